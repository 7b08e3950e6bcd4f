"""The host plan: on a target whose lanes are SIMD slots (openmp) the split-K Schedule
puts tokens outer and the head dimension innermost, serves a KV group's query heads
with one read of each row, prefetches the token streams and takes its scratch from a
workspace the kernel keeps between calls."""
from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest

import moac
from moac.commands import random_inputs
from moac.jit import build

ROOT = Path(__file__).resolve().parent.parent
GQA = {"dk": 128, "dv": 128, "hq": 8, "hkv": 2}


def source(name: str, kv: str = "f32") -> str:
    text = (ROOT / "examples" / f"{name}.moa").read_text(encoding="utf-8")
    return text.replace("input K : f32", f"input K : {kv}").replace("input V : f32", f"input V : {kv}")


def run(prog, kern, sizes: dict, seed: int = 4):
    arrays, all_sizes = random_inputs(prog, sizes, seed)
    got = kern(**arrays, **{k: v for k, v in all_sizes.items() if k in kern.onf.params})[prog.outputs[0]]
    ref = prog.evaluate(sizes=all_sizes, **arrays)[prog.outputs[0]]
    return got, ref


@pytest.mark.parametrize("kv", ["f32", "bf16", "f16"])
@pytest.mark.parametrize("n", [1, 3, 37, 1000, 2053])    # remainders of the 4-token loops and of the chunks
def test_host_plan_matches_the_interpreter(kv, n):
    prog = moac.parse(source("decode_gqa", kv), "gqa.moa")
    kern = prog.compile(target="openmp", sizes=GQA)
    got, ref = run(prog, kern, {**GQA, "n": n})
    tol = 16 * 1.2e-7 * np.sqrt(n + 128) * max(1.0, np.abs(ref).max())
    np.testing.assert_allclose(got, ref, rtol=0, atol=tol)


def test_host_plan_schedule_says_what_it_did():
    prog = moac.parse(source("decode_gqa", "bf16"), "gqa.moa")
    onf = prog.onf(target="openmp", sizes=GQA)
    notes = "\n".join(onf.notes)
    assert "score loads not packed: the target's lanes are SIMD slots" in notes
    assert "weighted sum: tokens outer (4 per iteration) and d innermost in SIMD lanes" in notes
    assert "share one gang: every such row is loaded once and used 4 times" in notes
    src = prog.c_source(target="openmp", sizes=GQA)
    assert "moac_word" not in src                             # no packed words on SIMD lanes
    assert "#pragma omp simd\n" in src and "reduction(" not in src
    # the K and V streams prefetched 16 KB ahead (64 rows of 256 bytes in bf16)
    assert "__builtin_prefetch((const char *)&K_[" in src and "(t0 + 64)" in src
    assert "__builtin_prefetch((const char *)&V_[" in src and "(u0 + 64)" in src
    # the same DNF on a GPU target keeps its lane mapping and has no prefetches
    acc = prog.c_source(target="openacc", sizes=GQA)
    assert "__builtin_prefetch" not in acc and "moac_word" in acc


def test_host_plan_counts_ignore_prefetches():
    """A prefetch moves no value: the openmp Schedule's traffic is the minimum (K and V
    once per KV head: 2·2·128·4 bytes per token) plus a split overhead per chunk only; its
    accumulators (o_part, read and written in L1) count once each way, so the overhead is
    one o_part row per head more than openacc's, plus the combine's sums o_sum (one row per
    query head, written and read once: the combine's lanes are over d, not the partials)."""
    import sympy as sp
    prog = moac.parse(source("decode_gqa"), "gqa.moa")
    omp, acc = (prog.onf(target=t, sizes=GQA) for t in ("openmp", "openacc"))
    assert omp.compulsory_minimal and omp.minimum == acc.minimum
    n = sp.Symbol("n", integer=True, nonnegative=True)
    over = sp.expand(omp.traffic - omp.minimum)
    assert over.free_symbols - {n} and over.coeff(n) == 0          # nothing per token beyond the minimum
    chunks = [a for a in over.atoms(sp.ceiling)]
    o_sum = 2 * GQA["hq"] * 128 * 4
    assert len(chunks) == 1 and sp.expand(omp.traffic - acc.traffic) == 8 * 128 * 4 * chunks[0] + o_sum


def test_workspace_is_kept_and_grown():
    prog = moac.parse(source("decode_gqa"), "gqa.moa")
    kern = prog.compile(target="openmp", sizes=GQA)
    assert kern.signature.workspace and "_with_workspace" in kern.c_source
    for n in (16, 5000, 40):                 # a larger call grows the buffer, a smaller reuses it
        got, ref = run(prog, kern, {**GQA, "n": n}, seed=n)
        np.testing.assert_allclose(got, ref, rtol=0, atol=1e-5 * max(1.0, np.abs(ref).max()))
    assert kern._ws.buf.size >= int(kern._ws_bytes(5000))


def test_workspace_is_per_thread():
    """Concurrent calls from two Python threads never share scratch memory."""
    prog = moac.parse(source("decode_gqa"), "gqa.moa")
    kern = prog.compile(target="openmp", sizes=GQA)
    cases = [random_inputs(prog, {**GQA, "n": 3000}, s)[0] for s in (1, 2)]
    want = [kern(**a)["out"] for a in cases]
    errors = []

    def worker(i):
        for _ in range(20):
            if not np.array_equal(kern(**cases[i])["out"], want[i]):
                errors.append(i)
    threads = [threading.Thread(target=worker, args=(i,)) for i in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


def test_c_entry_without_workspace_allocates_its_own():
    """The plain entry (the one a C caller links) still works: it allocates scratch itself."""
    import cffi
    prog = moac.parse(source("decode"), "decode.moa")
    kern = prog.compile(target="openmp", sizes={"dk": 16, "dv": 16})
    arrays, _ = random_inputs(prog, {"dk": 16, "dv": 16, "n": 100}, 0)
    ffi = cffi.FFI()
    ffi.cdef("int moac_decode(const float *q, const float *K, const float *V, float *out, int64_t n);")
    lib = ffi.dlopen(str(kern.library))
    out = np.empty(16, np.float32)
    ptr = lambda a: ffi.cast("float *", a.ctypes.data)          # noqa: E731
    assert lib.moac_decode(ptr(arrays["q"]), ptr(arrays["K"]), ptr(arrays["V"]), ptr(out), 100) == 0
    np.testing.assert_array_equal(out, kern(**arrays)["out"])


def test_native_builds_are_keyed_by_the_cpu(monkeypatch):
    assert "-march=native" in build.compile_flags("openmp", native=True)
    assert "-march=native" not in build.compile_flags("openmp")
    assert "-march=native" not in build.compile_flags("c", native=True)       # the portable reference
    prog = moac.parse(source("decode"), "decode.moa")
    assert "-march=native" in prog.compile(target="openmp", native=True).flags
    monkeypatch.setenv("MOAC_NATIVE", "0")
    assert "-march=native" not in moac.parse(source("decode"), "d2.moa").compile(target="openmp").flags
    arch = build.native_arch("gcc")
    assert arch and arch != "unknown"


def test_inline_fmax_and_fmin_follow_c_rule_for_nan_and_infinities():
    """openmp calls moac_fmaxf & co. (selects GCC inlines) where libm's fmaxf would be a
    call; they must return what C's fmax/fmin return: the other operand where one is NaN,
    NaN only where both are."""
    import math
    import cffi
    from moac.emit.codegen import OPTIONAL_HELPERS
    names = ("moac_fmaxf", "moac_fminf", "moac_fmax", "moac_fmin")
    src = "#include <math.h>\n" + "\n".join(OPTIONAL_HELPERS[n] for n in names) + "\n" + "\n".join(
        f"{t} t_{n}({t} a, {t} b) {{ return {n}(a, b); }}\n{t} c_{n}({t} a, {t} b) {{ return {n[5:]}(a, b); }}"
        for n in names for t in ["float" if n.endswith("f") else "double"])
    lib_path = build.build_library(src, build.compile_flags("openmp", werror=True, native=True))
    ffi = cffi.FFI()
    ffi.cdef("\n".join(f"{t} t_{n}({t}, {t}); {t} c_{n}({t}, {t});"
                       for n in names for t in ["float" if n.endswith("f") else "double"]))
    lib = ffi.dlopen(str(lib_path))
    vals = [0.0, 1.5, -2.25, math.inf, -math.inf, math.nan, 3e38, -1e-40]
    for n in names:
        for a in vals:
            for b in vals:
                got, want = getattr(lib, f"t_{n}")(a, b), getattr(lib, f"c_{n}")(a, b)
                assert (math.isnan(got) and math.isnan(want)) or got == want, (n, a, b, got, want)
    c = moac.parse(source("decode_gqa"), "gqa.moa").c_source(target="openmp", sizes=GQA)
    assert "moac_fmaxf(" in c and " fmaxf(" not in c and "(fmaxf(" not in c


def test_host_combine_weights_each_partial_once_with_lanes_over_d():
    """On SIMD lanes the combine is one gang per frame, the partials in sequence and d in
    the lanes: exp(m_g − M) once per partial (the GPU's combine, lanes over the partials
    and 8 outputs per gang, computed it once per block of 8 outputs)."""
    prog = moac.parse(source("decode_gqa"), "gqa.moa")
    onf = prog.onf(target="openmp", sizes=GQA)
    assert any("combine: one gang per frame" in n for n in onf.notes)
    src = prog.c_source(target="openmp", sizes=GQA)
    comb = src[src.index("k2_combine"):].split("#endif")[0]
    for branch in comb.split("#else"):                # explicit vectors, and the loops as scheduled
        assert branch.count("moac_expf(") == 1 and "moac_o_sum" in branch and "db" not in branch
    acc = prog.c_source(target="openacc", sizes=GQA)
    assert "moac_o_sum" not in acc
