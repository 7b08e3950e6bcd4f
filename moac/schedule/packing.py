"""Packed loads from the register-stride lifting.

A lane loop over a DNF axis d of literal extent N is lifted d = w·(32·r + v) + k
(v < 32 lanes, r < R = N / 32w register blocks, k < w elements per lane): each lane then
reads w consecutive elements of every stream that d walks with stride 1, as whole 8-byte
words (GCC emits one load instruction per C load, and at most 8 bytes per lane).  The
coalescing criterion at the granularity of the packed load: adjacent lanes are w elements
apart, γ-difference w, exactly the width each lane loads.

`plan_packing` decides w and R or says why not; `packed_reduction` lowers a Σ over such an
axis into one vector loop whose lanes take R·w terms each.
"""
from __future__ import annotations

import sympy as sp

from .. import ops
from ..dnf import DReduce, reads, substitute
from ..dtypes import BYTES
from .index import gamma, internal, lane_diff, logical
from .ir import Const, Let, Local, Loop, Op, Set, Unpack

WORD = 8        # bytes per packed load
IN_FLIGHT = 8   # packed words in flight per lane a split-K score pass aims for (bf16 d = 128: 8 tokens)
MIN_WORD = 4    # the narrower packed load, where a lane's run of the narrowest stream is 4 bytes
LANES = 32


def word_bytes(w: int, esize: int) -> int | None:
    """The load width for a lane's run of w elements of esize bytes: 8-byte words (the run a
    whole number of them), one 4-byte word, or None (not whole words)."""
    run = w * esize
    if run % WORD == 0:
        return WORD
    return run if run == MIN_WORD else None


def streams(ctx, body, var) -> list:
    """The distinct reads of `body` whose index mentions `var`."""
    seen, out = set(), []
    for r in reads(body):
        key = (r.array, tuple(r.index))
        if key not in seen and any(var in sp.sympify(i).free_symbols for i in r.index):
            seen.add(key)
            out.append(r)
    return out


def token_streams(ctx, body, var, tok) -> list:
    """The streams of `body` along `var` whose index also walks the tokens `tok` (K's rows,
    not q, which a score pass loads once)."""
    return [r for r in streams(ctx, body, var) if any(tok in sp.sympify(i).free_symbols for i in r.index)]


def lane_words(ctx, runs: list, elems) -> int:
    """Packed words a lane loads per token: `elems` elements of each run, the widest counted."""
    return max((max(1, int(elems) * BYTES[ctx.buffers[r.array].dtype] // WORD) for r in runs), default=1)


def plan_packing(ctx, body, var, extent, opts):
    """(w, R) for lifting `var` of `body`, or a reason (str) why its loads are not packed."""
    if opts.pack == "none":
        return "packing off (--pack none)"
    if ctx.target.lanes == "simd":
        return "the target's lanes are SIMD slots: contiguous elements vectorise without packed words"
    n = sp.sympify(extent)
    if not n.is_Integer:
        return f"the extent {n} of {var.name} is not fixed at compile time"
    runs = streams(ctx, body, var)
    if not runs:
        return f"no load walks {var.name}"
    sizes = [BYTES[ctx.buffers[r.array].dtype] for r in runs]
    w = WORD // min(sizes)
    if w < 2:
        return "8-byte elements are one word each already"
    # the widest run per lane that the 32 lanes tile: an 8-byte word of the narrowest
    # stream, else a 4-byte one (d = 128 of one-byte elements: 4 per lane)
    tried = [w]
    while w > 2 and (int(n) % (LANES * w) or int(n) // (LANES * w) > 8) and w * min(sizes) > MIN_WORD:
        w //= 2
        tried.append(w)
    if int(n) % (LANES * w) or not 1 <= int(n) // (LANES * w) <= 8:
        why = f"{var.name} < {n} is not {' or '.join(f'32·{t}·R' for t in tried)} with R ≤ 8"
        return why + (f" (1-byte elements pack {w} to a word)" if min(sizes) == 1 else "")
    for r, esize in zip(runs, sizes):
        buf = ctx.buffers[r.array]
        off = gamma(ctx.spec(tuple(r.index)), buf.shape)
        if lane_diff(off, var) != 1:
            return f"{r.array} is not contiguous along {var.name}"
        if word_bytes(w, esize) is None:
            return f"{r.array}: {w} elements of {esize} bytes are not whole words"
        base = sp.expand(off.xreplace({var: 0}))
        if any(c % w for c in base.as_coefficients_dict().values()):
            return f"{r.array}'s rows are not aligned to {w} elements"
    return w, int(n) // (LANES * w)


def unpacks(ctx, body, var, base, w: int, names, tag: str, subst: dict | None = None) -> tuple:
    """Unpack statements for every stream of `body` along `var`, the lane's run starting at
    var = base, and a map (array, index at var = base + k) -> the local holding it."""
    stmts, locals_ = [], {}
    for r in streams(ctx, body, var):
        idx = tuple(sp.expand(sp.sympify(i).xreplace({var: base})) for i in r.index)
        ns = tuple(names.fresh(f"{r.array.lower()}{tag}_") for _ in range(w))
        stmts.append(Unpack(r.array, idx, logical(tuple(r.index), subst or {}), ns))
        for k, nm in enumerate(ns):
            locals_[(r.array, tuple(sp.expand(sp.sympify(i).xreplace({var: base + k})) for i in r.index))] = nm
    return tuple(stmts), locals_


def packed_reduction(ctx, red: DReduce, names, pack: tuple, opts, lower, subst: dict):
    """Σ_j body → one vector loop over the lanes v, j = w·(32·r + v) + k: every lane
    unpacks its w consecutive elements of each stream and adds its R·w terms.  None when
    this reduction's streams do not allow the packing `pack` (then it is lowered plainly)."""
    w, R = pack
    if plan_packing(ctx, red.body, red.var, red.extent, opts) != pack:
        return None                     # this reduction's own streams do not allow the plan's packing
    v = internal("v")
    acc = names.fresh("acc")
    body: list = []
    for r in range(R):
        base = w * (LANES * r + v)
        loads, locals_ = unpacks(ctx, red.body, red.var, base, w, names, str(r), subst)
        body += loads
        for k in range(w):
            pre, x = lower(substitute(red.body, {red.var: base + k}), names, subst=subst, reads=locals_)
            body += pre
            body.append(Set(acc, Op(red.op, (Local(acc), x))))
    loop = Loop(v, LANES, "vector", tuple(body), note=f"vector lanes: {red.var.name} = {lifted(w, R)}, "
                f"{w} elements per lane in packed loads",
                reduce=((red.op, (acc,)),), binds=((red.var, red.extent),), trip=sp.Integer(LANES))
    return [Let(acc, Const(ops.identity(red.op))), loop], Local(acc)


def _rename(e, ren: dict):
    match e:
        case Local(name=n):
            return Local(ren.get(n, n))
        case Op(op=op, args=args):
            return Op(op, tuple(_rename(a, ren) for a in args))
    return e


def dedupe_unpacks(stmts: list) -> list:
    """Jammed copies unpack the same run (q, for every token) once: later copies read the
    first copy's locals."""
    seen: dict = {}
    ren: dict = {}
    out = []
    for st in stmts:
        if isinstance(st, Unpack):
            key = (st.array, st.index)
            if key in seen:
                ren.update(zip(st.names, seen[key]))
                continue
            seen[key] = st.names
            out.append(st)
        elif isinstance(st, (Set, Let)) and ren:
            out.append(type(st)(st.name, _rename(st.value, ren)))
        else:
            out.append(st)
    return out


def note_lift(ctx, var, extent, w: int, R: int, what: str):
    from .ir import Lift
    ctx.lifts.append(Lift(var.name, extent, LANES * w, "r v" if R > 1 else "v", "k", False,
                          f"{what}: {var.name} = {lifted(w, R)}, {w} elements per lane in packed loads"))


def lifted(w: int, R: int) -> str:
    """The register-stride lifting as text: d = w·(32·r + v) + k (r < R), or w·v + k."""
    return f"{w}·(32·r + v) + k, r < {R}" if R > 1 else f"{w}·v + k"
