"""ψ-reduction: for every rewrite rule and every example, the DNF evaluated index by index
equals the reference interpreter on small concrete shapes with seeded random data."""
from __future__ import annotations

import re

import numpy as np
import pytest

import moac
from moac.dnf import DNF, DRead, DReduce, DSelect, DOp, evaluate_dnf
from conftest import EXAMPLES, check_dnf, random_inputs

H = """size n, m, p, k
index i < n, j < m
input s : f32 ⟨⟩
input x : f32 ⟨n⟩
input x2 : f32 ⟨n⟩
input y : f32 ⟨m⟩
input A : f32 ⟨n m⟩
input A2 : f32 ⟨n m⟩
input B : f32 ⟨m p⟩
input T : f32 ⟨n m p⟩
input C : f32 ⟨k m⟩
"""
SIZES = {"n": 3, "m": 2, "p": 4, "k": 2}

# id: (body, rules that must fire)
RULES = {
    "psi-psi": ("r = ⟨1⟩ ψ ⟨2⟩ ψ T", {"ψ∘ψ"}),
    "psi-psi-prefix": ("r = ⟨1⟩ ψ T", {"ψ∘ψ"}),
    "psi-psi-full": ("r = ⟨0 1⟩ ψ A", {"ψ∘ψ"}),
    "psi-empty-index": ("r = ⟨⟩ ψ A", {"ψ∘ψ"}),
    "psi-symbolic-index": ("r = ⟨(n − 1)⟩ ψ A", {"ψ∘ψ"}),
    "elementwise": ("r = A + A2 × A − A2", set()),
    "elementwise-all-ops": ("r = (A max A2) − (A min A2) + (A ÷ A2 + 3) × exp A", set()),
    "elementwise-monadic": ("r = − √ abs exp log abs A", set()),
    "elementwise-recip": ("r = ÷ 2 + abs A", set()),
    "pow": ("r = (abs A) ⋆ 2", set()),
    "scalar-extension-left": ("r = 2 × A", set()),
    "scalar-extension-right": ("r = A − 1.5", set()),
    "scalar-extension-input": ("r = s × A + s", set()),
    "scalar-extension-reduction": ("r = A − max red max red A", {"ψ-reduce", "temporary"}),
    "scalar-extension-size": ("r = A × n + m", set()),
    "transpose-monadic": ("r = ⍉ A", {"ψ-transpose"}),
    "transpose-monadic-rank3": ("r = ⍉ T", {"ψ-transpose"}),
    "transpose-dyadic-120": ("r = ⟨1 2 0⟩ ⍉ T", {"ψ-transpose"}),
    "transpose-dyadic-201": ("r = ⟨2 0 1⟩ ⍉ T", {"ψ-transpose"}),
    "transpose-dyadic-021": ("r = ⟨0 2 1⟩ ⍉ T", {"ψ-transpose"}),
    "transpose-twice": ("r = ⟨1 2 0⟩ ⍉ ⟨1 2 0⟩ ⍉ T", {"ψ-transpose"}),
    "transpose-vector": ("r = ⍉ x", {"ψ-transpose"}),
    "reshape-swap": ("r = ⟨m n⟩ ρ A", {"ψ-reshape"}),
    "reshape-flatten": ("r = ⟨(n × m × p)⟩ ρ T", {"ψ-reshape"}),
    "reshape-split": ("r = ⟨m (p × n)⟩ ρ ⟨(n × m × p)⟩ ρ T", {"ψ-reshape"}),
    "reshape-same": ("r = ⟨n m⟩ ρ A", {"ψ-reshape"}),
    "reshape-rank3": ("r = ⟨p n m⟩ ρ T", {"ψ-reshape"}),
    "reshape-of-transpose": ("r = ⟨(n × m)⟩ ρ ⍉ A", {"ψ-reshape", "ψ-transpose"}),
    "shape-vector": ("r = (ρ T) × 2", set()),
    "iota": ("r = x + ι n", set()),
    "catenate": ("r = A # C", {"ψ-catenate"}),
    "catenate-same": ("r = A # A2", {"ψ-catenate"}),
    "catenate-item": ("r = A # y", {"ψ-catenate"}),
    "catenate-vector-scalar": ("r = x # 1", {"ψ-catenate"}),
    "catenate-literal": ("r = ⟨7 8⟩ # x", {"ψ-catenate"}),
    "catenate-three": ("r = x # x2 # x", {"ψ-catenate"}),
    "catenate-transposed": ("r = (⍉ A) # ⍉ A2", {"ψ-catenate", "ψ-transpose"}),
    "take": ("r = 2 △ A", {"ψ-take"}),
    "take-negative": ("r = ¯2 △ A", {"ψ-take"}),
    "take-all": ("r = n △ A", {"ψ-take"}),
    "take-zero": ("r = (0 △ A) # A", {"ψ-catenate"}),   # i < 0 is false: the guard folds away
    "drop": ("r = 1 ▽ A", {"ψ-drop"}),
    "drop-negative": ("r = ¯1 ▽ A", {"ψ-drop"}),
    "drop-negative-2": ("r = ¯2 ▽ T", {"ψ-drop"}),
    "take-drop": ("r = ¯1 △ 1 ▽ x", {"ψ-take", "ψ-drop"}),
    "reverse": ("r = Φ A", {"ψ-reverse"}),
    "reverse-twice": ("r = Φ Φ T", {"ψ-reverse"}),
    "reverse-take": ("r = Φ ¯2 △ x", {"ψ-reverse", "ψ-take"}),
    "reduce-add": ("r = + red A", {"ψ-reduce"}),
    "reduce-mul": ("r = × red A", {"ψ-reduce"}),
    "reduce-max": ("r = max red T", {"ψ-reduce"}),
    "reduce-min": ("r = min red T", {"ψ-reduce"}),
    "reduce-to-scalar": ("r = + red x", {"ψ-reduce"}),
    "reduce-twice": ("r = + red × red T", {"ψ-reduce"}),
    "reduce-of-catenation": ("r = max red A # C", {"ψ-reduce", "ψ-catenate"}),
    "inner-matmul": ("r = A +.× B", {"ψ-inner"}),
    "inner-matrix-vector": ("r = A +.× y", {"ψ-inner"}),
    "inner-vector-matrix": ("r = x +.× A", {"ψ-inner"}),
    "inner-dot": ("r = y +.× y", {"ψ-inner"}),
    "inner-rank3": ("r = T +.× ⍉ B", {"ψ-inner", "ψ-transpose"}),
    "inner-max-plus": ("r = A max.+ B", {"ψ-inner"}),
    "inner-min-minus": ("r = A min.− B", {"ψ-inner"}),
    "inner-mul-plus": ("r = A ×.+ B", {"ψ-inner"}),
    "inner-plus-max": ("r = A +.max B", {"ψ-inner"}),
    "inner-chain": ("r = x +.× A +.× B +.× ι p", {"ψ-inner"}),
    "outer": ("r = x ∘.× y", {"ψ-outer"}),
    "outer-minus": ("r = x ∘.− x2", {"ψ-outer"}),
    "outer-matrix-vector": ("r = A ∘.max x", {"ψ-outer"}),
    "outer-scalar": ("r = s ∘.+ y", {"ψ-outer"}),
    "omega-monadic-reduce": ("r = (+ red) Ω⟨1⟩ A", {"ψ-Ω", "ψ-reduce"}),
    "omega-monadic-softmax": ("r = softmax Ω⟨1⟩ A", {"ψ-Ω", "temporary"}),
    "omega-monadic-rank2-cells": ("r = ⍉ Ω⟨2⟩ T", {"ψ-Ω", "ψ-transpose"}),
    "omega-monadic-scalar-cells": ("r = exp Ω⟨0⟩ A", {"ψ-Ω"}),
    "omega-monadic-whole": ("r = Φ Ω⟨2⟩ A", {"ψ-Ω", "ψ-reverse"}),
    "omega-nested": ("r = (softmax Ω⟨1⟩) Ω⟨2⟩ T", {"ψ-Ω"}),
    "omega-dyadic-equal-frames": ("r = A (+.× Ω⟨1 1⟩) A2", {"ψ-Ω", "ψ-inner"}),
    "omega-dyadic-equal-frames-elementwise": ("r = A (− Ω⟨1 1⟩) A2", {"ψ-Ω"}),
    "omega-dyadic-left-frame-empty": ("r = y (+.× Ω⟨1 1⟩) A", {"ψ-Ω", "ψ-inner"}),
    "omega-dyadic-right-frame-empty": ("r = A (× Ω⟨1 1⟩) y", {"ψ-Ω"}),
    "omega-dyadic-both-frames-empty": ("r = y (∘.× Ω⟨1 1⟩) y", {"ψ-Ω", "ψ-outer"}),
    "omega-dyadic-scalar-cells": ("r = A (× Ω⟨1 0⟩) x", {"ψ-Ω"}),
    "omega-dyadic-rank2-frame": ("r = T (+ Ω⟨0 0⟩) T", {"ψ-Ω"}),
    "omega-dyadic-matrix-cells": ("r = T (+.× Ω⟨2 2⟩) ⍉ B", {"ψ-Ω", "ψ-inner"}),
    "omega-user-function": ("r = (mean Ω⟨1⟩ A) + softmax x", {"ψ-Ω"}),
    "prelude-softmax": ("r = softmax x", {"temporary"}),
    "prelude-mean": ("r = mean A", {"ψ-reduce"}),
    "gamma": ("r = x × ⟨1 2⟩ γ ⟨n m⟩", set()),
    "gammacol": ("r = x × ⟨1 1⟩ gammacol ⟨n m⟩", set()),
    "catenate-softmax-rows-right": ("r = A # softmax Ω⟨1⟩ C", {"ψ-catenate", "temporary"}),
    "catenate-softmax-rows-left": ("r = (softmax Ω⟨1⟩ ⍉ B) # ⍉ B", {"ψ-catenate", "temporary"}),
    "reshape-empty": ("r = Φ (⟨0 m⟩ ρ ⟨m 0⟩ ρ 0 △ C) # A", {"ψ-catenate", "ψ-reshape"}),
    "composite-take-reverse-psi": ("r = ⟨1⟩ ψ Φ 2 △ ⍉ (A # C)", {"ψ∘ψ", "ψ-reverse", "ψ-take", "ψ-catenate"}),
}


@pytest.mark.parametrize("case", list(RULES), ids=list(RULES))
def test_rule_dnf_matches_interpreter(case):
    body, rules = RULES[case]
    prog = moac.parse(H + body + "\noutput r\n")
    check_dnf(prog, SIZES, seed=hash(case) % 1000)
    fired = {t.rule for t in prog.dnf().trace}
    assert rules <= fired, fired


@pytest.mark.parametrize("case", list(RULES), ids=list(RULES))
def test_rule_dnf_reads_only_inputs(case):
    """No transpose, reshape, catenation or Ω survives: reads are of inputs or temporaries."""
    body, _ = RULES[case]
    d = moac.parse(H + body + "\noutput r\n").dnf()
    allowed = {i.name for i in d.program.inputs} | {s.name for s in d.temps}
    for st in d.stmts:
        for name in _reads(st.body):
            assert name in allowed
    stmts = [line for line in str(d).splitlines() if line.startswith(("temp", "output"))]
    for sym in ("⍉", "ρ", "#", "Ω", "△", "▽", "Φ", "γ"):
        assert not any(sym in line for line in stmts), (sym, stmts)


def _reads(e):
    match e:
        case DRead(array=a):
            yield a
        case DOp(args=args):
            for a in args:
                yield from _reads(a)
        case DReduce(body=b):
            yield from _reads(b)
        case DSelect(then=t, other=o):
            yield from _reads(t)
            yield from _reads(o)


@pytest.mark.parametrize("sizes", [{"n": 1, "m": 1, "p": 1, "k": 1}, {"n": 4, "m": 3, "p": 2, "k": 3}])
def test_rules_at_other_sizes(sizes):
    ran = 0
    for case, (body, _) in RULES.items():
        try:
            check_dnf(H + body + "\noutput r\n", sizes, seed=1)
            ran += 1
        except moac.ArgumentError as e:   # a run-time size constraint (e.g. 2 △ x needs n ≥ 2)
            assert "must" in e.message, e.message
    assert ran >= 0.8 * len(RULES)


# --------------------------------------------------------------------------- examples

EXAMPLE_FILES = sorted(EXAMPLES.glob("*.moa"))
EXAMPLE_SIZES = {"n": 5, "m": 3, "p": 2, "d": 3, "dk": 4, "dv": 3, "w": 4, "N": 8, "B": 2, "h": 2, "hq": 4, "hkv": 2}


def test_examples_exist():
    names = {f.name for f in EXAMPLE_FILES}
    assert {"decode.moa", "matmul.moa", "take_reverse.moa", "catenate.moa", "transpose.moa",
            "reshape.moa", "omega.moa", "outer.moa"} <= names


@pytest.mark.parametrize("path", EXAMPLE_FILES, ids=[f.name for f in EXAMPLE_FILES])
def test_example_dnf_matches_interpreter(path):
    prog = moac.load(path)
    assert prog.source.text.startswith("--"), "examples start with a comment header"
    sizes = {s.name: EXAMPLE_SIZES.get(s.name, 2 + k % 2) for k, s in enumerate(prog.core.sizes)}
    for seed in (0, 1):
        check_dnf(prog, sizes, seed=seed)
    assert str(prog.dnf()).startswith(f"-- DNF of {path}")
    from moac.dtypes import BYTES
    assert all(i.dtype in BYTES for i in prog.inputs)


# --------------------------------------------------------------------------- the founding claim

SCORES = """size n, dk
index l < n, j < dk
input q : f32 ⟨dk⟩
input K : f32 ⟨n dk⟩
"""


def _output_line(prog):
    (st,) = [s for s in prog.dnf().stmts if s.role == "output"]
    from moac.dnf import format_stmt
    return format_stmt(st)


def test_transpose_and_omega_give_the_identical_dnf():
    a = moac.parse(SCORES + "s = q +.× ⍉K\noutput s")
    b = moac.parse(SCORES + "s = q (+.× Ω⟨1 1⟩) K\noutput s")
    la, lb = _output_line(a), _output_line(b)
    assert la == lb
    assert la == "⟨l⟩ψs = Σ_{j<dk} ⟨j⟩ψq × ⟨l j⟩ψK    for l < n"
    assert str(a.dnf()) == str(b.dnf())
    assert "⍉" not in str(a.dnf()) and "Ω" not in str(b.dnf())
    assert any(t.rule == "ψ-transpose" for t in a.dnf().trace)
    assert any(t.rule == "ψ-Ω" for t in b.dnf().trace)
    check_dnf(a, {"n": 5, "dk": 3})
    check_dnf(b, {"n": 5, "dk": 3})


def test_decode_matches_hand_numpy():
    prog = moac.load(EXAMPLES / "decode.moa")
    rng = np.random.default_rng(7)
    n, dk, dv = 9, 8, 5
    q, K, V = rng.standard_normal(dk), rng.standard_normal((n, dk)), rng.standard_normal((n, dv))
    out = prog.evaluate(q=q, K=K, V=V)["out"]
    s = K @ q / np.sqrt(dk)
    a = np.exp(s - s.max())
    a /= a.sum()
    np.testing.assert_allclose(out, a @ V, rtol=1e-12)
    np.testing.assert_allclose(evaluate_dnf(prog.dnf(), {"q": q, "K": K, "V": V})["out"], a @ V, rtol=1e-12)


def test_decode_dnf_shape():
    d = moac.load(EXAMPLES / "decode.moa").dnf()
    assert [s.name for s in d.temps] == ["m", "z"]
    assert all(s.vars == () for s in d.temps)        # softmax's max and sum are scalars
    assert [s.name for s in d.stmts if s.role == "output"] == ["out"]
    text = str(d)
    assert "⟨l j⟩ψK" in text and "⍉" not in text
    assert re.search(r"temp +m = max_\{l<n\}", text)
    assert re.search(r"temp +z = Σ_\{l<n\} exp\(", text)


def test_temporaries_are_shared_not_recomputed():
    prog = moac.parse(SCORES + "s = q +.× ⍉K\nt = s − max red s\nu = s × max red s\noutput t, u")
    d = prog.dnf()
    assert len(d.temps) == 1
    check_dnf(prog, {"n": 4, "dk": 3})


def test_temporary_names_do_not_shadow_sizes():
    prog = moac.parse("size m, z\ninput S : f32 ⟨m z⟩\nP = softmax Ω⟨1⟩ S\noutput P")
    names = [s.name for s in prog.dnf().temps]
    assert len(names) == 2 and not {"m", "z"} & set(names)
    check_dnf(prog, {"m": 3, "z": 4})


# --------------------------------------------------------------------------- python-moa defects


def test_psi_bound_is_strict():
    """python-moa accepts index == length; moac rejects it (statically and at run time)."""
    with pytest.raises(moac.ShapeError, match="outside 0 ≤ i < 3"):
        moac.parse("input A : f32 ⟨3 4⟩\nr = ⟨3⟩ ψ A\n")
    with pytest.raises(moac.ShapeError, match="outside 0 ≤ i < 4"):
        moac.parse("input A : f32 ⟨3 4⟩\nr = ⟨2 4⟩ ψ A\n")
    ok = moac.parse("input A : f32 ⟨3 4⟩\nr = ⟨2 3⟩ ψ A\n")
    A = np.arange(12.0).reshape(3, 4)
    assert float(ok.evaluate(A=A)["r"]) == 11.0
    # a symbolic index that can reach the length is guarded at run time
    sym = moac.parse("size n, m\ninput A : f32 ⟨n m⟩\nr = ⟨m⟩ ψ A\noutput r")
    assert "m < n" in str(sym.dnf())
    with pytest.raises(moac.ArgumentError, match="must lie in"):
        sym.evaluate(A=np.zeros((3, 3)))
    np.testing.assert_array_equal(sym.evaluate(A=np.arange(12.0).reshape(4, 3))["r"], [9.0, 10.0, 11.0])


def test_dyadic_transpose_is_not_involutive():
    """⟨1 2 0⟩⍉ on a ⟨2 3 4⟩ array: axis k of A becomes axis v[k] of the result (APL)."""
    prog = moac.parse("input A : f32 ⟨2 3 4⟩\nr = ⟨1 2 0⟩ ⍉ A\noutput r")
    assert prog.core.outputs[0][1].shape == (4, 2, 3)
    A = np.arange(24.0).reshape(2, 3, 4)
    want = np.moveaxis(A, [0, 1, 2], [1, 2, 0])
    assert want.shape == (4, 2, 3)
    np.testing.assert_array_equal(prog.evaluate(A=A)["r"], want)
    np.testing.assert_array_equal(evaluate_dnf(prog.dnf(), {"A": A})["r"], want)
    # element check straight from the definition: r[i0, i1, i2] = A[i1, i2, i0]
    r = prog.evaluate(A=A)["r"]
    for i0, i1, i2 in np.ndindex(4, 2, 3):
        assert r[i0, i1, i2] == A[i1, i2, i0]
    # and it is not its own inverse
    twice = moac.parse("input A : f32 ⟨2 3 4⟩\nr = ⟨1 2 0⟩ ⍉ ⟨1 2 0⟩ ⍉ A\noutput r")
    assert twice.core.outputs[0][1].shape == (3, 4, 2)
    np.testing.assert_array_equal(twice.evaluate(A=A)["r"], np.moveaxis(want, [0, 1, 2], [1, 2, 0]))


def test_matrix_times_vector_inner_product():
    prog = moac.parse("size n, m\ninput A : f32 ⟨n m⟩\ninput v : f32 ⟨m⟩\nr = A +.× v\noutput r")
    assert len(prog.core.outputs[0][1].shape) == 1
    rng = np.random.default_rng(3)
    A, v = rng.standard_normal((4, 3)), rng.standard_normal(3)
    np.testing.assert_allclose(prog.evaluate(A=A, v=v)["r"], A @ v, rtol=1e-12)
    np.testing.assert_allclose(evaluate_dnf(prog.dnf(), {"A": A, "v": v})["r"], A @ v, rtol=1e-12)
    assert "⟨i j⟩ψA × ⟨j⟩ψv" in str(prog.dnf())


def test_interpreter_is_independent_of_the_dnf(monkeypatch):
    """Program.evaluate must not go through the DNF."""
    prog = moac.parse(SCORES + "s = q +.× ⍉K\noutput s")
    import moac.dnf as D
    monkeypatch.setattr(D, "to_dnf", lambda *a, **k: (_ for _ in ()).throw(AssertionError("used DNF")))
    arrays = random_inputs(prog, {"n": 3, "dk": 2})
    np.testing.assert_allclose(prog.evaluate(**arrays)["s"], arrays["K"] @ arrays["q"])


def test_dnf_object_is_printable_and_cached():
    prog = moac.load(EXAMPLES / "matmul.moa")
    assert isinstance(prog.dnf(), DNF)
    assert prog.dnf() is prog.dnf()
    assert "output  ⟨i j⟩ψC = Σ_{k<m} ⟨i k⟩ψA × ⟨k j⟩ψB    for i < n, j < p" in str(prog.dnf())


def test_temporary_inside_a_catenation_branch_reads_in_bounds():
    """A row-wise softmax on one side of # : its temporaries are indexed by the catenated axis,
    and must not read the other side's rows (found by the property test)."""
    prog = moac.parse("size n, m, w\ninput A : f32 ⟨n w⟩\ninput B : f32 ⟨m w⟩\n"
                      "C = A # softmax Ω⟨1⟩ B\noutput C")
    d = prog.dnf()
    assert len(d.temps) == 2
    assert all(isinstance(t.body, DSelect) for t in d.temps)    # guarded like the branch
    check_dnf(prog, {"n": 2, "m": 3, "w": 4})                    # evaluate_dnf checks every read
