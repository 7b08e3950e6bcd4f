"""Counts as pure functions of the Schedule: every access with its γ offset, the
γ-difference between adjacent lanes and its verdict, footprints, DRAM traffic per kernel
and its minimum, and flops.

Traffic model: each kernel moves every distinct element it touches once (a perfect
cache within a kernel, none between kernels); an access's distinct elements are counted
in the DNF's variables over the kernel's domain, narrowed by the guards around it.
Flops: every scalar operator of moac.ops costs its `flops`, times the iterations of the
loops around it (a lifted loop counts what its lifting covers, `Loop.count`).
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass

import sympy as sp
from sympy.core.function import AppliedUndef

from .. import ops
from ..dnf.walk import replace_sizes
from ..dtypes import BYTES as DTYPE_BYTES
from ..front.core import source_ops
from ..front.data import bounds, has_data
from ..front.sizes import resolve
from .index import (data_terms, footprint, gamma, gamma_text, guard_branches, guard_bound, internal, lane_diff,
                    narrow_update, size_key, verdict)
from .union import needed_reads, ordered, size_facts, union_footprint
from .ir import (Guard, LastGang, Let, LetIndex, Loop, Op, Schedule, Scope, Select, Serial, Set, Store, TensorTile, Unpack,
                 expr_reads, gang_chain, Prefetch)


@dataclass(frozen=True, slots=True)
class Access:
    kernel: str
    array: str
    offset: sp.Expr      # γ offset in elements
    index: tuple         # the ψ index it implements (code variables)
    logical: tuple       # the same in the DNF's variables
    text: str            # the offset as γ reads it: l·dk + j
    write: bool
    lanes: str | None    # the variable the vector lanes step
    diff: sp.Expr | None # γ-difference between adjacent lanes
    extents: tuple = ()  # (variable, number of values) where the access happens, guards applied
    packed: int = 1      # elements each lane loads at once (a packed load)
    starts: tuple = ()   # (variable, first value) where a guard v < a leaves v ≥ a (else 0)
    branch: tuple = ()   # (guard: (v, bound), branch, v) of each guard v < bound over it: 0 then, 1 else

    @property
    def verdict(self) -> str:
        return verdict(self.diff, self.packed)


@dataclass(frozen=True, slots=True)
class LoopInfo:
    var: str
    extent: sp.Expr
    level: str
    meaning: str
    depth: int


@dataclass(frozen=True, slots=True)
class KernelCounts:
    name: str
    comment: str
    loops: tuple         # LoopInfo, in tree order
    accesses: tuple      # Access, in tree order
    arrays: tuple        # names of the buffers it touches, sorted
    flops: sp.Expr
    traffic: sp.Expr     # DRAM bytes, all buffers
    scratch: sp.Expr     # of which to and from scratch buffers
    gang_traffic: sp.Expr = sp.Integer(0)   # DRAM bytes if gangs share no cache (each loads what it touches)


@dataclass(frozen=True, slots=True)
class Counts:
    kernels: tuple
    traffic: sp.Expr
    minimum: sp.Expr
    flops: sp.Expr
    gang_traffic: sp.Expr = sp.Integer(0)

    @property
    def scratch_traffic(self) -> sp.Expr:
        return sp.expand(sum((k.scratch for k in self.kernels), sp.Integer(0)))

    @property
    def compulsory(self) -> sp.Expr:
        """Traffic to and from the inputs and outputs."""
        return sp.expand(self.traffic - self.scratch_traffic)

    @property
    def minimal(self) -> bool:
        return sp.expand(self.traffic - self.minimum) == 0

    @property
    def compulsory_minimal(self) -> bool:
        return sp.expand(self.compulsory - self.minimum) == 0


def _expr_flops(e) -> sp.Expr:
    match e:
        case Op(op=op, args=args):
            return ops.OPS[op].flops + sum((_expr_flops(a) for a in args), sp.Integer(0))
        case Select(test=t, a=a, b=b):
            return _expr_flops(t) + _expr_flops(a) + _expr_flops(b)
    return sp.Integer(0)


def count_kernel(s: Schedule, kernel, facts: tuple = ()) -> KernelCounts:
    """A kernel's loops, accesses, flops and bytes; `facts` what the program's size
    conditions say (union.size_facts)."""
    bufs = {b.name: b for b in s.buffers}
    accesses, loops = [], []
    loose: set = set()          # ids of the accesses under a guard that does not narrow their loop

    def access(a, write: bool, lanes, ext: dict, lo: dict, packed: int = 1, path: tuple = ()):
        buf = bufs[a.array]
        off = gamma(a.index, buf.shape)
        accesses.append(Access(kernel.name, a.array, off, a.index, a.logical, gamma_text(a.index, buf.shape), write,
                               lanes.name if lanes is not None else None,
                               lane_diff(off, lanes) if lanes is not None else None, tuple(ext.items()), packed,
                               tuple(lo.items()), path))
        data(a.logical, ext, lo, path)

    def data(exprs, ext: dict, lo: dict, path: tuple = ()):
        """The integer inputs an index, an extent or a guard reads (⟨b⟩ψlens, a page number):
        accesses of their own, in the DNF's variables; a scan of a whole array (the CUDA
        gangs' ragged_pick) reads its every element."""
        for r in data_terms(exprs):
            name = r.func.__name__
            if "@" in name:                     # moac_ragged_pick@lens(w, B, chunk): all of lens
                name = name.split("@")[1]
                v = internal("scan")
                idx, ext2 = (v,), {**ext, v: bufs[name].shape[0]}
            else:
                idx, ext2 = tuple(r.args), ext
            if name not in bufs:
                continue
            buf = bufs[name]
            off = gamma(idx, buf.shape)
            accesses.append(Access(kernel.name, name, off, idx, idx, gamma_text(idx, buf.shape), False, None, None,
                                   tuple(ext2.items()), 1, tuple(lo.items()), path))

    def expr(e, lanes, ext, lo, path):
        for r in expr_reads(e, []):
            access(r, False, lanes, ext, lo, path=path)
        return _expr_flops(e)

    def walk(body, lanes, ext: dict, lo: dict, depth: int, path: tuple = ()) -> sp.Expr:
        """The body's flops (per entry); records its loops and accesses, each with the guards
        over it (`path`, Access.branch)."""
        total = sp.Integer(0)
        for st in body:
            match st:
                case Let(value=v) | Set(value=v):
                    if v is not None:
                        total += expr(v, lanes, ext, lo, path)
                case LetIndex(value=x):
                    data((x,), ext, lo, path)
                case Prefetch():
                    pass
                case Unpack():
                    access(st, False, lanes, ext, lo, st.width, path)
                case Store(value=v):
                    total += expr(v, lanes, ext, lo, path)
                    access(st, True, lanes, ext, lo, path=path)
                case Guard(cond=c, then=t, other=o):
                    data((c,), ext, lo, path)
                    cond = sp.sympify(c)
                    runs, boxes = guard_branches(cond, ext, lo)
                    vb = guard_bound(cond, ext)     # guards of one variable and bound: one choice of a gang
                    g, v = ((vb[0].name, str(vb[1])), vb[0].name) if vb is not None else (str(cond), None)
                    first = len(accesses)
                    for k, ext2, lo2 in runs:
                        total += walk((t, o)[k], lanes, ext2, lo2, depth, path + ((g, k, v),))
                    if not boxes:
                        loose.update(id(a) for a in accesses[first:])
                case Loop():
                    data((st.extent, st.start), ext, lo, path)
                    loops.append(LoopInfo(st.var.name, sp.sympify(st.extent), st.level, st.note, depth))
                    inner = (st.lanes or st.var) if st.level == "vector" else lanes
                    binds = dict(st.binds)
                    f = walk(st.body, inner, {**ext, **binds}, {v: x for v, x in lo.items() if v not in binds},
                             depth + 1, path)
                    total += _repeat(st, f)
                case LastGang():          # the fold it holds is the separate kernel's work, counted there
                    loops.append(LoopInfo("·", sp.sympify(st.count), "last", st.note, depth))
                case TensorTile():
                    loops.append(LoopInfo("c", sp.sympify(st.count), "tile", st.meaning(), depth))
                    total += walk(st.body, lanes, ext, lo, depth + 1, path)
                case Serial(body=b) | Scope(body=b):
                    total += walk(b, lanes, ext, lo, depth, path)
                case _:
                    raise TypeError(st)
        return total

    flops = walk(kernel.body, None, dict(kernel.domain), {}, 0)
    arrays = tuple(sorted({a.array for a in accesses}))
    gang_traffic = _gang_traffic(s, kernel, accesses, bufs)
    traffic, scratch = _kernel_bytes(accesses, bufs, lambda a: dict(a.extents), lambda a: dict(a.starts), facts,
                                     lambda a: a.index == a.logical and id(a) not in loose)
    return KernelCounts(kernel.name, kernel.comment, tuple(loops), tuple(accesses), arrays, sp.expand(flops),
                        sp.expand(traffic), sp.expand(scratch), gang_traffic)


def _repeat(loop, f) -> sp.Expr:
    """A loop body's flops `f` over all its iterations: count × f, or, where f depends on
    the loop's variable (an inner extent read from data, ⟨b⟩ψlens), the sum over it."""
    f = sp.expand(sp.sympify(f))
    if loop.var in f.free_symbols and loop.count == loop.extent - loop.start:
        terms = sp.Add.make_args(f)
        const = sp.Add(*(t for t in terms if loop.var not in t.free_symbols))
        dep = sp.Add(*(t for t in terms if loop.var in t.free_symbols))
        return loop.count * const + sp.Sum(dep, (loop.var, loop.start, loop.extent - 1))
    return loop.count * f


def _gang_traffic(s: Schedule, kernel, accesses: list, bufs: dict) -> sp.Expr:
    """DRAM bytes when gangs share no cache: what one gang touches (its gang variables
    fixed, an axis lifted over a gang loop narrowed to the lifting's inner extent) times
    the gang iterations (the chain of gang loops, by what they count).  With fixed sizes a
    lifting counts ⌊N/factor⌋ full gangs and one of the remainder, so that a share capped by
    its buffer (one gang of 32 lanes over 6 elements) is not scaled by the trip 6/32."""
    chain = gang_chain(kernel.body)
    if not chain:
        return _kernel_bytes(accesses, bufs, lambda a: dict(a.extents))[0]
    gangs = {lp.var.name for lp in chain}
    lifts = _own_lifts(s, chain)

    worlds = _gang_worlds(accesses, gangs)
    own = frozenset(gangs | {lf.var for lf in lifts})      # guards on these: a gang's lanes read one piece

    def bytes_per_gang(inner: dict) -> sp.Expr:
        """A gang's bytes: the largest of its worlds where one is the largest at every size,
        else every branch's reads counted (an upper bound)."""
        def per_gang(a) -> dict:
            return {v: sp.Integer(1) if v.name in gangs else sp.sympify(inner.get(v.name, n)) for v, n in a.extents}
        best = _largest([_kernel_bytes(w, bufs, per_gang, own=own)[0] for w in worlds]) if len(worlds) > 1 else None
        return best if best is not None else _kernel_bytes(accesses, bufs, per_gang, own=own)[0]
    sizes = [(sp.sympify(lf.extent), sp.sympify(lf.factor)) for lf in lifts]
    if not lifts or not all(n.is_Integer and f.is_Integer for n, f in sizes):
        # a lifted gang loop counts N/factor gangs (its trip) of `factor` elements each
        return sp.expand(sp.Mul(*(lp.count for lp in chain)) * bytes_per_gang({lf.var: lf.factor for lf in lifts}))
    lifted = {lf.outer for lf in lifts}
    total = sp.Integer(0)
    for pick in itertools.product(*[[(n // f, f), (sp.Integer(1), n % f)] for n, f in sizes]):
        if all(k and e for k, e in pick):
            total += sp.Mul(*(k for k, _ in pick)) * bytes_per_gang({lf.var: e for lf, (_, e) in zip(lifts, pick)})
    return sp.expand(sp.Mul(*(lp.count for lp in chain if lp.var.name not in lifted)) * total)


def _gang_worlds(accesses: list, gangs: set) -> list:
    """The accesses a gang may make, as lists: one for each choice of branch of the guards
    on a gang variable (`gangs`), where one gang runs one branch (a gang whose row is one of
    the catenation's K rows reads no k).  Guards that narrow the variable to the same bound
    are one choice (a score pass's and a weighted sum's l < n; i < 40 and i + 2 < 42).
    Guards on a lifted axis (a gang's range may hold some of each piece), on other variables
    (both run in one gang) or that decide no one variable are no choice: their branches'
    reads are all in every list.  With more than 6 choices the accesses are one list."""
    guards: dict = {}
    for a in accesses:
        for g, k, v in a.branch:
            if v in gangs:
                guards.setdefault(g, set()).add(k)
    if not guards or len(guards) > 6:
        return [accesses]
    worlds = []
    for pick in itertools.product(*[sorted(ks) for ks in guards.values()]):
        choice = dict(zip(guards, pick))
        worlds.append([a for a in accesses if all(choice.get(g, k) == k for g, k, _ in a.branch)])
    return worlds


def _largest(values: list):
    """The one of these byte counts that is at least each of the others for all non-negative
    sizes (their difference a polynomial with no negative coefficient), else None."""
    for best in values:
        if all(_at_least(best, v) for v in values):
            return best
    return None


def _at_least(a, b) -> bool:
    d = sp.expand(a - b)
    if d == 0:
        return True
    if not d.free_symbols:
        return bool(d >= 0)
    try:
        return all(c >= 0 for c in sp.Poly(d, *sorted(d.free_symbols, key=str)).coeffs())
    except sp.PolynomialError:
        return False


def _own_lifts(s: Schedule, chain: list) -> list:
    """The liftings of these gang loops, each once: the schedule's liftings name their outer
    loop (i_g) alike in every kernel that lifts the axis, so a lifting is this kernel's
    where its loop of that name counts extent ÷ factor (x over 40 and z over 100 both lift
    i over i_g), a length read from data taken at the bound the program's conditions give it
    (decode_ragged's tokens, lens(b) ≤ N, over N ÷ chunk gangs)."""
    trips = {lp.var.name: sp.sympify(lp.count) for lp in chain}
    most = bounds(s.dnf.program)
    own = []
    for lf in s.lifts:
        if lf.outer not in trips or lf in own:
            continue
        extent = sp.sympify(lf.extent)     # a length read from data (lens(b)) at its bound: the gangs' trip
        data = extent.atoms(AppliedUndef)
        gap = sp.expand(trips[lf.outer] - _at_bounds(extent, most) / lf.factor)
        if gap == 0 or data and size_key(gap) == 0:     # Max(1, maxp·page) ÷ chunk for lens(b) + 1 ≤ maxp·page
            own.append(lf)
    return own


def _at_bounds(e, most: dict):
    """e with each read of integer data at the bound the program's conditions give its
    array (`bounds`: lens(b) ≤ N reads as N), where there is one."""
    return e.xreplace({r: most.get(r.func.__name__, r) for r in e.atoms(AppliedUndef)})


def _kernel_bytes(accesses: list, bufs: dict, extents, starts=None, facts: tuple = (), boxed=None,
                  own: frozenset = frozenset()) -> tuple:
    """(DRAM bytes, of which scratch): per buffer and direction the elements its accesses
    touch over `extents(access)`: with `starts(access)` (where guards begin the variables)
    the union of their footprints (union.union_footprint), at most the buffer as the size
    `facts` decide it (`_at_most`); without it (a gang's share) their union where they
    stand under one guard and their boxes are disjoint, nested or strided progressions (the
    4 heads 4·a + m of a gang, m < 4), else the largest one, at most the buffer compared at
    sizes of 64."""
    total, scratch = sp.Integer(0), sp.Integer(0)
    for arr in sorted({a.array for a in accesses}):
        buf = bufs[arr]
        if buf.placement != "DRAM":
            continue
        for write in (False, True):
            accs = [a for a in accesses if a.array == arr and a.write == write]
            if accs:
                if starts is None and len({frozenset(a.starts) for a in accs}) > 1 and _inner_pieces(accs, own):
                    # a gang's share of reads under guards on loops within the gang (a reduction
                    # over (2 ▽ A) # (2 △ A)): the gang runs every piece, their union
                    fp = union_footprint([(a.logical, extents(a), dict(a.starts)) for a in accs], buf.shape,
                                         boxes_exact=all(a.index == a.logical for a in accs), capped=False)
                elif starts is None and len({frozenset(a.starts) for a in accs}) > 1:
                    # a gang's share of reads under guards on its lifted axis (the pieces of a
                    # catenation): the largest, as a gang's lanes read one piece or the other
                    fp = max((footprint(a.logical, buf.shape, extents(a)) for a in accs), key=size_key)
                elif starts is None:        # a gang's share of reads under one guard: their union
                    fp = union_footprint([(a.logical, extents(a), {}) for a in accs], buf.shape, boxes_exact=False,
                                         capped=False)
                else:
                    # a box is the elements read where the index is the logical one (not a token the
                    # kernel picks: a packed pass's t0 over the sinks and the window) and no guard
                    # that does not narrow the loop stands over the read (`boxed`)
                    fp = union_footprint([(a.logical, extents(a), starts(a)) for a in accs], buf.shape,
                                         boxes_exact=boxed is not None and all(boxed(a) for a in accs), facts=facts)
                # a count over integer data (Σ_{b<B} ⟨b⟩ψlens rows) is not compared with the buffer:
                # which is smaller depends on the data (the model's guess of 64 per size cannot say)
                if has_data(fp):
                    cap = fp
                elif starts is None:        # a gang's share (no gang cache): the larger at sizes of 64
                    cap = min(fp, buf.size, key=size_key)
                else:
                    cap = _at_most(fp, buf.size, facts)
                moved = cap * DTYPE_BYTES[buf.dtype]
                total += moved
                if buf.role == "scratch":
                    scratch += moved
    return sp.expand(total), sp.expand(scratch)


def _inner_pieces(accs: list, own: frozenset) -> bool:
    """Whether the guards that set these accesses apart are all on loops within a gang (not
    its gang variables or lifted axes, `own`), so that one gang runs every branch."""
    sets = [set(a.branch) for a in accs]
    apart = set().union(*sets) - set.intersection(*sets)
    return bool(apart) and all(v is not None and v not in own for _, _, v in apart)


def _at_most(fp, size, facts: tuple) -> sp.Expr:
    """A footprint capped by its buffer: the smaller where the size facts decide it (n rows
    of a cache of N where the program requires n + 1 ≤ N: n), else the smaller where every
    size is 64 (size_key; min(fp, size) would be exact but reads min(B, B·maxp) where a
    size of 0 is all that separates them)."""
    o = ordered(fp, size, facts)
    return min(fp, size, key=size_key) if o is None else o[0]


def minimum(s: Schedule) -> sp.Expr:
    """Each input element the outputs depend on read once, each output element written
    once (an update writes only the rows that change)."""
    d, prog = s.dnf, s.dnf.program
    bufs = {b.name: b for b in s.buffers}
    subs = resolve(prog, s.fixed)
    total = sp.Integer(0)
    need = needed_reads(d, subs)
    for i in prog.inputs:
        total += need.get(i.name, sp.Integer(0)) * DTYPE_BYTES[bufs[i.name].dtype]
    for name, _ in prog.outputs:
        total += bufs[name].size * DTYPE_BYTES[bufs[name].dtype]     # the arithmetic type or the declared storage
    for st in s.statements:
        if st.role != "update":
            continue
        _, starts = narrow_update(st, st.body)
        rows = [replace_sizes(sp.sympify(n) - sp.sympify(starts.get(v, 0)), subs) for v, n in zip(st.vars, st.shape)]
        total += sp.Mul(*rows) * DTYPE_BYTES[bufs[st.name].dtype]
    return sp.expand(total)


def count(s: Schedule) -> Counts:
    facts = size_facts(s.dnf.program.constraints, resolve(s.dnf.program, s.fixed))
    ks = tuple(count_kernel(s, k, facts) for k in s.kernels)
    traffic = sp.expand(sum((k.traffic for k in ks), sp.Integer(0)))
    flops = sp.expand(sum((k.flops for k in ks), sp.Integer(0)))
    gangs = sp.expand(sum((k.gang_traffic for k in ks), sp.Integer(0)))
    return Counts(ks, traffic, minimum(s), flops, gangs)


def distinct_accesses(k) -> list:
    """A kernel's accesses as the dumps list them: one per (array, offset, write, lanes)."""
    seen, out = set(), []
    for a in k.accesses:
        key = (a.array, a.offset, a.write, a.lanes)
        if key not in seen:
            seen.add(key)
            out.append(a)
    return out


# --------------------------------------------------------------------------- against the source program


def source_count(s: Schedule, c: Counts) -> tuple:
    """(the source program's operation count at the schedule's fixed sizes, the term of the
    kernels' flops that no term of it bounds, or None)."""
    prog = s.dnf.program
    src = source_ops(prog)
    if s.fixed:
        src = src.xreplace({sp.Symbol(k, integer=True, nonnegative=True): v for k, v in s.fixed.items()})
    return src, repeated_work(c.flops, src, set(prog.size_names()), bounds(prog))


def repeated_work(flops, ops, sizes: set, data_bounds: dict) -> sp.Expr | None:
    """A term of the kernels' flops that no term of the source's operation count bounds
    (n·dm·dk against dm·dk + n·dk: a value recomputed under a loop it does not depend on);
    None when every term is bounded.  The counts are compared as polynomials in the
    sizes: an element of integer data at its bound (`lens[b]` at N: the kernels' counts run
    over the bound), ⌈x⌉ as x, min and max as the sum of their arguments, and what is not
    a size (the run-time chunk) as a constant."""
    def poly(e):
        e = sp.sympify(e)
        e = _at_bounds(e, data_bounds).doit()
        e = e.replace(lambda x: isinstance(x, (sp.ceiling, sp.floor)), lambda x: x.args[0])
        e = e.replace(lambda x: isinstance(x, (sp.Min, sp.Max)), lambda x: sp.Add(*x.args))
        e = e.xreplace({x: 64 for x in e.free_symbols if x.name not in sizes})
        return sp.Poly(sp.expand(e), *sorted((x for x in e.free_symbols), key=lambda x: x.name))

    try:
        pf, po = poly(flops), poly(ops)
    except (sp.PolynomialError, sp.GeneratorsNeeded, TypeError, ValueError):
        return None
    gens = pf.gens
    own = [dict(zip(po.gens, m)) for m in po.monoms()]
    for m in pf.monoms():
        want = dict(zip(gens, m))
        if not any(all(e <= o.get(g, 0) for g, e in want.items()) for o in own):
            return sp.Mul(*(g ** e for g, e in want.items()))
    return None
