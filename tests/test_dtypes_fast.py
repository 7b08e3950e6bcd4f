"""The ml_dtypes fast path of the bf16 conversions gives the same bits as the numpy one.

bf16 -> f32 is compared on all 65536 bf16 patterns; f32 -> bf16 on every bf16 pattern as
the high half with the low halves that decide the rounding (0, 1, just below, at and just
above the half-way point, all ones), which covers ±0, subnormals, ties to even, values
near the overflow to infinity, ±inf and every NaN class, plus a million random patterns.
"""
import sys
import warnings

import numpy as np
import pytest

from moac import dtypes

ALL16 = np.arange(65536, dtype=np.uint32).astype(np.uint16)
LOW_HALVES = np.array([0x0000, 0x0001, 0x3FFF, 0x4000, 0x7FFE, 0x7FFF, 0x8000, 0x8001, 0xC000, 0xFFFE, 0xFFFF],
                      np.uint32)


def f32_patterns() -> np.ndarray:
    structured = ((ALL16.astype(np.uint32) << 16)[:, None] | LOW_HALVES[None, :]).ravel()
    rng = np.random.default_rng(12)
    return np.concatenate([structured, rng.integers(0, 2**32, 1_000_000, dtype=np.uint64).astype(np.uint32)])


def test_bf16_to_f32_every_pattern_is_bit_identical():
    pytest.importorskip("ml_dtypes")
    fast = dtypes.bf16_values(ALL16)
    slow = dtypes._bf16_values_numpy(ALL16)
    assert fast.dtype == slow.dtype == np.float32
    assert np.array_equal(fast.view(np.uint32), slow.view(np.uint32))
    assert np.array_equal(slow.view(np.uint32), ALL16.astype(np.uint32) << 16)   # NaN payloads kept


def test_f32_to_bf16_is_bit_identical():
    pytest.importorskip("ml_dtypes")
    u = f32_patterns()
    x = u.view(np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")          # f32 input: neither path warns, signalling NaNs included
        fast = dtypes.bf16_bits(x)
        slow = dtypes._bf16_bits_numpy(x)
    assert fast.dtype == slow.dtype == np.uint16
    diff = np.nonzero(fast != slow)[0]
    assert diff.size == 0, [(hex(u[i]), hex(fast[i]), hex(slow[i])) for i in diff[:8]]
    # the set really holds the classes it is meant to
    exp, frac = (u >> 23) & 0xFF, u & 0x7FFFFF
    assert ((exp == 0xFF) & (frac != 0) & (frac < 0x400000)).sum() > 1000       # signalling NaNs
    assert ((exp == 0xFF) & (frac >= 0x400000)).sum() > 1000                    # quiet NaNs
    assert ((exp == 0) & (frac != 0)).sum() > 1000                              # subnormals
    assert (np.isnan(x) & (u >> 31 == 1)).sum() > 1000                          # negative NaNs


@pytest.mark.parametrize("f32,bf16", [
    (0x3F808000, 0x3F80),   # 1 + 2^-8: a tie, kept bit even -> down
    (0x3F818000, 0x3F82),   # a tie, kept bit odd -> up
    (0x3F808001, 0x3F81),   # just above the tie -> up
    (0x3F807FFF, 0x3F80),   # just below -> down
    (0x7F7F7FFF, 0x7F7F),   # below the largest tie: the largest finite bf16
    (0x7F7F8000, 0x7F80),   # the tie above the largest finite bf16 (odd) -> +inf
    (0x7F7FFFFF, 0x7F80),   # the largest f32 -> +inf
    (0xFF7F8000, 0xFF80),   # -> -inf
    (0x7F800000, 0x7F80), (0xFF800000, 0xFF80),   # ±inf stay
    (0x00000000, 0x0000), (0x80000000, 0x8000),   # ±0 keep their sign
    (0x00008000, 0x0000),   # the smallest subnormal tie -> +0 (even)
    (0x00018000, 0x0002),   # a subnormal tie, odd -> up
    (0x80018000, 0x8002),
    (0x7F800001, 0x7FC0),   # signalling NaN (its payload would truncate to inf)
    (0x7FC00000, 0x7FC0), (0xFFC00000, 0x7FC0), (0xFF800001, 0x7FC0), (0xFFFFFFFF, 0x7FC0),
])
def test_f32_to_bf16_known_bits(f32, bf16):
    x = np.array([f32], np.uint32).view(np.float32)
    assert dtypes._bf16_bits_numpy(x)[0] == bf16
    assert dtypes.bf16_bits(x)[0] == bf16


@pytest.mark.filterwarnings("ignore:overflow encountered in cast:RuntimeWarning")   # f64 beyond f32's range
def test_fast_path_keeps_shape_layout_and_double_rounding():
    pytest.importorskip("ml_dtypes")
    rng = np.random.default_rng(5)
    f64 = rng.standard_normal((37, 11)) * 10.0 ** rng.integers(-40, 40, (37, 11))
    for x in (f64, np.asfortranarray(f64), f64[::2, ::3], f64.astype(np.float32), 1.5, [1.0, np.nan, -3.0],
              np.float64(0.1), np.array(-np.inf)):
        fast, slow = dtypes.bf16_bits(x), dtypes._bf16_bits_numpy(x)
        assert fast.shape == slow.shape and fast.flags.c_contiguous and fast.dtype == np.uint16
        assert np.array_equal(fast, slow)
    x = np.array([1 + 2**-8 + 2**-30])        # f64 just above a bf16 tie: f32 rounds it onto the tie,
    assert dtypes.bf16_bits(x)[0] == dtypes._bf16_bits_numpy(x)[0] == 0x3F80   # then to even (not 0x3F81)
    b = dtypes.bf16_bits(f64)
    strided = b.T[::2]                                       # a non-contiguous uint16 view
    assert np.array_equal(dtypes.bf16_values(strided).view(np.uint32),
                          dtypes._bf16_values_numpy(strided).view(np.uint32))


def test_ml_dtypes_is_used_where_installed(monkeypatch):
    pytest.importorskip("ml_dtypes")
    calls = []
    monkeypatch.setattr(dtypes, "_bf16_bits_numpy", lambda x: calls.append("bits"))
    monkeypatch.setattr(dtypes, "_bf16_values_numpy", lambda b: calls.append("values"))
    assert dtypes.bf16_bits(np.ones(4)).tolist() == [0x3F80] * 4
    assert dtypes.bf16_values(np.full(4, 0x3F80, np.uint16)).tolist() == [1.0] * 4
    assert calls == []


def test_numpy_fallback_when_ml_dtypes_is_missing(monkeypatch):
    monkeypatch.setitem(sys.modules, "ml_dtypes", None)      # `import ml_dtypes` now raises ImportError
    assert dtypes._ml_bfloat16() is None
    calls = []
    bits, values = dtypes._bf16_bits_numpy, dtypes._bf16_values_numpy
    monkeypatch.setattr(dtypes, "_bf16_bits_numpy", lambda x: calls.append("bits") or bits(x))
    monkeypatch.setattr(dtypes, "_bf16_values_numpy", lambda b: calls.append("values") or values(b))
    x = np.array([1.0, 1.00390625, np.nan, -np.nan, 3.0e38, 1e-40], np.float32)
    got = dtypes.bf16_bits(x)
    assert got.tolist() == [0x3F80, 0x3F80, 0x7FC0, 0x7FC0, 0x7F62, 0x0001]
    assert dtypes.bf16_values(got)[:2].tolist() == [1.0, 1.0]
    assert calls == ["bits", "values"]
