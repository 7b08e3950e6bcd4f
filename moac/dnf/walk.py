"""Walks over DNF expressions: the free variables, whether a reduction occurs, and a
key that equates expressions differing only in their bound variable names."""
from __future__ import annotations

import sympy as sp

from .ir import DConst, DIndex, DOp, DRead, DReduce, DSelect


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
