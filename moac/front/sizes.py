"""Binding the size symbols to integers: from `-D`/`sizes=` and from the arrays' shapes.

A program's sizes are independent symbols; a `size g = hq ÷ hkv` declaration makes
g independent and hq the derived product g·hkv.  Given values (by either name) and
array extents are equations solved one unknown at a time; an equation without a
non-negative integer solution (hq = 30 with hkv = 8) is a clear error.
"""
from __future__ import annotations

import sympy as sp

from .core import show_expr as _show
from .core import show_shape as _show_shape
from ..errors import ArgumentError


def _solve(expr, value: int, env: dict):
    """Solve expr = value for its one unbound symbol.  Returns (symbol, Integer) or None
    when more than one symbol is unbound; raises ValueError when there is no solution."""
    e = sp.sympify(expr).xreplace(env)
    unknown = list(e.free_symbols)
    if not unknown:
        if e != value:
            raise ValueError(f"{_show(expr)} = {_show(e)}, not {value}")
        return ()
    if len(unknown) > 1:
        return None
    (u,) = unknown
    if e == u:                                   # the common case: an axis of length n
        if value < 0:
            raise ValueError(f"{u.name} = {value} is negative")
        return u, sp.Integer(value)
    sols = sp.solve(sp.Eq(e, value), u)
    good = [x for x in sols if x.is_Integer and x >= 0]
    if len(good) != 1:
        raise ValueError(f"no non-negative integer {u.name} makes {_show(expr)} = {value}")
    return u, good[0]


def _solve_all(eqs: list, env: dict, impossible, stuck) -> None:
    """Solve equations (expr, value, tag) into env, one unknown at a time, until none is
    left; impossible(eq, err) and stuck(eq) build the exceptions to raise."""
    pending = list(eqs)
    while pending:
        progress = False
        for eq in list(pending):
            try:
                r = _solve(eq[0], eq[1], env)
            except ValueError as err:
                raise impossible(eq, err) from None
            if r is not None:
                if r:
                    env[r[0]] = r[1]
                pending.remove(eq)
                progress = True
        if not progress:
            raise stuck(pending[0])


def resolve(program, given: dict, strict: bool = True) -> dict:
    """Symbols bound by explicitly given sizes (names may be independent or derived).
    `strict` (sizes fixed at compile time): each must be an integer in [0, 2^63), and a
    condition on the sizes alone that they make false is an error here; a call's binding
    (`bind`) checks its values and the conditions itself, the conditions after the shapes."""
    plain = {s.name: s for s in program.sizes}
    derived = dict(program.derived)
    env: dict = {}
    for name, v in given.items():
        if not strict:
            pass                           # a call's sizes: its binding checks them (moac.jit.binding)
        elif isinstance(v, bool) or not isinstance(v, (int, sp.Integer)) and not hasattr(v, "__index__"):
            raise ArgumentError(f"size {name} = {v!r}: a size is an integer")
        elif not 0 <= int(v) < 2**63:
            raise ArgumentError(f"size {name} = {int(v)}: sizes are integers in [0, 2^63)",
                                program.size_spans.get(name), program.source)
        if name in plain:
            env[plain[name]] = sp.Integer(int(v))
        elif name not in derived:
            raise ArgumentError(f"the program declares no size '{name}' (sizes: "
                                f"{', '.join(program.size_names())})")
    eqs = [(derived[n], int(v), n) for n, v in given.items() if n in derived]

    def impossible(eq, err):
        expr, v, name = eq
        return ArgumentError(f"size {name} = {v} is impossible: {err} ({name} = {_show(expr)})",
                             program.size_spans.get(name), program.source)

    def stuck(eq):
        expr, v, name = eq
        return ArgumentError(f"size {name} = {v} needs the other sizes of {name} = {_show(expr)} fixed too",
                             program.size_spans.get(name), program.source)
    _solve_all(eqs, env, impossible, stuck)
    if strict:
        _conditions_hold(program, env)
    return env


def size_conditions(program, env: dict):
    """(constraint, its condition with the sizes of `env` put in) for each condition on the
    sizes alone (a △ count within its axis, a ψ index in range, ι's length ≥ 0, room in a
    cache); the conditions on integer inputs' elements are checked with the data, at the
    call.  Put in, a condition is sympy's false also where the sizes left free cannot make
    it hold (m + 5 ≤ 3)."""
    from .data import on_data
    for c in program.constraints:
        if on_data(c):
            continue
        try:
            yield c, sp.sympify(c.cond).xreplace(env)
        except (TypeError, ZeroDivisionError):
            continue


def _slack(cond):
    """s with cond ⟺ s ≥ 0 for an integer inequality (x < y is y − x − 1 ≥ 0), else None."""
    if not isinstance(cond, (sp.LessThan, sp.StrictLessThan, sp.GreaterThan, sp.StrictGreaterThan)):
        return None
    s = cond.gts - cond.lts
    if not s.is_integer:
        return None
    return s - 1 if isinstance(cond, (sp.StrictLessThan, sp.StrictGreaterThan)) else s


def implied(conds: list) -> set:
    """Positions of the conditions that another of `conds` implies: its slack is the
    other's plus a non-negative constant (n ≤ N follows from n + 1 ≤ N).  Of two
    equivalent ones the later counts as implied."""
    slacks = [_slack(c) for c in conds]
    out = set()
    for i, si in enumerate(slacks):
        for j, sj in enumerate(slacks):
            if i == j or j in out:
                continue
            d = sp.expand(si - sj) if si is not None and sj is not None else None
            if (d is None and conds[i] == conds[j] and j < i) or (
                    d is not None and d.is_number and d >= 0 and (d > 0 or j < i)):
                out.add(i)
                break
    return out


def _conditions_hold(program, env: dict) -> None:
    """An ArgumentError at the first condition on the sizes alone that the fixed sizes make
    false: the C a compile writes for them would read outside its arrays."""
    if not env:
        return
    for c, value in size_conditions(program, env):
        cond = sp.sympify(c.cond)
        if not cond.free_symbols & set(env):
            continue
        if value is sp.false:
            shown = ", ".join(f"{s.name} = {env[s]}" for s in program.sizes if s in cond.free_symbols and s in env)
            free = [s.name for s in program.sizes if s in cond.free_symbols and s not in env]
            raise ArgumentError(f"{c.message}, but {shown}" + (f" (false for every {', '.join(free)})" if free else ""),
                                c.span, program.source)


def bind(program, shapes: dict, given: dict | None = None) -> dict:
    """Bind every size from given values and the arrays' shapes (name -> tuple of ints);
    a mismatch raises ArgumentError naming the input, the axis, the expected extent and
    what was given.  Run-time conditions (take counts, ψ indices) are checked last."""
    env = resolve(program, given or {}, strict=False)
    eqs = []
    for info in program.inputs:
        if info.name not in shapes:
            raise ArgumentError(f"missing input '{info.name}'")
        shape = shapes[info.name]
        if len(shape) != len(info.shape):
            raise ArgumentError(f"input '{info.name}' must have rank {len(info.shape)} "
                                f"(shape {_show_shape(info.shape)}), got shape {tuple(shape)}")
        eqs += [(ext, int(dim), (info.name, ax)) for ax, (ext, dim) in enumerate(zip(info.shape, shape))]
    def mismatch(eq, err):
        _, dim, (name, ax) = eq
        return ArgumentError(_mismatch(program, name, ax, eq[0], dim, env))

    def stuck(eq):
        ext, _, (name, ax) = eq
        return ArgumentError(f"cannot determine {_show(ext)} (input '{name}' axis {ax}) from the shapes; "
                             "fix one of its sizes")
    _solve_all(eqs, env, mismatch, stuck)
    missing = [s.name for s in program.sizes if s not in env]
    if missing:
        raise ArgumentError(f"size(s) {', '.join(missing)} are not fixed by any input; pass them explicitly")
    check_constraints(program, env)
    return env


def check_constraints(program, env: dict) -> None:
    """Raise a positioned ArgumentError if the bound sizes violate a run-time condition."""
    from .data import on_data
    for c in program.constraints:
        if on_data(c):              # a condition on integer data: interp.check_data, with the arrays
            continue
        if not bool(sp.sympify(c.cond).xreplace(env)):
            free = sp.sympify(c.cond).free_symbols
            shown = ", ".join(f"{k.name} = {env[k]}" for k in program.sizes if k in free and k in env)
            raise ArgumentError(f"{c.message}, but {shown}", c.span, program.source)


def _mismatch(program, name, ax, ext, dim, env) -> str:
    value = sp.sympify(ext).xreplace(env)
    derived = {sp.expand(e): n for n, e in program.derived}
    alias = f" = {derived[sp.expand(ext)]}" if sp.expand(ext) in derived else ""
    if value.free_symbols:
        known = ", ".join(f"{k.name} = {v}" for k, v in env.items() if k in sp.sympify(ext).free_symbols)
        return (f"input '{name}' axis {ax} has length {dim}, but its length must be {_show(ext)}{alias} "
                f"with {known}: {dim} is not such a length")
    return f"input '{name}' axis {ax} must have length {_show(ext)}{alias} = {value}, got {dim}"

