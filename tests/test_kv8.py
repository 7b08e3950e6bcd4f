"""8-bit KV storage (issue 13, item 4): f8e4m3 (OCP E4M3FN), f8e5m2 (OCP E5M2) and i8
inputs, widened exactly to f32 on load in every target, and the rounding of float32 to
the 8-bit floats in moac.dtypes.

Every widening is compared on all 256 patterns with two references that share nothing
with moac: ml_dtypes' conversion and the value written out here from the format's sign,
exponent and mantissa fields.
"""
from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

import moac
from moac import dtypes

ml_dtypes = pytest.importorskip("ml_dtypes")

ALL8 = np.arange(256, dtype=np.uint8)
ML = {"f8e4m3": ml_dtypes.float8_e4m3fn, "f8e5m2": ml_dtypes.float8_e5m2}
FIELDS = {"f8e4m3": (4, 3, 7), "f8e5m2": (5, 2, 15)}     # exponent bits, mantissa bits, bias
TARGETS = ("c", "openmp", "openacc")


def by_hand(decl: str, p: int) -> float:
    """The value of pattern p, from its fields (OCP 8-bit floats, v1.0)."""
    ebits, mbits, bias = FIELDS[decl]
    s, e, m = p >> 7, (p >> mbits) & ((1 << ebits) - 1), p & ((1 << mbits) - 1)
    sign = -1.0 if s else 1.0
    if decl == "f8e4m3" and e == 15 and m == 7:
        return math.nan                                  # E4M3FN: S.1111.111 only; no infinities
    if decl == "f8e5m2" and e == 31:
        return math.nan if m else sign * math.inf
    if e == 0:
        return sign * m * 2.0 ** (1 - bias - mbits)      # subnormal
    return sign * (1 + m / 2 ** mbits) * 2.0 ** (e - bias)


def widen_kernel(decl: str, target: str):
    prog = moac.parse(f"size n\ninput x : {decl} ⟨n⟩\ny = x × 1\noutput y\n", f"widen8_{decl}.moa")
    return prog, prog.compile(target=target, werror=True)


# --------------------------------------------------------------------------- widening

@pytest.mark.parametrize("decl", ["f8e4m3", "f8e5m2"])
def test_by_hand_formula_agrees_with_ml_dtypes(decl):
    """The two references agree with each other before either judges moac."""
    ml = ALL8.view(ML[decl]).astype(np.float64)
    hand = np.array([by_hand(decl, int(p)) for p in ALL8])
    assert np.array_equal(ml, hand, equal_nan=True)
    assert np.isnan(hand).sum() == {"f8e4m3": 2, "f8e5m2": 6}[decl]
    assert np.nanmax(hand[np.isfinite(hand)]) == {"f8e4m3": 448.0, "f8e5m2": 57344.0}[decl]


@pytest.mark.parametrize("decl", ["f8e4m3", "f8e5m2"])
def test_python_widening_every_pattern(decl):
    hand = np.array([by_hand(decl, int(p)) for p in ALL8])
    for got in (dtypes.fp8_values(ALL8, decl), dtypes._fp8_values_numpy(ALL8, decl), dtypes.fp8_table(decl)):
        assert got.dtype == np.float32
        assert np.array_equal(got.astype(np.float64), hand, equal_nan=True)
    fast, slow = dtypes.fp8_values(ALL8, decl), dtypes._fp8_values_numpy(ALL8, decl)
    assert np.array_equal(fast.view(np.uint32), slow.view(np.uint32))     # NaN bits too
    assert np.array_equal(dtypes.as_float64(decl, ALL8.view(ML[decl])), hand, equal_nan=True)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("decl", ["f8e4m3", "f8e5m2"])
def test_c_widening_every_pattern(decl, target):
    """The C helpers, through a compiled kernel: y = x × 1 over all 256 patterns."""
    prog, kern = widen_kernel(decl, target)
    got = kern(x=ALL8)["y"]
    assert got.dtype == np.float32
    hand = np.array([by_hand(decl, int(p)) for p in ALL8])
    assert np.array_equal(got.astype(np.float64), hand, equal_nan=True)
    ml = ALL8.view(ML[decl]).astype(np.float32)
    finite = ~np.isnan(hand)
    assert np.array_equal(got[finite].view(np.uint32), ml[finite].view(np.uint32))   # -0.0 included
    assert np.signbit(got[ALL8 == 0x80])[0] and not np.signbit(got[0])
    assert np.isnan(got[~finite]).all()
    assert np.array_equal(prog.evaluate(x=ALL8)["y"], hand, equal_nan=True)       # the reference reads them so too


@pytest.mark.parametrize("target", TARGETS)
def test_i8_every_value(target):
    prog, kern = widen_kernel("i8", target)
    x = ALL8.view(np.int8)
    got = kern(x=x)["y"]
    assert got.tolist() == [float(v) for v in range(128)] + [float(v) for v in range(-128, 0)]
    assert prog.evaluate(x=x)["y"].tolist() == got.tolist()


def test_kernel_takes_ml_dtypes_and_torch_float8_without_copies():
    torch = pytest.importorskip("torch")
    from moac.jit.kernel import as_array
    _, kern = widen_kernel("f8e4m3", "c")
    want = kern(x=ALL8)["y"]
    assert np.array_equal(kern(x=ALL8.view(ml_dtypes.float8_e4m3fn))["y"], want, equal_nan=True)
    t = torch.from_numpy(ALL8.copy()).view(torch.float8_e4m3fn)
    out = kern(x=t)["y"]
    assert isinstance(out, torch.Tensor) and np.array_equal(out.numpy(), want, equal_nan=True)
    view, is_torch = as_array("x", t)
    assert is_torch and view.dtype == np.uint8 and view.ctypes.data == t.data_ptr()
    _, k52 = widen_kernel("f8e5m2", "c")
    t52 = torch.from_numpy(ALL8.copy()).view(torch.float8_e5m2)
    assert np.array_equal(k52(x=t52)["y"].numpy(), k52(x=ALL8)["y"], equal_nan=True)
    _, ki8 = widen_kernel("i8", "c")
    ti8 = torch.arange(-128, 128, dtype=torch.int8)
    assert ki8(x=ti8)["y"].tolist() == list(range(-128, 128))


def test_wrong_8bit_storage_is_refused_before_c_runs():
    _, kern = widen_kernel("f8e4m3", "c")
    with pytest.raises(moac.ArgumentError, match=r"input 'x' must have dtype uint8 f8e4m3 bit patterns "
                       r"\(or ml_dtypes.float8_e4m3fn\) \(declared f8e4m3\), got int8"):
        kern(x=np.zeros(4, np.int8))
    with pytest.raises(moac.ArgumentError, match=r"got float8_e5m2"):
        kern(x=np.zeros(4, ml_dtypes.float8_e5m2))
    _, ki8 = widen_kernel("i8", "c")
    with pytest.raises(moac.ArgumentError, match=r"must have dtype int8 \(declared i8\), got uint8"):
        ki8(x=np.zeros(4, np.uint8))


# --------------------------------------------------------------------------- f32 -> fp8

def f32_sample() -> np.ndarray:
    """About 2.1 million float32 patterns: every 2039th of all 2^32 (a prime stride, so
    every exponent and sign with varied mantissas, NaNs and subnormals among them) plus,
    near every 8-bit value, the f32 patterns of its ties and their neighbours."""
    strided = np.arange(0, 2**32, 2039, dtype=np.uint64).astype(np.uint32)
    edges = []
    for decl in ("f8e4m3", "f8e5m2"):
        v = dtypes.fp8_table(decl).astype(np.float64)
        v = np.unique(v[np.isfinite(v)])
        mids = (v[:-1] + v[1:]) / 2                         # the ties between neighbours (exact in f32)
        top = v[-1] + (v[-1] - v[-2]) / 2                   # the tie above the largest
        pts = np.concatenate([v, mids, [top, 2 * v[-1], v[0] - (v[1] - v[0]) / 2]]).astype(np.float32)
        u = pts.view(np.uint32)
        edges += [u, u + 1, u - 1]
    return np.concatenate([strided] + edges + [np.array([0x7F800000, 0xFF800000, 0x7F800001, 0xFFFFFFFF,
                                                         0x00000001, 0x80000001], np.uint32)])


def torch_bits(x32: np.ndarray, decl: str) -> np.ndarray:
    torch = pytest.importorskip("torch")
    t = {"f8e4m3": torch.float8_e4m3fn, "f8e5m2": torch.float8_e5m2}[decl]
    return torch.from_numpy(x32).to(t).view(torch.uint8).numpy()


@pytest.mark.parametrize("saturate", [False, True])
@pytest.mark.parametrize("decl", ["f8e4m3", "f8e5m2"])
def test_rounding_fast_path_is_bit_identical(decl, saturate):
    u = f32_sample()
    x = u.view(np.float32)
    assert x.size >= 2_000_000
    with warnings.catch_warnings():
        warnings.simplefilter("error")                      # neither path warns
        fast = dtypes.fp8_bits(x, decl, saturate)
        slow = dtypes._fp8_bits_numpy(x, decl, saturate)
    assert fast.dtype == slow.dtype == np.uint8
    diff = np.nonzero(fast != slow)[0]
    assert diff.size == 0, [(hex(u[i]), hex(fast[i]), hex(slow[i])) for i in diff[:8]]
    nan = np.isnan(x)
    assert (fast[nan] == {"f8e4m3": 0x7F, "f8e5m2": 0x7E}[decl]).all()
    # against ml_dtypes' own conversion (non-saturating, NaN inputs aside)
    with np.errstate(invalid="ignore", over="ignore"):
        ml = x.astype(ML[decl]).view(np.uint8)
    if not saturate:
        assert np.array_equal(fast[~nan], ml[~nan])


@pytest.mark.parametrize("decl", ["f8e4m3", "f8e5m2"])
def test_rounding_agrees_with_torch(decl):
    """PyTorch's conversion, another independent one: it saturates f8e4m3 (inf and overflow
    to ±448) and not f8e5m2."""
    u = f32_sample()
    x = u.view(np.float32)
    want = torch_bits(x, decl)
    got = dtypes.fp8_bits(x, decl, saturate=(decl == "f8e4m3"))
    nan = np.isnan(x)
    assert np.array_equal(got[~nan], want[~nan])


@pytest.mark.parametrize("decl", ["f8e4m3", "f8e5m2"])
def test_rounding_is_to_nearest_even(decl):
    """Every tie between two neighbouring finite values goes to the one with the even
    mantissa; a hair above or below goes to the nearer."""
    v = dtypes.fp8_table(decl)
    pats = np.nonzero(np.isfinite(v) & (ALL8 < 0x80))[0]
    pats = pats[np.argsort(v[pats])]
    for lo, hi in zip(pats[:-1], pats[1:]):
        a, b = float(v[lo]), float(v[hi])
        mid = np.float32((a + b) / 2)
        even = lo if lo % 2 == 0 else hi
        assert dtypes.fp8_bits(mid, decl)[0] == even, (decl, a, b)
        assert dtypes.fp8_bits(np.nextafter(mid, np.float32(np.inf)), decl)[0] == hi
        assert dtypes.fp8_bits(np.nextafter(mid, np.float32(-np.inf)), decl)[0] == lo
        assert dtypes.fp8_bits(-mid, decl)[0] == even | 0x80


def test_overflow_and_saturation():
    big = np.array([448, 464, 464.01, 1e6, np.inf, -464.01, -np.inf], np.float32)
    assert dtypes.fp8_bits(big, "f8e4m3").tolist() == [0x7E, 0x7E, 0x7F, 0x7F, 0x7F, 0xFF, 0xFF]
    assert dtypes.fp8_bits(big, "f8e4m3", saturate=True).tolist() == [0x7E, 0x7E, 0x7E, 0x7E, 0x7E, 0xFE, 0xFE]
    big = np.array([57344, 61440, 61439, np.inf, -1e9], np.float32)
    assert dtypes.fp8_bits(big, "f8e5m2").tolist() == [0x7B, 0x7C, 0x7B, 0x7C, 0xFC]
    assert dtypes.fp8_bits(big, "f8e5m2", saturate=True).tolist() == [0x7B, 0x7B, 0x7B, 0x7B, 0xFB]
    assert dtypes.fp8_bits(2.0 ** -10, "f8e4m3")[0] == 0x00          # half the smallest subnormal: a tie, to 0
    assert dtypes.fp8_bits(2.0 ** -10 * 1.5, "f8e4m3")[0] == 0x01
    assert dtypes.fp8_bits(-0.0, "f8e5m2")[0] == 0x80


def test_numpy_fallback_when_ml_dtypes_is_missing(monkeypatch):
    import sys
    monkeypatch.setitem(sys.modules, "ml_dtypes", None)      # `import ml_dtypes` now raises ImportError
    assert dtypes._ml("float8_e4m3fn") is None
    x = np.array([1.0, 0.3, -500.0, np.nan, 2.0 ** -9], np.float32)
    assert dtypes.fp8_bits(x).tolist() == [0x38, 0x2A, 0xFF, 0x7F, 0x01]
    assert dtypes.fp8_values(np.array([0x38, 0x2A, 0x01], np.uint8)).tolist() == [1.0, 0.3125, 2.0 ** -9]
    r = dtypes.random("f8e4m3", np.random.default_rng(0), (5,))
    assert r.dtype == np.uint8 and r.shape == (5,)


# --------------------------------------------------------------------------- moac cost

@pytest.mark.parametrize("example, sizes, batch", [
    ("decode_gqa", ["-D", "hq=32", "-D", "hkv=8", "-D", "dk=128", "-D", "dv=128"], 1),
    ("decode_gqa_batched", ["-D", "B=32", "-D", "hq=32", "-D", "hkv=8", "-D", "dk=128", "-D", "dv=128", "-D", "n=4096"],
     32),
])
def test_cost_of_8bit_kv_halves_bytes_and_doubles_intensity(example, sizes, batch):
    import json
    import subprocess
    import sys
    from pathlib import Path
    root = Path(__file__).resolve().parent.parent

    def cost(kv):
        r = subprocess.run([sys.executable, "-m", "moac", "cost", f"examples/{example}.moa", *sizes, "--kv-dtype", kv,
                            "--json"], cwd=root, capture_output=True, text=True, check=True)
        return json.loads(r.stdout)
    b16, f8, i8, f32 = cost("bf16"), cost("f8e4m3"), cost("i8"), cost("f32")
    assert f8["storage"] == {"K": "f8e4m3", "V": "f8e4m3"}
    kv16, kv8 = b16["kv_bytes_per_token"]["value"], f8["kv_bytes_per_token"]["value"]
    assert kv16 == batch * 2 * 8 * 128 * 2             # sequences × K and V × 8 KV heads × head dim 128 × 2 bytes
    assert kv8 * 2 == kv16 and i8["kv_bytes_per_token"]["value"] == kv8 and f32["kv_bytes_per_token"]["value"] == 2 * kv16
    ai16, ai8 = b16["intensity_per_token"]["value"], f8["intensity_per_token"]["value"]
    assert ai8 == pytest.approx(2 * ai16, rel=1e-12)
    assert f8["flops"]["expr"] == b16["flops"]["expr"]  # the same arithmetic: only the bytes change
