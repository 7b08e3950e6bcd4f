"""A kernel call's size binding, frozen when the kernel is built: a call never runs sympy.

`freeze_binding` (sympy is used there only) prints every integer expression a call needs
-- the inputs' extents, derived sizes (hq = g·hkv), run-time conditions (take counts, ψ
indices, a full cache), the outputs' extents -- as Python lambdas (`_src`), and keeps each
extent as an integer polynomial {((size, power), ...): coefficient}.  `Binding.bind` does
what `front.sizes.bind` does, with its messages.  The solving order depends only on which
sizes are given by name, so it is planned once per such set: a plain size binds from its
axis, g·hkv with hkv known solves g by exact division.  A plan assumes no coefficient
vanishes (g·hkv with hkv = 0 no longer names g); where one could, it checks, and such a
call is solved again equation by equation on the polynomials.  A program whose extents
are not integer polynomials (⟨(n ⌈ m)⟩) is not frozen: `reason` says why, and its
binding stays `front.sizes.bind`.
"""
from __future__ import annotations

import math

from ..errors import ArgumentError

BIND, CHECK, SOLVE, GUARD, STUCK = range(5)
_JOIN = {"Add": " + ", "Mul": " * ", "And": " and ", "Or": " or ", "Equality": " == ", "Unequality": " != ",
         "StrictLessThan": " < ", "LessThan": " <= ", "StrictGreaterThan": " > ", "GreaterThan": " >= "}
_GLOBALS = {"__builtins__": {}, "max": max, "min": min, "abs": abs}


class NotFrozen(Exception):
    """An expression the frozen form does not cover."""


class _Degenerate(Exception):
    """A coefficient a plan relies on is zero for this call's values."""


def _src(e) -> str:
    """Python source of a sympy integer expression or condition over e[name]."""
    import sympy as sp
    kind = type(e).__name__
    if e is sp.true or e is sp.false:
        return str(bool(e))
    if isinstance(e, sp.Integer):
        return f"({int(e)})"
    if isinstance(e, sp.Symbol) and not isinstance(e, sp.Dummy):
        return f"e[{e.name!r}]"
    if kind in _JOIN:
        return "(" + _JOIN[kind].join(map(_src, e.args)) + ")"
    if kind in ("Max", "Min", "Abs"):
        return f"{kind.lower()}({', '.join(map(_src, e.args))})"
    if kind == "Not":
        return f"(not {_src(e.args[0])})"
    if kind == "Pow" and e.exp.is_Integer and e.exp >= 0:
        return f"({_src(e.base)} ** {int(e.exp)})"
    raise NotFrozen(f"cannot freeze {e} ({kind})")


def _fn(src: str):
    return eval("lambda e: " + src, dict(_GLOBALS))      # our own printer's output, never user text


def _pfn(poly: dict):
    return _fn(" + ".join(" * ".join([f"({c})"] + [f"e[{x!r}] ** {p}" for x, p in m])
                          for m, c in poly.items()) or "0")


def _poly(e) -> dict:
    """An integer polynomial {((name, power), ...): coefficient} (names sorted)."""
    import sympy as sp
    out: dict = {}
    for term in sp.Add.make_args(sp.expand(e)):
        coeff, mono = 1, {}
        for f in sp.Mul.make_args(term):
            base, k = (f.base, f.exp) if isinstance(f, sp.Pow) else (f, sp.Integer(1))
            if isinstance(f, sp.Integer):
                coeff *= int(f)
            elif isinstance(base, sp.Symbol) and not isinstance(base, sp.Dummy) and k.is_Integer and k > 0:
                mono[base.name] = mono.get(base.name, 0) + int(k)
            else:
                raise NotFrozen(f"{e} is not an integer polynomial of the sizes")
        key = tuple(sorted(mono.items()))
        out[key] = out.get(key, 0) + coeff
    poly = {m: c for m, c in out.items() if c}
    if {x for m in poly for x, _ in m} != {s.name for s in sp.sympify(e).free_symbols}:
        raise NotFrozen(f"{e} has sizes that cancel")
    return poly


def _split(poly: dict, unknown) -> dict:
    """{monomial in the unknowns: its coefficient, a polynomial in the other sizes}."""
    out: dict = {}
    for m, c in poly.items():
        mu = tuple(p for p in m if p[0] in unknown)
        mb = tuple(p for p in m if p[0] not in unknown)
        out.setdefault(mu, {})[mb] = c
    return out


def _subst(poly: dict, env: dict) -> dict:
    """The polynomial with the bound sizes' values put in."""
    out: dict = {}
    for m, c in poly.items():
        rest = tuple((x, p) for x, p in m if x not in env)
        out[rest] = out.get(rest, 0) + c * math.prod(env[x] ** p for x, p in m if x in env)
    return {m: c for m, c in out.items() if c}


def _root(cs: list, value: int):
    """The one non-negative integer u with Σ cs[k]·u^k = value, 'negative' where the
    expression is u itself and value < 0, else None (no such u, or several)."""
    if cs[1] == 1 and cs[0] == 0 and not any(cs[2:]):
        return "negative" if value < 0 else value
    cs = [cs[0] - value] + cs[1:]
    if len(cs) == 2:
        q, r = divmod(-cs[0], cs[1])
        return q if r == 0 and q >= 0 else None
    low = next(k for k, c in enumerate(cs) if c)
    roots = [0] if low else []
    c = abs(cs[low])
    for d in range(1, math.isqrt(c) + 1):
        if c % d == 0:
            roots += [r for r in {d, c // d} if sum(ck * r ** k for k, ck in enumerate(cs)) == 0]
    return roots[0] if len(roots) == 1 else None


class _Eq:
    """One equation extent = value: a derived size given by name (axis None) or an axis."""
    __slots__ = ("poly", "vars", "fn", "show", "name", "axis", "alias", "plain")

    def __init__(self, expr, name, axis, alias=""):
        from ..front.core import show_expr
        self.poly = _poly(expr)
        self.vars = frozenset(x for m in self.poly for x, _ in m)
        self.fn = _fn(_src(expr))
        self.show, self.name, self.axis, self.alias = show_expr(expr), name, axis, alias
        (m, c), *more = list(self.poly.items()) or [((), 0)]
        self.plain = m[0][0] if not more and c == 1 and len(m) == 1 and m[0][1] == 1 else None  # n itself


class Binding:
    """Sizes from a call's shapes and given sizes; outputs' shapes from the sizes."""

    def __init__(self, program, fixed: dict, outputs: dict):
        self.program, self.fixed, self.reason = program, dict(fixed), None
        self.sizes = [s.name for s in program.sizes]
        self._plans: dict = {}
        self._outputs_sym = outputs

    def freeze(self) -> None:
        import sympy as sp
        from ..front.data import on_data
        from ..front.core import show_shape
        prog = self.program
        derived = {sp.expand(e): n for n, e in prog.derived}
        self.derived = {n: _Eq(e, n, None) for n, e in prog.derived}
        self.inputs = [(i.name, len(i.shape), f"input '{i.name}' must have rank {len(i.shape)} "
                        f"(shape {show_shape(i.shape)}), got shape ") for i in prog.inputs]
        self.axes = [_Eq(ext, i.name, ax, f" = {derived[sp.expand(ext)]}" if sp.expand(ext) in derived else "")
                     for i in prog.inputs for ax, ext in enumerate(i.shape)]
        def sizes_of(*es) -> list:                      # in declaration order, as messages list them
            free = {s.name for e in es for s in sp.sympify(e).free_symbols}
            if not free <= set(self.sizes):
                raise NotFrozen(f"{', '.join(map(str, es))} mentions {', '.join(sorted(free - set(self.sizes)))}")
            return [s for s in self.sizes if s in free]
        self.constraints = [(_fn(_src(sp.sympify(c.cond))), c.message, sizes_of(c.cond), c.span)
                            for c in prog.constraints if not on_data(c)]   # data: Kernel.check_data
        self.outputs = {}
        for name, shape in self._outputs_sym.items():
            sizes_of(*shape)
            self.outputs[name] = _fn("(" + "".join(_src(sp.sympify(x)) + ", " for x in shape) + ")")
        self.plan(())                                   # the common call: no size given by name

    # ---- planning: which equation binds, checks or solves what, in the order sizes.bind takes
    def plan(self, key: tuple):
        if key in self._plans:
            return self._plans[key]
        given = list(dict.fromkeys(key + tuple(self.fixed)))
        for n in given:
            if n not in self.sizes and n not in self.derived:
                raise ArgumentError(f"the program declares no size '{n}' (sizes: "
                                    f"{', '.join(self.program.size_names())})")
        plain = [n for n in given if n in self.sizes]
        eqs1 = [self.derived[n] for n in given if n in self.derived]
        bound = set(plain)
        p1 = self._simulate(eqs1, bound)
        p2 = self._simulate(self.axes, bound)
        missing = [s for s in self.sizes if s not in bound]
        plan = self._plans[key] = (plain, eqs1, p1, p2, missing)
        return plan

    def _simulate(self, eqs: list, bound: set, run: tuple | None = None) -> list:
        """sizes._solve_all on which sizes are bound, as a list of steps; with run = (values,
        env), on the values instead, each step done as it is found (a call no plan fits)."""
        steps, pending = [], list(range(len(eqs)))
        while pending:
            progress = False
            for i in list(pending):
                eq = eqs[i]
                poly = eq.poly if run is None else _subst(eq.poly, run[1])
                unknown = eq.vars - bound if run is None else {x for m in poly for x, _ in m}
                if len(unknown) > 1:
                    groups = _split(poly, unknown)
                    always = {x for mu, cp in groups.items() if list(cp) == [()] for x, _ in mu}
                    if len(always) < 2 and run is None:     # the values may leave one unknown or none
                        watch = [[_pfn(cp) for mu, cp in groups.items() if x in dict(mu)]
                                 for x in unknown - always]
                        steps.append((GUARD, i, len(always), watch))
                    continue
                if not unknown:
                    steps.append((CHECK, i) if run is None else (CHECK, i, poly.get((), 0)))
                elif eq.plain:
                    steps.append((BIND, i, eq.plain))
                else:
                    (u,) = unknown
                    groups = _split(poly, unknown)
                    deg = max(dict(mu).get(u, 0) for mu in groups)
                    steps.append((SOLVE, i, u, [_pfn(groups.get(((u, k),) if k else (), {}))
                                                for k in range(deg + 1)]))
                if run is not None:
                    self._run(steps[-1:], eqs, *run)
                bound |= unknown
                pending.remove(i)
                progress = True
            if not progress:
                steps.append((STUCK, pending[0]))
                if run is not None:
                    self._run(steps[-1:], eqs, *run)
                break
        return steps

    # ---- a call
    def bind(self, shapes: dict, given: dict) -> dict:
        """Every size (independent and derived), name -> int; ArgumentError as sizes.bind."""
        if self.reason is not None:
            return self._sympy_bind(shapes, given)
        given = {k: int(v) for k, v in given.items()}
        allg = {**given, **self.fixed}
        plain, eqs1, p1, p2, missing = self.plan(tuple(given))
        env = {n: allg[n] for n in plain}
        try:
            self._run(p1, eqs1, [allg[eq.name] for eq in eqs1], env)
            dims = self._dims(shapes)
            self._run(p2, self.axes, dims, env)
        except _Degenerate:
            env = {n: allg[n] for n in plain}
            self._simulate(eqs1, set(), ([allg[eq.name] for eq in eqs1], env))
            self._simulate(self.axes, set(), (self._dims(shapes), env))
            missing = [s for s in self.sizes if s not in env]
        if missing:
            raise ArgumentError(f"size(s) {', '.join(missing)} are not fixed by any input; pass them explicitly")
        for fn, message, names, span in self.constraints:
            if not fn(env):
                shown = ", ".join(f"{k} = {env[k]}" for k in names)
                raise ArgumentError(f"{message}, but {shown}", span, self.program.source)
        for n, eq in self.derived.items():
            env[n] = eq.fn(env)
        return env

    def output_shape(self, name: str, env: dict) -> tuple:
        if self.reason is None:
            return self.outputs[name](env)
        import sympy as sp
        from ..front.core import size_symbol
        return tuple(int(sp.sympify(s).xreplace({size_symbol(k): v for k, v in env.items()}))
                     for s in self._outputs_sym[name])

    def _dims(self, shapes: dict) -> list:
        dims = []
        for name, rank, msg in self.inputs:
            if name not in shapes:
                raise ArgumentError(f"missing input '{name}'")
            shape = shapes[name]
            if len(shape) != rank:
                raise ArgumentError(msg + str(tuple(shape)))
            dims += [int(d) for d in shape]
        return dims

    def _run(self, steps: list, eqs: list, vals: list, env: dict) -> None:
        for step in steps:
            op, i = step[0], step[1]
            eq, v = eqs[i], vals[i]
            if op == BIND:
                if v < 0:
                    self._fail(eq, v, env, "negative", step[2])
                env[step[2]] = v
            elif op == CHECK:
                got = eq.fn(env) if len(step) == 2 else step[2]
                if got != v:
                    self._fail(eq, v, env, "check", got)
            elif op == SOLVE:
                cs = [f(env) for f in step[3]]
                if not any(cs[1:]):
                    raise _Degenerate
                r = _root(cs, v)
                if r is None or r == "negative":
                    self._fail(eq, v, env, r or "none", step[2])
                env[step[2]] = r
            elif op == GUARD:
                if step[2] + sum(1 for fns in step[3] if any(f(env) for f in fns)) < 2:
                    raise _Degenerate
            else:
                self._fail(eq, v, env, "stuck", None)

    def _fail(self, eq: _Eq, v: int, env: dict, why: str, detail):
        """The ArgumentError sizes.bind raises for this equation."""
        prog = self.program
        if eq.axis is None:                              # a derived size given by name
            span = prog.size_spans.get(eq.name)
            if why == "stuck":
                raise ArgumentError(f"size {eq.name} = {v} needs the other sizes of {eq.name} = {eq.show} "
                                    "fixed too", span, prog.source)
            err = {"check": f"{eq.show} = {detail}, not {v}", "negative": f"{detail} = {v} is negative",
                   "none": f"no non-negative integer {detail} makes {eq.show} = {v}"}[why]
            raise ArgumentError(f"size {eq.name} = {v} is impossible: {err} ({eq.name} = {eq.show})",
                                span, prog.source)
        where = f"input '{eq.name}' axis {eq.axis}"
        if why == "stuck":
            raise ArgumentError(f"cannot determine {eq.show} ({where}) from the shapes; fix one of its sizes")
        if why == "check":
            raise ArgumentError(f"{where} must have length {eq.show}{eq.alias} = {detail}, got {v}")
        known = ", ".join(f"{k} = {x}" for k, x in env.items() if k in eq.vars)
        raise ArgumentError(f"{where} has length {v}, but its length must be {eq.show}{eq.alias} "
                            f"with {known}: {v} is not such a length")

    def _sympy_bind(self, shapes: dict, given: dict) -> dict:
        """front.sizes.bind, for a program freeze_binding could not freeze."""
        from ..front.sizes import bind
        env = bind(self.program, shapes, {**given, **self.fixed})
        return {**{k.name: int(v) for k, v in env.items()},
                **{n: int(e.xreplace(env)) for n, e in self.program.derived}}


def freeze_binding(program, fixed: dict, outputs: dict) -> Binding:
    """The binding of a kernel built from `program` with sizes `fixed` at compile time and
    outputs of the given symbolic shapes.  Where the program has an expression the frozen
    form does not cover, the result's `reason` says which, and it binds with sympy."""
    b = Binding(program, fixed, outputs)
    try:
        b.freeze()
    except NotFrozen as e:
        b.reason = str(e)
    return b
