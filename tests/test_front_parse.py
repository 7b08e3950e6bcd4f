"""Parser: Unicode and ASCII spellings give the same AST and DNF; APL precedence."""
from __future__ import annotations

import numpy as np
import pytest

import moac
from moac.front import syntax as S
from conftest import check_dnf, strip

HEAD_U = """size n, m, p
index i < n, j < m
input A : f32 ⟨n m⟩
input B : f32 ⟨m p⟩
input x : f32 ⟨m⟩
input y : f32 ⟨n⟩
input T : f32 ⟨n m p⟩
"""
HEAD_A = """size n, m, p
index i < n, j < m
input A : f32 <n m>
input B : f32 <m, p>
input x : f32 <m>
input y : f32 <n>
input T : f32 <n, m, p>
"""

# (Unicode body, ASCII body): every operator in both spellings.
SPELLINGS = [
    ("r ← A × 2", "r = A * 2"),
    ("r = A ÷ 2", "r = A / 2"),
    ("r = A − 1", "r = A - 1"),
    ("r = − A", "r = - A"),
    ("r = ÷ A", "r = / A"),
    ("r = A ⌈ 0", "r = A max 0"),
    ("r = A ⌊ 0", "r = A min 0"),
    ("r = 2 ⋆ A", "r = 2 pow A"),
    ("r = √ abs A", "r = sqrt abs A"),
    ("r = exp log abs A", "r = exp log abs A"),
    ("r = ⟨1 0⟩ ψ A", "r = <1 0> psi A"),
    ("r = ⟨1⟩ ψ A", "r = <1> psi A"),
    ("r = ρ A", "r = rho A"),
    ("r = ⟨m n⟩ ρ A", "r = <m n> rho A"),
    ("r = ι n", "r = iota n"),
    ("r = ⟨1 2⟩ γ ⟨n m⟩", "r = <1 2> gamma <n m>"),
    ("r = ⟨1 2⟩ γcol ⟨n m⟩".replace("γcol", "gammacol"), "r = <1 2> gammacol <n m>"),
    ("r = ⍉ A", "r = tr A"),
    ("r = ⍉ A", "r = transpose A"),
    ("r = ⟨1 2 0⟩ ⍉ T", "r = <1 2 0> tr T"),
    ("r = 2 △ A", "r = 2 take A"),
    ("r = 2 △ A", "r = 2 ↑ A"),
    ("r = ¯1 ▽ A", "r = (-1) drop A"),
    ("r = 1 ▽ A", "r = 1 ↓ A"),
    ("r = Φ A", "r = rev A"),
    ("r = Φ A", "r = reverse A"),
    ("r = Φ A", "r = ⌽ A"),
    ("r = A # x", "r = A cat x"),
    ("r = + red A", "r = + red A"),
    ("r = × red A", "r = * red A"),
    ("r = ⌈ red A", "r = max red A"),
    ("r = ⌊ red A", "r = min red A"),
    ("r = A +.× B", "r = A +.* B"),
    ("r = A ⌈.+ B", "r = A max.+ B"),
    ("r = A ⌊.− B", "r = A min.- B"),
    ("r = A +.× x", "r = A +.* x"),
    ("r = y ∘.× x", "r = y outer.* x"),
    ("r = y ∘.⌈ x", "r = y outer.max x"),
    ("r = softmax Ω⟨1⟩ A", "r = softmax omega<1> A"),
    ("r = A (+.× Ω⟨1 1⟩) x", "r = A (+.* omega<1, 1>) x"),
    ("r = (+ red) Ω⟨1⟩ A", "r = (+ red) omega<1> A"),
    ("r = mean A", "r = mean A"),
]


def _src(head, body):
    return head + body + "\noutput r\n"


@pytest.mark.parametrize("uni, asc", SPELLINGS, ids=[a for _, a in SPELLINGS])
def test_unicode_and_ascii_spellings_agree(uni, asc):
    pu = moac.parse(_src(HEAD_U, uni), "f.moa")
    pa = moac.parse(_src(HEAD_A, asc), "f.moa")
    if "(-1)" in asc:
        # `¯1` is a literal; `(-1)` is monadic − applied to 1: the same count, another tree.
        assert str(pu.dnf()) == str(pa.dnf())
        return
    assert strip(pu.module) == strip(pa.module)
    assert str(pu.dnf()) == str(pa.dnf())


def test_header_spellings_agree():
    assert strip(moac.parse(HEAD_U + "r = A\n").module) == strip(moac.parse(HEAD_A + "r = A\n").module)


def test_prim_canonical_names():
    mod = moac.parse(_src(HEAD_A, "r = A * 2")).module
    assign = [s for s in mod.stmts if isinstance(s, S.Assign)][0]
    assert isinstance(assign.expr, S.Dyad)
    assert assign.expr.fn.op == "mul" and assign.expr.fn.text == "*"


def test_spans_are_one_based_and_point_at_tokens():
    mod = moac.parse("size n\ninput x : f32 ⟨n⟩\ny = x + 1\n").module
    assign = mod.stmts[2]
    assert (assign.span.line, assign.span.col) == (3, 1)
    assert (assign.expr.fn.span.line, assign.expr.fn.span.col) == (3, 7)
    assert (assign.expr.right.span.line, assign.expr.right.span.col) == (3, 9)


def test_comments_and_blank_lines():
    src = "-- header\n\nsize n   -- sizes\n\ninput x : f32 ⟨n⟩ -- an input\n-- middle\ny = x + 1 -- comment\n\n"
    p = moac.parse(src)
    assert p.outputs == ("y",)


def test_commas_in_vectors_and_declarations():
    a = moac.parse("size n, m\ninput A : f32 ⟨n, m⟩\nr = ⟨1, 0⟩ ψ A\noutput r")
    b = moac.parse("size n m\ninput A : f32 ⟨n m⟩\nr = ⟨1 0⟩ ψ A\noutput r")
    assert strip(a.module) == strip(b.module)


def test_line_continuation():
    a = moac.parse("size n\ninput x : f32 ⟨n⟩\ny = x + \\\n  1\noutput y")
    b = moac.parse("size n\ninput x : f32 ⟨n⟩\ny = x + 1\noutput y")
    assert strip(a.module) == strip(b.module)


# --------------------------------------------------------------------------- precedence

PRE = "size n, m\ninput A : f32 ⟨n m⟩\ninput B : f32 ⟨m n⟩\ninput x : f32 ⟨m⟩\ninput y : f32 ⟨m⟩\n"

# (as written, fully parenthesised): APL — right to left, one precedence for all dyads,
# a monadic function takes everything on its right.
PRECEDENCE = [
    ("r = x × y + 1", "r = x × (y + 1)"),
    ("r = x − y − 1", "r = x − (y − 1)"),
    ("r = x ÷ y ÷ 2", "r = x ÷ (y ÷ 2)"),
    ("r = exp x − y", "r = exp (x − y)"),
    ("r = − x + y", "r = − (x + y)"),
    ("r = + red A × A", "r = + red (A × A)"),
    ("r = ⟨1⟩ ψ 1 ▽ A", "r = ⟨1⟩ ψ (1 ▽ A)"),
    ("r = 2 △ Φ A", "r = 2 △ (Φ A)"),
    ("r = ⍉ A +.× B", "r = ⍉ (A +.× B)"),
    ("r = B +.× ⍉ B + 1", "r = B +.× (⍉ (B + 1))"),
    ("r = x +.× B +.× A +.× x", "r = x +.× (B +.× (A +.× x))"),
    ("r = + red Ω⟨1⟩ A", "r = (+ red) Ω⟨1⟩ A"),
    ("r = softmax Ω⟨1⟩ A + 1", "r = (softmax Ω⟨1⟩) (A + 1)"),
    ("r = x # y # x", "r = x # (y # x)"),
    ("r = ⟨0⟩ ψ ρ A", "r = ⟨0⟩ ψ (ρ A)"),
    ("r = 2 × 3 − 1", "r = 2 × (3 − 1)"),
]


@pytest.mark.parametrize("plain, paren", PRECEDENCE, ids=[p for p, _ in PRECEDENCE])
def test_precedence_is_apl_right_to_left(plain, paren):
    a = moac.parse(PRE + plain + "\noutput r")
    b = moac.parse(PRE + paren + "\noutput r")
    assert strip(a.module) == strip(b.module)
    assert str(a.dnf()) == str(b.dnf())
    check_dnf(a, {"n": 3, "m": 2})


def test_left_parentheses_change_the_meaning():
    v = moac.parse("r = 2 × 3 − 1\noutput r").evaluate()["r"]
    w = moac.parse("r = (2 × 3) − 1\noutput r").evaluate()["r"]
    assert float(v) == 4.0 and float(w) == 5.0


def test_monadic_minus_versus_negative_literal():
    # `-1 △ x` is −(1 △ x) (APL: the monadic function takes everything to its right);
    # `¯1 △ x` takes the last item.
    src = "input x : f32 ⟨3⟩\na = -1 △ x\nb = ¯1 △ x\nc = (-1) △ x\noutput a, b, c"
    out = moac.parse(src).evaluate(x=np.array([1.0, 2.0, 3.0]))
    assert out["a"].tolist() == [-1.0]
    assert out["b"].tolist() == [3.0]
    assert out["c"].tolist() == [3.0]


def test_parenthesised_function_expressions():
    a = moac.parse(PRE + "r = A (+.×) B\noutput r")
    b = moac.parse(PRE + "r = A +.× B\noutput r")
    assert str(a.dnf()) == str(b.dnf())


def test_user_functions_monadic_and_dyadic():
    src = PRE + """fn dot a b {
  + red a × b
}
fn sq a { a × a }
r = x dot sq y
s = A (dot Ω⟨1 1⟩) A
output r, s
"""
    p = moac.parse(src)
    out = check_dnf(p, {"n": 3, "m": 2})
    rng = np.random.default_rng(0)
    A, x, y = rng.standard_normal((3, 2)), rng.standard_normal(2), rng.standard_normal(2)
    out = p.evaluate(A=A, B=A.T.copy(), x=x, y=y)
    np.testing.assert_allclose(out["r"], x @ (y * y))
    np.testing.assert_allclose(out["s"], (A * A).sum(axis=1))


def test_user_function_overrides_prelude():
    src = "size n\ninput x : f32 ⟨n⟩\nfn softmax v { v + 1 }\ny = softmax x\noutput y"
    np.testing.assert_allclose(moac.parse(src).evaluate(x=np.zeros(3))["y"], np.ones(3))


def test_last_assignment_is_the_output_by_default():
    p = moac.parse("size n\ninput x : f32 ⟨n⟩\na = x + 1\nb = a × 2")
    assert p.outputs == ("b",)


def test_crlf_line_ends_and_byte_order_mark():
    plain = "size n\ninput x : f32 ⟨n⟩\ny = x + 1\n"
    want = str(moac.parse(plain, "f.moa").dnf())
    assert str(moac.parse(plain.replace("\n", "\r\n"), "f.moa").dnf()) == want
    assert str(moac.parse("\ufeff" + plain, "f.moa").dnf()) == want
    with pytest.raises(moac.NameError_) as info:           # the mark is not a column, as in editors and gcc
        moac.parse("\ufeffy = z\n", "f.moa")
    assert (info.value.span.line, info.value.span.col) == (1, 5)
    assert "\ufeff" not in str(info.value)
