"""Core program -> Denotational Normal Form by ψ-reduction (stage 3: `to_dnf`).

Every output element becomes one closed expression over ψ-selections of the stored
inputs, with explicit bound reduction variables and guards.  No transpose,
reshape, catenation, take/drop/reverse or Ω survives: each is an index rewrite.
A temporary is kept only where a reduction result is reused under scalar
extension (softmax's max and sum): recomputing it per element would change the
complexity.  Each rewrite is recorded with the name of the rule that fired.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import sympy as sp

from ..front import core as C
from ..errors import RewriteError

# --------------------------------------------------------------------------- DNF IR


@dataclass(frozen=True, slots=True)
class DRead:
    array: str
    index: tuple


@dataclass(frozen=True, slots=True)
class DConst:
    value: float


@dataclass(frozen=True, slots=True)
class DIndex:
    """An integer expression of indices and sizes used as a value."""
    expr: sp.Expr


@dataclass(frozen=True, slots=True)
class DOp:
    op: str
    args: tuple


@dataclass(frozen=True, slots=True)
class DReduce:
    op: str
    var: sp.Symbol
    extent: sp.Expr
    body: object


@dataclass(frozen=True, slots=True)
class DSelect:
    cond: sp.Basic
    then: object
    other: object


@dataclass(frozen=True, slots=True)
class DStmt:
    name: str
    vars: tuple           # index symbols, one per axis
    shape: tuple
    body: object
    role: str             # "temp" or "output"


@dataclass(frozen=True, slots=True)
class TraceStep:
    rule: str
    before: str
    after: str


@dataclass(frozen=True, slots=True)
class DNF:
    program: C.CoreProgram
    stmts: tuple
    trace: tuple

    @property
    def temps(self):
        return tuple(s for s in self.stmts if s.role == "temp")

    def __str__(self) -> str:
        return format_dnf(self)


# --------------------------------------------------------------------------- helpers


def index_var(name: str) -> sp.Symbol:
    return sp.Symbol(name, integer=True, nonnegative=True)


def free_index_vars(e) -> set:
    """Index variables occurring free in a DNF expression."""
    match e:
        case DRead(index=idx):
            return set().union(*(sp.sympify(i).free_symbols for i in idx)) if idx else set()
        case DConst():
            return set()
        case DIndex(expr=x):
            return set(sp.sympify(x).free_symbols)
        case DOp(args=args):
            return set().union(*(free_index_vars(a) for a in args))
        case DReduce(var=v, extent=ext, body=b):
            return (free_index_vars(b) - {v}) | set(sp.sympify(ext).free_symbols)
        case DSelect(cond=c, then=t, other=o):
            return set(sp.sympify(c).free_symbols) | free_index_vars(t) | free_index_vars(o)
    raise TypeError(e)


def has_reduce(e) -> bool:
    match e:
        case DReduce():
            return True
        case DOp(args=args):
            return any(has_reduce(a) for a in args)
        case DSelect(then=t, other=o):
            return has_reduce(t) or has_reduce(o)
    return False


def canonical_key(e, names: dict | None = None):
    """A hashable key equal for expressions that differ only in bound variable names."""
    names = {} if names is None else names

    def ren(x):
        return sp.sympify(x).xreplace(names) if names else sp.sympify(x)

    match e:
        case DRead(array=a, index=idx):
            return ("read", a, tuple(ren(i) for i in idx))
        case DConst(value=v):
            return ("const", v)
        case DIndex(expr=x):
            return ("index", ren(x))
        case DOp(op=op, args=args):
            return ("op", op, tuple(canonical_key(a, names) for a in args))
        case DReduce(op=op, var=v, extent=ext, body=b):
            inner = dict(names)
            inner[v] = sp.Symbol(f"_b{len(names)}", integer=True, nonnegative=True)
            return ("red", op, ren(ext), canonical_key(b, inner))
        case DSelect(cond=c, then=t, other=o):
            return ("sel", ren(c), canonical_key(t, names), canonical_key(o, names))
    raise TypeError(e)


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
        case C.CMap(op=op, args=(a,)):
            return f"{OP_TEXT[op]}{core_text(a)}"
        case C.CMap(op=op, args=(a, b)):
            return f"({core_text(a)} {OP_TEXT[op]} {core_text(b)})"
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
            return f"{OP_TEXT[op]}red {core_text(a)}"
        case C.CInner(f=f, g=g, left=a, right=b):
            return f"({core_text(a)} {OP_TEXT[f]}.{OP_TEXT[g]} {core_text(b)})"
        case C.COuter(g=g, left=a, right=b):
            return f"({core_text(a)} ∘.{OP_TEXT[g]} {core_text(b)})"
        case C.COmega(args=args, body=b):
            return f"Ω[{core_text(b)}]({', '.join(core_text(a) for a in args)})"
        case C.CCell():
            return "cell"
    return type(c).__name__  # pragma: no cover


OP_TEXT = {"add": "+", "sub": "−", "mul": "×", "div": "÷", "max": "max", "min": "min", "pow": "⋆",
           "neg": "−", "exp": "exp ", "log": "log ", "sqrt": "√", "abs": "abs ", "recip": "÷"}


def fmt_num(v: float) -> str:
    return str(int(v)) if float(v).is_integer() else repr(float(v))


def fmt_index(e) -> str:
    e = sp.sympify(e)
    if isinstance(e, sp.Eq):          # sympy prints Eq(a, b)
        return f"{fmt_index(e.lhs)} = {fmt_index(e.rhs)}"
    return C.show_expr(e)


def fmt_vec(idx) -> str:
    # components are separated by spaces, so a sum is parenthesised: ⟨(n - i - 1) j⟩
    def comp(i):
        s = fmt_index(i)
        return f"({s})" if isinstance(sp.sympify(i), sp.Add) else s
    return "⟨" + " ".join(comp(i) for i in idx) + "⟩"


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
    guards: list = field(default_factory=list)      # catenation conditions around the current node

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


def _after(e) -> str:
    return format_expr(e)


def psi_reduce(node: C.Core, idx: tuple, ctx: _Ctx):
    """The full ψ-selection ⟨idx⟩ψnode as a DNF expression (len(idx) == rank of node)."""
    assert len(idx) == node.rank, (type(node).__name__, idx, node.shape)
    match node:
        case C.CInput(name=name):
            return DRead(name, tuple(simplify_index(i) for i in idx))
        case C.CConst(value=v):
            return DConst(v)
        case C.CSize(expr=e):
            return DIndex(e)
        case C.CVec(items=items):
            (i,) = idx
            if sp.sympify(i).is_Integer:
                return psi_reduce(items[int(i)], (), ctx)
            out = psi_reduce(items[-1], (), ctx)
            for k in range(len(items) - 2, -1, -1):
                out = DSelect(sp.Eq(i, k), psi_reduce(items[k], (), ctx), out)
            return out
        case C.CIota():
            return DIndex(idx[0])
        case C.CNamed(name=name, arg=arg):
            return psi_reduce(arg, idx, ctx)
        case C.CMap(op=op, args=args):
            parts = []
            for a in args:
                if a.rank == 0 and node.rank > 0:
                    parts.append(_extended(a, ctx))
                else:
                    parts.append(psi_reduce(a, idx, ctx))
            return DOp(op, tuple(parts))
        case C.CPsi(index=pre, arg=arg):
            full = tuple(pre) + tuple(idx)
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
            na = a.shape[0]
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
            new = tuple(idx) if sp.sympify(k).is_nonnegative else (idx[0] + arg.shape[0] + k,) + tuple(idx[1:])
            ctx.log("ψ-take", node, idx, f"{fmt_vec(new)}ψ{core_text(arg)}")
            return psi_reduce(arg, new, ctx)
        case C.CDrop(count=k, arg=arg):
            new = (idx[0] + k,) + tuple(idx[1:]) if sp.sympify(k).is_nonnegative else tuple(idx)
            ctx.log("ψ-drop", node, idx, f"{fmt_vec(new)}ψ{core_text(arg)}")
            return psi_reduce(arg, new, ctx)
        case C.CReverse(arg=arg):
            new = (arg.shape[0] - 1 - idx[0],) + tuple(idx[1:])
            ctx.log("ψ-reverse", node, idx, f"{fmt_vec(new)}ψ{core_text(arg)}")
            return psi_reduce(arg, new, ctx)
        case C.CRed(op=op, arg=arg):
            v = ctx.fresh(arg.shape[0])
            with _bound(ctx, v, arg.shape[0]):
                body = psi_reduce(arg, (v,) + tuple(idx), ctx)
            out = DReduce(op, v, arg.shape[0], body)
            ctx.log("ψ-reduce", node, idx, _after(out))
            return out
        case C.CInner(f=f, g=g, left=a, right=b):
            ext = a.shape[-1]
            v = ctx.fresh(ext)
            ra = a.rank - 1
            with _bound(ctx, v, ext):
                body = DOp(g, (psi_reduce(a, tuple(idx[:ra]) + (v,), ctx),
                               psi_reduce(b, (v,) + tuple(idx[ra:]), ctx)))
            out = DReduce(f, v, ext, body)
            ctx.log("ψ-inner", node, idx, _after(out))
            return out
        case C.COuter(g=g, left=a, right=b):
            out = DOp(g, (psi_reduce(a, tuple(idx[:a.rank]), ctx), psi_reduce(b, tuple(idx[a.rank:]), ctx)))
            ctx.log("ψ-outer", node, idx, _after(out))
            return out
        case C.COmega(frame=frame, args=args, cells=cells, frames=frames, body=body):
            fidx = tuple(idx[:len(frame)])
            saved = dict(ctx.cells)
            for a, cell, fr in zip(args, cells, frames):
                ctx.cells[cell.id] = (a, fidx if fr else ())
            ctx.log("ψ-Ω", node, idx, f"{fmt_vec(idx[len(frame):])}ψ{core_text(body)} with cells "
                    + ", ".join(f"{fmt_vec(fidx if fr else ())}ψ{core_text(a)}" for a, fr in zip(args, frames)))
            try:
                return psi_reduce(body, tuple(idx[len(frame):]), ctx)
            finally:
                ctx.cells = saved
        case C.CCell(id=cid):
            arg, fidx = ctx.cells[cid]
            saved = dict(ctx.cells)
            try:
                return psi_reduce(arg, tuple(fidx) + tuple(idx), ctx)
            finally:
                ctx.cells = saved
    raise RewriteError(f"no ψ-rule for {type(node).__name__}", node.span, ctx.program.source)


def _unravel(flat, shape: tuple) -> list:
    """Row-major indices of a flat offset into `shape` (γ′)."""
    out, strides = [], [sp.Mul(*shape[k + 1:]) for k in range(len(shape))]
    for k in range(len(shape)):
        q = sp.floor(flat / strides[k]) if strides[k] != 1 else flat
        out.append(sp.Mod(q, shape[k]) if k > 0 else q)
    return out


def _divides(a, b) -> bool:
    """a | b as polynomials in the sizes (b/a has no denominator)."""
    return sp.fraction(sp.cancel(sp.sympify(b) / sp.sympify(a)))[1] == 1


def _axis_groups(new: tuple, old: tuple):
    """Match the axes of two shapes with equal products into consecutive groups of
    equal products, left to right; None when no such matching is found."""
    groups, i, j = [], 0, 0
    while i < len(new) and j < len(old):
        i0, j0 = i, j
        pn, po = new[i], old[j]
        i, j = i + 1, j + 1
        while not C.same(pn, po):
            if i < len(new) and _divides(pn, po):
                pn, i = pn * new[i], i + 1
            elif j < len(old) and _divides(po, pn):
                po, j = po * old[j], j + 1
            else:
                return None
        groups.append((i0, i, j0, j))
    if i != len(new) or j != len(old):
        return None
    return groups


def reshape_index(idx: tuple, new: tuple, old: tuple) -> tuple:
    """The index into the operand of a reshape: γ′(γ(idx; new); old).

    The axes are first matched into groups with equal products, left to right
    (⟨hkv g dk⟩ against ⟨hkv·g dk⟩ is {hkv g | hkv·g}, {dk | dk}); within a group that
    splits one axis the old index is γ of the new ones (no division), within a group
    that merges axes it is γ′ of the one new index; only a group that does both needs
    the general flat-offset form.  Without such a grouping the whole index is flattened.
    """
    groups = _axis_groups(new, old)
    if groups is None:
        flat = sp.Integer(0)
        for x, s in zip(idx, new):
            flat = flat * s + x
        return tuple(_unravel(flat, old))
    out = []
    for i0, i1, j0, j1 in groups:
        flat = sp.Integer(0)
        for x, s in zip(idx[i0:i1], new[i0:i1]):
            flat = flat * s + x
        out += [flat] if j1 - j0 == 1 else _unravel(flat, old[j0:j1])
    return tuple(sp.expand(x) if not x.has(sp.floor, sp.Mod) else x for x in out)


def simplify_index(e):
    """c·⌊x/c⌋ + (x mod c) → x: the identity reshape round trips leave behind."""
    e = sp.sympify(e)
    if not isinstance(e, sp.Add):
        return e
    terms = list(e.args)
    for t in terms:
        if isinstance(t, sp.Mod):
            x, c = t.args
            want = sp.expand(c * sp.floor(x / c))
            for u in terms:
                if u is not t and sp.expand(u - want) == 0:
                    rest = [v for v in terms if v is not t and v is not u]
                    return simplify_index(sp.Add(x, *rest))
    return e


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
    d = psi_reduce(a, (), ctx)
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
    base = a.name if isinstance(a, C.CNamed) else "t"
    name, k = base, 1
    taken = ({i.name for i in ctx.program.inputs} | {o[0] for o in ctx.program.outputs}
             | {s.name for s in ctx.program.sizes} | ctx.used)   # a temp must not shadow a size or index
    while name in ctx.temp_names or name in taken:
        k += 1
        name = f"{base}{k}"
    ctx.temp_names.add(name)
    ctx.temps[key] = name
    # the temporary is a statement of its own: give its bound variables fresh, preferred names
    saved_used = ctx.used
    ctx.used = {v.name for v in free}
    body = rename_bound(d, ctx, {})
    ctx.used = saved_used
    ctx.stmts.append(DStmt(name, tuple(free), tuple(ctx.scope[v] for v in free), body, "temp"))
    ctx.log("temporary", a, (), f"{name} (a reduction reused under scalar extension)")
    return DRead(name, tuple(free))


def rename_bound(e, ctx: _Ctx, sub: dict):
    """Rename every bound reduction variable of `e` with ctx.fresh (outermost first)."""
    def x(v):
        return sp.sympify(v).xreplace(sub) if sub else v

    match e:
        case DRead(array=a, index=idx):
            return DRead(a, tuple(x(i) for i in idx))
        case DConst():
            return e
        case DIndex(expr=v):
            return DIndex(x(v))
        case DOp(op=op, args=args):
            return DOp(op, tuple(rename_bound(a, ctx, sub) for a in args))
        case DReduce(op=op, var=v, extent=ext, body=b):
            nv = ctx.fresh(ext)
            return DReduce(op, nv, x(ext), rename_bound(b, ctx, {**sub, v: nv}))
        case DSelect(cond=c, then=t, other=o):
            return DSelect(x(c), rename_bound(t, ctx, sub), rename_bound(o, ctx, sub))
    raise TypeError(e)


def to_dnf(program: C.CoreProgram) -> DNF:
    """ψ-reduce every output of a core program to its DNF."""
    ctx = _Ctx(program)
    for name, node in program.outputs:
        ctx.used = set()
        ctx.scope = {}
        vars_ = tuple(ctx.fresh(n) for n in node.shape)
        for v, n in zip(vars_, node.shape):
            ctx.scope[v] = n
        body = psi_reduce(node.arg, vars_, ctx)
        ctx.stmts.append(DStmt(name, vars_, node.shape, body, "output"))
    for name, node in program.updates:          # last: they overwrite buffers the others read
        ctx.used = set()
        ctx.scope = {}
        vars_ = tuple(ctx.fresh(n) for n in node.shape)
        for v, n in zip(vars_, node.shape):
            ctx.scope[v] = n
        body = psi_reduce(node.arg, vars_, ctx)
        ctx.stmts.append(DStmt(name, vars_, node.shape, body, "update"))
    return DNF(program, tuple(ctx.stmts), tuple(ctx.trace))


# --------------------------------------------------------------------------- printing

_PREC = {"add": 1, "sub": 1, "mul": 2, "div": 2}
_RED = {"add": "Σ", "mul": "Π", "max": "max", "min": "min"}


def format_expr(e, prec: int = 0) -> str:
    match e:
        case DRead(array=a, index=idx):
            return f"{fmt_vec(idx)}ψ{a}" if idx else a
        case DConst(value=v):
            return fmt_num(v)
        case DIndex(expr=x):
            s = fmt_index(x)
            return s if (sp.sympify(x).is_Atom or prec == 0) else f"({s})"
        case DOp(op=op, args=(a, b)) if op in _PREC:
            p = _PREC[op]
            right_p = p + 1 if op in ("sub", "div") else p
            s = f"{format_expr(a, p)} {OP_TEXT[op]} {format_expr(b, right_p)}"
            return f"({s})" if p < prec else s
        case DOp(op="pow", args=(a, b)):
            return f"{format_expr(a, 3)}^{format_expr(b, 3)}"
        case DOp(op=op, args=(a, b)):
            return f"{op}({format_expr(a)}, {format_expr(b)})"
        case DOp(op="neg", args=(a,)):
            return f"−{format_expr(a, 3)}"
        case DOp(op="recip", args=(a,)):
            return f"(1 ÷ {format_expr(a, 3)})" if prec > 0 else f"1 ÷ {format_expr(a, 3)}"
        case DOp(op="sqrt", args=(a,)):
            inner = format_expr(a, 3)
            return f"√{inner}"
        case DOp(op="abs", args=(a,)):
            return f"|{format_expr(a)}|"
        case DOp(op=op, args=(a,)):
            return f"{op}({format_expr(a)})"
        case DReduce(op=op, var=v, extent=ext, body=b):
            s = f"{_RED[op]}_{{{v}<{fmt_index(ext)}}} {format_expr(b, 3 if op != 'add' else 2)}"
            return f"({s})" if prec > 0 else s
        case DSelect(cond=c, then=t, other=o):
            return f"({format_expr(t)} if {fmt_index(c)} else {format_expr(o)})"
    raise TypeError(e)  # pragma: no cover


def format_stmt(s: DStmt) -> str:
    lhs = f"{fmt_vec(s.vars)}ψ{s.name}" if s.vars else s.name
    dom = ""
    if s.vars:
        dom = "    for " + ", ".join(f"{v} < {fmt_index(n)}" for v, n in zip(s.vars, s.shape))
    return f"{lhs} = {format_expr(s.body)}{dom}"


def format_dnf(d: DNF) -> str:
    p = d.program
    lines = [f"-- DNF of {p.source.filename}"]
    if p.sizes:
        derived = "".join(f", {n} = {fmt_index(e)}" for n, e in p.derived)
        lines.append("sizes   " + ", ".join(s.name for s in p.sizes) + derived)
    for i in p.inputs:
        lines.append(f"input   {i.name} : {i.dtype} {C.show_shape(i.shape)}")
    for s in d.stmts:
        tag = {"temp": "temp   ", "output": "output ", "update": "update "}[s.role]
        lines.append(f"{tag} {format_stmt(s)}")
    for c in p.constraints:
        lines.append(f"require {fmt_index(c.cond)}    -- {c.message}")
    return "\n".join(lines)


def format_trace(d: DNF) -> str:
    return "\n".join(f"[{t.rule}] {t.before}  ⇒  {t.after}" for t in d.trace)


# --------------------------------------------------------------------------- direct evaluation


def evaluate_dnf(d: DNF, arrays: dict, sizes: dict | None = None) -> dict:
    """Evaluate the DNF element by element (plain Python): used by the tests to check the
    ψ-reduction against the reference interpreter on small shapes."""
    import itertools
    import math

    import numpy as np

    from ..front.interp import bind_sizes

    env = bind_sizes(d.program, arrays, sizes)
    store = {k: np.asarray(v, dtype=np.float64) for k, v in arrays.items()}
    fns2 = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
            "div": lambda a, b: a / b if b != 0 else math.copysign(math.inf, a) if a != 0 else math.nan,
            "max": max, "min": min, "pow": lambda a, b: a ** b}
    fns1 = {"neg": lambda a: -a, "exp": math.exp, "log": math.log, "sqrt": math.sqrt, "abs": abs,
            "recip": lambda a: 1.0 / a}
    ident = {"add": 0.0, "mul": 1.0, "max": -math.inf, "min": math.inf}

    def ival(x, ienv) -> int:
        v = sp.sympify(x).xreplace(ienv)
        if not v.is_Integer:
            raise ValueError(f"index {x} did not evaluate to an integer: {v}")
        return int(v)

    def ev(e, ienv):
        match e:
            case DRead(array=a, index=idx):
                ix = tuple(ival(i, ienv) for i in idx)
                arr = store[a]
                for k, i in enumerate(ix):
                    if not 0 <= i < arr.shape[k]:
                        raise IndexError(f"DNF reads {a}{list(ix)} outside shape {arr.shape}")
                return float(arr[ix])
            case DConst(value=v):
                return float(v)
            case DIndex(expr=x):
                return float(ival(x, ienv))
            case DOp(op=op, args=(a,)):
                return fns1[op](ev(a, ienv))
            case DOp(op=op, args=(a, b)):
                return fns2[op](ev(a, ienv), ev(b, ienv))
            case DReduce(op=op, var=v, extent=ext, body=b):
                acc = ident[op]
                for i in range(ival(ext, ienv)):
                    acc = fns2[op](acc, ev(b, {**ienv, v: sp.Integer(i)}))
                return acc
            case DSelect(cond=c, then=t, other=o):
                return ev(t, ienv) if bool(sp.sympify(c).xreplace(ienv)) else ev(o, ienv)
        raise TypeError(e)

    out = {}
    base = dict(env)
    for st in d.stmts:
        shape = tuple(ival(s, base) for s in st.shape)
        res = np.empty(shape, dtype=np.float64)
        for ix in itertools.product(*(range(s) for s in shape)):
            ienv = {**base, **{v: sp.Integer(i) for v, i in zip(st.vars, ix)}}
            res[ix] = ev(st.body, ienv)
        if st.role == "update":                     # the buffer keeps its rows beyond the update's
            res = np.concatenate([res, store[st.name][res.shape[0]:]], axis=0)
        store[st.name] = res
        if st.role in ("output", "update"):
            out[st.name] = res
    return out
