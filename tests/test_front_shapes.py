"""Symbolic shape inference: one case (at least) per construct, checked against sympy."""
from __future__ import annotations

import pytest
import sympy as sp

from conftest import output_shapes, sym

n, m, p, k = sym("n"), sym("m"), sym("p"), sym("k")

H = """size n, m, p, k
input s : f32 ⟨⟩
input x : f32 ⟨n⟩
input y : f32 ⟨m⟩
input A : f32 ⟨n m⟩
input B : f32 ⟨m p⟩
input T : f32 ⟨n m p⟩
input C : f32 ⟨k m⟩
"""

# (expression, expected shape)
SHAPES = [
    # scalars, vectors, shape and index generation
    ("3", ()),
    ("s × 1", ()),
    ("⟨1 2 3⟩", (3,)),
    ("⟨n m⟩", (2,)),
    ("ρ T", (3,)),
    ("ρ s", (0,)),
    ("ι n", (n,)),
    ("ι 4", (4,)),
    ("ι n + m", (n + m,)),
    ("⟨1 2⟩ γ ⟨n m⟩", ()),
    # elementwise and scalar extension
    ("A + A", (n, m)),
    ("2 × A", (n, m)),
    ("A ÷ s", (n, m)),
    ("A max 0", (n, m)),
    ("exp − A", (n, m)),
    ("√ abs x", (n,)),
    ("(+ red x) × A", (n, m)),
    # ψ
    ("⟨0⟩ ψ A", (m,)),
    ("⟨0 1⟩ ψ A", ()),
    ("⟨⟩ ψ A", (n, m)),
    ("⟨1⟩ ψ T", (m, p)),
    ("⟨(n − 1)⟩ ψ T", (m, p)),
    # transpose
    ("⍉ A", (m, n)),
    ("⍉ T", (p, m, n)),
    ("⍉ x", (n,)),
    ("⟨0 1⟩ ⍉ A", (n, m)),
    ("⟨1 2 0⟩ ⍉ T", (p, n, m)),
    ("⟨2 0 1⟩ ⍉ T", (m, p, n)),
    ("⟨0 2 1⟩ ⍉ T", (n, p, m)),
    # reshape
    ("⟨m n⟩ ρ A", (m, n)),
    ("⟨(n × m)⟩ ρ A", (n * m,)),
    ("⟨n (m × p)⟩ ρ T", (n, m * p)),
    ("⟨p n m⟩ ρ T", (p, n, m)),
    # catenation
    ("A # A", (2 * n, m)),
    ("A # C", (n + k, m)),
    ("A # y", (n + 1, m)),
    ("x # x", (2 * n,)),
    ("x # 1", (n + 1,)),
    ("⟨1 2⟩ # ι 3", (5,)),
    # take / drop / reverse
    ("2 △ A", (2, m)),
    ("¯2 △ A", (2, m)),
    ("n △ A", (n, m)),
    ("1 ▽ A", (n - 1, m)),
    ("¯1 ▽ A", (n - 1, m)),
    ("Φ A", (n, m)),
    ("Φ 1 ▽ x", (n - 1,)),
    # reductions
    ("+ red A", (m,)),
    ("× red T", (m, p)),
    ("max red x", ()),
    ("min red + red T", (p,)),
    # inner products
    ("A +.× B", (n, p)),
    ("A +.× y", (n,)),
    ("x +.× A", (m,)),
    ("y +.× y", ()),
    ("(⍉ T) +.× x", (p, m)),
    ("⍉ T +.× ⍉ B", (m, m, n)),
    ("A max.+ B", (n, p)),
    ("A min.− B", (n, p)),
    ("A ×.+ B", (n, p)),
    # outer products
    ("x ∘.× y", (n, m)),
    ("A ∘.+ x", (n, m, n)),
    ("s ∘.× x", (n,)),
    ("x ∘.max s", (n,)),
    # Ω
    ("softmax Ω⟨1⟩ A", (n, m)),
    ("(+ red) Ω⟨1⟩ A", (n,)),
    ("(+ red) Ω⟨2⟩ T", (n, p)),
    ("(+ red) Ω⟨1⟩ T", (n, m)),
    ("⍉ Ω⟨2⟩ T", (n, p, m)),
    ("− Ω⟨0⟩ A", (n, m)),
    ("y (+.× Ω⟨1 1⟩) A", (n,)),
    ("A (+.× Ω⟨1 1⟩) A", (n,)),
    ("A (× Ω⟨1 0⟩) x", (n, m)),
    ("x (× Ω⟨0 1⟩) A", (n, m)),
    ("A (∘.× Ω⟨1 1⟩) A", (n, m, m)),
    ("A (+.× Ω⟨1 2⟩) B", (n, p)),
    ("T (+.× Ω⟨2 2⟩) ⍉ B", (n, m, m)),
    ("(softmax Ω⟨1⟩) Ω⟨2⟩ T", (n, m, p)),
    # prelude and user functions
    ("softmax x", (n,)),
    ("mean A", (m,)),
    ("mean Ω⟨1⟩ A", (n,)),
]


@pytest.mark.parametrize("expr, shape", SHAPES, ids=[e for e, _ in SHAPES])
def test_shape_rule(expr, shape):
    got = output_shapes(H + f"r = {expr}\noutput r")["r"]
    assert len(got) == len(shape), (got, shape)
    for g, w in zip(got, shape):
        assert sp.expand(sp.sympify(g) - sp.sympify(w)) == 0, (got, shape)


def test_shapes_of_every_statement_are_kept():
    shapes = output_shapes(H + "a = A +.× B\nb = ⍉ a\nc = b # (+ red b)\noutput a, b, c")
    assert shapes == {"a": (n, p), "b": (p, n), "c": (p + 1, n)}


def test_symbolic_input_shapes():
    shapes = output_shapes("size n, d\ninput K : f32 ⟨(n + 1) d⟩\ninput k : f32 ⟨d⟩\nr = K # k\noutput r")
    assert sp.expand(shapes["r"][0] - (sym("n") + 2)) == 0


def test_user_function_shape_depends_on_the_argument():
    src = H + "fn twice v { v # v }\na = twice x\nb = twice A\noutput a, b"
    shapes = output_shapes(src)
    assert shapes["a"] == (2 * n,) and shapes["b"] == (2 * n, m)


def test_sizes_are_nonnegative_integers():
    from moac.front.core import size_symbol
    s = size_symbol("q")
    assert s.is_integer and s.is_nonnegative
