"""16-bit outputs (issue 13, item 5): `output out : bf16` / `output out : f16` rounds each
result to nearest even when it is stored; the kernel returns bf16 as uint16 bit patterns
(torch.bfloat16 for torch inputs) and f16 as float16; the counts take 2 bytes for them;
`moac check` widens them and adds the rounding to its tolerance."""
from __future__ import annotations

import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import sympy as sp

import moac
from moac import dtypes

ROOT = Path(__file__).resolve().parent.parent
TARGETS = ("c", "openmp", "openacc")
EPS32 = float(np.finfo(np.float32).eps)


def store(decl: str, target: str):
    prog = moac.parse(f"size n\ninput x : f32 ⟨n⟩\ny = x × 1\noutput y : {decl}\n", f"store_{decl}.moa")
    return prog, prog.compile(target=target, werror=True)


def f32_patterns() -> np.ndarray:
    """Every 4099th float32 pattern (about a million: all exponents, both signs, NaNs,
    subnormals), and near the halfway points of f16 and bf16: the ties and their neighbours."""
    strided = np.arange(0, 2**32, 4099, dtype=np.uint64).astype(np.uint32)
    h = np.arange(0, 0x7C00, 7, dtype=np.uint32)                        # f16 patterns, widened: then ties
    f16 = h.astype(np.uint16).view(np.float16).astype(np.float32).view(np.uint32)
    ties16 = f16 + (1 << 12)                                            # half an f16 ulp (normal ones)
    ties_bf = (np.arange(0, 0x7F80, 5, dtype=np.uint32) << 16) | 0x8000
    edges = np.concatenate([ties16, ties_bf])
    edges = np.concatenate([edges, edges - 1, edges + 1, edges | 0x80000000])
    return np.concatenate([strided, edges, np.array([0x477FEFFF, 0x477FF000, 0x7F7FFFFF, 0x7F800000, 0x7FC00001,
                                                      0x33000000, 0x33000001, 0x32FFFFFF], np.uint32)])


@pytest.mark.parametrize("target", TARGETS)
def test_bf16_store_rounds_to_nearest_even(target):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    u = f32_patterns()
    x = u.view(np.float32)
    _, kern = store("bf16", target)
    got = kern(x=x)["y"]
    assert got.dtype == np.uint16 and got.shape == x.shape
    with np.errstate(invalid="ignore"):
        want = x.astype(ml_dtypes.bfloat16).view(np.uint16)           # ml_dtypes' conversion, not moac's
    nan = np.isnan(x)
    assert np.array_equal(got[~nan], want[~nan])
    assert (got[nan] == 0x7FC0).all()


@pytest.mark.parametrize("target", TARGETS)
def test_f16_store_is_ieee_round_to_nearest_even(target):
    u = f32_patterns()
    x = u.view(np.float32)
    _, kern = store("f16", target)
    got = kern(x=x)["y"]
    assert got.dtype == np.float16
    with warnings.catch_warnings(), np.errstate(over="ignore", invalid="ignore"):
        warnings.simplefilter("ignore")
        want = x.astype(np.float16)                                     # numpy's IEEE conversion
    nan = np.isnan(x)
    assert np.array_equal(got[~nan].view(np.uint16), want[~nan].view(np.uint16))
    assert np.isnan(got[nan]).all()
    assert np.signbit(got[nan]).tolist() == np.signbit(x[nan]).tolist()
    sub = (np.abs(want) < 2.0 ** -14) & (want != 0)
    assert sub.sum() > 1000                                             # subnormal results were there


# --------------------------------------------------------------------------- an attention kernel with a bf16 output

GQA_BF16_OUT = (ROOT / "examples" / "decode_gqa_batched.moa").read_text(encoding="utf-8").replace(
    "input K : f32", "input K : bf16").replace("input V : f32", "input V : bf16").replace(
    "\noutput out\n", "\noutput out : bf16\n")
FIXED = {"hq": 8, "hkv": 2, "dk": 128, "dv": 128}


@pytest.fixture(scope="module")
def programs():
    assert "output out : bf16" in GQA_BF16_OUT
    return (moac.parse(GQA_BF16_OUT, "gqa_bf16_out.moa"),
            moac.parse(GQA_BF16_OUT.replace("output out : bf16", "output out"), "gqa_f32_out.moa"))


def gqa_inputs(s: dict, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    return {"Q": rng.standard_normal((s["B"], s["hq"], s["dk"])).astype(np.float32),
            "K": dtypes.bf16_bits(rng.standard_normal((s["B"], s["hkv"], s["n"], s["dk"]))),
            "V": dtypes.bf16_bits(rng.standard_normal((s["B"], s["hkv"], s["n"], s["dv"])))}


@pytest.mark.parametrize("fixed", [False, True], ids=["runtime", "fixed"])
@pytest.mark.parametrize("target", TARGETS)
def test_bf16_output_is_the_rounded_f32_output(programs, target, fixed):
    """The same kernel with `output out : bf16` stores exactly the bf16 rounding of what the
    f32-output kernel stores, and both are within their bounds of PyTorch's SDPA."""
    torch = pytest.importorskip("torch")
    b16, f32 = programs
    sizes = FIXED if fixed else {}
    k16 = b16.compile(target=target, sizes=sizes, werror=True)
    k32 = f32.compile(target=target, sizes=sizes, werror=True)
    s = dict(B=2, n=300, **FIXED)
    a = gqa_inputs(s, seed=3)
    got = k16(**a)["out"]
    ref32 = k32(**a)["out"]
    assert got.dtype == np.uint16 and ref32.dtype == np.float32 and got.shape == (2, 8, 128)
    assert np.array_equal(got, dtypes.bf16_bits(ref32))
    K = torch.from_numpy(dtypes.bf16_values(a["K"]).astype(np.float64))
    V = torch.from_numpy(dtypes.bf16_values(a["V"]).astype(np.float64))
    Q = torch.from_numpy(a["Q"].astype(np.float64))[:, :, None, :]
    sdpa = torch.nn.functional.scaled_dot_product_attention(Q, K, V, enable_gqa=True)[:, :, 0, :].numpy()
    scale = float(np.max(np.abs(sdpa)))
    tol = 16 * EPS32 * np.sqrt(s["dk"] + s["n"])
    assert np.max(np.abs(ref32 - sdpa)) <= tol * scale
    assert np.max(np.abs(dtypes.bf16_values(got) - sdpa)) <= (tol + 2.0 ** -8) * scale
    assert np.max(np.abs(dtypes.bf16_values(got) - sdpa)) > tol * scale       # the rounding is really there


def test_torch_inputs_give_a_bfloat16_tensor_and_out_is_checked(programs):
    torch = pytest.importorskip("torch")
    b16, _ = programs
    kern = b16.compile(target="c", sizes=FIXED, werror=True)
    s = dict(B=1, n=40, **FIXED)
    a = gqa_inputs(s, seed=4)
    want = kern(**a)["out"]
    t = {k: torch.from_numpy(v.view(np.int16)).view(torch.bfloat16) if v.dtype == np.uint16 else torch.from_numpy(v)
         for k, v in a.items()}
    out = kern(**t)["out"]
    assert out.dtype == torch.bfloat16 and np.array_equal(out.view(torch.int16).numpy().view(np.uint16), want)
    buf = torch.zeros((1, 8, 128), dtype=torch.bfloat16)
    res = kern(out={"out": buf}, **t)["out"]
    assert res is buf and torch.equal(buf.view(torch.int16), out.view(torch.int16))
    npbuf = np.zeros((1, 8, 128), np.uint16)
    assert kern(out={"out": npbuf}, **a)["out"] is npbuf and np.array_equal(npbuf, want)
    with pytest.raises(moac.ArgumentError, match=r"out\['out'\] must be a uint16 bf16 bit patterns .* got float32"):
        kern(out={"out": np.zeros((1, 8, 128), np.float32)}, **a)


def test_f16_output_returns_float16_and_torch_half():
    torch = pytest.importorskip("torch")
    prog, kern = store("f16", "c")
    x = np.linspace(-3, 3, 101, dtype=np.float32)
    got = kern(x=x)["y"]
    assert got.dtype == np.float16 and np.array_equal(got, x.astype(np.float16))
    out = kern(x=torch.from_numpy(x))["y"]
    assert out.dtype == torch.float16 and np.array_equal(out.numpy(), got)


def test_counts_take_two_bytes_per_stored_output(programs):
    b16, f32 = programs
    o16, o32 = b16.onf(sizes=FIXED), f32.onf(sizes=FIXED)
    B = sp.Symbol("B", integer=True, nonnegative=True)
    assert sp.expand(o32.minimum - o16.minimum) == 2 * 8 * 128 * B      # ⟨B 8 128⟩ outputs: 4 bytes -> 2
    assert o16.compulsory_minimal
    assert sp.expand(o32.traffic - o16.traffic) == 2 * 8 * 128 * B
    assert o16.schedule.buffer("out").dtype == "bf16"
    sig = {p.name: p for p in b16.compile(target="c", sizes=FIXED).signature.params}
    assert sig["out"].ctype == "uint16_t" and sig["out"].dtype == "bf16"


def test_check_widens_and_adds_the_rounding(tmp_path):
    src = tmp_path / "gqa_bf16_out.moa"
    src.write_text(GQA_BF16_OUT, encoding="utf-8")
    r = subprocess.run([sys.executable, "-m", "moac", "check", str(src), "--target", "c", "-D", "hq=8", "-D", "hkv=2",
                        "-D", "n=200"], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "= " in r.stdout and "+ 3.9e-03, half an ulp of bf16," in r.stdout and r.stdout.rstrip().endswith("OK")
    import json
    r = subprocess.run([sys.executable, "-m", "moac", "check", str(src), "--target", "c", "--json"], cwd=ROOT,
                       capture_output=True, text=True)
    out, = json.loads(r.stdout)["outputs"]
    assert out["storage"] == "bf16" and out["storage_rounding"] == 2.0 ** -8
    assert out["tolerance"] > 2.0 ** -8 and out["ok"]
    assert out["max_rel_error"] > 16 * EPS32 * np.sqrt(out["reduction_length"])   # f32's bound alone would fail


@pytest.mark.parametrize("decl, why", [
    ("f8e4m3", "output 'y' cannot be stored as f8e4m3: an output is declared f16 or bf16"),
    ("f32", "output 'y' cannot be stored as f32: an output is declared f16 or bf16"),
])
def test_other_output_storage_is_a_positioned_error(decl, why):
    with pytest.raises(moac.MoacError) as info:
        moac.parse(f"size n\ninput x : f32 ⟨n⟩\ny = x + 1\noutput y : {decl}\n", "bad.moa")
    text = info.value.render()
    assert text.startswith(f"bad.moa:4:12: error: {why}"), text
    assert text.splitlines()[1:3] == [f"    output y : {decl}", "               ^" + "~" * (len(decl) - 1)]


def test_output_dtype_syntax():
    prog = moac.parse("size n\ninput x : f32 ⟨n⟩\na = x + 1\nb = x × 2\nc = x − 1\noutput a : f16, b c : bf16\n", "m.moa")
    assert prog.outputs == ("a", "b", "c")
    assert prog.core.output_dtypes == {"a": "f16", "c": "bf16"}
    with pytest.raises(moac.ParseError, match=r"expected a dtype"):
        moac.parse("size n\ninput x : f32 ⟨n⟩\na = x + 1\noutput a : half\n", "p.moa")


@pytest.mark.parametrize("target", TARGETS)
def test_generic_plan_and_scalar_outputs(target):
    """16-bit outputs outside the split-K plan: a matrix × vector (generic array kernel), a
    scalar reduction (partials and a combine) and a plain f32 output beside them."""
    prog = moac.parse("size n, m\ninput A : f32 ⟨n m⟩\ninput x : bf16 ⟨m⟩\ny = A +.× x\ns = + red x\n"
                      "t = (+ red y) ÷ n\noutput y : f16, s : bf16, t\n", "mixed.moa")
    kern = prog.compile(target=target, werror=True)
    rng = np.random.default_rng(2)
    A = rng.standard_normal((300, 77)).astype(np.float32)
    x = dtypes.bf16_bits(rng.standard_normal(77))
    got = kern(A=A, x=x)
    ref = prog.evaluate(A=A, x=x)
    assert got["y"].dtype == np.float16 and got["s"].dtype == np.uint16 and got["s"].shape == ()
    assert got["t"].dtype == np.float32
    tol = 16 * EPS32 * np.sqrt(77 + 300)
    for name, decl, u in (("y", "f16", 2.0 ** -11), ("s", "bf16", 2.0 ** -8), ("t", "f32", 0.0)):
        r = np.asarray(ref[name], dtype=np.float64)
        err = np.max(np.abs(dtypes.as_float64(decl, got[name]) - r))
        assert err <= (tol + u) * max(1.0, float(np.max(np.abs(r)))), name
