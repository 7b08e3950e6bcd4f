"""PyTorch CPU tensors and DLPack objects through a compiled kernel (#12): no copies in,
results bit for bit those of the numpy path, torch tensors out, and `out=`."""
from __future__ import annotations

import numpy as np
import pytest

import moac
from moac.commands import random_inputs

torch = pytest.importorskip("torch")

SIZES = dict(hq=8, hkv=2, n=50, dk=16, dv=16)


def program(kv: str):
    from test_back_common import ROOT
    text = (ROOT / "examples/decode_gqa.moa").read_text(encoding="utf-8")
    text = text.replace("input K : f32", f"input K : {kv}").replace("input V : f32", f"input V : {kv}")
    return moac.parse(text, f"gqa_{kv}.moa")


def as_torch(a: np.ndarray):
    if a.dtype == np.uint16:                                   # bf16 bit patterns
        return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(a)


@pytest.mark.parametrize("kv", ["f32", "f64", "f16", "bf16"])
@pytest.mark.parametrize("target", ["c", "openmp"])
def test_torch_tensors_give_the_numpy_results_bit_for_bit(kv, target):
    prog = program(kv)
    if kv == "f64":
        prog = moac.parse(prog.source.text.replace("input Q : f32", "input Q : f64"), "gqa_f64.moa")
    kern = prog.compile(target=target)
    arrays, _ = random_inputs(prog, SIZES, 3)
    want = kern(**arrays)["out"]
    got = kern(**{k: as_torch(v) for k, v in arrays.items()})["out"]
    assert isinstance(got, torch.Tensor) and got.dtype == {"float32": torch.float32, "float64": torch.float64}[str(want.dtype)]
    assert torch.equal(got, torch.from_numpy(want))


def test_tensor_inputs_are_not_copied():
    """The kernel reads the tensor's own memory: the data pointer numpy sees is the tensor's."""
    from moac.jit.kernel import as_array
    t = torch.arange(12, dtype=torch.float32)
    a, is_torch = as_array("x", t)
    assert is_torch and a.ctypes.data == t.data_ptr()
    b = torch.zeros(4, dtype=torch.bfloat16)
    v, _ = as_array("K", b)
    assert v.dtype == np.uint16 and v.ctypes.data == b.data_ptr()


def test_a_tensor_that_requires_grad_is_read():
    prog = program("f32")
    kern = prog.compile(target="c")
    arrays, _ = random_inputs(prog, SIZES, 1)
    t = {k: torch.from_numpy(v).requires_grad_(True) for k, v in arrays.items()}
    assert torch.equal(kern(**t)["out"], torch.from_numpy(kern(**arrays)["out"]))


def test_non_contiguous_tensors_and_wrong_dtypes_are_refused():
    prog = program("f32")
    kern = prog.compile(target="c")
    arrays, _ = random_inputs(prog, SIZES, 1)
    t = {k: torch.from_numpy(v) for k, v in arrays.items()}
    with pytest.raises(moac.ArgumentError, match="'K' must be C-contiguous"):
        kern(**{**t, "K": t["K"].transpose(1, 2)})
    with pytest.raises(moac.ArgumentError, match="'Q' must have dtype float32"):
        kern(**{**t, "Q": t["Q"].double()})


def test_dlpack_objects_are_read():
    class Capsule:                        # any producer of DLPack, here wrapping a tensor
        def __init__(self, t):
            self.t = t

        def __dlpack__(self, **kw):
            return self.t.__dlpack__(**kw)

        def __dlpack_device__(self):
            return self.t.__dlpack_device__()
    prog = program("f32")
    kern = prog.compile(target="openmp")
    arrays, _ = random_inputs(prog, SIZES, 2)
    got = kern(**{k: Capsule(torch.from_numpy(v)) for k, v in arrays.items()})["out"]
    np.testing.assert_array_equal(got, kern(**arrays)["out"])


@pytest.mark.parametrize("kind", ["numpy", "torch"])
def test_out_writes_into_the_given_array(kind):
    prog = program("bf16")
    kern = prog.compile(target="openmp")
    arrays, _ = random_inputs(prog, SIZES, 4)
    want = kern(**arrays)["out"]
    dest = np.full_like(want, np.nan) if kind == "numpy" else torch.full(want.shape, float("nan"))
    res = kern(**arrays, out={"out": dest})
    assert res["out"] is dest
    np.testing.assert_array_equal(np.asarray(dest), want)


def test_out_is_checked_before_any_c():
    prog = program("f32")
    kern = prog.compile(target="c")
    arrays, _ = random_inputs(prog, SIZES, 4)
    with pytest.raises(moac.ArgumentError, match="out\\['out'\\] must be a float32 array of shape"):
        kern(**arrays, out={"out": np.zeros((3, 3), np.float32)})
    with pytest.raises(moac.ArgumentError, match="does not output"):
        kern(**arrays, out={"nope": np.zeros(1, np.float32)})
    with pytest.raises(moac.ArgumentError, match="shares memory with input 'Q'"):
        kern(**arrays, out={"out": arrays["Q"][: SIZES["hq"]].reshape(SIZES["hq"], 16)})


def test_out_arrays_and_updated_tensors_come_back_as_the_callers_objects():
    # with a tensor among the inputs, a numpy out= array came back as a new torch tensor and
    # an updated tensor as another tensor object (sharing memory): README says "written and
    # returned" (a review, 2026-12-05)
    torch = pytest.importorskip("torch")
    import moac
    from test_back_common import example
    k = example("matmul").compile(target="c")
    C = np.zeros((3, 3), np.float32)
    r = k(A=torch.ones(3, 3), B=np.ones((3, 3), np.float32), x=np.ones(3, np.float32), out={"C": C})
    assert r["C"] is C and np.all(C == 3) and isinstance(r["y"], torch.Tensor)
    src = "size N, n, d\ninput C : f32 ⟨N d⟩\ninput x : f32 ⟨d⟩\nC2 = (n △ C) # x\ny = x × 2\nupdate C ← C2\noutput y\n"
    cache = torch.zeros(4, 3)
    r = moac.parse(src, "app.moa").compile(target="c")(C=cache, x=torch.ones(3), n=1)
    assert r["C"] is cache and cache[1].tolist() == [1.0, 1.0, 1.0]
