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


# --------------------------------------------------------------------------- decode_gqa_fp8 against SDPA

EXAMPLES = __import__("pathlib").Path(__file__).resolve().parent.parent / "examples"
EPS32 = float(np.finfo(np.float32).eps)
# (compile-time sizes, run-time size sets): GQA ratios g = hq / hkv of 1, 4 and 8
FP8_CASES = [
    ({}, [dict(B=2, hq=4, hkv=4, n=97, dk=64, dv=64), dict(B=3, hq=8, hkv=2, n=1000, dk=128, dv=80),
          dict(B=1, hq=8, hkv=1, n=1, dk=64, dv=64), dict(B=2, hq=16, hkv=2, n=7, dk=80, dv=128)]),
    ({"hq": 32, "hkv": 8, "dk": 128, "dv": 128}, [dict(B=2, hq=32, hkv=8, n=n, dk=128, dv=128) for n in (1, 97, 1000)]),
    ({"hq": 8, "hkv": 1, "dk": 64, "dv": 64}, [dict(B=3, hq=8, hkv=1, n=n, dk=64, dv=64) for n in (7, 300)]),
    ({"hq": 4, "hkv": 4, "dk": 256, "dv": 256}, [dict(B=2, hq=4, hkv=4, n=130, dk=256, dv=256)]),   # packed words
]


def _fp8_program(storage: str = "f8e4m3") -> moac.Program:
    text = (EXAMPLES / "decode_gqa_fp8.moa").read_text(encoding="utf-8")
    if storage != "f8e4m3":
        text = text.replace(": f8e4m3 ⟨", f": {storage} ⟨")
    return moac.parse(text, f"decode_gqa_{storage}.moa")


_KERNELS: dict = {}


def _fp8_kernel(storage: str, target: str, fixed: tuple):
    key = (storage, target, fixed)
    if key not in _KERNELS:
        _KERNELS[key] = _fp8_program(storage).compile(target=target, sizes=dict(fixed), werror=True)
    return _KERNELS[key]


def quantised_inputs(storage: str, s: dict, seed: int) -> dict:
    """Q in f32; K and V quantised per (token, head) row as a serving stack does: the scale
    is the row's max |x| over the format's largest value, the bits those of x ÷ scale."""
    rng = np.random.default_rng(seed)
    B, hq, hkv, n, dk, dv = (s[k] for k in ("B", "hq", "hkv", "n", "dk", "dv"))
    Q = rng.standard_normal((B, hq, dk)).astype(np.float32)
    out = {"Q": Q}
    for name, d in (("K", dk), ("V", dv)):
        x = rng.standard_normal((B, hkv, n, d)) * rng.uniform(0.1, 3.0, (B, hkv, n, 1))
        top = {"f8e4m3": 448.0, "f8e5m2": 57344.0, "i8": 127.0}[storage]
        scale = (np.max(np.abs(x), axis=-1) / top).astype(np.float32)
        y = x / scale[..., None]
        bits = np.clip(np.rint(y), -127, 127).astype(np.int8) if storage == "i8" else dtypes.fp8_bits(y, storage)
        out[name], out[name.lower() + "s"] = bits, scale
    return out


def sdpa_dequantised(a: dict, storage: str) -> np.ndarray:
    """SDPA in float64 on K and V dequantised in float64 from the same bits and scales, by
    torch's own float8 conversion (numpy's int8 for i8)."""
    torch = pytest.importorskip("torch")

    def real(bits, scale):
        if storage == "i8":
            v = torch.from_numpy(bits.astype(np.float64))
        else:
            t = {"f8e4m3": torch.float8_e4m3fn, "f8e5m2": torch.float8_e5m2}[storage]
            v = torch.from_numpy(bits).view(t).to(torch.float64)
        return v * torch.from_numpy(scale.astype(np.float64))[..., None]
    K, V = real(a["K"], a["ks"]), real(a["V"], a["vs"])
    Q = torch.from_numpy(a["Q"].astype(np.float64))[:, :, None, :]             # (B, hq, 1, dk)
    with torch.no_grad():
        out = torch.nn.functional.scaled_dot_product_attention(Q, K, V, enable_gqa=True)
    return out[:, :, 0, :].numpy()


def _fp8_cases(targets=TARGETS):
    for fixed, sets in FP8_CASES:
        for target in targets:
            for s in sets:
                yield pytest.param(target, tuple(fixed.items()), s,
                                   id=f"{target}-{'fixed' if fixed else 'runtime'}-" + "-".join(f"{k}{v}" for k, v in s.items()))


@pytest.mark.parametrize("target, fixed, s", list(_fp8_cases()))
def test_decode_gqa_fp8_matches_sdpa(target, fixed, s):
    kern = _fp8_kernel("f8e4m3", target, fixed)
    a = quantised_inputs("f8e4m3", s, seed=s["n"] + 7 * s["hq"])
    got = kern(**a)["out"]
    assert got.dtype == np.float32 and got.shape == (s["B"], s["hq"], s["dv"])
    ref = sdpa_dequantised(a, "f8e4m3")
    tol = 16 * EPS32 * np.sqrt(s["dk"] + s["n"])
    for b in range(s["B"]):                                # per sequence of the batch
        scale = float(np.max(np.abs(ref[b])))
        err = float(np.max(np.abs(got[b].astype(np.float64) - ref[b])))
        assert err <= tol * scale, f"batch {b}: max |got − SDPA| = {err:.3e} > {tol:.2e} · {scale:.3e}"
    interp = np.asarray(_fp8_program().evaluate(sizes=s, **a)["out"], dtype=np.float64)
    np.testing.assert_allclose(interp, ref, rtol=1e-10, atol=1e-10 * float(np.max(np.abs(ref))))


def test_fp8_comparison_sees_the_scales():
    """The bound is tight enough to tell the scales from their absence: the same bits with
    the value scale of one row 10% off, or the key scales left out, fail it."""
    s = dict(B=2, hq=8, hkv=2, n=97, dk=64, dv=64)
    a = quantised_inputs("f8e4m3", s, seed=1)
    kern = _fp8_kernel("f8e4m3", "c", ())
    ref = sdpa_dequantised(a, "f8e4m3")
    tol = 16 * EPS32 * np.sqrt(s["dk"] + s["n"]) * float(np.max(np.abs(ref)))
    assert np.max(np.abs(kern(**a)["out"] - ref)) <= tol
    for name, change in (("vs", lambda x: x.__setitem__((0, 1, 40), x[0, 1, 40] * 1.1)),
                         ("ks", lambda x: x.fill(1.0))):
        b = {k: v.copy() for k, v in a.items()}
        change(b[name])
        assert np.max(np.abs(kern(**b)["out"] - ref)) > 10 * tol, name


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("storage", ["i8", "f8e5m2"])
def test_other_8bit_storage_through_the_attention_kernel(storage, target):
    s = dict(B=2, hq=8, hkv=2, n=300, dk=64, dv=64)
    kern = _fp8_kernel(storage, target, ())
    a = quantised_inputs(storage, s, seed=5)
    assert a["K"].dtype == (np.int8 if storage == "i8" else np.uint8)
    got = kern(**a)["out"]
    ref = sdpa_dequantised(a, storage)
    tol = 16 * EPS32 * np.sqrt(s["dk"] + s["n"])
    assert np.max(np.abs(got - ref)) <= tol * float(np.max(np.abs(ref)))


def test_fp8_onf_moves_the_minimum_and_scales_once_per_row():
    """K and V rows read once each, ks and vs once per row (the verdict: traffic = minimum),
    and the scales cost one multiply per score and one per weight, not one per element:
    against the same program without scales, 2 flops more per token and query head."""
    import sympy as sp
    n = sp.Symbol("n", integer=True, nonnegative=True)
    sizes = dict(B=4, hq=32, hkv=8, dk=128, dv=128)
    plain = moac.load(EXAMPLES / "decode_gqa_batched.moa")
    for target in ("openacc", "openmp", "cuda"):
        o = _fp8_program().onf(target=target, sizes=sizes)
        assert o.compulsory_minimal, target
        assert sp.diff(o.minimum, n) == 4 * 8 * (128 + 128 + 4 + 4)          # 1-byte K, V; 4-byte ks, vs
        per_token = sp.diff(sp.sympify(o.flops).replace(sp.ceiling, lambda x: x), n)
        base = sp.diff(sp.sympify(plain.onf(target=target, sizes=sizes).flops).replace(sp.ceiling, lambda x: x), n)
        assert sp.simplify(per_token - base) == 2 * 4 * 32, target
    dnf = str(_fp8_program().dnf())
    assert dnf.count("ψks") == 3 and dnf.count("ψvs") == 1 and "× ⟨i ⌊j÷g⌋ k⟩ψks" in dnf


HEAD_TEXT = (EXAMPLES / "decode_gqa_fp8_head.moa").read_text(encoding="utf-8")


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("per", ["head", "tensor"])
def test_per_head_and_per_tensor_scales_match_sdpa(per, target):
    """decode_gqa_fp8_head.moa (a scale per KV head) and the same text with rank-0 scales
    (one per tensor, docs/decode_family.md), against SDPA on the dequantised K and V."""
    text = HEAD_TEXT if per == "head" else HEAD_TEXT.replace("f32 ⟨B hkv⟩", "f32 ⟨⟩")
    assert text.count("f32 ⟨⟩") == HEAD_TEXT.count("f32 ⟨⟩") + (2 if per == "tensor" else 0)
    prog = moac.parse(text, f"decode_gqa_fp8_{per}.moa")
    fixed = {"hq": 8, "hkv": 2, "dk": 64, "dv": 64} if target == "openmp" else {}
    kern = prog.compile(target=target, sizes=fixed, werror=True)
    s = dict(B=2, hq=8, hkv=2, n=300, dk=64, dv=64)
    rng = np.random.default_rng(11)
    a = {"Q": rng.standard_normal((2, 8, 64)).astype(np.float32)}
    for name in ("K", "V"):
        x = rng.standard_normal((2, 2, 300, 64)) * rng.uniform(0.1, 3.0, (2, 2, 1, 1))
        axes = (2, 3) if per == "head" else (0, 1, 2, 3)
        scale = np.asarray(np.max(np.abs(x), axis=axes) / 448.0, dtype=np.float32)    # 0-d per tensor
        full = scale.reshape(scale.shape + (1,) * len(axes))
        a[name], a[name.lower() + "s"] = dtypes.fp8_bits(x / full), scale
    got = kern(**a)["out"]
    # the reference's scales per (token, head), from the same numbers
    b = dict(a, ks=np.broadcast_to(np.reshape(a["ks"], a["ks"].shape + (1,) * (3 - a["ks"].ndim)), (2, 2, 300)),
             vs=np.broadcast_to(np.reshape(a["vs"], a["vs"].shape + (1,) * (3 - a["vs"].ndim)), (2, 2, 300)))
    ref = sdpa_dequantised(b, "f8e4m3")
    tol = 16 * EPS32 * np.sqrt(s["dk"] + s["n"])
    assert np.max(np.abs(got - ref)) <= tol * float(np.max(np.abs(ref)))
    o = prog.onf(target=target, sizes={"hq": 8, "hkv": 2, "dk": 64, "dv": 64})
    assert o.compulsory_minimal
