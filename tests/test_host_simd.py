"""openmp's explicit SIMD vectors (moac.emit.simd): the jammed score reductions of a KV
group (U tokens × g heads, at least MIN_ACCS accumulators) are printed as 16-float vectors
with one transposed reduction, and give the interpreter's values; loops with fewer
accumulators, and the other targets, keep their scalar form."""
from __future__ import annotations

import numpy as np
import pytest

import moac
from moac.emit import simd

from test_host_plan import run, source


def gqa(hq: int, hkv: int) -> dict:
    return {"dk": 128, "dv": 128, "hq": hq, "hkv": hkv}


@pytest.mark.parametrize("hq,accs", [(4, 8), (8, 16), (16, 32)])     # g = 2, 4, 8 heads × 4 tokens
def test_gqa_scores_are_printed_in_vectors(hq, accs):
    art = moac.parse(source("decode_gqa"), "gqa.moa").lower(moac.options.Options.make(target="openmp", sizes=gqa(hq, 2)))
    c = art.c_source
    assert "typedef float moac_f32x16" in c and "moac_v16_tr4(" in c
    assert f"({accs} accumulators)" in c
    assert ("moac_v_sum1" in c) == (accs > simd.W)       # one transposed reduction per 16 accumulators


def test_few_accumulators_and_other_targets_keep_the_scalar_loop():
    prog = moac.load("examples/decode_mha.moa")
    c = prog.lower(moac.options.Options.make(target="openmp", sizes={"dk": 128, "dv": 128})).c_source
    assert "moac_v16" not in c              # 4 accumulators: fewer than MIN_ACCS
    g = moac.parse(source("decode_gqa"), "gqa.moa")
    for t in ("c", "openacc"):
        assert "moac_v16" not in g.lower(moac.options.Options.make(target=t, sizes=gqa(8, 2))).c_source


@pytest.mark.parametrize("kv", ["f32", "bf16"])
@pytest.mark.parametrize("hq,n", [(4, 37), (16, 1000), (16, 3)])
def test_vector_scores_match_the_interpreter(kv, hq, n):
    prog = moac.parse(source("decode_gqa", kv), "gqa.moa")
    kern = prog.compile(target="openmp", sizes=gqa(hq, 2))
    assert "moac_v16_tr" in kern.c_source
    got, ref = run(prog, kern, {**gqa(hq, 2), "n": n})
    tol = 16 * 1.2e-7 * np.sqrt(n + 128) * max(1.0, np.abs(ref).max())
    np.testing.assert_allclose(got, ref, rtol=0, atol=tol)


def test_a_nan_in_k_still_gives_nan():
    prog = moac.parse(source("decode_gqa"), "gqa.moa")
    kern = prog.compile(target="openmp", sizes=gqa(8, 2))
    from moac.commands import random_inputs
    arrays, sizes = random_inputs(prog, {**gqa(8, 2), "n": 64}, 3)
    arrays["K"] = arrays["K"].copy()
    arrays["K"][1, 17, 5] = np.nan
    out = kern(**arrays, n=64)["out"]
    assert np.isnan(out[4:8]).all() and not np.isnan(out[:4]).any()
