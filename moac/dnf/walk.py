"""Walks over DNF expressions.

`children`, `map_children` and `substitute` are the one traversal of the node types:
a pass matches the nodes it cares about and hands the rest to them.  Built on them:
the free variables, whether a reduction occurs, and a key that equates expressions
differing only in their bound variable names."""
from __future__ import annotations

import sympy as sp
from sympy.core.function import AppliedUndef

from .ir import DConst, DIndex, DOp, DRead, DReduce, DSelect


def children(e) -> tuple:
    """The sub-expressions of a DNF expression, in order (a read, constant or index value has none)."""
    match e:
        case DOp(args=args):
            return tuple(args)
        case DReduce(body=b):
            return (b,)
        case DSelect(then=t, other=o):
            return (t, o)
        case DRead() | DConst() | DIndex():
            return ()
    raise TypeError(e)


def reads(e, out: list | None = None) -> list:
    """Every ψ-selection (DRead) in a DNF expression, in order."""
    out = [] if out is None else out
    if isinstance(e, DRead):
        out.append(e)
    for c in children(e):
        reads(c, out)
    return out


def map_children(e, f):
    """`e` rebuilt with f applied to each sub-expression, in order (a leaf is returned as it is)."""
    match e:
        case DOp(op=op, args=args):
            return DOp(op, tuple(f(a) for a in args))
        case DReduce(op=op, var=v, extent=ext, body=b):
            return DReduce(op, v, ext, f(b))
        case DSelect(cond=c, then=t, other=o):
            return DSelect(c, f(t), f(o))
        case DRead() | DConst() | DIndex():
            return e
    raise TypeError(e)


def replace_sizes(v, sub: dict):
    """sympy's v.xreplace(sub) for an index, extent or condition, where a `mod` or `⌊/⌋` whose
    divisor sub makes 0 gives 0, not ZeroDivisionError or zoo (`_without_zero_divisors`)."""
    v = sp.sympify(v)
    try:
        out = v.xreplace(sub)
        if not out.has(sp.zoo, sp.nan):
            return out
    except ZeroDivisionError:           # sympy's a mod 0
        pass
    return _without_zero_divisors(v, sub).xreplace(sub)      # ⌊a / 0⌋ is ⌊zoo⌋ to sympy


def _without_zero_divisors(v, sub: dict):
    """v with each `a mod b` and `⌊a / b⌋` whose divisor `sub` makes 0 replaced by 0.  Only
    ψ-reshape divides an index by extents, those of its operand: an extent of 0 leaves the
    operand without elements, and then the reshape's result has none either (reshape keeps the
    element count), so the read never runs; 0 is the index the reduction rule gives it when
    the extent is 0 before substitution."""
    def zero(b) -> bool:
        return b.xreplace(sub) == 0

    v = v.replace(lambda t: isinstance(t, sp.Mod) and zero(t.args[1]), lambda t: sp.Integer(0))
    return v.replace(lambda t: isinstance(t, sp.floor) and any(zero(b) for b in _divisors(t.args[0])),
                     lambda t: sp.Integer(0))


def _divisors(e) -> list:
    """The bases of the negative powers in e (the b of every a / b)."""
    return [t.base for t in sp.preorder_traversal(e) if isinstance(t, sp.Pow) and t.exp.is_negative]


def substitute(e, sub: dict):
    """`e` with sympy's xreplace(sub) applied to every index, extent, condition and index
    value.  A reduction's bound variable shadows: inside its body sub does not replace it."""
    if not sub:
        return e

    def x(v):
        return replace_sizes(v, sub)

    match e:
        case DRead(array=a, index=idx):
            return DRead(a, tuple(x(i) for i in idx))
        case DIndex(expr=v):
            return DIndex(x(v))
        case DReduce(op=op, var=v, extent=ext, body=b):
            return DReduce(op, v, x(ext), substitute(b, {k: w for k, w in sub.items() if k != v}))
        case DSelect(cond=c, then=t, other=o):
            return DSelect(x(c), substitute(t, sub), substitute(o, sub))
    return map_children(e, lambda c: substitute(c, sub))


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
    return isinstance(e, DReduce) or any(has_reduce(c) for c in children(e))


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


def flops(e) -> sp.Expr:
    """The scalar operations one evaluation of a DNF expression performs, as a sympy count:
    one per operator, one per step of a reduction, a selection's costlier branch."""
    match e:
        case DOp(args=args):
            return 1 + sp.Add(*(flops(a) for a in args))
        case DReduce(extent=ext, body=b):
            return sp.sympify(ext) * (flops(b) + 1)
        case DSelect(then=t, other=o):
            a, b = flops(t), flops(o)
            return a if a == b else sp.Max(a, b)
    return sp.Integer(0)


def at_sizes(e, value: int) -> float:
    """A count with every size, and every element of integer data, at `value`."""
    v = sp.Integer(value)
    e = sp.sympify(e).xreplace({r: v for r in sp.sympify(e).atoms(AppliedUndef)})
    return float(e.xreplace({s: v for s in e.free_symbols}).doit())


def factor_list(e, num: list, den: list):
    """Flatten a product/quotient into numerator and denominator factors (appended to the
    lists given, which are returned)."""
    match e:
        case DOp(op="mul", args=(a, b)):
            factor_list(a, num, den)
            factor_list(b, num, den)
        case DOp(op="div", args=(a, b)):
            factor_list(a, num, den)
            factor_list(b, den, num)
        case _:
            num.append(e)
    return num, den


def divmod_pair(hi, lo):
    """(x, n) where adjacent index components are (⌊x ÷ n⌋, x mod n), the pair a reshape's γ′
    gives a flat index x over an axis of extent n (one-to-one in x; γ gives x back), else None."""
    lo = sp.sympify(lo)
    if isinstance(lo, sp.Mod) and sp.sympify(hi) == sp.floor(lo.args[0] / lo.args[1]):
        return lo.args[0], lo.args[1]
    return None
