"""Index analysis on the DNF and the Schedule: γ offsets, the γ-difference between
adjacent lanes, footprints (distinct elements a ψ-selection touches over a loop domain;
several selections of one array together: schedule.union), and the rows an update leaves
unchanged.  sympy only."""
from __future__ import annotations

import sympy as sp
from sympy.core.function import AppliedUndef

from ..dnf import DRead, DSelect, DStmt, fmt_index
from ..dnf.walk import at_sizes
from ..front.data import data_reads, has_data

def gamma(index: tuple, shape: tuple) -> sp.Expr:
    """Row-major γ: Σ_k i_k · Π_{j>k} s_j, with n·⌊x ÷ n⌋ + (x mod n) folded back to x (a
    reshaped array read or written in its own order: γ of γ′ is the identity)."""
    off = sp.Integer(0)
    for i, s in zip(index, shape):
        off = off * s + i
    return _fold_divmod(sp.expand(off))


def _fold_divmod(e: sp.Expr) -> sp.Expr:
    """c·n·⌊x ÷ n⌋ + c·(x mod n) → c·x wherever both terms are there."""
    terms = list(sp.Add.make_args(e))
    for t in list(terms):
        coeff, mods = t.as_independent(sp.Mod, as_Add=False)
        if not isinstance(mods, sp.Mod) or t not in terms:
            continue
        x, n = mods.args
        partner = sp.expand(coeff * n * sp.floor(x / n))
        if partner in terms:
            terms.remove(t)
            terms.remove(partner)
            terms.append(sp.expand(coeff * x))
    return sp.Add(*terms) if len(terms) != len(sp.Add.make_args(e)) else e


def lane_diff(offset: sp.Expr, var: sp.Symbol) -> sp.Expr:
    return sp.simplify(sp.expand(offset.xreplace({var: var + 1}) - offset))


_INTERNAL: dict = {}


def internal(name: str) -> sp.Symbol:
    """A loop variable moac introduces: a sympy Dummy, so never equal to a user's index
    variable of the same name, and printed into C unmangled.  One per name in the process:
    two threads that ask first at once get the same one (setdefault)."""
    s = _INTERNAL.get(name)
    return s if s is not None else _INTERNAL.setdefault(name, sp.Dummy(name, integer=True, nonnegative=True))


def ragged_pick(array: str, w, n, chunk) -> sp.Expr:
    """Gang w of the chunks of a ragged batch enumerated densely (w = Σ_{b'<b} ⌈array[b'] ÷
    chunk⌉ + g) as g·(n + 1) + b, b = n past the last chunk: a term freeze prints as the
    helper moac_ragged_pick of the array's integer type."""
    return sp.Function(f"moac_ragged_pick@{array}", integer=True, nonnegative=True)(w, n, chunk)


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
    if step.is_Integer and step != 0:                      # v + c, c − v, s·v + c: one value a point
        return n
    if isinstance(e, sp.floor):                            # ⌊v / c⌋
        num, den = sp.fraction(sp.together(e.args[0]))
        if num == v and not den.free_symbols & set(extents):
            return sp.ceiling(n / den)
    if isinstance(e, sp.Mod) and e.args[0] == v and not e.args[1].free_symbols & set(extents):
        return sp.Min(e.args[1], n)
    return None


def nonnegative(e) -> bool:
    """e ≥ 0 surely (a number, or sympy can tell; a sum over integer data is not decided)."""
    if e.is_nonnegative:
        return True
    return bool(e.is_number and not has_data(e) and e >= 0)


def sum_dependent(index: tuple, factors: list, extents: dict) -> sp.Expr:
    """The product of the components' distinct counts, where a count depends on another
    loop variable v (an extent read from data: l < ⟨b⟩ψlens) and a component enumerates v:
    the sum over v of the product of the counts that depend on it (Σ_{b<B} ⟨b⟩ψlens rows,
    not B·⟨b⟩ψlens)."""
    loopvars = set(extents)
    factors = [sp.sympify(f) for f in factors]
    for v in sorted({x for f in factors for x in f.free_symbols & loopvars}, key=sp.default_sort_key):
        owner = [j for j, i in enumerate(index) if sp.sympify(i) == v]
        dep = [k for k, f in enumerate(factors) if v in f.free_symbols]
        if not owner or not dep:
            continue
        term = sp.Mul(*(factors[k] for k in dep))
        for k in dep:
            factors[k] = sp.Integer(1)
        factors[owner[0]] = sp.Sum(term, (v, 0, sp.sympify(extents[v]) - 1))
    return sp.Mul(*factors) if factors else sp.Integer(1)


def footprint(index: tuple, shape: tuple, extents: dict) -> sp.Expr:
    """Distinct elements a ψ-selection touches over a loop domain: the product over the
    axes of the distinct values of each index component (the axis length where the
    component is not recognised), never more than the array."""
    ds = [distinct_values(i, extents) for i in index]
    factors = [n if d is None else d for d, n in zip(ds, shape)]
    loops = set(extents)
    uses = [sp.sympify(i).free_symbols & loops for i in index]
    # components that read integer data (a page number ⟨b ⌊l ÷ page⌋⟩ψtable) take, with the
    # components over the same loop variables, at most as many values together as those
    # variables have points: the tokens the loops visit (Σ_{b<B} ⟨b⟩ψlens), not the pool
    gather = set().union(*(uses[k] for k, i in enumerate(index) if ds[k] is None and data_reads(i)), set())
    if gather:
        joint = [k for k, u in enumerate(uses) if u and u <= gather]
        points = sorted(gather, key=sp.default_sort_key)
        count = sum_dependent(tuple(points), [extents[v] for v in points], extents)
        for k in joint:
            factors[k] = sp.Integer(1)
        factors[joint[0]] = count
    total = sum_dependent(index, factors, extents)
    size = sp.Mul(*shape) if shape else sp.Integer(1)
    over = sp.expand(total - size)
    return size if nonnegative(over) else total


def data_terms(exprs) -> list:
    """The reads of integer inputs in these expressions (front/data.py), outermost first,
    each once; a gang's scan of a whole array (ragged_pick) as a read of its every element."""
    out, seen = [], set()
    for e in exprs:
        for r in sp.preorder_traversal(sp.sympify(e)):
            if isinstance(r, AppliedUndef) and r not in seen:
                seen.add(r)
                out.append(r)
    return out


def _guard_var(cond, ext: dict):
    """The loop variable v of a guard v < a (a free of v), or v + c < a with c free of the
    loops' variables (the second piece of a catenation, i − n < m), which narrows v's range
    to v < a − c; else None."""
    if not isinstance(cond, sp.StrictLessThan):
        return None
    if cond.lhs in ext:                     # v < a, a what it may be (⟨b⟩ψlens)
        return cond.lhs
    lhs = sp.expand(cond.lhs)
    vs = [v for v in lhs.free_symbols if v in ext]
    if len(vs) != 1 or sp.expand(lhs - vs[0]).free_symbols & set(ext) or vs[0] in cond.rhs.free_symbols:
        return None
    return vs[0]


def guard_bound(cond, ext: dict):
    """(v, a): the loop variable a guard narrows and the bound it narrows it to, v < a
    (`_guard_var`: v + c < b is v < b − c); None where it decides no one variable."""
    v = _guard_var(cond, ext)
    return None if v is None else (v, sp.expand(cond.rhs - cond.lhs + v))


def guard_branches(cond, ext: dict, lo: dict) -> tuple:
    """((branch, extents, starts), ...), boxes: the branches of a guard `cond` that run
    (0 then, 1 else) and the loop ranges their reads run over, and whether those ranges are
    what the reads touch.  A constant guard runs one branch (a size fixed at 0 makes i < s
    sympy's false); a guard on one loop variable (`guard_bound`) splits its range
    (`narrowed`); any other runs both over the whole loops, and their reads are not boxes of
    what they read."""
    if cond is sp.true or cond is sp.false:
        return ((0 if cond is sp.true else 1, ext, lo),), True
    vb = guard_bound(cond, ext)
    if vb is None:
        return ((0, ext, lo), (1, ext, lo)), False
    then, other = narrowed(sp.StrictLessThan(*vb), ext, lo)
    return ((0, *then), (1, *other)), True


def narrowed(cond, ext: dict, lo: dict) -> tuple:
    """The (extents, starts) of the two branches of a guard v < a, for v running over
    [lo, lo + extent): [lo, a) and [a, lo + extent)."""
    v, a = cond.lhs, cond.rhs
    start = sp.sympify(lo.get(v, 0))
    return (({**ext, v: sp.expand(a - start)}, lo),
            ({**ext, v: sp.expand(start + ext[v] - a)}, {**lo, v: a}))


def size_key(e):
    # order symbolic sizes by their value when every size (and each read of integer data)
    # is 64, a large-ish generic size
    try:
        return at_sizes(e, 64)
    except TypeError:  # pragma: no cover
        return 0.0


def narrow_update(st: DStmt, body) -> tuple:
    """For an update, the rows it would rewrite with their own values are not written:
    `⟨i j⟩ψK = (⟨i j⟩ψK if i < n else …)` runs i from n.  Returns (body, {var: start})."""
    starts: dict = {}
    if st.role != "update" or st.at:            # a scatter writes what it selects, nothing else
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


def verdict(diff, packed: int = 1) -> str:
    """What a γ-difference between adjacent lanes means for the memory system; a lane
    that loads `packed` consecutive elements at once is coalesced when adjacent lanes are
    `packed` elements apart."""
    if diff is None:
        return "no vector loop"
    if packed > 1:
        if diff == packed:
            return f"coalesced (packed: {packed} elements per lane, adjacent lanes {packed} apart)"
        return f"NOT coalesced (packed {packed} per lane, lanes {fmt_index(diff)} apart)"
    if diff == 0:
        return "broadcast (same element in every lane)"
    if diff == 1:
        return "coalesced"
    return f"NOT coalesced (stride {fmt_index(diff)})"


def logical(index: tuple, subst: dict) -> tuple:
    """The DNF index a code index implements (unrolled copies map back to DNF variables)."""
    return tuple(sp.expand(sp.sympify(i).xreplace(subst)) for i in index) if subst else tuple(index)
