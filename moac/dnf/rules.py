"""Core program -> Denotational Normal Form by ψ-reduction (stage 3: `to_dnf`).

Every output element becomes one closed expression over ψ-selections of the stored
inputs, with explicit bound reduction variables and guards.  No transpose,
reshape, catenation, take/drop/reverse or Ω survives: each is an index rewrite.
A temporary is kept only where a reduction result is reused under scalar
extension (softmax's max and sum): recomputing it per element would change the
complexity.  Each rewrite is recorded with the name of the rule that fired.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

import sympy as sp

from ..front import core as C
from ..front.data import has_data
from ..errors import RewriteError
from ..ops import OPS, RIGHT_FOLDS
from .ir import (DConst, DIndex, DOp, DRead, DReduce, DSelect, DStmt, TraceStep, fmt_index, fmt_num,
                 fmt_vec, format_expr, index_var)
from .reshape import reshape_index, simplify_index
from .walk import at_sizes, canonical_key, flops, free_index_vars, has_reduce, map_children, reads, substitute


def core_text(c: C.Core) -> str:
    """A short readable rendering of a core node for the rewrite trace."""
    match c:
        case C.CInput(name=n) | C.CNamed(name=n):
            return n
        case C.CConst(value=v):
            return fmt_num(v)
        case C.CSize(expr=e):
            return fmt_index(e)
        case C.CVec(items=items):
            return "⟨" + " ".join(core_text(i) for i in items) + "⟩"
        case C.CIota(n=n):
            return f"ι{fmt_index(n)}"
        case C.CIndices(dims=dims):
            return f"ι{fmt_vec(dims)}"
        case C.CMap(op=op, args=(a,)):
            return f"{OPS[op].dnf_text}{core_text(a)}"
        case C.CMap(op=op, args=(a, b)):
            return f"({core_text(a)} {OPS[op].dnf_text} {core_text(b)})"
        case C.CPsi(index=idx, arg=a):
            return f"{fmt_vec(idx)}ψ{core_text(a)}"
        case C.CTranspose(perm=p, arg=a):
            if tuple(p) == tuple(reversed(range(len(p)))):
                return f"⍉{core_text(a)}"
            return f"{fmt_vec(p)}⍉{core_text(a)}"
        case C.CReshape(shape=s, arg=a):
            return f"{fmt_vec(s)}ρ{core_text(a)}"
        case C.CCat(left=a, right=b):
            return f"({core_text(a)} # {core_text(b)})"
        case C.CTake(count=k, arg=a):
            return f"{fmt_index(k)}△{core_text(a)}"
        case C.CDrop(count=k, arg=a):
            return f"{fmt_index(k)}▽{core_text(a)}"
        case C.CReverse(arg=a):
            return f"Φ{core_text(a)}"
        case C.CRed(op=op, arg=a):
            return f"{OPS[op].dnf_text}red {core_text(a)}"
        case C.CInner(f=f, g=g, left=a, right=b):
            return f"({core_text(a)} {OPS[f].dnf_text}.{OPS[g].dnf_text} {core_text(b)})"
        case C.COuter(g=g, left=a, right=b):
            return f"({core_text(a)} ∘.{OPS[g].dnf_text} {core_text(b)})"
        case C.COmega(args=args, body=b):
            return f"Ω[{core_text(b)}]({', '.join(core_text(a) for a in args)})"
        case C.CCell():
            return "cell"
    return type(c).__name__  # pragma: no cover


# --------------------------------------------------------------------------- ψ-reduction


@dataclass
class _Ctx:
    program: C.CoreProgram
    stmts: list = field(default_factory=list)
    trace: list = field(default_factory=list)
    temps: dict = field(default_factory=dict)       # canonical key -> (name, free vars order)
    temp_names: set = field(default_factory=set)
    used: set = field(default_factory=set)          # variable names in the current statement
    scope: dict = field(default_factory=dict)       # var -> extent, in binding order
    cells: dict = field(default_factory=dict)       # cell id -> (core arg, frame index)
    phis: dict = field(default_factory=dict)        # Ω frame placeholder -> the frame index it stands for
    guards: list = field(default_factory=list)      # catenation conditions around the current node
    stmt_vars: set = field(default_factory=set)     # the current statement's own index variables
    outer: set = field(default_factory=set)         # the scope around a scalar kept by extension (_extended)
    stored: dict = field(default_factory=dict)      # id of a named core node -> the temporary that stores it
    notes: dict = field(default_factory=dict)       # temporary -> why it is stored (the DNF dump prints it)

    def fresh(self, extent) -> sp.Symbol:
        ext = sp.sympify(extent)
        base = None
        if isinstance(ext, sp.Symbol):
            base = self.program.index_hints.get(ext.name)
        reserved = {s.name for s in self.program.sizes} | {i.name for i in self.program.inputs} | \
            {o[0] for o in self.program.outputs} | self.temp_names
        candidates = [base] if base else []
        candidates += ["i", "j", "k", "l", "p", "r", "t", "u", "w"]
        for cand in candidates:
            if cand not in self.used and cand not in reserved:
                self.used.add(cand)
                return index_var(cand)
        root = base or "i"
        k = 1
        while f"{root}{k}" in self.used or f"{root}{k}" in reserved:
            k += 1
        self.used.add(f"{root}{k}")
        return index_var(f"{root}{k}")

    def log(self, rule: str, node: C.Core, idx: tuple, after: str):
        self.trace.append(TraceStep(rule, f"{fmt_vec(idx)}ψ{core_text(node)}" if idx else core_text(node), after))


def _fold(op: str, v, extent, body):
    """Σ/Π/max/min over v, or a right fold of − or ÷ as the fold of its associative partner
    with the odd terms negated or inverted: a0 − (a1 − (a2 − …)) = Σ_v (−1)^v a_v and
    a0 ÷ (a1 ÷ (a2 ÷ …)) = Π_v a_v^((−1)^v), so the Schedule may split it like any monoid."""
    if op not in RIGHT_FOLDS:
        return DReduce(op, v, extent, body)
    partner, invert = RIGHT_FOLDS[op]
    odd = sp.Eq(sp.Mod(v, 2), 1)
    return DReduce(partner, v, extent, DSelect(odd, DOp(invert, (body,)), body))


def _at(ctx: _Ctx, e):
    """A node's sympy field as the DNF sees it: the enclosing Ω frames' placeholders
    replaced by their frame indices (front/data.py).  (A ragged array, whose shape holds
    axis placeholders, reaches the ψ-reduction only as an Ω cell, a ψ-selection or an
    elementwise operand, whose rules read no extent.)"""
    e = sp.sympify(e)
    return e.xreplace(ctx.phis) if ctx.phis else e


def psi_reduce(node: C.Core, idx: tuple, ctx: _Ctx):
    """The full ψ-selection ⟨idx⟩ψnode as a DNF expression (len(idx) == rank of node)."""
    assert len(idx) == node.rank, (type(node).__name__, idx, node.shape)
    match node:
        case C.CInput(name=name):
            return DRead(name, tuple(simplify_index(i, ctx.scope) for i in idx))
        case C.CConst(value=v):
            return DConst(v)
        case C.CSize(expr=e):
            return DIndex(_at(ctx, e))
        case C.CVec(items=items):
            (i,) = idx
            if not items:                       # ⟨⟩ unified with an axis whose size must then be 0: never read
                return DConst(0.0)
            if sp.sympify(i).is_Integer:
                return psi_reduce(items[int(i)], (), ctx)
            out = psi_reduce(items[-1], (), ctx)
            for k in range(len(items) - 2, -1, -1):
                out = DSelect(sp.Eq(i, k), psi_reduce(items[k], (), ctx), out)
            return out
        case C.CIota():
            return DIndex(idx[0])
        case C.CIndices():                      # ⟨i … m⟩ψ ι s = item m of the index ⟨i …⟩
            *at, m = idx
            if sp.sympify(m).is_Integer:
                return DIndex(at[int(m)])
            out = DIndex(at[-1])
            for k in range(len(at) - 2, -1, -1):
                out = DSelect(sp.Eq(m, k), DIndex(at[k]), out)
            return out
        case C.CNamed(arg=arg):
            if id(node) in ctx.stored:
                return DRead(ctx.stored[id(node)], tuple(idx))
            return _stored(ctx, node, idx) or psi_reduce(arg, idx, ctx)
        case C.CMap(op=op, args=args):
            parts = []
            for a in args:
                if a.rank == 0 and node.rank > 0:
                    parts.append(_extended(a, ctx))
                else:
                    parts.append(psi_reduce(a, idx, ctx))
            return DOp(op, tuple(parts))
        case C.CPsi(index=pre, arg=arg):
            full = tuple(_at(ctx, i) for i in pre) + tuple(idx)
            ctx.log("ψ∘ψ", node, idx, f"{fmt_vec(full)}ψ{core_text(arg)}")
            return psi_reduce(arg, full, ctx)
        case C.CTranspose(perm=perm, arg=arg):
            new = tuple(idx[perm[k]] for k in range(arg.rank))
            ctx.log("ψ-transpose", node, idx, f"{fmt_vec(new)}ψ{core_text(arg)}")
            return psi_reduce(arg, new, ctx)
        case C.CReshape(arg=arg):
            if C.same_shape(node.shape, arg.shape):
                new = tuple(idx)
            elif any(sp.sympify(d) == 0 for d in arg.shape):
                new = tuple(sp.Integer(0) for _ in arg.shape)   # no elements: never read (no Mod by 0)
            else:
                new = reshape_index(tuple(idx), tuple(node.shape), tuple(arg.shape))
            ctx.log("ψ-reshape", node, idx, f"{fmt_vec(new)}ψ{core_text(arg)}")
            return psi_reduce(arg, new, ctx)
        case C.CCat(left=a, right=b, item=item):
            i0, rest = idx[0], tuple(idx[1:])
            na = _at(ctx, a.shape[0])               # a cell's length may be read from data: ⟨b⟩ψlens
            cond = sp.Lt(i0, na)
            bidx = rest if item else (i0 - na,) + rest
            ctx.log("ψ-catenate", node, idx, f"{fmt_vec(idx)}ψ{core_text(a)} if {fmt_index(i0)} < {fmt_index(na)} "
                    f"else {fmt_vec(bidx)}ψ{core_text(b)}")
            if C.provably(cond):
                return psi_reduce(a, idx, ctx)
            if C.provably_false(cond):
                return psi_reduce(b, bidx, ctx)
            with _guard(ctx, cond):
                then = psi_reduce(a, idx, ctx)
            with _guard(ctx, sp.Not(cond)):
                other = psi_reduce(b, bidx, ctx)
            return DSelect(cond, then, other)
        case C.CTake(count=k, arg=arg):
            k = _at(ctx, k)
            new = tuple(idx) if k.is_nonnegative else (idx[0] + _at(ctx, arg.shape[0]) + k,) + tuple(idx[1:])
            ctx.log("ψ-take", node, idx, f"{fmt_vec(new)}ψ{core_text(arg)}")
            return psi_reduce(arg, new, ctx)
        case C.CDrop(count=k, arg=arg):
            k = _at(ctx, k)
            new = (idx[0] + k,) + tuple(idx[1:]) if k.is_nonnegative else tuple(idx)
            ctx.log("ψ-drop", node, idx, f"{fmt_vec(new)}ψ{core_text(arg)}")
            return psi_reduce(arg, new, ctx)
        case C.CReverse(arg=arg):
            new = (_at(ctx, arg.shape[0]) - 1 - idx[0],) + tuple(idx[1:])
            ctx.log("ψ-reverse", node, idx, f"{fmt_vec(new)}ψ{core_text(arg)}")
            return psi_reduce(arg, new, ctx)
        case C.CRed(op=op, arg=arg):
            ext = _at(ctx, arg.shape[0])
            v = ctx.fresh(ext)
            with _bound(ctx, v, ext):
                body = psi_reduce(arg, (v,) + tuple(idx), ctx)
            out = _fold(op, v, ext, body)
            ctx.log("ψ-reduce" if op not in RIGHT_FOLDS else "ψ-reduce, right fold", node, idx, format_expr(out))
            return out
        case C.CInner(f=f, g=g, left=a, right=b):
            ra = a.rank - 1
            ext = _at(ctx, a.shape[-1])
            v = ctx.fresh(ext)
            with _bound(ctx, v, ext):
                body = DOp(g, (psi_reduce(a, tuple(idx[:ra]) + (v,), ctx),
                               psi_reduce(b, (v,) + tuple(idx[ra:]), ctx)))
            out = _fold(f, v, ext, body)
            ctx.log("ψ-inner" if f not in RIGHT_FOLDS else "ψ-inner, right fold", node, idx, format_expr(out))
            return out
        case C.COuter(g=g, left=a, right=b):
            out = DOp(g, (psi_reduce(a, tuple(idx[:a.rank]), ctx), psi_reduce(b, tuple(idx[a.rank:]), ctx)))
            ctx.log("ψ-outer", node, idx, format_expr(out))
            return out
        case C.COmega(frame=frame, args=args, cells=cells, frames=frames, body=body, phis=phis):
            fidx = tuple(idx[:len(frame)])
            saved = dict(ctx.cells)
            saved_phis = ctx.phis
            ctx.phis = {**ctx.phis, **dict(zip(phis, fidx))}
            for a, cell, fr in zip(args, cells, frames):
                ctx.cells[cell.id] = (a, fidx if fr else ())
            ctx.log("ψ-Ω", node, idx, f"{fmt_vec(idx[len(frame):])}ψ{core_text(body)} with cells "
                    + ", ".join(f"{fmt_vec(fidx if fr else ())}ψ{core_text(a)}" for a, fr in zip(args, frames)))
            try:
                return psi_reduce(body, tuple(idx[len(frame):]), ctx)
            finally:
                ctx.cells = saved
                ctx.phis = saved_phis
        case C.CCell(id=cid):
            arg, fidx = ctx.cells[cid]
            saved = dict(ctx.cells)
            try:
                return psi_reduce(arg, tuple(fidx) + tuple(idx), ctx)
            finally:
                ctx.cells = saved
    raise RewriteError(f"no ψ-rule for {type(node).__name__}", node.span, ctx.program.source)


class _bound:
    def __init__(self, ctx: _Ctx, var, extent):
        self.ctx, self.var, self.extent = ctx, var, extent

    def __enter__(self):
        self.ctx.scope[self.var] = self.extent

    def __exit__(self, *exc):
        del self.ctx.scope[self.var]


class _guard:
    def __init__(self, ctx: _Ctx, cond):
        self.ctx, self.cond = ctx, cond

    def __enter__(self):
        self.ctx.guards.append(self.cond)

    def __exit__(self, *exc):
        self.ctx.guards.pop()


def _extended(a: C.Core, ctx: _Ctx):
    """A rank-0 operand used for every element of a larger array (scalar extension)."""
    outer = ctx.outer
    ctx.outer = set(ctx.scope)              # kept as a temporary: only its own reductions are loops around a read
    try:
        d = psi_reduce(a, (), ctx)
    finally:
        ctx.outer = outer
    if not has_reduce(d):
        return d
    free = [v for v in ctx.scope if v in free_index_vars(d)]
    # The temporary is computed over the whole domain of its free variables, but inside a
    # catenation branch its reads are valid only where that branch is taken: keep the guard.
    sizes = set(ctx.program.sizes)
    guards = [g for g in ctx.guards if sp.sympify(g).free_symbols - sizes
              and sp.sympify(g).free_symbols - sizes <= set(free)]
    if guards:
        d = DSelect(sp.And(*guards), d, DConst(0.0))
    key = (canonical_key(d, {v: sp.Symbol(f"_f{k}") for k, v in enumerate(free)}), len(free))
    if key in ctx.temps:
        name = ctx.temps[key]
        ctx.log("reuse-temporary", a, (), f"{name}")
        return DRead(name, tuple(free))
    name = _temp_name(ctx, a.name if isinstance(a, C.CNamed) else "t")
    ctx.temps[key] = name
    # the temporary is a statement of its own: give its bound variables fresh, preferred names
    saved_used = ctx.used
    ctx.used = {v.name for v in free}
    body = rename_bound(d, ctx, {})
    ctx.used = saved_used
    ctx.stmts.append(DStmt(name, tuple(free), tuple(ctx.scope[v] for v in free), body, "temp"))
    ctx.log("temporary", a, (), f"{name} (a reduction reused under scalar extension)")
    return DRead(name, tuple(free))


def _temp_name(ctx: _Ctx, base: str) -> str:
    """A fresh temporary name from `base` (m, m2, …): no input, output, size, index variable
    of the statement or other temporary has it."""
    taken = ({i.name for i in ctx.program.inputs} | {o[0] for o in ctx.program.outputs}
             | {s.name for s in ctx.program.sizes} | ctx.used | ctx.temp_names)
    name, k = base, 1
    while name in taken:
        k += 1
        name = f"{base}{k}"
    ctx.temp_names.add(name)
    return name


def _whole(ctx: _Ctx, node: C.CNamed) -> tuple:
    """Every element of a named node ψ-reduced as a statement of its own: (its index
    variables, its body).  The context is left set up for that statement."""
    ctx.used, ctx.guards, ctx.outer = set(), [], set()
    vars_ = tuple(ctx.fresh(n) for n in node.shape)
    ctx.scope = dict(zip(vars_, node.shape))
    ctx.stmt_vars = set(vars_)
    return vars_, psi_reduce(node.arg, vars_, ctx)


STORE_RULE_SIZE = 64      # every size at this value when the counts of inlined and stored are compared


def _stored(ctx: _Ctx, node: C.CNamed, idx: tuple):
    """A named array read under a reduction it does not depend on is stored once (a
    temporary over its own shape) when the counts say so; None to inline it.

    Inlined, each of the `sites` evaluations of this read (the enclosing index domain)
    costs the f operations of its element; stored, the array costs f per element once and
    each site one read.  It is stored when f·sites > f·τ + sites with every size at
    STORE_RULE_SIZE.  Only a reduction variable counts as a loop it is recomputed under:
    an element recomputed for each element of the statement's own domain (a softmax's
    weights across the output axis) is the plan's business (split-K keeps them on chip)."""
    if node.rank == 0 or ctx.phis or ctx.cells or C.mentions_cells(node.arg) or any(has_data(x) for x in node.shape):
        return None                                   # (a scalar reused under extension: _extended keeps it)
    mark = (len(ctx.trace), list(ctx.stmts), dict(ctx.temps), set(ctx.temp_names), set(ctx.used),
            dict(ctx.stored), dict(ctx.notes))
    inline = psi_reduce(node.arg, idx, ctx)
    free = free_index_vars(inline)
    around = [v for v in ctx.scope if v not in ctx.stmt_vars | ctx.outer and v not in free]
    if not around or not has_reduce(inline):
        return inline
    f = flops(inline)
    sites = sp.Mul(*(sp.sympify(e) for v, e in ctx.scope.items() if v not in ctx.outer or v in free))
    total = sp.Mul(*(sp.sympify(e) for e in node.shape))
    inlined, stored = sp.expand(f * sites), sp.expand(f * total)
    if not at_sizes(inlined - stored - sites, STORE_RULE_SIZE) > 0:
        return inline
    ctx.trace[mark[0]:] = []                          # undo the inlined copy: stored, it is reduced once
    ctx.stmts[:], ctx.temps, ctx.temp_names, ctx.used, ctx.stored, ctx.notes = mark[1:]
    name = _temp_name(ctx, node.name)
    ctx.stored[id(node)] = name
    saved = (ctx.used, ctx.scope, ctx.guards, ctx.stmt_vars, ctx.outer)
    vars_, body = _whole(ctx, node)
    ctx.used, ctx.scope, ctx.guards, ctx.stmt_vars, ctx.outer = saved
    ctx.stmts.append(DStmt(name, vars_, tuple(node.shape), body, "temp"))
    steps = " × ".join(fmt_index(ctx.scope[v]) for v in around)
    why = (f"stored: inlined, each element would be recomputed for the {steps} steps of a reduction it "
           f"does not depend on ({fmt_index(inlined)} flops); stored, {fmt_index(stored)} flops and "
           f"{fmt_index(sites)} reads")
    ctx.notes[name] = why
    ctx.log("store-named", node, idx, f"{fmt_vec(idx)}ψ{name} ({why})")
    return DRead(name, tuple(idx))


def rename_bound(e, ctx: _Ctx, sub: dict):
    """Rename every bound reduction variable of `e` with ctx.fresh (outermost first); `sub`
    maps the enclosing ones already renamed to their new names."""
    match e:
        case DReduce(op=op, var=v, extent=ext, body=b):
            nv = ctx.fresh(ext)
            return DReduce(op, nv, sp.sympify(ext).xreplace(sub), rename_bound(b, ctx, {**sub, v: nv}))
        case DSelect(cond=c, then=t, other=o):
            return DSelect(sp.sympify(c).xreplace(sub), rename_bound(t, ctx, sub), rename_bound(o, ctx, sub))
        case DOp():
            return map_children(e, lambda a: rename_bound(a, ctx, sub))
    return substitute(e, sub)               # a read, a constant or an index value


def _temp_key(e, free: tuple):
    return canonical_key(e, {v: sp.Symbol(f"_f{k}") for k, v in enumerate(free)}), len(free)


def _share_temporaries(ctx: _Ctx) -> tuple:
    """Every reduction equal to a kept temporary (up to bound-variable names, over the same
    extents of its free variables) reads that temporary instead.  Scalar extension keeps a
    reduction only where it is reused across an array; the same reduction used once per
    element elsewhere (a row's log-sum-exp, m + log z, beside the softmax that keeps m and
    z) is then computed once, not twice.  A temporary read by a statement before the place
    it was kept moves up to just before that statement; otherwise the order is kept.  A
    reduction that is a statement's whole value stays as it is: reading the temporary
    would only copy it."""
    temps = {}                  # key -> temporary statement
    for st in ctx.stmts:
        if st.role == "temp":
            temps[_temp_key(st.body, st.vars)] = st

    def rewrite(e, enclosing: dict, top: bool = False):
        match e:
            case DReduce(op=op, var=v, extent=ext, body=b):
                free = tuple(x for x in enclosing if x in free_index_vars(e))
                t = None if top else temps.get(_temp_key(e, free))
                if t is not None and C.same_shape(t.shape, tuple(enclosing[x] for x in free)):
                    after = f"{fmt_vec(free)}ψ{t.name}" if free else t.name
                    ctx.trace.append(TraceStep("reuse-temporary", format_expr(e), after))
                    return DRead(t.name, free)
                return DReduce(op, v, ext, rewrite(b, {**enclosing, v: ext}))
            case DOp() | DSelect():
                return map_children(e, lambda a: rewrite(a, enclosing))
        return e

    new = {}
    for st in ctx.stmts:
        body = rewrite(st.body, dict(zip(st.vars, st.shape)), top=True)
        new[st.name, st.role] = replace(st, body=body)
    by_name = {st.name: new[st.name, st.role] for st in ctx.stmts if st.role == "temp"}
    out, done = [], set()

    def emit(st):
        for r in reads(st.body):
            if r.array in by_name and r.array not in done and by_name[r.array] is not st:
                done.add(r.array)
                emit(by_name[r.array])
        out.append(st)

    for st in ctx.stmts:
        if st.role == "temp":
            if st.name in done:
                continue
            done.add(st.name)
        emit(new[st.name, st.role])
    return tuple(out)
