"""The core IR (stage 2's output): immutable nodes with symbolic shapes.

Every node carries its source span and its shape, a tuple of sympy integer
expressions over the declared size symbols; the program holds the inputs, the
outputs, the run-time conditions on the sizes and the derived sizes.  The helpers
at the end compare, decide and print those shapes.  `lower.to_core` builds this IR
from the AST; the interpreter and the ψ-reduction both work on it.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import sympy as sp

from ..errors import Source, Span
from .data import has_data, show_expr

Shape = tuple  # tuple[sp.Expr, ...]


def size_symbol(name: str) -> sp.Symbol:
    return sp.Symbol(name, integer=True, nonnegative=True)


# --------------------------------------------------------------------------- core IR


@dataclass(frozen=True, slots=True, eq=False)
class Core:
    span: Span
    shape: Shape

    @property
    def rank(self) -> int:
        return len(self.shape)


@dataclass(frozen=True, slots=True, eq=False)
class CInput(Core):
    name: str
    dtype: str


@dataclass(frozen=True, slots=True, eq=False)
class CConst(Core):
    value: float


@dataclass(frozen=True, slots=True, eq=False)
class CSize(Core):
    """A static integer (size symbols and arithmetic on them) used as a value."""
    expr: sp.Expr


@dataclass(frozen=True, slots=True, eq=False)
class CVec(Core):
    items: tuple


@dataclass(frozen=True, slots=True, eq=False)
class CIota(Core):
    n: sp.Expr


@dataclass(frozen=True, slots=True, eq=False)
class CIndices(Core):
    """ι s of a shape vector s: the array of shape s ++ ⟨δs⟩ whose cell at i is i itself."""
    dims: tuple


@dataclass(frozen=True, slots=True, eq=False)
class CMap(Core):
    op: str
    args: tuple


@dataclass(frozen=True, slots=True, eq=False)
class CPsi(Core):
    index: tuple          # sympy integer expressions (a prefix index)
    arg: Core


@dataclass(frozen=True, slots=True, eq=False)
class CTranspose(Core):
    perm: tuple           # axis k of arg becomes axis perm[k] of the result
    arg: Core


@dataclass(frozen=True, slots=True, eq=False)
class CReshape(Core):
    arg: Core


@dataclass(frozen=True, slots=True, eq=False)
class CCat(Core):
    left: Core
    right: Core
    item: bool            # right is one item (rank one less than left)


@dataclass(frozen=True, slots=True, eq=False)
class CTake(Core):
    count: sp.Expr
    arg: Core


@dataclass(frozen=True, slots=True, eq=False)
class CDrop(Core):
    count: sp.Expr
    arg: Core


@dataclass(frozen=True, slots=True, eq=False)
class CReverse(Core):
    arg: Core


@dataclass(frozen=True, slots=True, eq=False)
class CRed(Core):
    op: str
    arg: Core


@dataclass(frozen=True, slots=True, eq=False)
class CInner(Core):
    f: str
    g: str
    left: Core
    right: Core


@dataclass(frozen=True, slots=True, eq=False)
class COuter(Core):
    g: str
    left: Core
    right: Core


@dataclass(frozen=True, slots=True, eq=False)
class CCell(Core):
    """Placeholder for one cell of an Ω operand inside the Ω body."""
    id: int


@dataclass(frozen=True, slots=True, eq=False)
class COmega(Core):
    frame: Shape
    args: tuple           # the whole operands
    cells: tuple          # one CCell per operand
    frames: tuple         # each operand's own frame (empty or == frame)
    body: Core            # the function applied to the cells
    phis: tuple = ()      # the frame placeholders the body's shapes use (front/data.py)


@dataclass(frozen=True, slots=True, eq=False)
class CNamed(Core):
    name: str
    arg: Core


@dataclass(frozen=True, slots=True, eq=False)
class CScatter(Core):
    """`update S ← e` with S a selection of input `target` (ψ, ρ, ⍉, △, ▽, Φ and Ω of it):
    the elements S selects are set to e's (shape: S's).  The value of an update entry."""
    target: str
    sel: Core
    value: Core


@dataclass(frozen=True, slots=True)
class InputInfo:
    name: str
    dtype: str
    shape: Shape
    span: Span


@dataclass(frozen=True, slots=True)
class Constraint:
    """A run-time condition on the sizes (e.g. a symbolic take count within range)."""
    cond: sp.Basic
    message: str
    span: Span
    over: tuple = ()      # ((index symbol, extent), …): the condition holds for every such index
                          # (a condition on integer data: every element of `lens` within the cache)


@dataclass(frozen=True, slots=True)
class CoreProgram:
    source: Source
    sizes: tuple              # sympy size symbols, in declaration order
    index_hints: dict         # size name -> preferred index variable name
    inputs: tuple             # InputInfo
    outputs: tuple            # (name, CNamed)
    constraints: tuple        # Constraint
    derived: tuple = ()       # (name, sympy expression over `sizes`): sizes given by the others
    updates: tuple = ()       # (input name, CNamed): buffers the program rewrites in place
    size_spans: dict = field(default_factory=dict)   # size name -> where it is declared
    output_dtypes: dict = field(default_factory=dict)  # output name -> its declared storage (f16, bf16);
                                                        # the others are in the kernel's arithmetic type

    def size_names(self) -> list:
        return [s.name for s in self.sizes] + [n for n, _ in self.derived]


# --------------------------------------------------------------------------- helpers


def same(a: sp.Expr, b: sp.Expr) -> bool:
    return sp.expand(sp.sympify(a) - sp.sympify(b)) == 0


def same_shape(a: Shape, b: Shape) -> bool:
    return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))


def show_shape(shape: Shape) -> str:
    def one(s):
        t = show_expr(s)
        return t if sp.sympify(s).is_Atom or " " not in t else f"({t})"
    return "⟨" + " ".join(one(s) for s in shape) + "⟩"


def provably(cond) -> bool:
    """True when the relation holds for all non-negative sizes: sympy decides it, or it is
    an inequality that the bounds of its minima and maxima decide (see `_bounded`)."""
    c = sp.sympify(cond)
    if c is sp.true or c == True:  # noqa: E712
        return True
    if isinstance(c, sp.And):
        return all(provably(a) for a in c.args)
    if isinstance(c, (sp.LessThan, sp.StrictLessThan, sp.GreaterThan, sp.StrictGreaterThan)) and \
            c.has(sp.Min, sp.Max):
        small, big = (c.lhs, c.rhs) if isinstance(c, (sp.LessThan, sp.StrictLessThan)) else (c.rhs, c.lhs)
        return _bounded(big - small, isinstance(c, (sp.StrictLessThan, sp.StrictGreaterThan)))
    return False


def _bounded(e, strict: bool, depth: int = 0) -> bool:
    """e ≥ 0 (e > 0 if strict) for all non-negative sizes, through one Min or Max M that e
    holds linearly, e = c·M + r with c a number: each argument a of M bounds it (Min ≤ a,
    Max ≥ a), so where c·M ≥ c·a (a Min with c < 0, a Max with c > 0) it suffices that
    r + c·a ≥ 0 for one argument, and otherwise, M being one of its arguments, for every one.
    n − Min(n, w) ≥ 0 holds by the first argument; Min(w, Max(0, n − s)) ≤ n by both."""
    e = sp.expand(e)
    if (e.is_positive if strict else e.is_nonnegative):
        return True
    if depth >= 4:
        return False
    for m in sorted(e.atoms(sp.Min, sp.Max), key=sp.default_sort_key):
        c = e.coeff(m)
        r = sp.expand(e - c * m)
        if not c.is_number or c == 0 or r.has(m):
            continue
        cases = [_bounded(r + c * a, strict, depth + 1) for a in m.args]
        if (c < 0) == isinstance(m, sp.Min):
            if any(cases):
                return True
        elif all(cases):
            return True
    return False


def provably_false(cond) -> bool:
    c = sp.sympify(cond)
    return c is sp.false or c == False  # noqa: E712



# --------------------------------------------------------------------------- the source's operation count


def mentions_cells(c, seen: set | None = None) -> bool:
    """Whether a core subtree reads an Ω cell (its value then depends on the frame)."""
    seen = set() if seen is None else seen
    if id(c) in seen:
        return False
    seen.add(id(c))
    if isinstance(c, CCell):
        return True
    return any(mentions_cells(k, seen) for k in _kids(c))


def _kids(c) -> list:
    parts = [getattr(c, f) for f in c.__dataclass_fields__ if f not in ("span", "shape")]
    return [x for v in parts for x in (v if isinstance(v, tuple) else (v,)) if isinstance(x, Core)]


def source_ops(program: CoreProgram) -> sp.Expr:
    """The scalar operations of the program as written, each named array evaluated once:
    an elementwise function one per result element, a reduction one per element reduced,
    an inner product two per product, an outer product one per result element, and an Ω
    its body's count for each frame index.  Selections and rearrangements (ψ, ⍉, ρ, △, ▽,
    Φ, #) cost nothing.  `moac onf` sets the kernels' flops against it, so that work the
    kernels repeat (a value recomputed under a loop it does not depend on) shows."""
    seen: set = set()

    def tau(shape) -> sp.Expr:
        return sp.Mul(*(sp.sympify(x) for x in shape))

    def ops(c) -> sp.Expr:
        if id(c) in seen:
            return sp.Integer(0)
        seen.add(id(c))
        own = sp.Integer(0)
        match c:
            case CMap():
                own = tau(c.shape)
            case CRed(arg=a):
                own = tau(a.shape)
            case CInner(left=a):
                own = 2 * tau(c.shape) * sp.sympify(a.shape[-1])
            case COuter():
                own = tau(c.shape)
            case COmega(frame=frame, args=args, body=body, phis=phis):
                inner = ops(body)
                for p, f in zip(phis, frame):       # a ragged cell's count depends on its frame index
                    if inner.has(p):
                        q = sp.Symbol(program.index_hints.get(getattr(f, "name", ""), "b"), integer=True,
                                      nonnegative=True)
                        inner = sp.Sum(inner.xreplace({p: q}), (q, 0, sp.sympify(f) - 1))
                    else:
                        inner = inner * f
                return inner + sp.Add(*(ops(a) for a in args))
        return own + sp.Add(*(ops(k) for k in _kids(c)))

    nodes = [n for _, n in program.outputs] + [n for _, n in program.updates]
    return _merge_sums(sp.expand(sp.Add(*(ops(n) for n in nodes))))


def _merge_sums(e: sp.Expr) -> sp.Expr:
    """Σ_b a + Σ_b c → Σ_b (a + c) over equal limits, and a sum whose body reads no data
    evaluated (Σ_{b<B} 1 = B)."""
    groups: dict = {}
    rest = []
    for t in sp.Add.make_args(e):
        sums = [f for f in sp.Mul.make_args(t) if isinstance(f, sp.Sum)]
        if len(sums) != 1:
            rest.append(t)
            continue
        coeff = sp.Mul(*(f for f in sp.Mul.make_args(t) if f is not sums[0]))
        groups.setdefault(sums[0].limits, []).append(coeff * sums[0].function)
    for limits, bodies in groups.items():
        body = sp.factor(sp.expand(sp.Add(*bodies)))
        total = sp.Sum(body, *limits)
        rest.append(total.doit() if not has_data(body) else total)
    return sp.Add(*rest)
