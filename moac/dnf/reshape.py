"""The index arithmetic of a reshape (ρ): the operand's index of an element of the
reshaped array, as γ and γ′ over groups of axes with equal products."""
from __future__ import annotations

import sympy as sp

from ..front import core as C


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


def simplify_index(e, scope: dict | None = None):
    """An index expression with what reshape round trips leave behind taken out, bottom up:
    c·⌊x/c⌋ + (x mod c) → x; ⌊(c·q + r)/c⌋ → q + ⌊r/c⌋ and (c·q + r) mod c → r mod c (q a
    polynomial in integers: exact); and with `scope` (index variable -> extent), ⌊v/c⌋ → 0,
    v mod c → v, ⌊(−v − 1)/c⌋ → −1 and (−v − 1) mod c → c − v − 1 for an index v < extent ≤ c
    (the last two from a reverse)."""
    e = sp.sympify(e)
    if e.is_Atom:
        return e
    e = e.func(*(simplify_index(a, scope) for a in e.args)) if isinstance(e, (sp.Add, sp.Mul, sp.floor, sp.Mod)) else e
    if isinstance(e, sp.Add):
        return _collapse(e, scope)
    if isinstance(e, sp.floor):
        num, den = sp.fraction(sp.together(e.args[0]))
        if den != 1:
            whole, rest = _split_multiples(num, den)
            if whole != 0:
                return simplify_index(sp.expand(whole / den) + sp.floor(rest / den), scope)
            if _below(rest, den, scope):
                return sp.Integer(0)
            if _below(sp.expand(-rest - 1), den, scope):       # −v − 1 for v below c: in [−c, −1]
                return sp.Integer(-1)
    if isinstance(e, sp.Mod):
        x, c = e.args
        whole, rest = _split_multiples(x, c)
        if whole != 0:
            return simplify_index(sp.Mod(rest, c), scope)
        if _below(x, c, scope):
            return x
        if _below(sp.expand(-x - 1), c, scope):
            return sp.expand(x + c)
    return e


def _collapse(e, scope):
    """c·⌊x/c⌋ + (x mod c) → x in a sum."""
    terms = list(e.args)
    for t in terms:
        if isinstance(t, sp.Mod):
            x, c = t.args
            want = sp.expand(c * sp.floor(x / c))
            for u in terms:
                if u is not t and sp.expand(u - want) == 0:
                    rest = [v for v in terms if v is not t and v is not u]
                    return simplify_index(sp.Add(x, *rest), scope)
    return e


def _split_multiples(x, c):
    """(the terms of x that are c times a polynomial, the others)."""
    whole = [t for t in sp.Add.make_args(sp.expand(x)) if t != 0 and _divides(c, t)]
    return sp.Add(*whole), sp.expand(x - sp.Add(*whole))


def _below(x, c, scope) -> bool:
    """Whether x is 0 or an index variable of `scope` whose extent is at most c (0 ≤ x < c)."""
    if x == 0:
        return True
    return bool(scope) and x in scope and C.provably(sp.Le(sp.sympify(scope[x]), c))
