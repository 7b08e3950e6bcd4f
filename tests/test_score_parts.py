"""The split-K score pass over tokens × parts of d (moac.schedule.plans.score_parts): where
the plan takes it and why not, the parts it derives, its numerics at chunk ends, and its
counts against the lanes-over-d pass it replaces."""
from __future__ import annotations

import numpy as np
import pytest
import sympy as sp

import moac
from moac.commands import random_inputs
from test_back_packing import check, gqa

GQA = {"dk": 128, "dv": 128, "hq": 32, "hkv": 8}


def notes(prog, sizes, **kw) -> str:
    return "\n".join(prog.onf(sizes=sizes, **kw).notes)


@pytest.mark.parametrize("kv, parts, tokens, words, u", [
    ("bf16", 8, 4, 4, 2),      # 4 heads × 128 q elements ÷ 64 registers: 8 lanes a token; 8 words in flight
    ("f32", 8, 4, 8, 1),       # the same lanes, 2 f32 a word: 8 words a lane a token already
    ("f8e4m3", 8, 4, 4, 4),    # one-byte K: 4-byte words, a sector needs 8 lanes; 2 8-byte words a token
])
def test_gqa_takes_the_pass_with_the_derived_parts(kv, parts, tokens, words, u):
    text = notes(moac.parse(gqa(kv), "gqa.moa"), GQA)
    assert (f"score pass: the lanes take {tokens} tokens × {parts} parts of j" in text
            and f"{u} token{'s' if u > 1 else ''} a lane at a time" in text), text
    onf = str(moac.parse(gqa(kv), "gqa.moa").onf(sizes=GQA))
    assert f"cp < {parts} lanes of a token, s < {words}" in onf
    assert "pass 1b: token l = g·chunk + c: the sum of its" in onf


def test_one_f32_head_keeps_the_lanes_over_d_and_says_why():
    text = notes(moac.load("examples/decode.moa"), {"dk": 128, "dv": 128})
    assert "score pass: lanes over j, a vector reduction per score (1 head a row and 2 packed words a lane" in text
    assert "score pass: 4 tokens per vector pass" in text


def test_bf16_mha_takes_it_an_unroll_keeps_the_lanes_over_d():
    prog = moac.parse(gqa("bf16"), "gqa.moa")
    sizes = {"dk": 128, "dv": 128, "hq": 8, "hkv": 8}
    assert "the lanes take 8 tokens × 4 parts of j" in notes(prog, sizes)
    text = str(prog.onf(sizes=GQA, unroll=8))
    assert "no vector reduction per score" not in text and "score partials" not in text
    assert "j ∈ ⟨128⟩ → ⟨v k⟩: score reduction, vector × packed" in text


@pytest.mark.parametrize("target", ["c", "openacc"])
@pytest.mark.parametrize("n", [1, 7, 77, 1000])
def test_chunk_ends_match_the_interpreter(target, n):
    """The lanes' last tokens (a chunk not a multiple of the 8 tokens of a step, fewer
    tokens than lanes) against the interpreter."""
    prog = moac.parse(gqa("bf16"), "gqa.moa")
    check(prog, {**GQA, "n": n}, target)


def test_counts_are_the_dot_products_plus_the_partials_sums():
    """Flops: the same multiply-adds as the lanes-over-d pass, plus P − 1 adds of a token's
    partials per head; DRAM traffic unchanged (p_part is a gang buffer, like p)."""
    prog = moac.parse(gqa("bf16"), "gqa.moa")
    a, b = prog.onf(sizes=GQA), prog.onf(sizes=GQA, unroll=8)
    n = sp.Symbol("n", integer=True, nonnegative=True)
    assert sp.expand(a.counts.traffic - b.counts.traffic) == 0
    assert sp.expand(a.counts.flops - b.counts.flops) == 7 * 32 * n


def test_cuda_keeps_one_gang_buffer_on_chip_and_p_part_in_device_memory():
    src = moac.parse(gqa("f32"), "gqa.moa").c_source(target="cuda", sizes=GQA)
    assert "float *__restrict__ moac_pp" in src and "moac_sword(moac_pp" in src
    assert "__ldg" not in src.split("moac_sword(const void *p")[1].split("\n")[0]


def test_the_partials_are_read_back_in_words_on_openacc():
    prog = moac.parse(gqa("bf16"), "gqa.moa")
    src = prog.c_source(target="openacc", sizes=GQA)
    assert src.count("moac_sword(moac_pp,") >= 4 * 4        # 8 floats a token and head: 4 words
    arrays, sizes = random_inputs(prog, {**GQA, "n": 300}, 5)
    kern = prog.compile(target="openacc", sizes=GQA)
    got = kern(**arrays, n=sizes["n"])["out"]
    ref = prog.evaluate(sizes=sizes, **arrays)["out"]
    assert np.allclose(got, ref, rtol=1e-5, atol=1e-6)


def test_the_onf_is_the_same_for_openacc_and_cuda_where_the_pass_is_taken():
    """The mapping is derived once: the pass is the program's, not the target's."""
    for kv in ("bf16", "f32"):
        prog = moac.parse(gqa(kv), "gqa.moa")
        a, b = (str(prog.onf(target=t, sizes=GQA)) for t in ("openacc", "cuda"))
        assert "no vector reduction per score" in a
        assert [ln for ln in a.splitlines() if "openacc" not in ln] == [ln for ln in b.splitlines() if "cuda" not in ln]


def test_one_f32_head_at_d_64_takes_the_pass():
    """d = 64 of f32: one packed word a lane per token (W = 1), so one head (M = 1) is enough."""
    text = notes(moac.load("examples/decode.moa"), {"dk": 64, "dv": 64})
    assert "score pass: the lanes take 8 tokens × 4 parts of j" in text, text
