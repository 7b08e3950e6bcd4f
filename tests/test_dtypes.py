"""Low-precision storage: f16 and bf16 inputs are widened to f32 exactly, in every target."""
import numpy as np
import pytest

import moac
from moac import dtypes

pytestmark = pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")

ALL16 = np.arange(65536, dtype=np.uint32).astype(np.uint16)


def widen(decl, target):
    prog = moac.parse(f"size n\ninput x : {decl} ⟨n⟩\ny = x + 0\noutput y\n", f"widen_{decl}.moa")
    return prog, prog.compile(target=target, werror=True)


@pytest.mark.parametrize("target", ["c", "openacc"])
def test_f16_every_bit_pattern(target):
    prog, kern = widen("f16", target)
    x = ALL16.view(np.float16)
    got = kern(x=x)["y"]
    want = x.astype(np.float32)
    assert np.array_equal(got, want, equal_nan=True)
    ref = prog.evaluate(x=x)["y"]
    assert np.array_equal(ref, want.astype(np.float64), equal_nan=True)


@pytest.mark.parametrize("target", ["c", "openacc"])
def test_bf16_every_bit_pattern(target):
    prog, kern = widen("bf16", target)
    got = kern(x=ALL16)["y"]
    want = (ALL16.astype(np.uint32) << 16).view(np.float32)
    assert np.array_equal(got, want, equal_nan=True)
    assert np.array_equal(prog.evaluate(x=ALL16)["y"], want.astype(np.float64), equal_nan=True)


def test_bf16_rounding_is_to_nearest_even():
    x = np.array([1.0, 1.00390625, 1.01171875, -2.5, 3.14159, 65504.0, np.inf], np.float32)
    back = dtypes.bf16_values(dtypes.bf16_bits(x))
    assert back.tolist() == [1.0, 1.0, 1.015625, -2.5, 3.140625, 65536.0, np.inf]
    assert np.isnan(dtypes.bf16_values(dtypes.bf16_bits(np.array([np.nan], np.float32))))[0]


def test_wrong_storage_dtype_is_refused_before_c_runs():
    prog, kern = widen("bf16", "c")
    with pytest.raises(moac.ArgumentError, match=r"input 'x' must have dtype uint16 bf16 bit patterns"):
        kern(x=np.zeros(4, np.float32))
    prog, kern = widen("f16", "c")
    with pytest.raises(moac.ArgumentError, match=r"input 'x' must have dtype float16 \(declared f16\), got float32"):
        kern(x=np.zeros(4, np.float32))


def test_low_precision_halves_the_kv_bytes():
    src = open("examples/decode.moa").read()
    f32 = moac.parse(src, "d32.moa").onf(sizes={"dk": 128, "dv": 128})
    b16 = moac.parse(src.replace("input K : f32", "input K : bf16").replace("input V : f32", "input V : bf16"),
                     "d16.moa").onf(sizes={"dk": 128, "dv": 128})
    import sympy as sp
    n = sp.Symbol("n", integer=True, nonnegative=True)
    assert sp.diff(f32.minimum, n) == 1024          # 4 bytes × (128 + 128) per token
    assert sp.diff(b16.minimum, n) == 512           # halved
    assert b16.compulsory_minimal


def test_decode_bf16_checks_against_reference():
    src = open("examples/decode_gqa.moa").read()
    prog = moac.parse(src.replace("input K : f32", "input K : bf16").replace("input V : f32", "input V : bf16"),
                      "gqa_bf16.moa")
    kern = prog.compile(target="openacc", sizes={"dk": 64, "dv": 64}, werror=True)
    rng = np.random.default_rng(3)
    Q = rng.standard_normal((8, 64)).astype(np.float32)
    K = dtypes.bf16_bits(rng.standard_normal((2, 300, 64)))
    V = dtypes.bf16_bits(rng.standard_normal((2, 300, 64)))
    got = kern(Q=Q, K=K, V=V)["out"]
    ref = prog.evaluate(Q=Q, K=K, V=V)["out"]
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, ref, rtol=0, atol=2e-6 * np.abs(ref).max())
