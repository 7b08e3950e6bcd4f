"""The shape rules of stage 2 where extents must agree or a length must be ≥ 0: each is
proved (nothing to record), refused (a ShapeError at the expression) or, where only the
run-time sizes decide it, recorded as a condition the kernel checks (a `require` line of
the dumps): elementwise operands, the inner product's contracted axes, △ and ▽ counts,
the lengths ι and ρ give.  A mixin of the elaborator (moac.front.elaborate.Elab)."""
from __future__ import annotations

import sympy as sp

from . import syntax as S
from . import data as D
from .core import CDrop, CInner, CTake, Constraint, Core, provably, same, show_expr, show_shape
from ..errors import ShapeError
from ..ops import STRUCTURAL


def _may_be_equal(x, y) -> bool:
    """Extents that differ in form (different size names, a size and a number) but that no
    fact tells apart (4 and 5, n and n + 1 are told apart): sizes meant to be equal, a
    condition to check with the sizes."""
    d = sp.expand(sp.sympify(x) - sp.sympify(y))
    return d != 0 and not d.is_number and not provably(sp.Ne(x, y))


class Agreement:
    def unify(self, fn, a: Core, b: Core, arg_nodes, node) -> bool:
        """Shapes of equal rank whose extents may be equal (different size names, or a
        size and a number): True, with each equality that is not provable recorded as a
        constraint the kernel checks when it is called (a `require` line in the dumps).
        False if an extent pair is known to differ (4 and 5, n and n + 1), or if one shape
        is a reordering of the other (⟨n m⟩ against ⟨m n⟩: a transpose left out, not sizes
        meant to be equal): those stay errors here."""
        if a.rank != b.rank:
            return False
        key = sp.default_sort_key
        if sorted(map(sp.sympify, a.shape), key=key) == sorted(map(sp.sympify, b.shape), key=key):
            return False
        pending = []
        for k, (x, y) in enumerate(zip(a.shape, b.shape)):
            if same(x, y):
                continue
            if not _may_be_equal(x, y):
                return False
            pending.append((k, x, y))
        lt, rt = (self.text(n) for n in arg_nodes)
        for k, x, y in pending:
            self.constraints.append(Constraint(sp.Eq(x, y), f"{fn.text} pairs axis {k} of {lt} ({show_expr(x)}) "
                                               f"with axis {k} of {rt} ({show_expr(y)}): they must be equal",
                                               node.span))
        return True

    def take_drop(self, op, k, a: Core, fn, left, right, node) -> Core:
        """k △ A or k ▽ A along axis 0, a scalar count k (negative: from the end)."""
        if a.rank == 0:
            raise self.err(ShapeError, f"{fn.text} needs an array of rank ≥ 1", right)
        self.cells_only(a, right, fn.text)
        n = a.shape[0]
        sym = STRUCTURAL[op].symbol
        mag = k if k.is_nonnegative else sp.Abs(k)
        bad = sp.Gt(mag, n)
        if provably(bad):
            raise self.err(ShapeError, f"{sym} count {k} is larger than the axis length {n}", left)
        if not provably(sp.Le(mag, n)):
            shown = f"{show_expr(k)}" if D.has_data(k) else f"|{k}|"
            self.constraints.append(Constraint(sp.Le(mag, n),
                                               f"{sym} count {shown} must not exceed {show_expr(n)}", left.span))
        if k.is_nonnegative:
            length = k if op == "take" else n - k
        elif k.is_nonpositive:
            length = -k if op == "take" else n + k
        else:
            raise self.err(ShapeError, f"the sign of the {sym} count {k} must be known", left)
        cls = CTake if op == "take" else CDrop
        return cls(node.span, (length,) + a.shape[1:], k, a)

    def length_item(self, d, negative: str, condition: str, arg_node) -> None:
        """An axis length of ι or ρ: an error if provably negative, else a run-time condition d ≥ 0."""
        if provably(sp.Lt(d, 0)):
            raise self.err(ShapeError, negative, arg_node)
        if not provably(sp.Ge(d, 0)):
            self.constraints.append(Constraint(sp.Ge(d, 0), condition, arg_node.span))

    def inner(self, f: str, g: str, a: Core, b: Core, arg_nodes, node, fn) -> Core:
        if a.rank == 0 or b.rank == 0:
            raise self.err(ShapeError, f"inner product {self.text(fn)} needs operands of rank ≥ 1; got "
                           f"{show_shape(a.shape)} and {show_shape(b.shape)}", node)
        x, y = a.shape[-1], b.shape[0]
        transposed = b.rank >= 2 and same(x, b.shape[-1])      # q +.× K for q +.× ⍉K: stays an error
        if _may_be_equal(x, y) and not transposed and not D.has_data(x) and not D.has_data(y):   # data: an error
            lt, rt = (self.text(n) for n in arg_nodes)       # sizes meant to be equal, as `unify` takes them
            self.constraints.append(Constraint(sp.Eq(x, y), f"{self.text(fn)} contracts the last axis of {lt} "
                                               f"({show_expr(x)}) with the first of {rt} ({show_expr(y)}): "
                                               "they must be equal", node.span))
        elif not same(x, y):
            notes = []
            if transposed:
                lt, rt = (self.text(n) if isinstance(n, (S.Name, S.Vector)) else f"({self.text(n)})"
                          for n in arg_nodes)
                notes.append(f"to pair {lt} with each row of {rt} (contract with its last axis), write "
                             f"`{lt} {self.text(fn)} ⍉{rt}` or `{lt} ({self.text(fn)} Ω⟨1 1⟩) {rt}`")
            raise self.err(ShapeError, f"inner product {self.text(fn)} contracts the last axis of the left operand "
                           f"(length {show_expr(a.shape[-1])}) with the first axis of the right operand (length "
                           f"{show_expr(b.shape[0])}); they differ (shapes {show_shape(a.shape)} and {show_shape(b.shape)})",
                           node, notes)
        for x, xn in zip((a, b), arg_nodes):
            self.cells_only(x, xn, self.text(fn))
        return CInner(node.span, a.shape[:-1] + b.shape[1:], f, g, a, b)
