"""Values read from integer arrays, and shapes that depend on them.

An integer input (`i32`, `i64`) holds sizes and indices: a sequence's length, a page
number.  Read where the elaborator needs a static integer (a take count, a ψ index item),
its element is the sympy term ``lens(b)`` — an undefined function named after the array,
applied to the element's index — so extents, indices and guards stay sympy expressions
that the later stages analyse like any other (``Σ_{l<lens(b)}``, ``⟨table(b, ⌊l ÷ page⌋) …⟩``).
The dumps print such a term as a ψ-selection: ``⟨b⟩ψlens``.

A shape may then depend on data: ``lens (take Ω⟨0 3⟩) K`` has shape
``⟨B hkv lens(@0) dk⟩``, where the *axis placeholder* ``@0`` stands for the index along
axis 0 of the array itself (an extent may depend on the index of another axis).  Inside an
Ω body the frame's indices are *frame placeholders* of that Ω; the ψ-reduction replaces
both kinds by the indices it selects with.  Nothing here is evaluated: this module only
makes, recognises, shifts and prints these terms.
"""
from __future__ import annotations

import itertools

import numpy as np
import sympy as sp
from sympy.core.function import AppliedUndef
from sympy.printing.str import StrPrinter

INDEX_DTYPES = ("i32", "i64")

_frame_ids = itertools.count()


def reader(name: str):
    """The sympy function whose application reads an element of integer array `name`."""
    return sp.Function(name, integer=True, nonnegative=True)


def read_term(name: str, index: tuple) -> sp.Expr:
    """Element `index` of integer array `name`: an integer ≥ 0 (an integer input holds sizes
    and indices; the program's conditions require it of every element when it runs)."""
    return reader(name)(*index)


class Distinct(sp.Function):
    """A condition over quantified indices (a Constraint's `over`): the tuples of its
    arguments at the indices are pairwise distinct, so a scatter (`update S ← e`) never
    writes one element twice.  Printed `distinct⟨k₀ k₁ …⟩`."""

    def _sympystr(self, printer):
        def comp(a):
            s = printer._print(a)
            return f"({s})" if isinstance(a, sp.Add) else s
        return "distinct⟨" + " ".join(comp(a) for a in self.args) + "⟩"


def data_reads(e) -> set:
    """The integer-array reads in a sympy expression."""
    return set(sp.sympify(e).atoms(AppliedUndef))


def on_data(c) -> bool:
    """Whether a Constraint is a condition on integer data (checked with the arrays, when
    the kernel is called), not on the sizes alone."""
    return bool(c.over) or has_data(c.cond)


def has_data(e) -> bool:
    e = sp.sympify(e)
    return bool(data_reads(e)) or e.has(sp.Sum)


INDEX_NAMES = ("i", "j", "k", "p", "q", "r", "s", "t", "u", "w")


def quantifier(ext, hints: dict, taken: set) -> sp.Symbol:
    """The index a condition on data is quantified with over an axis of extent `ext` (the
    `b` of `require … for b < B`): the index hint of its size (`index b < B`) unless that
    name is taken, else the first of INDEX_NAMES that is neither taken nor any size's hint."""
    hint = hints.get(ext.name) if isinstance(ext, sp.Symbol) else None
    reserved = set(taken) | set(hints.values())
    name = hint if hint and hint not in taken else next(x for x in INDEX_NAMES if x not in reserved)
    return sp.Dummy(name, integer=True, nonnegative=True)


def axis(k: int) -> sp.Symbol:
    """The placeholder for an array's own index along axis k, in its shape."""
    return sp.Symbol(f"@{k}", integer=True, nonnegative=True)


def is_axis(s) -> bool:
    return isinstance(s, sp.Symbol) and s.name.startswith("@") and s.name[1:].isdigit()


def axis_number(s) -> int:
    return int(s.name[1:])


def frame_placeholders(rank: int, oid: int | None = None) -> tuple:
    """Fresh placeholders for the frame indices of one Ω (a Dummy each: never equal to
    another Ω's), named φ<oid>_<axis>: `oid` numbers the program's Ω from 1 (the
    elaborator's count), so that messages name them alike in every process."""
    oid = next(_frame_ids) if oid is None else oid
    return tuple(sp.Dummy(f"φ{oid}_{k}", integer=True, nonnegative=True) for k in range(rank))


def dependent(shape: tuple) -> bool:
    """Whether a shape's extents depend on data or on another axis's index."""
    return any(has_data(x) or any(is_axis(s) for s in sp.sympify(x).free_symbols) for x in shape)


def axes_in(e) -> set:
    return {axis_number(s) for s in sp.sympify(e).free_symbols if is_axis(s)}


def shift_axes(shape: tuple, mapping: dict) -> tuple:
    """Rename axis placeholders of a shape: `mapping` sends an old axis number to a new
    axis number, or to an expression (a frame placeholder, an index)."""
    sub = {}
    for x in shape:
        for k in axes_in(x):
            if k in mapping:
                v = mapping[k]
                sub[axis(k)] = axis(v) if isinstance(v, int) else v
    if not sub:
        return tuple(shape)
    return tuple(sp.sympify(x).xreplace(sub) for x in shape)


def at_index(e, index: tuple):
    """An extent of a dependent shape at a given index: each axis placeholder @k replaced
    by index[k]."""
    e = sp.sympify(e)
    ks = axes_in(e)
    if not ks:
        return e
    return e.xreplace({axis(k): index[k] for k in ks if k < len(index)})


def show(e) -> str:
    """The dumps' text of an integer expression in MoA notation: an integer-array read as a
    ψ-selection ⟨b⟩ψlens, ⌊i÷g⌋ and ⌈n÷c⌉, (j mod page), min(n, s) and max(0, n − s) (not
    sympy's floor(i/g), Mod(j, page), Min, Max).  `·` and `^` are show_expr's."""
    return _Printer().doprint(sp.sympify(e))


def show_expr(e) -> str:
    """An integer expression as the dumps and messages print it: n·dk, n^2 (not sympy's
    n*dk, n**2)."""
    e = sp.sympify(e)
    e = e.xreplace({d: sp.Symbol(d.name) for d in e.atoms(sp.Dummy)})   # moac's own loop variables
    return show(e).replace("**", "^").replace("*", "·")


class _Printer(StrPrinter):
    def _quotient(self, a) -> str:
        num, den = sp.fraction(sp.together(a))
        if den == 1:
            return self._print(a)
        wrap = lambda x: f"({self._print(x)})" if isinstance(x, (sp.Add, sp.Mul)) else self._print(x)   # noqa: E731
        return f"{wrap(num)}÷{wrap(den)}"

    def _print_floor(self, e):
        return f"⌊{self._quotient(e.args[0])}⌋"

    def _print_ceiling(self, e):
        return f"⌈{self._quotient(e.args[0])}⌉"

    def _print_Mod(self, e):
        a, b = e.args
        a = f"({self._print(a)})" if isinstance(a, sp.Add) else self._print(a)
        b = f"({self._print(b)})" if isinstance(b, (sp.Add, sp.Mul)) else self._print(b)   # mod (g·m), not (… mod g)·m
        return f"({a} mod {b})"

    def _print_Min(self, e):
        return "min(" + ", ".join(self._print(a) for a in e.args) + ")"

    def _print_Max(self, e):
        return "max(" + ", ".join(self._print(a) for a in e.args) + ")"

    def _print_AppliedUndef(self, e):
        def comp(a):
            s = self._print(a)
            return f"({s})" if isinstance(a, sp.Add) else s
        name = e.func.__name__
        return f"⟨{' '.join(comp(a) for a in e.args)}⟩ψ{name}" if e.args else name

    def _print_Sum(self, e):
        (v, lo, hi), = e.limits
        body = self._print(e.function)
        body = f"({body})" if isinstance(e.function, (sp.Add, sp.Mul)) else body
        return f"Σ_{{{self._print(v)}<{self._print(hi + 1)}}} {body}"

    def _print_And(self, e):
        """lo ≤ x < hi for the two bounds of one index (x ≥ lo and x < hi)."""
        lows = [a for a in e.args if isinstance(a, sp.GreaterThan)]
        highs = [a for a in e.args if isinstance(a, sp.StrictLessThan)]
        if len(e.args) == 2 and len(lows) == 1 and len(highs) == 1 and lows[0].lhs == highs[0].lhs:
            return f"{self._print(lows[0].rhs)} <= {self._print(lows[0].lhs)} < {self._print(highs[0].rhs)}"
        return super()._print_And(e)

    def _print_Dummy(self, e):
        return e.name

    def _print_Symbol(self, e):
        return e.name


def evaluate(e, env: dict, arrays: dict) -> sp.Expr:
    """An expression with integer-array reads at known indices: `env` binds the sizes and
    indices, `arrays` holds the integer inputs (numpy); a read outside its array raises
    IndexError."""
    v = sp.sympify(e).xreplace(env) if env else sp.sympify(e)
    while True:
        found = [r for r in v.atoms(AppliedUndef) if all(a.is_Integer for a in r.args)]
        if not found:
            return v
        sub = {}
        for r in found:
            arr = arrays[r.func.__name__]
            ix = tuple(int(a) for a in r.args)
            if len(ix) != arr.ndim or any(not 0 <= i < n for i, n in zip(ix, arr.shape)):
                raise IndexError(f"{r.func.__name__}{list(ix)} is outside its shape {arr.shape}")
            sub[r] = sp.Integer(int(arr[ix]))
        v = v.xreplace(sub)


def violation(cond, over: tuple, env: dict, arrays: dict):
    """None if `cond` holds for every index of `over` ((symbol, extent), …) with the sizes
    `env` (symbol -> int) and the integer inputs `arrays`; else a text naming the first
    index where it fails and the value there.  The condition is evaluated as the call
    path's check evaluates it (condition_source, moac.datacheck)."""
    from ..datacheck import make_grid
    sizes = {k.name: int(v) for k, v in env.items()}
    extents, test = condition_source(cond, over)
    ok = np.asarray(make_grid(extents, test)(arrays, sizes), dtype=bool)
    if ok.all():
        return None
    if isinstance(sp.sympify(cond), Distinct):              # name two indices whose keys are equal
        keys = [make_grid(extents, condition_source(a, over)[1])(arrays, sizes).ravel()
                for a in sp.sympify(cond).args] or [np.zeros(ok.size, dtype=np.int64)]
        seen: dict = {}
        for flat, key in enumerate(zip(*keys)):
            if key in seen:
                pair = [np.unravel_index(f, ok.shape) for f in (seen[key], flat)]
                at = [", ".join(f"{v.name} = {int(i)}" for (v, _), i in zip(over, p)) for p in pair]
                return f"at {at[0]} and at {at[1]} it names the same element"
            seen[key] = flat
    first = tuple(int(i) for i in np.argwhere(~ok)[0])
    where = ", ".join(f"{v.name} = {i}" for (v, _), i in zip(over, first))
    lhs = getattr(sp.sympify(cond), "lhs", None)
    if lhs is not None:
        value = int(make_grid(*condition_source(lhs, over))(arrays, sizes)[first])
        return f"at {where} it is {value}" if where else f"it is {value}"
    return f"it fails at {where}" if where else "it fails"


def _element_bounds(program):
    """(constraint, its read of an integer input, e, the largest value e allows) for each
    condition `x[…] < e` or `x[…] ≤ e` whose bound e reads no data."""
    for c in program.constraints:
        cond = sp.sympify(c.cond)
        if not isinstance(cond, (sp.LessThan, sp.StrictLessThan)):
            continue
        lhs, rhs = cond.lhs, cond.rhs
        if isinstance(lhs, AppliedUndef) and not has_data(rhs):
            yield c, lhs, rhs, rhs - 1 if isinstance(cond, sp.StrictLessThan) else rhs


def bounds(program, slices: bool = False) -> dict:
    """The largest value each integer input's elements may hold by the program's
    conditions (`lens[b] ≤ N` gives N, `table[b, p] < P` gives P − 1): input name -> a sympy
    expression of the sizes.  An input with no such condition has no entry.  With
    `slices`, a condition on a slice (`r[t, 0] < n for t < T`) bounds the whole array too:
    the least bound every element satisfies (random data that meets every condition)."""
    out: dict = {}
    for c, lhs, _, ub in _element_bounds(program):
        quantified = tuple(v for v, _ in c.over)
        whole = tuple(lhs.args) == quantified
        one = not c.over and all(a.is_Integer for a in lhs.args)
        part = slices and all(a in quantified or a.is_Integer for a in lhs.args)
        if not (whole or one or part):
            continue                 # every element (for b < B), or one element at a constant index
        name = lhs.func.__name__
        out[name] = ub if name not in out else sp.Min(out[name], ub)
    return out


def upper_bound(e, program_bounds: dict):
    """An expression with integer-array reads bounded above, for expressions linear in
    each read (a take count lens[b], a drop's N − lens[b]): the largest of its values with
    each read at 0 or at the largest value its array may hold.  None if a read has no
    bound, there are more than four reads, or the form is not one of sums, products,
    minima and maxima."""
    e = sp.sympify(e)
    reads = sorted(data_reads(e), key=sp.default_sort_key)
    if not reads:
        return e
    if len(reads) > 4 or any(program_bounds.get(r.func.__name__) is None for r in reads):
        return None
    if not all(isinstance(x, (sp.Add, sp.Mul, sp.Symbol, sp.Integer, AppliedUndef, sp.Min, sp.Max))
               for x in sp.preorder_traversal(e) if not x.is_Atom or isinstance(x, AppliedUndef)):
        return None
    if not e.has(sp.Min, sp.Max):           # linear in each read: its extremes are at the corners
        stand = {r: sp.Dummy(integer=True) for r in reads}
        poly = sp.expand(e.xreplace(stand))
        if any(sp.degree(poly, x) > 1 for x in stand.values()):
            return None
    corners = [e.xreplace(dict(zip(reads, pick))) for pick in
               itertools.product(*[(sp.Integer(0), program_bounds[r.func.__name__]) for r in reads])]
    return corners[0] if len(corners) == 1 else sp.Max(*corners)


def random_values(name: str, shape: tuple, program, env: dict, rng) -> np.ndarray:
    """Random elements for integer input `name` that satisfy the program's conditions:
    uniform in [0, its bound] (`bounds`), [0, 12] where it has none."""
    ub = bounds(program, slices=True).get(name)
    top = int(sp.sympify(ub).xreplace(env)) if ub is not None else 12
    dtype = np.int64 if any(i.name == name and i.dtype == "i64" for i in program.inputs) else np.int32
    return rng.integers(0, max(top, 0) + 1, size=shape).astype(dtype)


def random_index_inputs(program, shapes: dict, env: dict, rng, tries: int = 200) -> dict:
    """Random elements for every integer input (`random_values`), drawn again until a
    scatter's targets are distinct (its `Distinct` conditions: the bounds cannot say it):
    name -> array.  A MoacError names the condition where `tries` draws all fail."""
    from ..errors import MoacError
    names = [i.name for i in program.inputs if i.dtype in INDEX_DTYPES]
    empty_range(program, env)
    scatters = [c for c in program.constraints if isinstance(sp.sympify(c.cond), Distinct)]
    for _ in range(tries):
        arrays = {n: random_values(n, shapes[n], program, env, rng) for n in names}
        bad = next((c for c in scatters if violation(c.cond, c.over, env, arrays)), None)
        if bad is None:
            return arrays
    raise MoacError(f"no random integer inputs in {tries} draws met: {bad.message} (give fewer sequences or a "
                    "larger pool)", bad.span, program.source)


def empty_range(program, env: dict) -> None:
    """A MoacError at the first condition `x[i] < e` (or ≤) on an integer input's elements
    that no element can meet with these sizes, e below 0 (the elements are indices, ≥ 0),
    where it quantifies over at least one element: with a page of 0 tokens no sequence
    length is below maxp·page, and saying so beats the scatter's distinctness failing on
    the draws clamped to 0."""
    from ..errors import MoacError
    for c, _, bound, ub in _element_bounds(program):
        extents = [sp.sympify(sp.sympify(x).xreplace(env)) for _, x in c.over]
        if any(not x.is_Integer or int(x) <= 0 for x in extents):
            continue                     # no element to draw (or not known here)
        top = sp.sympify(sp.sympify(bound).xreplace(env))
        if not top.is_Integer:
            continue
        if int(sp.sympify(ub).xreplace(env)) < 0:
            shown = f"{show_expr(bound)} = {int(top)}" if not sp.sympify(bound).is_Integer else str(int(top))
            raise MoacError(f"no integer inputs exist for these sizes: {c.message}, and {shown} leaves no "
                            "value ≥ 0 for it", c.span, program.source)


def condition_source(cond, over: tuple) -> tuple:
    """A condition on integer data as numpy source for moac.datacheck.make_check: (the
    extents of its quantified indices, the test over them)."""
    pos = {v: k for k, (v, _) in enumerate(over)}

    def src(e) -> str:
        e = sp.sympify(e)
        if e.is_Integer:
            return str(int(e))
        if e is sp.true or e is sp.false:
            return str(bool(e))
        if isinstance(e, sp.Symbol):
            return f"G[{pos[e]}]" if e in pos else f"S[{e.name!r}]"
        if isinstance(e, sp.floor):             # ⌊a ÷ b⌋ as integer division (its argument is no integer)
            num, den = sp.fraction(sp.together(e.args[0]))   # -i/2 - 1/2 as (-i - 1) / 2
            return f"({src(num)} // {src(den)})"
        args = [src(a) for a in e.args]
        if isinstance(e, Distinct):
            return f"distinct(n, ({''.join(a + ', ' for a in args)}))"
        if isinstance(e, AppliedUndef):
            return f"A[{e.func.__name__!r}][({', '.join(args)},)]" if args else f"A[{e.func.__name__!r}][()]"
        if isinstance(e, sp.Add):
            return "(" + " + ".join(args) + ")"
        if isinstance(e, sp.Mul):
            return "(" + " * ".join(args) + ")"
        if isinstance(e, sp.Pow) and e.exp.is_Integer and e.exp >= 0:
            return f"({args[0]} ** {int(e.exp)})"
        if isinstance(e, sp.Mod):
            return f"({args[0]} % {args[1]})"
        if isinstance(e, (sp.Min, sp.Max)):
            fn = "np.minimum" if isinstance(e, sp.Min) else "np.maximum"
            out = args[0]
            for a in args[1:]:
                out = f"{fn}({out}, {a})"
            return out
        if isinstance(e, sp.Abs):
            return f"np.abs({args[0]})"
        if isinstance(e, (sp.And, sp.Or)):
            return "(" + (" & " if isinstance(e, sp.And) else " | ").join(args) + ")"
        ops = {sp.StrictLessThan: "<", sp.LessThan: "<=", sp.StrictGreaterThan: ">", sp.GreaterThan: ">=",
               sp.Equality: "==", sp.Unequality: "!="}
        for cls, op in ops.items():
            if isinstance(e, cls):
                return f"({args[0]} {op} {args[1]})"
        raise TypeError(f"cannot compile the condition {e}")
    return "(" + "".join(src(x) + ", " for _, x in over) + ")", src(cond)


def compile_condition(cond, over: tuple):
    """A condition on integer data as a plain-numpy function `ok(arrays, sizes) -> bool`
    (arrays: integer inputs by name, sizes: ints by name), for the call path: no sympy
    when it runs."""
    from ..datacheck import make_check
    return make_check(*condition_source(cond, over))
