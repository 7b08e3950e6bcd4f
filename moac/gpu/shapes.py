"""Sizes from a bundle's manifest, without sympy: the manifest's shapes, derived sizes and
run-time conditions are expression strings over size names ("g*hkv", "n + 1 <= N"), read
here with Python's `ast` and evaluated exactly (integers, `/` as a fraction).

`Binder.bind` binds the sizes of a call: a given size by name, a plain size name (n) from
the axis it is the length of, then one unknown size of an affine expression (g in g*hkv
once hkv is known) by exact division, until nothing changes; a size left unbound must be
given by name.  Then every axis is checked against its evaluated expression, and every
run-time condition of the program (a take count that must not exceed n, a full cache),
each error naming the input, the axis and the sizes involved.
"""
from __future__ import annotations

import ast
import math
import operator
from fractions import Fraction

from ..errors import ArgumentError


def _div(a, b):
    if b == 0:
        raise ZeroDivisionError("division by zero")
    return Fraction(a) / Fraction(b)


def _all(a, b):
    return bool(a) and bool(b)


def _any(a, b):
    return bool(a) or bool(b)


_BINOP = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: _div,
          ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow,
          ast.BitAnd: _all, ast.BitOr: _any}                 # sympy prints And, Or as &, |
_CMP = {ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt, ast.GtE: operator.ge,
        ast.Eq: operator.eq, ast.NotEq: operator.ne}
_FUNC = {"Max": max, "Min": min, "Abs": abs, "floor": math.floor, "ceiling": math.ceil,
         "Mod": operator.mod, "Eq": operator.eq, "Ne": operator.ne}


class Expr:
    """An integer expression or a condition over size names, as sympy prints it."""

    __slots__ = ("text", "names", "plain", "_tree")

    def __init__(self, text):
        self.text = str(text)
        try:
            tree = ast.parse(self.text.strip(), mode="eval").body
        except SyntaxError:
            raise ValueError(f"cannot read the expression {self.text!r}") from None
        names: list = []
        self._check(tree, names)
        self._tree = tree
        self.names = frozenset(names)
        self.plain = tree.id if isinstance(tree, ast.Name) else None      # n itself

    def _check(self, node, names: list) -> None:
        match node:
            case ast.Name(id=n):
                names.append(n)
            case ast.Constant(value=v) if isinstance(v, (int, bool)):
                pass
            case ast.BinOp(op=op, left=a, right=b) if type(op) in _BINOP:
                self._check(a, names)
                self._check(b, names)
            case ast.UnaryOp(op=ast.USub() | ast.UAdd() | ast.Not() | ast.Invert(), operand=a):
                self._check(a, names)
            case ast.Compare(left=a, ops=ops, comparators=bs) if all(type(o) in _CMP for o in ops):
                for x in (a, *bs):
                    self._check(x, names)
            case ast.BoolOp(values=vs):
                for x in vs:
                    self._check(x, names)
            case ast.Call(func=ast.Name(id=f), args=args, keywords=[]) if f in _FUNC:
                for x in args:
                    self._check(x, names)
            case _:
                raise ValueError(f"cannot read the expression {self.text!r} (unexpected {ast.dump(node)[:40]})")

    def __call__(self, env: dict):
        """The value: an int (a Fraction where it is not an integer) or a bool."""
        v = self._eval(self._tree, env)
        if isinstance(v, Fraction) and v.denominator == 1:
            return int(v)
        return v

    def _eval(self, node, env: dict):
        ev = self._eval
        match node:
            case ast.Name(id=n):
                return env[n]
            case ast.Constant(value=v):
                return v
            case ast.BinOp(op=op, left=a, right=b):
                return _BINOP[type(op)](ev(a, env), ev(b, env))
            case ast.UnaryOp(op=ast.USub(), operand=a):
                return -ev(a, env)
            case ast.UnaryOp(op=ast.UAdd(), operand=a):
                return ev(a, env)
            case ast.UnaryOp(operand=a):                        # not, ~ (sympy's Not)
                return not ev(a, env)
            case ast.Compare(left=a, ops=ops, comparators=bs):
                left = ev(a, env)
                for o, b in zip(ops, bs):
                    right = ev(b, env)
                    if not _CMP[type(o)](left, right):
                        return False
                    left = right
                return True
            case ast.BoolOp(op=op, values=vs):
                vals = (bool(ev(x, env)) for x in vs)
                return all(vals) if isinstance(op, ast.And) else any(vals)
            case ast.Call(func=ast.Name(id=f), args=args):
                return _FUNC[f](*(ev(x, env) for x in args))
        raise AssertionError(node)          # _check admitted nothing else

    def __repr__(self) -> str:
        return f"Expr({self.text!r})"


_NOT_AFFINE = object()


def _affine_root(e: Expr, u: str, value: int, env: dict):
    """The non-negative integer u with e = value where e is affine in u (its other names
    bound): the root, None where there is none, _NOT_AFFINE where e is not affine in u."""
    def at(x):
        return e({**env, u: x})
    try:
        f0, f1, f2 = at(0), at(1), at(2)
    except (ArithmeticError, ValueError, TypeError):
        return _NOT_AFFINE
    if f1 == f0 or f2 - f1 != f1 - f0:
        return _NOT_AFFINE
    x = Fraction(value - f0) / Fraction(f1 - f0)
    if x.denominator != 1 or x < 0:
        return None
    x = int(x)
    try:
        return x if at(x) == value else None
    except (ArithmeticError, ValueError, TypeError):
        return None


def _size_value(name: str, v) -> int:
    if isinstance(v, bool) or not hasattr(v, "__index__") or operator.index(v) < 0:
        raise ArgumentError(f"size {name} must be a non-negative integer, got {v!r}")
    return operator.index(v)


class Binder:
    """The sizes of a bundle's calls.  `arrays`: (name, [Expr, ...]) of the inputs whose
    shapes bind sizes; `sizes`: the size parameters of the entry points; `fixed`: sizes
    given when the bundle was built; `derived`: name -> Expr (hq = g*hkv); `constraints`:
    (Expr, message) conditions every call must meet."""

    def __init__(self, arrays: list, sizes: list, fixed: dict, derived: dict, constraints: list = ()):
        self.arrays = [(n, list(shape)) for n, shape in arrays]
        self.sizes = list(sizes)
        self.fixed = {k: int(v) for k, v in fixed.items()}
        self.derived = dict(derived)
        self.constraints = list(constraints)
        self.names = list(dict.fromkeys(self.sizes + list(self.fixed) + list(self.derived)))

    # ---- the two entries
    def bind(self, shapes: dict, given: dict | None = None) -> dict:
        """Every size, name -> int, from the inputs' shapes (name -> tuple) and the sizes
        given by name; ArgumentError naming the input and axis where they disagree."""
        env, src, eqs = self._start(given or {})
        for name, shape in self.arrays:
            if name not in shapes:
                raise ArgumentError(f"missing input '{name}'")
            got = tuple(int(d) for d in shapes[name])
            if len(got) != len(shape):
                raise ArgumentError(f"input '{name}' must have rank {len(shape)} (shape "
                                    f"⟨{' '.join(e.text for e in shape)}⟩), got shape {got}")
            eqs += [(e, d, f"input '{name}' axis {ax}") for ax, (e, d) in enumerate(zip(shape, got))]
        return self._finish(env, src, eqs, ("is not fixed by any input's shape; pass it by name",
                                             "are not fixed by any input's shape; pass them by name"))

    def solve(self, given: dict, hint: str = "") -> dict:
        """Every size from sizes given by name alone (a derived one, hq, solves for g)."""
        env, src, eqs = self._start(given)
        return self._finish(env, src, eqs, ("is not given" + hint, "are not given" + hint))

    def shape(self, shape: list, env: dict) -> tuple:
        """A shape (a list of Expr) at these sizes."""
        out = []
        for e in shape:
            v = e(env)
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise ArgumentError(f"the extent {e.text} is {v} at these sizes, not a length")
            out.append(v)
        return tuple(out)

    # ---- the steps
    def _start(self, given: dict):
        env, src, eqs = dict(self.fixed), {k: "fixed when the bundle was built" for k in self.fixed}, []
        for k, v in given.items():
            v = _size_value(k, v)
            if k in self.derived:
                eqs.append((self.derived[k], v, f"size {k}"))
            elif k in self.fixed:
                if v != self.fixed[k]:
                    raise ArgumentError(f"size {k} = {v}, but the bundle was built for {k} = {self.fixed[k]}")
            elif k in self.sizes:
                env[k], src[k] = v, "given"
            else:
                raise ArgumentError(f"the bundle has no size '{k}' (sizes: {', '.join(self.names) or 'none'})")
        return env, src, eqs

    def _finish(self, env: dict, src: dict, eqs: list, missing_why: tuple) -> dict:
        for e, v, where in eqs:                      # a plain size name: the length of its axis
            if e.plain is not None and e.plain not in env:
                env[e.plain], src[e.plain] = v, f"from {where}"
        progress = True
        while progress:                              # one unknown of an affine extent: solve it
            progress = False
            for e, v, where in eqs:
                unknown = e.names - env.keys()
                if len(unknown) != 1:
                    continue
                (u,) = unknown
                r = _affine_root(e, u, v, env)
                if r is _NOT_AFFINE:
                    continue
                if r is None:
                    raise ArgumentError(f"{where} is {v}, but it must be {e.text}{self._known(e, env, src)}, "
                                        f"and no non-negative integer {u} gives {v}")
                env[u], src[u] = r, f"from {where}"
                progress = True
        missing = [s for s in self.sizes if s not in env]
        if missing:
            raise ArgumentError(f"size{'s' if len(missing) > 1 else ''} {', '.join(missing)} "
                                f"{missing_why[len(missing) > 1]}")
        for e, v, where in eqs:
            got = e(env)
            if got != v:
                what = f"{where} must have length" if where.startswith("input") else f"{where} must be"
                raise ArgumentError(f"{what} {e.text}{self._known(e, env, src, got)}, got {v}")
        for cond, message in self.constraints:
            if not cond(env):
                shown = ", ".join(f"{k} = {env[k]}" for k in self.names if k in cond.names and k in env)
                raise ArgumentError(f"{message}, but {shown}")
        for n, e in self.derived.items():
            env.setdefault(n, e(env))
        return env

    def _known(self, e: Expr, env: dict, src: dict, value=None) -> str:
        """' = 32 (g = 4 from input 'Q' axis 0, hkv = 8 given)': the value and where each
        size in it came from."""
        if not e.names:                             # a number: nothing to show
            return ""
        if e.plain is not None and value is not None:
            return f" = {value} ({src[e.plain]})" if src.get(e.plain) else f" = {value}"
        parts = [f"{k} = {env[k]} {src.get(k, '')}".rstrip() for k in self.names if k in e.names and k in env]
        head = f" = {value}" if value is not None else ""
        return f"{head} ({', '.join(parts)})" if parts else head
