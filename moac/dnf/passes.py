"""DNF -> DNF passes run before a plan is chosen, and the materialisation the generic
plan asks for.  Each is a pure function of DNF statements."""
from __future__ import annotations

import math
from dataclasses import replace

import sympy as sp

from ..front.core import provably
from .ir import DConst, DIndex, DOp, DRead, DReduce, DSelect, DStmt
from .walk import canonical_key, factor_list, free_index_vars


HOIST_LIMIT = 3      # guards moved out of one reduction: at most 2³ copies of it


def hoist_selects(e):
    """Move a guard out of a reduction it does not depend on:
    Σ_j f(a if c else b) = (Σ_j f(a)) if c else (Σ_j f(b)) when c does not mention j.
    (Appending to a cache makes the score of the new row a guarded read; hoisted, the
    guard is tested once per row instead of once per element of the row.)

    Each hoisted guard doubles the reduction, so at most HOIST_LIMIT guards leave one
    reduction; the others stay inside it, where they are tested per element (a product
    of ten catenations under a Σ would otherwise become 2¹⁰ reductions, and the ONF
    stage took seconds to minutes to lower them)."""
    match e:
        case DReduce(op=op, var=v, extent=ext, body=b):
            return _hoist_out(op, v, ext, hoist_selects(b), HOIST_LIMIT)
        case DOp(op=op, args=args):
            return DOp(op, tuple(hoist_selects(a) for a in args))
        case DSelect(cond=c, then=t, other=o):
            return DSelect(c, hoist_selects(t), hoist_selects(o))
    return e


def _hoist_out(op: str, v, ext, body, budget: int):
    """Σ_v body (or another monoid) with up to `budget` guards of the already hoisted
    `body` that do not mention v moved out of it, one nested select per guard."""
    c = _find_guard(body, {v}) if budget > 0 else None
    if c is None:
        return DReduce(op, v, ext, body)
    return DSelect(c, _hoist_out(op, v, ext, _choose(body, c, True), budget - 1),
                   _hoist_out(op, v, ext, _choose(body, c, False), budget - 1))


def _find_guard(e, bound: set):
    """A guard inside e that mentions none of the `bound` variables, if any."""
    match e:
        case DSelect(cond=c, then=t, other=o):
            if not (sp.sympify(c).free_symbols & bound):
                return c
            g = _find_guard(t, bound)        # not `or`: a sympy relation has no truth value
            return g if g is not None else _find_guard(o, bound)
        case DOp(args=args):
            for a in args:
                g = _find_guard(a, bound)
                if g is not None:
                    return g
        case DReduce(var=v, body=b):
            return _find_guard(b, bound | {v})
    return None


def _choose(e, cond, value: bool):
    """e with every guard `cond` decided."""
    match e:
        case DSelect(cond=c, then=t, other=o):
            if c == cond:
                return _choose(t if value else o, cond, value)
            return DSelect(c, _choose(t, cond, value), _choose(o, cond, value))
        case DOp(op=op, args=args):
            return DOp(op, tuple(_choose(a, cond, value) for a in args))
        case DReduce(op=op, var=v, extent=ext, body=b):
            return DReduce(op, v, ext, _choose(b, cond, value))
    return e


def materialise(stmts: list[DStmt], avoid: tuple = ()) -> list[DStmt]:
    """Hoist reductions an enclosing loop would recompute into scratch temporaries.

    A reduction R inside a statement is invariant in an enclosing variable v when v
    is not free in R; evaluated in place it would be recomputed for every v.  It is
    computed once into a temporary indexed by its free variables, and every occurrence
    of the same reduction (up to bound-variable names) then reads the temporary.
    Nothing is hoisted out of a guarded branch (catenation, take/drop): outside its
    guard the branch may index out of bounds.
    """
    hoisted: dict = {}        # canonical key -> temporary name
    found: dict = {}          # temporary name -> DStmt
    names = {s.name for s in stmts} | set(avoid)

    def rewrite(e, enclosing: dict, may_hoist: bool, top: bool = False):
        match e:
            case DReduce(op=op, var=v, extent=ext, body=b):
                free = [x for x in enclosing if x in free_index_vars(e)]
                key = (canonical_key(e, {x: sp.Symbol(f"_f{k}") for k, x in enumerate(free)}), len(free))
                if key in hoisted and not top:
                    return DRead(hoisted[key], tuple(free))
                new = DReduce(op, v, ext, rewrite(b, {**enclosing, v: ext}, may_hoist))
                if may_hoist and not top and any(x not in free for x in enclosing):
                    name, k = "s", 1
                    while name in names:
                        k += 1
                        name = f"s{k}"
                    names.add(name)
                    hoisted[key] = name
                    found[name] = DStmt(name, tuple(free), tuple(enclosing[x] for x in free), new, "temp")
                    return DRead(name, tuple(free))
                return new
            case DOp(op=op, args=args):
                return DOp(op, tuple(rewrite(a, enclosing, may_hoist) for a in args))
            case DSelect(cond=c, then=t, other=o):
                return DSelect(c, rewrite(t, enclosing, False), rewrite(o, enclosing, False))
        return e

    def domain(st: DStmt) -> dict:
        return {v: n for v, n in zip(st.vars, st.shape)}

    for st in stmts:                                   # discover what to hoist
        rewrite(st.body, domain(st), True)
    for name, t in list(found.items()):                # temporaries reuse each other
        found[name] = DStmt(t.name, t.vars, t.shape, rewrite(t.body, domain(t), False, top=True), "temp")
    result: list[DStmt] = []
    emitted: set = set()

    def emit_deps(e):                                  # each temporary right before its first user
        match e:
            case DRead(array=a) if a in found and a not in emitted:
                emitted.add(a)
                emit_deps(found[a].body)
                result.append(found[a])
            case DOp(args=args):
                for x in args:
                    emit_deps(x)
            case DReduce(body=b):
                emit_deps(b)
            case DSelect(then=t, other=o):
                emit_deps(t)
                emit_deps(o)

    for st in stmts:
        body = rewrite(st.body, domain(st), False, top=st.role == "temp")
        emit_deps(body)
        result.append(replace(st, body=body))
    return result


def pull_factors(e, sizes: frozenset, log=None):
    """Σ_v (a × c ÷ d) = (Σ_v a) × c ÷ d for factors c, d built from constants and the
    `sizes` alone (3, √dk): each is applied once instead of once per step.  `log(before,
    after)` is told of every rewrite."""
    const = lambda f: _constant(f, sizes)                       # noqa: E731
    divisor = lambda f: _constant(f, sizes) and _positive(f)    # noqa: E731
    match e:
        case DReduce(op=op, var=v, extent=ext, body=b):
            b = pull_factors(b, sizes, log)
            if op == "add" and isinstance(b, DOp) and b.op in ("mul", "div"):
                num, den = factor_list(b, [], [])
                out_num = [f for f in num if const(f)]
                out_den = [f for f in den if divisor(f)]
                keep_num = [f for f in num if not const(f)]
                keep_den = [f for f in den if not divisor(f)]
                if (out_num or out_den) and keep_num:
                    inner = _rebuild(keep_num, keep_den)
                    new = _rebuild([DReduce(op, v, ext, inner)] + out_num, out_den)
                    if log is not None:
                        log(DReduce(op, v, ext, b), new)
                    return new
            return DReduce(op, v, ext, b)
        case DOp(op=op, args=args):
            return DOp(op, tuple(pull_factors(a, sizes, log) for a in args))
        case DSelect(cond=c, then=t, other=o):
            return DSelect(c, pull_factors(t, sizes, log), pull_factors(o, sizes, log))
    return e


def _constant(e, sizes: frozenset) -> bool:
    """A finite value built from constants and sizes alone (no read, no index variable, no
    reduction), so that Σ_v (a × c) and (Σ_v a) × c agree also where the sum is empty."""
    match e:
        case DConst(value=v):
            return math.isfinite(v)
        case DIndex(expr=x):
            return sp.sympify(x).free_symbols <= sizes
        case DOp(op=op, args=args) if op in ("add", "sub", "mul", "neg", "sqrt"):
            return all(_constant(a, sizes) for a in args)
    return False


def _positive(e, strict: bool = True) -> bool:
    """A divisor that is > 0 (with `strict`; else ≥ 0) for every size (a size may be 0: √n
    is not a divisor to take out, √(n + 1) is)."""
    match e:
        case DConst(value=v):
            return v > 0 if strict else v >= 0
        case DIndex(expr=x):
            return provably(sp.Gt(x, 0) if strict else sp.Ge(x, 0))
        case DOp(op="mul", args=args):
            return all(_positive(a, strict) for a in args)
        case DOp(op="add", args=args):
            return all(_positive(a, False) for a in args) and (not strict or any(_positive(a) for a in args))
        case DOp(op="sqrt", args=(a,)):
            return _positive(a, strict)
    return False


def _rebuild(num: list, den: list):
    out = num[0]
    for f in num[1:]:
        out = DOp("mul", (out, f))
    for f in den:
        out = DOp("div", (out, f))
    return out


def hoist_guards(stmts: tuple) -> tuple:
    """The pass over whole statements: every statement's guards hoisted."""
    return tuple(replace(st, body=hoist_selects(st.body)) for st in stmts)


# the DNF passes, in order (moac.driver runs them between to_dnf and the plans)
PASSES = (hoist_guards,)
