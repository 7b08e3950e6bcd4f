"""Normal forms that read like the literature (#11 item 6): index expressions in MoA
notation, constant factors out of sums, tiny reductions in one gang, and a scalar made of
reductions reduced in parallel rather than by one thread."""
from __future__ import annotations

import numpy as np
import pytest
import sympy as sp

import moac
from conftest import EXAMPLES, check_dnf
from moac.front.core import show_expr

n, c, i, j = sp.symbols("n c i j", integer=True, nonnegative=True)


@pytest.mark.parametrize("expr, text", [
    (sp.floor(i / c), "⌊i÷c⌋"),
    (sp.floor((i * n + j) / c), "⌊(i·n + j)÷c⌋"),
    (sp.ceiling((n + 1) / c), "⌈(n + 1)÷c⌉"),
    (sp.Mod(i, 2), "(i mod 2)"),
    (sp.Mod(i * n + j, c), "((i·n + j) mod c)"),
    (sp.Min(n, c) + 1, "min(c, n) + 1"),
    (sp.Max(0, n - c), "max(0, -c + n)"),
    (3 * sp.floor(i / 2), "3·⌊i÷2⌋"),
    (n * c**2, "c^2·n"),
])
def test_index_expressions_print_in_moa_notation(expr, text):
    assert show_expr(expr) == text


def test_no_sympy_function_name_leaks_into_the_dumps():
    """The examples whose indices hold a floor, a remainder, a minimum or a maximum."""
    for name in ("decode_gqa", "decode_paged", "decode_sinks", "decode_window", "reshape"):
        path = EXAMPLES / f"{name}.moa"
        prog = moac.load(path)
        for text in (str(prog.dnf()), str(prog.onf())):
            for word in ("floor(", "Mod(", "Min(", "Max(", "ceiling("):
                assert word not in text, (path.name, word)


SRC = ("size n\ninput x : f32 ⟨n⟩\ny = + red (x × 3)\nz = + red (3 × x ÷ (√(n + 1)))\n"
       "u = + red (x ÷ n)\noutput y, z, u\n")


def test_constant_factors_come_out_of_sums():
    d = moac.parse(SRC, "f.moa").dnf()
    text = str(d)
    assert "output  y = (Σ_{i<n} ⟨i⟩ψx) × 3" in text
    assert "output  z = (Σ_{i<n} ⟨i⟩ψx) × 3 ÷ √(n + 1)" in text
    assert "output  u = Σ_{i<n} ⟨i⟩ψx ÷ n" in text          # n may be 0: ÷ n stays inside
    assert sum(t.rule == "Σ-factor" for t in d.trace) == 2


@pytest.mark.parametrize("size", [0, 1, 5, 3000])
def test_factored_sums_agree(size):
    check_dnf(SRC, {"n": size})
    prog = moac.parse(SRC, "f.moa")
    x = np.random.default_rng(size).standard_normal(size).astype(np.float32)
    ref = prog.evaluate(x=x)
    for target in ("c", "openmp", "openacc"):
        got = prog.compile(target=target, werror=True)(x=x)
        for k in ("y", "z", "u"):
            np.testing.assert_allclose(got[k], ref[k], rtol=1e-4, atol=1e-4 * max(1, size))


def test_a_factor_that_reads_data_stays_inside():
    """Only constants and sizes come out: a softmax's ÷ z stays where the split-K plan
    looks for it, and a factor that reads an input is not a constant."""
    text = str(moac.parse("size n\ninput x : f32 ⟨n⟩\ninput w : f32 ⟨n⟩\ny = + red (x × w)\noutput y\n",
                          "f.moa").dnf())
    assert "output  y = Σ_{i<n} ⟨i⟩ψx × ⟨i⟩ψw" in text
    assert "÷ z × ⟨l d⟩ψV" in str(moac.load(EXAMPLES / "decode.moa").dnf())


def test_a_tiny_reduction_runs_in_one_gang():
    onf = moac.parse("input x : f32 ⟨4⟩\ny = + red x\noutput y\n", "t.moa").onf()
    (k,) = onf.counts.kernels
    assert [(lp.level, str(lp.extent)) for lp in k.loops] == [("gang", "1"), ("vector", "4")]
    assert "one gang: the extent 4 ≤ 4096 is too small to split" in str(onf)
    big = moac.parse("size n\ninput x : f32 ⟨n⟩\ny = + red x\noutput y\n", "t.moa")
    assert len(big.onf().counts.kernels) == 2                              # partials + combine
    assert len(big.onf(sizes={"n": 4096}).counts.kernels) == 1             # fixed and small: one gang
    assert len(big.onf(sizes={"n": 4097}).counts.kernels) == 2


def test_a_scalar_of_reductions_is_reduced_in_parallel():
    onf = moac.parse(SRC, "f.moa").onf()
    names = [k.name for k in onf.counts.kernels]
    assert names[:6] == ["k1_y_r1_partials", "k2_y_r1_combine", "k3_y", "k4_z_r1_partials", "k5_z_r1_combine",
                         "k6_z"]
    assert any(lp.level == "gang" and str(lp.extent) == "256" for lp in onf.counts.kernels[0].loops)
