"""The Schedule: the ONF as a hardware mapping tree (stage 4's IR).

A Schedule says *how* a DNF is computed: which buffers exist and where they live,
and for every kernel a tree of loops, each at a hardware level

    gang      independent blocks of work (OpenACC gangs, CUDA blocks, CPU threads)
    worker    threads of a gang
    vector    adjacent lanes (a warp); the γ-difference between lanes decides coalescing
    register  copies unrolled into one thread (accumulators, jammed tokens)
    seq       a sequential loop

with the liftings ⟨N⟩ → ⟨⌈N/Π⌉ Π⟩ that made them, and the reductions with their combine
rule.  Indices and extents are sympy expressions over the DNF's variables and sizes;
there is no C and no pragma text here: a target decides how each level is spelled.
Counts (traffic, flops, coalescing) are pure functions of this tree (moac.schedule.counts).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import sympy as sp
from sympy.core.function import AppliedUndef

LEVELS = ("gang", "worker", "vector", "register", "seq")


# --------------------------------------------------------------------------- scalar expressions


@dataclass(frozen=True, slots=True)
class Read:
    """A load of buffer[index]; `logical` is the ψ index of the DNF it implements (an
    unrolled copy's token t₁ maps back to l), which the footprints are counted in."""
    array: str
    index: tuple
    logical: tuple


@dataclass(frozen=True, slots=True)
class Const:
    value: float


@dataclass(frozen=True, slots=True)
class IndexValue:
    """An integer index expression used as a float (ι, an iota value)."""
    expr: object


@dataclass(frozen=True, slots=True)
class Op:
    """A scalar operator of moac.ops applied to expressions."""
    op: str
    args: tuple


@dataclass(frozen=True, slots=True)
class Local:
    """A scalar local of the kernel (an accumulator, a score)."""
    name: str


@dataclass(frozen=True, slots=True)
class Select:
    """test ? a : b on floats."""
    test: object
    a: object
    b: object


def expr_reads(e, out: list) -> list:
    """Every Read in a scalar expression, in order."""
    match e:
        case Read():
            out.append(e)
        case Op(args=args):
            for a in args:
                expr_reads(a, out)
        case Select(test=t, a=a, b=b):
            for x in (t, a, b):
                expr_reads(x, out)
    return out


def index_values(v) -> list:
    """The integer expressions used as values inside a scalar expression."""
    found = []

    def walk(x):
        if isinstance(x, IndexValue):
            found.append(x.expr)
        elif dataclasses.is_dataclass(x):
            for f in dataclasses.fields(x):
                y = getattr(x, f.name)
                for z in (y if isinstance(y, tuple) else (y,)):
                    if dataclasses.is_dataclass(z):
                        walk(z)
    walk(v)
    return found


# --------------------------------------------------------------------------- statements


@dataclass(frozen=True, slots=True)
class Let:
    """A float local: `name = value` (value None: declared, assigned in branches)."""
    name: str
    value: object = None


@dataclass(frozen=True, slots=True)
class Unpack:
    """A packed load: the `width` consecutive elements buffer[index], buffer[index + 1], …
    along the last axis into the float locals `names`, loaded as whole words (the paper's
    register-stride lifting d = w·(32·r + v) + k puts them in one lane).  `logical` is the
    DNF index the elements implement together (its variable spans them)."""
    array: str
    index: tuple
    logical: tuple
    names: tuple

    @property
    def width(self) -> int:
        return len(self.names)


@dataclass(frozen=True, slots=True)
class Prefetch:
    """A hint that `nbytes` bytes of buffer from buffer[index] on are read soon (a token
    loop a distance ahead of its rows, on targets whose hardware gains from it).  It
    moves no value, so the counts ignore it."""
    array: str
    index: tuple
    nbytes: int


@dataclass(frozen=True, slots=True)
class LetIndex:
    """An integer local: a lifted variable's value (l = g·chunk + c), a span."""
    var: sp.Symbol
    value: object


@dataclass(frozen=True, slots=True)
class Set:
    name: str
    value: object


@dataclass(frozen=True, slots=True)
class Store:
    array: str
    index: tuple
    logical: tuple
    value: object


@dataclass(frozen=True, slots=True)
class Guard:
    """if cond (a sympy relation over index variables) then … else …"""
    cond: object
    then: tuple
    other: tuple = ()


@dataclass(frozen=True, slots=True)
class Loop:
    """for var in [start, extent) at a hardware level.

    reduce   the accumulators combined across the loop's lanes: ((op, (names…)), …)
    lanes    the DNF variable that adjacent lanes step by one (a lifted loop's lanes
             step its DNF axis: d = 32·d_g + d_v), for the γ-difference
    binds    DNF variables this loop enumerates with their extents (a reduction axis)
    trip     iterations counted per entry when the lifting makes the extent a bound
             rather than a count (⌈N/chunk⌉ chunks of chunk tokens count N tokens)
    """
    var: sp.Symbol
    extent: object
    level: str
    body: tuple
    note: str = ""
    start: object = sp.Integer(0)
    reduce: tuple = ()
    lanes: sp.Symbol | None = None
    binds: tuple = ()
    trip: object = None

    def __post_init__(self):
        assert self.level in LEVELS, self.level

    @property
    def count(self):
        return (sp.sympify(self.extent) - sp.sympify(self.start)) if self.trip is None else self.trip


@dataclass(frozen=True, slots=True)
class LastGang:
    """The end of a gang's work where the gangs of one frame fold their partials themselves:
    every gang of the frame `index` counts itself on `counter` (a scratch buffer, one slot a
    frame, zero before the kernel), and the last of the `count` to arrive runs `body`, the
    fold of the frame's partials, once every other gang's stores are visible.  Only where
    `when` holds (a run-time condition on the sizes and the chunk); the separate kernel
    `kernel` (the same fold for every frame) runs where it does not.  A target prints it
    where it has device-wide atomics and memory fences (Target.last_gang); the others skip
    it and always run `kernel`.  The counts read `kernel`, not `body`.  Where the token axis
    is read from data, `count` is the frame's own number of partials and a frame may have
    none: the outputs named in `zero` are then zero-filled before the kernel (where `when`
    holds), which is a frame's result when no gang folds it."""
    counter: str
    index: tuple
    count: object
    when: object
    kernel: str
    body: tuple
    note: str = ""
    otherwise: object = None   # ¬when, as relations (the condition `kernel` carries: LoopKernel.unfolded)
    zero: tuple = ()           # outputs zero-filled before the kernel where `when` holds
    counted: object = None     # where some frame has two partials or more, so that its gangs count: the
                               # counters are zeroed only there (None: where `when` holds)
    direct: bool = False       # the kernel's TensorTile stores the outputs of a frame of one gang
                               # (TensorTile.direct): where a target prints the tile, such frames do not fold


@dataclass(frozen=True, slots=True)
class Serial:
    """A region run by a single thread (a scalar result)."""
    body: tuple


@dataclass(frozen=True, slots=True)
class Scope:
    """A block of statements with local declarations (no parallelism of its own)."""
    body: tuple


@dataclass(frozen=True, slots=True)
class TensorTile(Scope):
    """A gang's whole softmax contraction over its chunk of tokens as tensor-core tiles
    (moac.schedule.plans.tiles): the scores Σ_d q·k of the `rows` group members and the tokens
    as the rows and columns of an mma tile, the chunk's softmax online, the weighted sum
    Σ_l p·v as a second tile.  `body` is the same computation as lane passes: what a
    target without such tiles runs, and what the counts and the verifier read.

    The operands are given by the offsets of their first elements (γ, sympy), written with
    the placeholders `row` (the group member) and `tok` (the token): q_at of q[row, 0],
    k_at and v_at of k[tok, 0] and v[tok, 0] (through a page table, say), every row
    contiguous along d (γ-difference 1, checked by the plan); m_at, z_at, o_at the
    offsets of row's partials (o at output element 0).  `score` is the score as a function
    of the dot product, the Local `moac_sv` (the ÷ √dk of the program, say); the tokens
    are start … start + count − 1, and `tok_var` names the DNF token axis in `score`."""
    q: str = ""
    k: str = ""
    v: str = ""
    q_at: object = 0
    k_at: object = 0
    v_at: object = 0
    blocks: tuple | None = None   # ((K base, stride), (V base, stride)): the rows of token 16·τ + u at
                                  # base(τ) + stride·u, u < 16 (τ the placeholder moac_blk), or None
    row: object = None
    tok: object = None
    tok_var: object = None
    rows: int = 0
    dk: int = 0
    dv: int = 0
    start: object = 0
    count: object = 0
    score: object = None
    parts: tuple = ()       # (m, z, o) partial buffers
    m_at: object = 0
    z_at: object = 0
    o_at: object = 0
    shape: str = ""         # the tile instruction, e.g. "m16n8k16 bf16 → f32"
    storage: str = "bf16"   # K's and V's element type
    weight: object = None   # a factor of token tok's values (vs[tok]: V_real = V × vs), or None
    warps: int = 1          # warps of the gang, sharing its chunk step by step (plans.tiles.team_warps)
    even: bool = True       # every chunk holds `chunk` tokens but a frame's last (no length read from
                            # data: a ragged batch's chunks hold any number, which one wave of gangs
                            # would leave unbalanced)
    out: str = ""           # the output a frame of one gang stores itself (o ÷ z from the tile), or ""
    out_at: object = 0      # the offset of row's output element 0 (contiguous along the output axis)
    direct: object = None   # where it does: the frame's fold in this kernel (LastGang.when) and one gang

    @property
    def step_bytes(self) -> int:
        """The K and V bytes of one step of 16 tokens."""
        from ..dtypes import BYTES
        return 16 * (self.dk + self.dv) * BYTES[self.storage]

    @property
    def gang_step_bytes(self) -> int:
        """The K and V bytes a gang reads at a time: a step of each of its warps."""
        return self.warps * self.step_bytes

    def meaning(self) -> str:
        """The tile's line in the ONF mapping tree."""
        team = (f"{self.warps} warps a gang, warp w taking steps w, w + {self.warps}, … of the chunk, their states "
                f"merged at its end; " if self.warps > 1 else "")
        who = f"the {self.rows} heads and their low halves" if self.rows > 1 else "the head and its low half"
        return (f"tensor-core tile {self.shape}, 16 tokens a step: {team}rows = {who}, columns = 8 tokens (scores), "
                f"8 of {self.dv} outputs (weighted sum); d = 32·s + 8·c + 4·h + e "
                f"puts 8 contiguous elements of a K row in a lane (16-byte loads, γ-difference 1), dv = 64·h + 8·r + e "
                f"8 of a V row; online softmax; "
                + (f"a frame of one gang stores {self.out} = o ÷ z from the tile, no fold; " if self.out else "")
                + "targets without tile instructions run the passes below")


# --------------------------------------------------------------------------- the whole


@dataclass(frozen=True, slots=True)
class Buffer:
    name: str
    role: str            # input | inout | output | scratch
    dtype: str
    shape: tuple         # sympy
    placement: str       # "DRAM", "registers" or "gang" (each gang owns a tile, see `tile`)
    tile: tuple = ()     # placement "gang": per axis (base, extent) of the gang's tile, the base in the
                         # gang loops' variables: a gang touches buffer[base + i] for i < extent only

    @property
    def tile_size(self):
        return sp.Mul(*(e for _, e in self.tile)) if self.tile else sp.Integer(1)

    @property
    def size(self):
        return sp.Mul(*self.shape) if self.shape else sp.Integer(1)


@dataclass(frozen=True, slots=True)
class Lift:
    """A dimension lifting ⟨N⟩ → ⟨outer inner⟩ of DNF axis `var` by `factor`."""
    var: str
    extent: object
    factor: object
    outer: str
    inner: str
    guarded: bool
    level: str


@dataclass(frozen=True, slots=True)
class Choice:
    """A value chosen at run time: var = rule(args…), e.g. chunk = moac_chunk(n, frames).
    `rule` names a function of moac.schedule.choices (and the C helper of that name)."""
    var: sp.Symbol
    rule: str
    args: tuple


@dataclass(frozen=True, slots=True)
class LoopKernel:
    """One kernel of a Schedule, as a loop tree (the loaded library is moac.jit.kernel.Kernel)."""
    name: str
    comment: str
    domain: tuple        # (DNF variable, extent): the iteration space the kernel enumerates
    body: tuple          # one parallel region (a gang loop nest) or a Serial region
    unfolded: object = None  # where another kernel's LastGang folds this one's work, the condition
                             # under which it does not: targets that print LastGang launch this only there


@dataclass(frozen=True, slots=True)
class Schedule:
    dnf: object
    plan: str            # the plan's name
    description: str
    declined: tuple      # (plan name, reason) for every plan tried before it
    target: str
    fixed: dict          # size name -> int, fixed at compile time
    params: tuple        # size names passed at run time
    dtype: str           # arithmetic dtype (f32 / f64)
    buffers: tuple
    kernels: tuple
    choices: tuple       # Choice: run-time values the kernels use
    lifts: tuple
    statements: tuple    # the DNF statements the kernels compute (after the DNF passes)
    notes: tuple = field(default=())

    def tiles(self) -> list:
        """The kernels' TensorTiles."""
        def walk(body):
            for st in body:
                if isinstance(st, TensorTile):
                    yield st
                for f in ("body", "then", "other"):
                    if isinstance(getattr(st, f, None), tuple):
                        yield from walk(getattr(st, f))
        return [t for k in self.kernels for t in walk(k.body)]

    @property
    def tiled(self) -> bool:
        """Whether a kernel has a TensorTile (its target may print tile instructions)."""
        return bool(self.tiles())

    @property
    def tile_step_bytes(self) -> int:
        """The most K and V bytes a gang of its tensor-core tiles reads at a time
        (TensorTile.gang_step_bytes), 0 where there are none."""
        return max((t.gang_step_bytes for t in self.tiles()), default=0)

    @property
    def tile_warps(self) -> int:
        """The most warps of a gang of its tensor-core tiles (TensorTile.warps), 1 where there are none."""
        return max((t.warps for t in self.tiles()), default=1)

    @property
    def even_tiles(self) -> bool:
        """Whether a kernel has a TensorTile whose chunks all hold the same tokens but the last
        of a frame (TensorTile.even): there a target's gang count for tiles (Target.tile_gangs,
        about one wave) leaves no multiprocessor idle."""
        return any(t.even for t in self.tiles())

    def buffer(self, name: str) -> Buffer:
        for b in self.buffers:
            if b.name == name:
                return b
        raise KeyError(name)


def gang_chain(body: tuple) -> list:
    """The gang loops nested one directly in the other from the start of body (a kernel's
    body, or (loop,)): the chain a target launches as one grid."""
    chain = []
    while len(body) == 1 and isinstance(body[0], Loop) and body[0].level == "gang":
        chain.append(body[0])
        body = body[0].body
    return chain


def data_arrays(e) -> set:
    """The integer inputs a sympy expression reads."""
    return {r.func.__name__.split("@")[-1] for r in sp.sympify(e).atoms(AppliedUndef)}


def arrays_touched(body, out: set) -> set:
    """The buffers a Schedule subtree touches (integer inputs read in its indices, extents
    and guards among them)."""
    def idx(index):
        for i in index:
            out.update(data_arrays(i))

    def reads(v):
        for r in expr_reads(v, []):
            out.add(r.array)
            idx(r.index)
        if v is not None:
            for x in index_values(v):
                out.update(data_arrays(x))
    for st in body:
        match st:
            case Store(array=a, value=v, index=ix):
                out.add(a)
                idx(ix)
                reads(v)
            case Let(value=v) | Set(value=v):
                reads(v)
            case Unpack(array=a, index=ix):
                out.add(a)
                idx(ix)
            case LetIndex(value=x):
                out.update(data_arrays(x))
            case Guard(cond=c, then=t, other=o):
                out.update(data_arrays(c))
                arrays_touched(t, out)
                arrays_touched(o, out)
            case Loop(body=b, extent=n, start=st0):
                out.update(data_arrays(n) | data_arrays(st0))
                arrays_touched(b, out)
            case Serial(body=b) | Scope(body=b):
                arrays_touched(b, out)
    return out
