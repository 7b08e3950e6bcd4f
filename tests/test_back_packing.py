"""Packed loads from the register-stride lifting d = w·(32·r + v) + k: which axes are
packed and why not, the coalescing verdict at the packed granularity, numerics of packed
kernels for every storage dtype, and the alignment they need."""
from __future__ import annotations

import re

from pathlib import Path

import numpy as np
import pytest

import moac
from moac import dtypes
from moac.commands import random_inputs

ROOT = Path(__file__).resolve().parent.parent


def gqa(kv: str, q: str = "f32") -> str:
    text = (ROOT / "examples/decode_gqa.moa").read_text(encoding="utf-8")
    return (text.replace("input Q : f32", f"input Q : {q}").replace("input K : f32", f"input K : {kv}")
            .replace("input V : f32", f"input V : {kv}"))


def check(prog, sizes: dict, target: str, pack: str = "auto", seed: int = 3):
    kern = prog.compile(target=target, sizes=sizes, pack=pack)
    arrays, all_sizes = random_inputs(prog, sizes, seed)
    got = kern(**arrays, **{k: v for k, v in all_sizes.items() if k in kern.onf.params})["out"]
    ref = prog.evaluate(sizes=all_sizes, **arrays)["out"]
    L = all_sizes.get("n", 13) + all_sizes.get("dk", 13)
    np.testing.assert_allclose(got, ref, rtol=0, atol=16 * 1.2e-7 * np.sqrt(L) * max(1.0, np.abs(ref).max()))
    return kern


@pytest.mark.parametrize("kv", ["f32", "bf16", "f16", "f8e4m3", "f8e5m2"])
@pytest.mark.parametrize("d", [64, 128, 256])
@pytest.mark.parametrize("target", ["c", "openacc"])
def test_packed_gqa_matches_the_interpreter(kv, d, target):
    prog = moac.parse(gqa(kv), "gqa.moa")
    sizes = {"dk": d, "dv": d, "hq": 8, "hkv": 2}
    kern = check(prog, {**sizes}, target)
    esize = dtypes.BYTES[kv]
    # the widest run per lane the 32 lanes tile: an 8-byte word, else one 4-byte word
    w = next((w for w in (8 // esize, 4 // esize) if w >= 2 and d % (32 * w) == 0), None)
    widths = {a.packed for k in kern.onf.kernels for a in k.accesses if a.array in ("K", "V")}
    assert widths == ({w} if w else {1})            # d = 64 of bf16: 2 per lane, one 4-byte word
    load = "moac_word" if w and w * esize == 8 else "moac_word4"
    assert (f"{load}(K_" in kern.c_source and f"{load}(V_" in kern.c_source) == bool(w)
    if w and esize == 1:       # one-byte elements widened two at a time, from the 16 bits of each pair
        pairs = w // 2
        assert re.search(rf"moac_{kv}x2_to_f32\(\(uint16_t\)k\w*_", kern.c_source)
        shifts = {int(x) for x in re.findall(rf"moac_{kv}x2_to_f32\(\(uint16_t\)\(k\w+ >> (\d+)\), [01]\)",
                                             kern.c_source)}
        assert shifts == {16 * p for p in range(1, pairs)}        # every pair of each word, none past it


def test_packing_off_gives_the_same_result_and_no_words():
    prog = moac.parse(gqa("bf16"), "gqa.moa")
    sizes = {"dk": 128, "dv": 128, "hq": 8, "hkv": 2}
    a = check(prog, sizes, "c", pack="auto")
    b = check(prog, sizes, "c", pack="none")
    assert "moac_word" in a.c_source and "moac_word" not in b.c_source
    notes = b.onf.notes
    assert "score loads not packed: packing off (--pack none)" in notes


def test_onf_states_the_packed_verdict_and_the_lifting():
    onf = moac.parse(gqa("bf16"), "gqa.moa").onf(sizes={"dk": 128, "dv": 128, "hq": 32, "hkv": 8})
    text = str(onf)
    # the score pass: 4 heads a K row, 1 packed word a lane per token in lanes over d, so the
    # lanes take tokens × parts of d (plans/score_parts): 8 lanes a token, q in registers
    assert "j ∈ ⟨128⟩ → ⟨s cp e⟩: score partials: j = 4·(8·s + cp) + e, cp < 8 lanes of a token, s < 4" in text
    assert "no vector reduction per score" in text
    unrolled = str(moac.parse(gqa("bf16"), "gqa.moa").onf(sizes={"dk": 128, "dv": 128, "hq": 32, "hkv": 8}, unroll=8))
    assert "j ∈ ⟨128⟩ → ⟨v k⟩: score reduction, vector × packed: j = 4·v + k, 4 elements per lane" in unrolled
    assert "d ∈ ⟨128⟩ → ⟨v k⟩: weighted sum, registers × vector × packed" in text
    k_reads = [a for a in onf.kernels[0].accesses if a.array == "K"]
    assert k_reads and all(a.packed == 4 and a.diff == 4 for a in k_reads)
    assert all(a.verdict.startswith("coalesced (packed: 4 elements per lane") for a in k_reads)
    # the count still equals the minimum for inputs and outputs
    assert onf.compulsory_minimal


@pytest.mark.parametrize("sizes, reason", [
    ({}, "score loads not packed: the extent dk of j is not fixed at compile time"),
    ({"dk": 80, "dv": 80}, "score loads not packed: j < 80 is not 32·4·R or 32·2·R with R ≤ 8"),
])
def test_packing_says_why_not(sizes, reason):
    onf = moac.parse(gqa("bf16"), "gqa.moa").onf(sizes=sizes)
    assert reason in onf.notes


def test_one_byte_elements_say_why_not():
    onf = moac.parse(gqa("f8e4m3"), "gqa.moa").onf(sizes={"dk": 96, "dv": 96})
    assert "score loads not packed: j < 96 is not 32·8·R or 32·4·R with R ≤ 8 (1-byte elements pack 4 to a word)" \
        in onf.notes, onf.notes
    onf = moac.parse(gqa("f8e4m3"), "gqa.moa").onf(sizes={"dk": 128, "dv": 128})     # 4 per lane, 4-byte words
    assert not any("not packed" in n for n in onf.notes), onf.notes


def test_f64_is_not_packed():
    text = (ROOT / "examples/decode.moa").read_text(encoding="utf-8").replace("f32", "f64")
    onf = moac.parse(text, "d.moa").onf(sizes={"dk": 128, "dv": 128})
    assert "score loads not packed: 8-byte elements are one word each already" in onf.notes


def test_misaligned_input_is_refused():
    prog = moac.parse(gqa("bf16"), "gqa.moa")
    kern = prog.compile(target="c", sizes={"dk": 128, "dv": 128, "hq": 8, "hkv": 2})
    arrays, _ = random_inputs(prog, {"dk": 128, "dv": 128, "hq": 8, "hkv": 2, "n": 5}, 0)
    K = arrays["K"]
    buf = np.empty(K.size + 1, dtype=K.dtype)
    shifted = buf[1:].reshape(K.shape)            # 2 bytes off an aligned address
    shifted[...] = K
    assert shifted.ctypes.data % 8 != 0
    with pytest.raises(moac.ArgumentError, match="input 'K' must start at an 8-byte aligned address"):
        kern(**{**arrays, "K": shifted})
    out = kern(**arrays)["out"]                    # and an aligned copy runs
    assert np.isfinite(out).all()
    assert dtypes.accepts("bf16", shifted)


def test_each_reduction_checks_its_own_streams():
    """The appended row's score (decode_step's k) is a second reduction over j: with k in
    bf16 beside a f32 cache it cannot take the cache's packing (2 per lane), so it is
    lowered plainly, and the results still match."""
    text = (ROOT / "examples/decode_step.moa").read_text(encoding="utf-8").replace("input k : f32", "input k : bf16")
    prog = moac.parse(text, "step.moa")
    sizes = {"dk": 128, "dv": 128, "N": 20, "n": 7}
    kern = prog.compile(target="c", sizes={"dk": 128, "dv": 128})
    assert "moac_word(Kc_" in kern.c_source and "moac_word(k_" not in kern.c_source
    arrays, _ = random_inputs(prog, sizes, 1)
    ref = prog.evaluate(sizes={"N": 20, "n": 7, "dk": 128, "dv": 128}, **{k: v.copy() for k, v in arrays.items()})
    got = kern(**{k: v.copy() for k, v in arrays.items()}, n=7)
    np.testing.assert_allclose(got["out"], ref["out"], rtol=0, atol=1e-5)


@pytest.mark.parametrize("target", ["c", "openmp", "openacc"])
@pytest.mark.parametrize("name, sizes", [("decode_mha", {"dk": 128, "dv": 128}), ("decode_gqa", {"hq": 8, "hkv": 2}),
                                         ("decode_step", {"dk": 64, "dv": 64}), ("reshape", {})])
def test_32_bit_indices_compute_the_same(name, sizes, target):
    prog = moac.load(ROOT / "examples" / f"{name}.moa")
    k64 = prog.compile(target=target, sizes=sizes, index_bits=64)
    k32 = prog.compile(target=target, sizes=sizes, index_bits=32)
    auto = prog.compile(target=target, sizes=sizes)        # 32-bit where proven or checked, else 64
    assert "int32_t" in k32.c_source and "_fits32(" in k32.c_source and "_fits32(" not in k64.c_source
    if target == "openacc" and name != "reshape":          # a device target and run-time sizes: both kernels
        assert "_fits32(" in auto.c_source and "for (int64_t " in auto.c_source and "for (int32_t " in auto.c_source
    run = {"decode_step": {"N": 20, "n": 7}}.get(name, {})
    arrays, all_sizes = random_inputs(prog, {**sizes, **run}, 5)
    by_name = {k: v for k, v in all_sizes.items() if k in k64.onf.params}    # as moac check passes them
    a = k64(**{k: v.copy() for k, v in arrays.items()}, **by_name)
    b = k32(**{k: v.copy() for k, v in arrays.items()}, **by_name)
    c = auto(**{k: v.copy() for k, v in arrays.items()}, **by_name)
    for out in a:
        np.testing.assert_array_equal(a[out], b[out])
        np.testing.assert_array_equal(a[out], c[out])


def test_32_bit_indices_refuse_sizes_that_do_not_fit():
    """The entry checks every buffer's element count before any index is computed: a
    cache of 2^30 rows of 128 does not fit, and the call returns 3 without touching memory."""
    import cffi
    prog = moac.load(ROOT / "examples/decode.moa")
    kern = prog.compile(target="c", sizes={"dk": 128, "dv": 128}, index_bits=32)
    ffi = cffi.FFI()
    ffi.cdef(kern.signature.cdef())
    lib = ffi.dlopen(str(kern.library))
    fn = getattr(lib, kern.signature.fname)
    assert fn(ffi.NULL, ffi.NULL, ffi.NULL, ffi.NULL, 1 << 30) == 3
    assert "32-bit indices" in kern.c_source
