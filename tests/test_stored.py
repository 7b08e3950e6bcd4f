"""No silent recomputation (#11 item 5): a named array read under a reduction it does not
depend on is stored once when the counts say so, the DNF dump says why, and `moac onf`
sets the kernels' flops against the source program's operation count, warning when they
outgrow it.  The acceptance case is a fused decode layer: projections of x by Wq, Wk and
Wv, the append to the cache, attention (examples/decode_layer.moa)."""
from __future__ import annotations

import numpy as np
import pytest
import sympy as sp

import moac
from moac.commands import random_inputs, reduction_length, tolerance
from moac.dnf import rules
from conftest import EXAMPLES

LAYER = (EXAMPLES / "decode_layer.moa").read_text(encoding="utf-8")
SIZES = dict(N=8192, n=4096, dm=4096, dk=128)


def hand_count(N, n, dm, dk) -> int:
    """Three mat-vecs (2·dk·dm each), the scores and the weighted sum over n + 1 tokens
    (2·dk each), and the softmax's five operations per token (− m, exp, max, Σ, ÷ z)."""
    return 3 * 2 * dk * dm + 2 * 2 * dk * (n + 1) + 5 * (n + 1)


def onf_flops(prog, **opts) -> float:
    onf = prog.onf(**opts)
    env = {sp.Symbol(k, integer=True, nonnegative=True): v for k, v in SIZES.items()}
    f = sp.sympify(onf.flops).xreplace(env)
    return float(f.xreplace({s: 64 for s in f.free_symbols}))      # the run-time chunk


def test_the_projections_are_stored_once_and_the_dump_says_why():
    text = str(moac.parse(LAYER, "layer.moa").dnf())
    for name, W in (("q", "Wq"), ("k2", "Wk"), ("v", "Wv")):
        line = next(s for s in text.splitlines() if s.startswith(f"temp    ⟨i⟩ψ{name} ="))
        assert f"= Σ_{{j<dm}} ⟨i j⟩ψ{W} × ⟨j⟩ψx    for i < dk    -- stored: inlined, each element would be " \
               "recomputed for the n + 1 steps of a reduction it does not depend on" in line
    assert "update  ⟨i j⟩ψKc = (⟨i j⟩ψKc if i < n else ⟨j⟩ψk2)" in text
    trace = moac.dnf.format_trace(moac.parse(LAYER, "layer.moa").dnf())
    assert trace.count("[store-named]") == 3


def test_the_layer_flops_are_within_twice_the_hand_count():
    prog = moac.parse(LAYER, "layer.moa")
    onf = prog.onf()
    assert onf.schedule.plan == "split-K"                      # the projections run first, then the contraction
    ratio = onf_flops(prog) / hand_count(**SIZES)
    assert 0.5 <= ratio <= 2.0, ratio
    assert "⚠ repeated work" not in str(onf)
    assert "source ops     " in str(onf)


def test_without_storing_the_recomputation_shows(monkeypatch):
    monkeypatch.setattr(rules, "_stored", lambda ctx, node, idx: None)
    prog = moac.parse(LAYER, "layer.moa")
    assert onf_flops(prog) > 100 * hand_count(**SIZES)         # a million-fold at serving shapes, as reported
    assert "⚠ repeated work: the kernels' flops have a term dk·dm·n that no term of the program's operations " \
        "bounds" in str(prog.onf())


@pytest.mark.parametrize("target", ["openmp", "openacc"])
@pytest.mark.parametrize("n", [0, 20])
def test_the_layer_agrees_with_the_interpreter(target, n):
    prog = moac.parse(LAYER, "layer.moa")
    arrays, sizes = random_inputs(prog, dict(N=24, n=n, dm=9, dk=8), n)
    ref = prog.evaluate(sizes=sizes, **{k: v.copy() for k, v in arrays.items()})
    kern = prog.compile(target=target, werror=True)
    got = kern(n=n, **arrays)
    tol = tolerance(kern.signature.ctype, reduction_length(kern.onf, sizes))
    np.testing.assert_allclose(got["out"], ref["out"], rtol=0, atol=tol * max(1.0, float(np.abs(ref["out"]).max())))
    np.testing.assert_allclose(arrays["Kc"][:n + 1], np.asarray(ref["Kc"])[:n + 1], rtol=0, atol=1e-4)


def test_the_counts_decline_where_storing_costs_more():
    """q (dk elements, 2·dm operations each) read at one element under a reduction of two
    steps: inlined 4·dm, stored 2·dk·dm + 2, so it stays inline."""
    src = ("size dm, dk\ninput Wq : f32 ⟨dk dm⟩\ninput x : f32 ⟨dm⟩\nq = Wq +.× x\n"
           "y = + red (⟨1 1⟩ ∘.× (⟨0⟩ ψ q))\noutput y\n")
    text = str(moac.parse(src, "d.moa").dnf())
    assert "temp" not in text and "stored" not in text
    assert "output  y = Σ_{i<2} (1 if i = 0 else 1) × (Σ_{j<dm} ⟨0 j⟩ψWq × ⟨j⟩ψx)" in text


def test_softmax_weights_across_the_output_axis_are_the_plans_business():
    """The weights exp(s − m) ÷ z of decode are recomputed for every output element d in the
    DNF; the split-K plan keeps them per chunk on chip, so the DNF does not store them."""
    for name in ("decode", "decode_gqa", "decode_step", "attention_forward"):
        assert "stored" not in str(moac.load(f"examples/{name}.moa").dnf())
