"""openmp's explicit SIMD vectors (moac.emit.simd): the jammed score reductions of a KV
group (U tokens × g heads, at least MIN_ACCS accumulators) are printed as 16-float vectors
with one transposed reduction, lane loops without reductions (the weighted sum, a row's
zeroing) as vector loads and stores, the prefetch before such a loop spread over its
iterations; all give the interpreter's values.  Reductions with fewer accumulators, loops
of other forms, f64 programs and the other targets keep their scalar form."""
from __future__ import annotations

import functools
import platform
import shutil
from pathlib import Path

import numpy as np
import pytest

import moac
from moac.emit import simd, simd_tail

from test_host_plan import run, source


def gqa(hq: int, hkv: int) -> dict:
    return {"dk": 128, "dv": 128, "hq": hq, "hkv": hkv}


def vectors(c: str) -> str:
    """The lowered kernels of a C source: the text under the vectors' guard, without the
    `#else` branches that keep the scheduled loops for builds without AVX-512."""
    parts = c.split(simd.OPEN)[1:]
    assert parts, "no lowered kernel"
    return "".join(p.split(simd.ELSE)[0] for p in parts)


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
    assert "transposed reduction: lane i" not in c     # 4 accumulators: fewer than MIN_ACCS
    assert "moac_v16_st(moac_o_part" in c   # its weighted sum: a lane loop without reduction, in vectors
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


def test_the_weighted_sum_and_the_prefetches_are_printed_in_vectors():
    c = moac.parse(source("decode_gqa", "bf16"), "gqa.moa").lower(
        moac.options.Options.make(target="openmp", sizes=gqa(32, 8))).c_source
    # 4 V rows widened once a step, each of the 4 heads' rows of o_part loaded, updated, stored
    assert c.count("moac_v16_ld_bf16(V_ + (") == 5          # 4 tokens a step, 1 in the remainder loop
    assert "moac_v16_st(moac_o_part + (4 * a * " in c
    # each head's update a chain of explicit FMAs, o + p0·w0 + … + p3·w3, not a sum GCC reassociates
    v = vectors(c)
    assert v.count("moac_v16_fma(moac_v16_fma(moac_v16_fma(moac_v16_fma(moac_v16_ld(moac_o_part + (") == 4
    assert "pc0_3, w_3))" in v and " + pc0_0 * w_0" not in v
    # the K and V prefetches of 1024 bytes: 2 lines in each of the 8 vector steps, not a burst of 16
    assert "moac_pf" not in vectors(c)
    assert c.count("+ 8 * j_, 0, 2);") == 1 and c.count("+ 8 * j_ + 64, 0, 2);") == 1
    assert c.count("+ 8 * d_, 0, 2);") == 1 and c.count("+ 8 * d_ + 64, 0, 2);") == 1
    assert "_mm512_cvtepu16_epi32" in c and "__builtin_convertvector" not in c     # the AVX-512 widening


def test_loops_of_other_forms_and_f64_keep_their_scalar_form():
    # the combine's last loop (a select on Z) stays an `omp simd` loop
    c = moac.parse(source("decode_gqa"), "gqa.moa").lower(moac.options.Options.make(target="openmp", sizes=gqa(8, 2))).c_source
    assert "out_[i_ * 128 + d_] = Z != 0.0f ? moac_o_sum[i_ * 128 + d_] / Z : 0.0f;" in c
    f64 = (Path(__file__).resolve().parent.parent / "examples" / "decode.moa").read_text().replace(": f32", ": f64")
    c = moac.parse(f64, "decode64.moa").lower(moac.options.Options.make(target="openmp", sizes={"dk": 128, "dv": 128})).c_source
    assert "double" in c and "moac_v16" not in c


@pytest.mark.parametrize("kv", ["f32", "bf16"])
@pytest.mark.parametrize("ex,sizes,n", [("decode", {"dk": 128, "dv": 128}, 77),
                                        ("decode_mha", {"dk": 64, "dv": 64}, 1000),
                                        ("decode_gqa", {"dk": 128, "dv": 128, "hq": 8, "hkv": 2}, 5)])
def test_vector_weighted_sums_match_the_interpreter(kv, ex, sizes, n):
    prog = moac.parse(source(ex, kv), f"{ex}.moa")
    kern = prog.compile(target="openmp", sizes=sizes)
    assert "moac_v16_st(" in kern.c_source
    run_sizes = {**sizes, "n": n, **({"B": 2, "h": 3} if ex == "decode_mha" else {})}
    got, ref = run(prog, kern, run_sizes)
    tol = 16 * 1.2e-7 * np.sqrt(n + 128) * max(1.0, np.abs(ref).max())
    np.testing.assert_allclose(got, ref, rtol=0, atol=tol)


def test_the_scores_divide_the_vector_of_sums_once():
    c = moac.parse(source("decode_gqa", "bf16"), "gqa.moa").lower(
        moac.options.Options.make(target="openmp", sizes=gqa(32, 8))).c_source
    # ÷ √dk of 16 scores: one vector multiplication by 1/√dk after the transposed reduction,
    # not 16 scalar divisions (nor a vector one)
    assert c.count("moac_v_acc1_sc = moac_v_sum * (1.0f / sqrtf((float)128));") == 1
    assert "(const float *)&moac_v_acc1_sc_moac_p + 12, 16);" in c     # its lanes are what p gets
    assert "acc1 / sqrtf" not in vectors(c) and "acc17 / sqrtf" in vectors(c)    # the remainder loop's scalar sums keep theirs


def test_the_scores_tail_stores_runs_and_keeps_the_maxima_in_a_vector():
    c = moac.parse(source("decode_gqa", "bf16"), "gqa.moa").lower(
        moac.options.Options.make(target="openmp", sizes=gqa(32, 8))).c_source
    # a head's 4 tokens are adjacent in p: one permutation, then 4 stores of 16 bytes
    assert "MOAC_V16_SH(moac_v_acc1_sc, moac_v_acc1_sc, 0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15)" in c
    assert c.count("(const float *)&moac_v_acc1_sc_moac_p + ") == 4
    assert "= sc0_0;" not in vectors(c)
    # the chunk maxima: a vector of running maxima across the token loop, folded after it
    assert "moac_v_acc1_sc_max = moac_v16_max(moac_v_acc1_sc_max, moac_v_acc1_sc);" in c
    assert "mg3 = moac_fmaxf(mg3, moac_v_acc1_sc_max[15]);" in c
    assert "mg0 = moac_fmaxf(mg0, sc0_0);" not in vectors(c)
    assert "mg0 = moac_fmaxf(mg0, sc_0);" in c                # the remainder loop's scalar scores keep theirs


def test_polynomial_index_comparison():
    from moac.emit import cir
    ints = {"t1": cir.Bin("+", cir.Var("t0"), cir.Int(1))}
    a = cir.Bin("+", cir.Bin("*", cir.Bin("+", cir.Var("h"), cir.Int(1)), cir.Var("P")), cir.Var("t1"))
    b = cir.Bin("+", cir.Bin("*", cir.Var("h"), cir.Var("P")), cir.Var("t0"))
    assert simd_tail._sub(simd_tail._poly(a, ints), simd_tail._poly(b, ints)) == {("P",): 1, (): 1}
    div = cir.Bin("/", cir.Var("n"), cir.Var("c"))          # a division stays one opaque factor
    assert simd_tail._poly(cir.Bin("*", cir.Int(2), div), {}) == {("n / c",): 2}


def test_portable_builds_take_the_scheduled_loops_and_agree():
    """Without -march=native (the C that `moac compile -o` writes, built anywhere) a build
    without AVX-512 takes the kernels' loops as scheduled (`#else` of the vectors' guard,
    where GCC vectorises them itself: explicit 64-byte vectors would live in memory there),
    builds under -Wall -Werror and gives the same values."""
    prog = moac.parse(source("decode_gqa", "bf16"), "gqa.moa")
    portable = prog.compile(target="openmp", sizes=gqa(8, 2), native=False, werror=True)
    native = prog.compile(target="openmp", sizes=gqa(8, 2), werror=True)
    text = portable.c_source
    assert "moac_v16_max" in text and text.count(f"#if {simd.GUARD}") == 1 + text.count(simd.ELSE)
    sizes = {**gqa(8, 2), "n": 301}
    got, ref = run(prog, portable, sizes)
    got_native, _ = run(prog, native, sizes)
    tol = 16 * 1.2e-7 * np.sqrt(301 + 128) * max(1.0, np.abs(ref).max())
    np.testing.assert_allclose(got, ref, rtol=0, atol=tol)
    np.testing.assert_allclose(got, got_native, rtol=0, atol=tol)


def test_the_guards_else_branch_is_the_kernel_as_scheduled():
    """Each lowered kernel keeps, under `#else`, exactly the C the target prints without its
    lowering; the helpers (64-byte vector types) exist only under the same guard."""
    import dataclasses
    from moac import driver, targets
    prog = moac.parse(source("decode_gqa", "bf16"), "gqa.moa")
    opts = moac.options.Options.make(target="openmp", sizes=gqa(32, 8))
    c = prog.lower(opts).c_source
    saved = targets.TARGETS["openmp"]
    targets.TARGETS["openmp"] = dataclasses.replace(saved, lower=None)
    try:
        plain = driver.lower(prog._dnf, opts).c_source
    finally:
        targets.TARGETS["openmp"] = saved
    branches = [p.split("\n", 1)[1].rsplit("\n", 1)[0] for p in c.split(simd.ELSE)[1:]
                for p in [p.split("#endif")[0]]]
    assert len(branches) == 2                               # the partials and the combine
    assert all(b.strip() and b in plain for b in branches)
    helper = c[c.index("/* explicit SIMD vectors"):]
    assert helper.index(f"#if {simd.GUARD}") < helper.index("typedef float moac_f32x16")
    last = helper.index("static inline moac_f32x16 moac_v16_tr4")
    assert helper.index("#endif", helper.index("\n}\n", last)) < helper.index("\n\n")   # the guard closes after the helpers


@functools.cache
def _clang_openmp():
    """A clang that builds and links an OpenMP shared library here, or None."""
    import subprocess
    import tempfile
    for cc in ("clang", "clang-19"):
        if shutil.which(cc):
            with tempfile.TemporaryDirectory() as d:
                src = Path(d) / "t.c"
                src.write_text("int f(int n) { int s = 0;\n#pragma omp parallel for reduction(+:s)\n"
                               "for (int i = 0; i < n; ++i) s += i; return s; }\n")
                r = subprocess.run([cc, "-fopenmp", "-fPIC", "-shared", str(src), "-o", str(Path(d) / "t.so")],
                                   capture_output=True)
                if r.returncode == 0:
                    return cc
    return None


@pytest.mark.skipif(_clang_openmp() is None, reason="no clang that builds OpenMP on this machine")
def test_clang_builds_the_vectors_and_agrees():
    """The printed vectors are GCC's and clang's alike (MOAC_V16_SH: clang's
    __builtin_shufflevector, GCC's own before GCC 12; GCC's simd attribute only for GCC): a
    native clang build gives the interpreter's values."""
    cc = _clang_openmp()
    prog = moac.parse(source("decode_gqa", "bf16"), "gqa.moa")
    kern = prog.compile(target="openmp", sizes=gqa(8, 2), cc=cc)
    assert "__builtin_shufflevector(" in kern.c_source and "MOAC_V16_SH(moac_v_acc1_sc, moac_v_acc1_sc," in kern.c_source
    got, ref = run(prog, kern, {**gqa(8, 2), "n": 301})
    np.testing.assert_allclose(got, ref, rtol=0, atol=16 * 1.2e-7 * np.sqrt(301 + 128) * max(1.0, np.abs(ref).max()))


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64") or not shutil.which("gcc"), reason="x86-64 with gcc only")
def test_the_vectors_compile_for_avx512_on_any_x86_host():
    """The lowered branch compiles under -mavx512f -Wall -Werror on any x86-64 machine, with
    or without AVX-512 itself (the value tests run it only where the CPU has AVX-512); the
    object then holds 512-bit instructions."""
    import subprocess
    import tempfile
    c = moac.parse(source("decode_gqa", "bf16"), "gqa.moa").lower(
        moac.options.Options.make(target="openmp", sizes=gqa(32, 8))).c_source
    with tempfile.TemporaryDirectory() as d:
        src, asm = Path(d) / "k.c", Path(d) / "k.s"
        src.write_text(c)
        r = subprocess.run(["gcc", "-O2", "-std=gnu11", "-fopenmp", "-mavx512f", "-Wall", "-Werror", "-S", str(src),
                            "-o", str(asm)], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr[-2000:]
        text = asm.read_text()
    assert "%zmm" in text and "vfmadd" in text
