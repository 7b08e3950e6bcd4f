"""DNF -> Operational Normal Form (stage 4: `to_onf`).

The ONF decides *how*: γ turns every ψ-selection into a flat row-major offset,
reductions that an enclosing loop would recompute are materialised (temporaries
placed on chip or in scratch memory), long axes are dimension-lifted
⟨N⟩ → ⟨⌈N/Π⌉ Π⟩ with guards, loops are mapped to gang / vector / seq, and for
every access in a vector loop the γ-difference between adjacent lanes is
computed (1 = coalesced).  DRAM traffic and flops are counted symbolically from
the kernels as built.  Kernel bodies are frozen into moac's C IR (moac.cir), so
no sympy reaches codegen.

This module holds the ONF's immutable IR, the index analysis (γ, lane differences,
footprints, flops), the driver `to_onf` and the dump; moac.plans holds the lowering
and the two plans (split-K softmax contraction, generic).
"""
from __future__ import annotations

from dataclasses import dataclass

import sympy as sp

from . import cir
from .front.core import show_shape
from .dnf import DNF, DOp, DRead, DReduce, DSelect, DStmt, fmt_index
from .dtypes import BYTES as DTYPE_BYTES
from .dtypes import CTYPE  # noqa: F401  (re-exported for moac.plans)
from .errors import RewriteError

CHUNK = 1024         # the most tokens per gang in the split-K lifting (see moac_chunk)
REDUCE_GANGS = 256   # gangs for a lifted scalar reduction


# --------------------------------------------------------------------------- ONF IR


@dataclass(frozen=True, slots=True)
class Buffer:
    name: str
    role: str            # input | output | scratch
    dtype: str
    shape: tuple         # sympy
    placement: str       # "DRAM" or "registers"

    @property
    def size(self):
        return sp.Mul(*self.shape) if self.shape else sp.Integer(1)


@dataclass(frozen=True, slots=True)
class Access:
    kernel: str
    array: str
    offset: sp.Expr      # γ offset in elements
    index: tuple         # the ψ index it implements
    logical: tuple       # the same in the DNF's variables (unrolled copies map back), for traffic
    text: str            # the offset as γ reads it: l·dk + j
    write: bool
    lanes: str | None    # the loop variable the vector lanes run over
    diff: sp.Expr | None # γ-difference between adjacent lanes
    extents: tuple = ()  # (variable, number of values) where the access happens, guards applied

    @property
    def verdict(self) -> str:
        if self.diff is None:
            return "no vector loop"
        if self.diff == 0:
            return "broadcast (same element in every lane)"
        if self.diff == 1:
            return "coalesced"
        return f"NOT coalesced (stride {fmt_index(self.diff)})"


@dataclass(frozen=True, slots=True)
class Loop:
    kernel: str
    var: str
    extent: sp.Expr
    level: str           # gang | vector | seq
    meaning: str


@dataclass(frozen=True, slots=True)
class Lift:
    var: str
    extent: sp.Expr
    factor: int
    outer: str
    inner: str
    guarded: bool
    level: str


@dataclass(frozen=True, slots=True)
class Kernel:
    name: str
    comment: str
    code: tuple          # cir statements (the parallel region and what surrounds it)
    arrays: tuple        # names of the buffers it touches
    flops: sp.Expr
    traffic: sp.Expr     # DRAM bytes, all buffers
    scratch: sp.Expr     # of which to and from scratch buffers
    loops: tuple
    accesses: tuple


@dataclass(frozen=True, slots=True)
class ONF:
    dnf: DNF
    target: str
    mapping: str
    plan: str
    fixed: dict          # size name -> int, fixed at compile time
    params: tuple        # size names passed at run time
    ctype: str
    buffers: tuple
    kernels: tuple
    prologue: tuple      # cir declarations run on the host before scratch is allocated
    lifts: tuple
    statements: tuple    # the DNF statements after materialisation (what the kernels compute)
    traffic: sp.Expr
    minimum: sp.Expr
    flops: sp.Expr
    notes: tuple
    run_time: tuple = ()  # (symbol, python function, argument expressions): values chosen at run time

    def __str__(self) -> str:
        return format_onf(self)

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


# --------------------------------------------------------------------------- helpers


def gamma(index: tuple, shape: tuple) -> sp.Expr:
    """Row-major γ: Σ_k i_k · Π_{j>k} s_j."""
    off = sp.Integer(0)
    for i, s in zip(index, shape):
        off = off * s + i
    return sp.expand(off)


def lane_diff(offset: sp.Expr, var: sp.Symbol) -> sp.Expr:
    return sp.simplify(sp.expand(offset.xreplace({var: var + 1}) - offset))


_INTERNAL: dict = {}


def internal(name: str) -> sp.Symbol:
    """A loop variable moac introduces: a sympy Dummy, so never equal to a user's index
    variable of the same name, and printed into C unmangled."""
    if name not in _INTERNAL:
        _INTERNAL[name] = sp.Dummy(name, integer=True, nonnegative=True)
    return _INTERNAL[name]


def gamma_text(index: tuple, shape: tuple) -> str:
    """γ(index; shape) in its natural reading order: l·dk + j."""
    terms = []
    for k, i in enumerate(index):
        strides = [s for s in shape[k + 1:] if s != 1]
        i = sp.sympify(i)
        if i == 0:
            continue
        it = fmt_index(i)
        if not (i.is_Atom or isinstance(i, (sp.Mul, sp.floor, sp.Mod, sp.ceiling))):
            it = f"({it})"
        terms.append("·".join([it] + [fmt_index(s) if sp.sympify(s).is_Atom else f"({fmt_index(s)})"
                                       for s in strides]))
    return " + ".join(terms) if terms else "0"


def gamma_c(index: tuple, shape: tuple):
    """γ(index; shape) as C, in the same order as gamma_text."""
    out = None
    for k, i in enumerate(index):
        i = sp.sympify(i)
        if i == 0:
            continue
        term = freeze(i)
        for s in shape[k + 1:]:
            if s != 1:
                term = cir.Bin("*", term, freeze(s))
        out = term if out is None else cir.Bin("+", out, term)
    return out if out is not None else cir.Int(0)


def mangle(name: str) -> str:
    """User identifiers reach C only with a trailing underscore (never a keyword or one of
    ours); moac's own buffers ('@p', '@m_part') become moac_p, moac_m_part, which no
    mangled user name can equal."""
    if name.startswith("@"):
        return "moac_" + name[1:]
    return name + "_"


def shown(name: str) -> str:
    """A buffer's name in the dumps."""
    return name.lstrip("@")


def freeze(e) -> object:
    """sympy integer expression -> cir (int64 arithmetic)."""
    e = sp.sympify(e)
    if e.is_Integer:
        return cir.Int(int(e))
    if isinstance(e, sp.Symbol):
        return cir.Var(e.name if isinstance(e, sp.Dummy) else mangle(e.name))
    if isinstance(e, sp.Add):
        terms = sorted(e.args, key=lambda t: (t.is_Number, sp.default_sort_key(t)))
        out = freeze(terms[0])
        for t in terms[1:]:
            if t.is_Number and t < 0:
                out = cir.Bin("-", out, cir.Int(int(-t)))
            elif isinstance(t, sp.Mul) and t.args[0].is_Number and t.args[0] < 0:
                out = cir.Bin("-", out, freeze(-t))
            else:
                out = cir.Bin("+", out, freeze(t))
        return out
    if isinstance(e, sp.Mul):
        c, rest = e.as_coeff_Mul()
        if c == -1:
            return cir.Neg(freeze(rest))
        factors = sorted(sp.Mul.make_args(e), key=lambda t: (not t.is_Number, sp.default_sort_key(t)))
        out = freeze(factors[0])
        for f in factors[1:]:
            out = cir.Bin("*", out, freeze(f))
        return out
    if isinstance(e, sp.Pow) and e.exp.is_Integer and e.exp > 0:
        out = freeze(e.base)
        for _ in range(int(e.exp) - 1):
            out = cir.Bin("*", out, freeze(e.base))
        return out
    if isinstance(e, sp.floor):
        num, den = sp.fraction(sp.together(e.args[0]))
        if num.is_nonnegative and den.is_nonnegative and den != 0:   # C truncation is the floor here
            return cir.Bin("/", freeze(num), freeze(den))
        return cir.Call("moac_floordiv", (freeze(num), freeze(den)))
    if isinstance(e, sp.ceiling):
        num, den = sp.fraction(sp.together(e.args[0]))
        return cir.Call("moac_ceildiv", (freeze(num), freeze(den)))
    if isinstance(e, sp.Mod):
        if e.args[0].is_nonnegative and e.args[1].is_nonnegative and e.args[1] != 0:
            return cir.Bin("%", freeze(e.args[0]), freeze(e.args[1]))
        return cir.Call("moac_mod", (freeze(e.args[0]), freeze(e.args[1])))
    if isinstance(e, (sp.Max, sp.Min)):
        fn = "moac_imax" if isinstance(e, sp.Max) else "moac_imin"
        args = list(e.args)
        out = freeze(args[0])
        for a in args[1:]:
            out = cir.Call(fn, (out, freeze(a)))
        return out
    raise RewriteError(f"cannot generate C for the index expression {e}")


def freeze_cond(c) -> object:
    c = sp.sympify(c)
    if c is sp.true:
        return cir.Int(1)
    if c is sp.false:
        return cir.Int(0)
    if isinstance(c, sp.And):
        out = freeze_cond(c.args[0])
        for a in c.args[1:]:
            out = cir.Bin("&&", out, freeze_cond(a))
        return out
    if isinstance(c, sp.Or):
        out = freeze_cond(c.args[0])
        for a in c.args[1:]:
            out = cir.Bin("||", out, freeze_cond(a))
        return out
    ops = {sp.StrictLessThan: "<", sp.LessThan: "<=", sp.StrictGreaterThan: ">", sp.GreaterThan: ">=",
           sp.Equality: "==", sp.Unequality: "!="}
    for cls, op in ops.items():
        if isinstance(c, cls):
            return cir.Bin(op, freeze(c.lhs), freeze(c.rhs))
    raise RewriteError(f"cannot generate C for the condition {c}")


def distinct_values(e, extents: dict):
    """How many distinct values an index component takes when its loop variables run
    over their extents; None when the form is not recognised."""
    e = sp.sympify(e)
    syms = [v for v in e.free_symbols if v in extents]
    if not syms:
        return sp.Integer(1)
    if len(syms) != 1:
        return None
    v = syms[0]
    n = extents[v]
    step = sp.expand(e.xreplace({v: v + 1}) - e)
    if step in (1, -1):                                    # v + c, c − v
        return n
    if isinstance(e, sp.floor):                            # ⌊v / c⌋
        num, den = sp.fraction(sp.together(e.args[0]))
        if num == v and not den.free_symbols & set(extents):
            return sp.ceiling(n / den)
    if isinstance(e, sp.Mod) and e.args[0] == v and not e.args[1].free_symbols & set(extents):
        return sp.Min(e.args[1], n)
    return None


def footprint(index: tuple, shape: tuple, extents: dict) -> sp.Expr:
    """Distinct elements a ψ-selection touches over a loop domain: the product over the
    axes of the distinct values of each index component (the axis length where the
    component is not recognised), never more than the array."""
    total = sp.Integer(1)
    for i, n in zip(index, shape):
        d = distinct_values(i, extents)
        total *= n if d is None else d
    size = sp.Mul(*shape) if shape else sp.Integer(1)
    over = sp.expand(total - size)
    return size if (over.is_nonnegative or (over.is_number and over >= 0)) else total


def needed_reads(d: DNF, subs: dict) -> dict:
    """For each input, the elements the outputs depend on (the DNF's read footprint)."""
    shapes = {i.name: tuple(sp.sympify(x).xreplace(subs) for x in i.shape) for i in d.program.inputs}
    need: dict = {}

    def walk(e, ext):
        match e:
            case DRead(array=a, index=idx) if a in shapes:
                f = footprint(tuple(sp.sympify(x).xreplace(subs) for x in idx), shapes[a], ext)
                if a not in need or _size_key(f) > _size_key(need[a]):
                    need[a] = f
            case DOp(args=args):
                for x in args:
                    walk(x, ext)
            case DReduce(var=v, extent=n, body=b):
                walk(b, {**ext, v: sp.sympify(n).xreplace(subs)})
            case DSelect(cond=c, then=t, other=o):
                c = sp.sympify(c).xreplace(subs)
                if isinstance(c, sp.StrictLessThan) and c.lhs in ext:
                    walk(t, {**ext, c.lhs: c.rhs})
                    walk(o, {**ext, c.lhs: ext[c.lhs] - c.rhs})
                else:
                    walk(t, ext)
                    walk(o, ext)

    for st in d.stmts:
        body, starts = narrow_update(st, st.body)
        walk(body, {v: sp.sympify(n - starts.get(v, 0)).xreplace(subs) for v, n in zip(st.vars, st.shape)})
    return need


def _size_key(e):
    # order symbolic sizes by their value when every size is 64 (a large-ish generic size)
    v = sp.sympify(e).xreplace({s: 64 for s in sp.sympify(e).free_symbols})
    try:
        return float(v)
    except TypeError:  # pragma: no cover
        return 0.0


def narrow_update(st: DStmt, body) -> tuple:
    """For an update, the rows it would rewrite with their own values are not written:
    `⟨i j⟩ψK = (⟨i j⟩ψK if i < n else …)` runs i from n.  Returns (body, {var: start})."""
    starts: dict = {}
    if st.role != "update":
        return body, starts
    same = DRead(st.name, tuple(st.vars))
    while isinstance(body, DSelect):
        c = sp.sympify(body.cond)
        if body.then == same and isinstance(c, sp.StrictLessThan) and c.lhs in st.vars and c.lhs not in starts:
            starts[c.lhs] = c.rhs
            body = body.other
        elif body.other == same and isinstance(c, sp.GreaterThan) and c.lhs in st.vars and c.lhs not in starts:
            starts[c.lhs] = c.rhs
            body = body.then
        else:
            break
    return body, starts




# --------------------------------------------------------------------------- driver


def chunk_size(tokens: int, frames: int) -> int:
    """The C helper moac_chunk, for evaluating ONF expressions at given sizes: at most 64
    chunks per frame, at most about 8192 gangs, 16 … 1024 tokens per chunk (measured on
    the H200: the combine's cost grows with the chunks per frame, docs/benchmarks.md)."""
    want, c = max((tokens + 63) // 64, (tokens * frames + 8191) // 8192), 16
    while c < want and c < CHUNK:
        c *= 2
    return c


def to_onf(d: DNF, target: str = "openacc", sizes: dict | None = None, mapping: str = "auto",
           unroll: int = 4, storage: dict | None = None, share_kv: bool = False) -> ONF:
    """Lower a DNF to its ONF.  `storage` overrides the declared dtype of inputs
    (name -> dtype) for cost studies; `share_kv` puts the query heads that read the same
    K/V rows (GQA) into one gang (off by default: slower on the H200 with GCC 12, see
    docs/benchmarks.md)."""
    from .plans import Builder, generic, hoist_selects, match_attention, materialise, split_k
    sizes = sizes or {}
    b = Builder(d, target, sizes, mapping, unroll, storage or {}, share_kv)
    prog = d.program
    norm = tuple(DStmt(st.name, st.vars, st.shape, hoist_selects(st.body), st.role) for st in d.stmts)
    updates = [st for st in norm if st.role == "update"]
    attn = match_attention(tuple(st for st in norm if st.role != "update")) if mapping == "auto" else None
    if attn is not None:
        stmts = list(norm)
        plan = "split-K softmax contraction (token axis lifted into gang chunks, log-sum-exp combine)"
        split_k(b, attn)
        generic(b, updates)
        for t in (attn.m, attn.z):
            b.notes.append(f"temporary {t.name} lives per chunk in registers (as m_g / z_g) and is never stored whole")
    else:
        stmts = materialise(list(norm), avoid=tuple(prog.size_names()) + tuple(i.name for i in prog.inputs))
        plan = "generic (one kernel per statement)" + (", naive lanes over reduction axes" if mapping == "naive" else "")
        generic(b, stmts)
    minimum = sp.Integer(0)
    need = needed_reads(d, b.subs)
    for i in prog.inputs:
        minimum += need.get(i.name, sp.Integer(0)) * DTYPE_BYTES[b.buffers[i.name].dtype]
    for name, _ in prog.outputs:
        minimum += b.buffers[name].size * DTYPE_BYTES[b.dtype]
    for st in updates:                     # an update writes only the rows that change
        _, starts = narrow_update(st, st.body)
        rows = [b.spec(n) - b.spec(starts.get(v, 0)) for v, n in zip(st.vars, st.shape)]
        minimum += sp.Mul(*rows) * DTYPE_BYTES[b.buffers[st.name].dtype]
    traffic = sp.expand(sum((k.traffic for k in b.kernels), sp.Integer(0)))
    flops = sp.expand(sum((k.flops for k in b.kernels), sp.Integer(0)))
    params = tuple(s.name for s in prog.sizes if s.name not in b.fixed)
    return ONF(d, target, mapping, plan, dict(b.fixed), params, b.ctype, tuple(b.buffers.values()),
               tuple(b.kernels), tuple(b.prologue), tuple(b.lifts), tuple(stmts), traffic, sp.expand(minimum), flops,
               tuple(b.notes), tuple(b.run_time))


# --------------------------------------------------------------------------- printing


def format_onf(o: ONF) -> str:
    from .dnf import format_stmt
    prog = o.dnf.program
    L = [f"-- ONF of {prog.source.filename}   target {o.target}, plan: {o.plan}"]
    if o.fixed:
        env = {sp.Symbol(k, integer=True, nonnegative=True): v for k, v in o.fixed.items()}
        derived = [f"{n} = {sp.sympify(e).xreplace(env)}" for n, e in prog.derived
                   if not sp.sympify(e).xreplace(env).free_symbols]
        L.append("fixed sizes   " + ", ".join([f"{k} = {v}" for k, v in o.fixed.items()] + derived))
    if o.params:
        L.append("run-time sizes " + ", ".join(o.params))
    L.append("")
    L.append("statements (DNF after materialisation):")
    for s in o.statements:
        L.append(f"  {s.role:6} {format_stmt(s)}")
    L.append("")
    L.append("buffers:")
    for buf in o.buffers:
        L.append(f"  {shown(buf.name):8} {buf.role:7} {buf.dtype} {show_shape(buf.shape):18} {buf.placement}")
    if o.lifts:
        L.append("")
        L.append("dimension lifting:")
        for lf in o.lifts:
            guard = f", guard {lf.var} < {fmt_index(lf.extent)} ({fmt_index(lf.factor)} ∤ {fmt_index(lf.extent)} " \
                "in general)" if lf.guarded else f" ({fmt_index(lf.factor)} | {fmt_index(lf.extent)}, no guard)"
            L.append(f"  {lf.var} ∈ ⟨{fmt_index(lf.extent)}⟩ → ⟨{lf.outer} {lf.inner}⟩: {lf.level}{guard}")
    for k in o.kernels:
        L.append("")
        L.append(f"kernel {k.name}: {k.comment}")
        for lp in dict.fromkeys(k.loops):          # each loop once, in order
            L.append(f"  loop {lp.var:6} < {fmt_index(lp.extent):14} {lp.level:6}  {lp.meaning}")
        seen = set()
        for a in k.accesses:
            key = (a.array, a.offset, a.write, a.lanes)
            if key in seen:
                continue
            seen.add(key)
            rw = "write" if a.write else "read "
            lanes = f"lanes over {a.lanes}: γ-difference {fmt_index(a.diff)} → {a.verdict}" if a.lanes else "no vector lanes"
            L.append(f"  {rw} {shown(a.array)}[{a.text}]   {lanes}")
        L.append(f"  DRAM bytes {fmt_index(k.traffic)}   flops {fmt_index(k.flops)}")
    L.append("")
    L.append("traffic model: each kernel moves every distinct element it touches once (a perfect cache within "
             "a kernel, none between kernels)")
    L.append(f"DRAM traffic   {fmt_index(sp.factor(o.traffic))} bytes")
    L.append(f"minimum        {fmt_index(sp.factor(o.minimum))} bytes (each input element the outputs depend on "
             "read once, each output element written once)")
    if o.minimal:
        L.append("verdict        traffic = minimum ✓ (minimal)")
    elif o.compulsory_minimal:
        L.append(f"verdict        inputs and outputs move exactly the minimum ✓ (minimal); scratch adds "
                 f"{fmt_index(sp.factor(o.scratch_traffic))} bytes")
    else:
        L.append(f"verdict        NOT minimal: {fmt_index(sp.factor(o.traffic - o.minimum))} bytes over the minimum")
    L.append(f"flops          {fmt_index(sp.factor(o.flops))}")
    for n in o.notes:
        L.append(f"note: {n}")
    return "\n".join(L)
