"""moac.torch_op (#12): a kernel as a torch.library custom op.  Eager results are the
Kernel's bit for bit, torch.library.opcheck passes (schema, fake tensors, AOT dispatch
with dynamic shapes), torch.compile(fullgraph=True) runs it with no graph break and, with
dynamic=True, once for several sizes; bf16 inputs, in-place updates, several outputs."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import moac
from moac.errors import ArgumentError

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit.script_method` is deprecated:DeprecationWarning")  # inductor's
from moac.torch_op import _Plan, _pick, as_custom_op  # noqa: E402  (imports torch)

ROOT = Path(__file__).resolve().parent.parent
TWO_OUTPUTS = "size n, m\ninput A : f32 ⟨n m⟩\ninput x : f32 ⟨m⟩\ny = A +.× x\nt = ⍉A\noutput y, t\n"


def kernel(name: str, target: str = "c", text: str | None = None):
    prog = moac.load(ROOT / "examples" / f"{name}.moa") if text is None else moac.parse(text, f"{name}.moa")
    return prog.compile(target=target)


def gqa_bf16():
    text = (ROOT / "examples/decode_gqa.moa").read_text(encoding="utf-8")
    return text.replace("input K : f32", "input K : bf16").replace("input V : f32", "input V : bf16")


def rand(*shape, seed=0, dtype=torch.float32):
    return torch.rand(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


def decode_args(n, seed=0):
    return rand(16, seed=seed), rand(n, 16, seed=seed + 1), rand(n, 8, seed=seed + 2)


def gqa_args(hkv, g, n, seed=0, kv=torch.float32):
    return (rand(hkv * g, 16, seed=seed), rand(hkv, n, 16, seed=seed + 1, dtype=kv),
            rand(hkv, n, 8, seed=seed + 2, dtype=kv))


def step_args(n=5, seed=0):
    """decode_step: caches of N = 12 rows holding n, the query and the new key and value."""
    return (rand(12, 16, seed=seed), rand(12, 8, seed=seed + 1), rand(16, seed=seed + 2), rand(16, seed=seed + 3),
            rand(8, seed=seed + 4), n)


CASES = {   # name: (kernel source, the op's positional arguments, the Kernel's keyword names)
    "decode": (lambda: kernel("decode"), lambda: decode_args(10), ["q", "K", "V"]),
    "decode_gqa": (lambda: kernel("decode_gqa"), lambda: gqa_args(2, 3, 10), ["Q", "K", "V"]),
    "decode_gqa_bf16": (lambda: kernel("gqa_bf16", text=gqa_bf16()), lambda: gqa_args(2, 3, 10, kv=torch.bfloat16),
                        ["Q", "K", "V"]),
    "decode_step": (lambda: kernel("decode_step"), step_args, ["Kc", "Vc", "q", "k", "v", "n"]),
    "two_outputs": (lambda: kernel("two", text=TWO_OUTPUTS), lambda: (rand(5, 3), rand(3, seed=1)), ["A", "x"]),
}


def clone(args):
    return tuple(a.clone() if isinstance(a, torch.Tensor) else a for a in args)


@pytest.mark.parametrize("case", list(CASES))
def test_eager_result_is_the_kernels_bit_for_bit(case):
    make, args_of, names = CASES[case]
    k = make()
    op = as_custom_op(k)
    args = args_of()
    mine, theirs = clone(args), clone(args)
    got = op(*mine)
    want = k(**dict(zip(names, theirs)))
    prog_outputs = [name for name, _ in k.onf.dnf.program.outputs]
    got = got if isinstance(got, tuple) else (got,)
    assert len(got) == len(prog_outputs)
    for g, name in zip(got, prog_outputs):
        assert g.dtype == want[name].dtype == torch.float32 and torch.equal(g, want[name])
    for a, b in zip(mine, theirs):                     # in-place updates happen, and identically
        if isinstance(a, torch.Tensor):
            assert torch.equal(a, b)
    if case == "decode_step":
        assert not torch.equal(mine[0], args[0]) and torch.equal(mine[0][5], args[3])   # row n is the new key


@pytest.mark.parametrize("case", list(CASES))
def test_opcheck(case):
    """Schema (mutations declared are the ones made), autograd registration, fake tensors
    against the real kernel, and AOT dispatch with dynamic shapes."""
    make, args_of, _ = CASES[case]
    res = torch.library.opcheck(as_custom_op(make()), args_of())
    assert set(res) >= {"test_schema", "test_faketensor", "test_aot_dispatch_dynamic"}
    assert all(v == "SUCCESS" for v in res.values()), res


def test_schema_arguments_outputs_and_mutations():
    op = as_custom_op(kernel("decode_step"))
    schema = op._opoverload._schema
    assert [a.name for a in schema.arguments] == ["Kc", "Vc", "q", "k", "v", "n"]
    assert [a.name for a in schema.arguments if a.alias_info is not None and a.alias_info.is_write] == ["Kc", "Vc"]
    assert str(schema).endswith("SymInt n) -> Tensor")           # a symbolic int under dynamic shapes
    two = as_custom_op(kernel("two", text=TWO_OUTPUTS))
    assert [str(r.type) for r in two._opoverload._schema.returns] == ["Tensor", "Tensor"]
    y, t = two(rand(5, 3), rand(3))
    assert y.shape == (5,) and t.shape == (3, 5)


def test_python_keywords_are_renamed_in_the_schema():
    k = kernel("kw", text="size n\ninput lambda : f32 ⟨n⟩\ninput out : f32 ⟨n⟩\ny = lambda × out\noutput y\n")
    op = as_custom_op(k)
    assert [a.name for a in op._opoverload._schema.arguments] == ["lambda_", "out_"]
    a, b = rand(4), rand(4, seed=1)
    assert torch.equal(op(a, b), a * b)


def test_meta_tensors_take_the_fake_path():
    op = as_custom_op(kernel("decode_gqa"))
    out = op(*(t.to("meta") for t in gqa_args(2, 3, 10)))
    assert out.device.type == "meta" and out.shape == (6, 8) and out.dtype == torch.float32


def test_symbolic_plan():
    """The sizes under dynamic shapes: whole axes, g from ⟨(g·hkv) dk⟩ by division; an
    alias m = n + 1 leaves n unreachable (the fake binds on the shapes then)."""
    steps = _Plan(kernel("decode_gqa")).sources
    assert [(s[0], s[1]) for s in steps] == [("dk", "axis"), ("hkv", "axis"), ("n", "axis"), ("dv", "axis"),
                                             ("g", "factor")]
    assert steps[-1][2:] == (0, 0, 1, ["hkv"])
    alias = kernel("alias", text="size n\nsize m = n + 1\ninput x : f32 ⟨m⟩\ny = n △ x\noutput y\n")
    assert _Plan(alias).sources is None
    assert _Plan(kernel("decode_step")).int_sizes == ["n"]
    res = torch.library.opcheck(as_custom_op(alias), (rand(6),))
    assert all(v == "SUCCESS" for v in res.values()), res


def test_the_same_kernel_gives_the_same_op():
    k = kernel("decode")
    op = as_custom_op(k)
    assert as_custom_op(k) is op and as_custom_op(kernel("decode")) is op
    assert op._opoverload is getattr(torch.ops.moac, op._name).default
    assert re.fullmatch(r"moac_decode_[0-9a-f]{10}", op._name)
    named = as_custom_op(k, name="my_decode", namespace="moac_test")
    assert named is not op and torch.equal(named(*decode_args(4)), op(*decode_args(4)))
    assert torch.ops.moac_test.my_decode.default is named._opoverload


def test_registration_errors_are_messages():
    k = kernel("decode")
    with pytest.raises(ArgumentError, match="ASCII identifier"):
        as_custom_op(k, name="a::b")
    with pytest.raises(ArgumentError, match="ASCII identifier"):
        as_custom_op(k, namespace="my lib")
    with pytest.raises(ArgumentError, match="must be callable"):
        as_custom_op(k, device_kernel=3)
    with pytest.raises(ArgumentError, match="namespace 'aten' is torch's own"):   # aten::add again broke
        as_custom_op(k, name="add", namespace="aten")                            # every later torch.compile
    as_custom_op(k, name="taken_once", namespace="moac_test")
    with pytest.raises(ArgumentError, match="already registered for another kernel"):
        as_custom_op(kernel("decode_gqa"), name="taken_once", namespace="moac_test")
    with pytest.raises(ArgumentError, match="already registered with no device_kernel"):
        as_custom_op(k, name="taken_once", namespace="moac_test", device_kernel=lambda **kw: kw)


def test_call_errors_are_the_kernels_messages():
    op = as_custom_op(kernel("decode"))
    q, K, V = decode_args(10)
    with pytest.raises(ArgumentError, match=r"input 'V' axis 0 must have length n = 10, got 9"):
        op(q, K, V[:9])
    with pytest.raises(ArgumentError, match="must have dtype float32"):
        op(q.double(), K, V)
    step = as_custom_op(kernel("decode_step"))
    with pytest.raises(ArgumentError, match="'Kc' is full"):
        step(*step_args(n=12))


def test_device_dispatch():
    """CPU tensors run the Kernel; CUDA tensors the device_kernel, or a message without
    one (decided on the devices alone: this machine may have no GPU)."""
    k, dk = object(), object()
    cpu, cuda = torch.device("cpu"), torch.device("cuda", 0)
    assert _pick(k, None, [cpu, cpu]) is k and _pick(k, dk, [cpu]) is k
    assert _pick(k, dk, [cuda, cuda]) is dk
    with pytest.raises(ArgumentError, match="CUDA tensors need the device entry of a GPU bundle"):
        _pick(k, None, [cuda])
    with pytest.raises(ArgumentError, match="all on one device"):
        _pick(k, dk, [cpu, cuda])


def test_importing_moac_does_not_import_torch():
    code = "import sys, moac; moac.load('examples/decode.moa'); print('torch' in sys.modules)"
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert r.returncode == 0 and r.stdout.strip() == "False", r.stderr


# ---- torch.compile (inductor): a few seconds per compile on a small machine
def compiled(fn, **kw):
    """torch.compile(fn, fullgraph=True) with a counter of the frames dynamo compiles."""
    from torch._dynamo.testing import CompileCounterWithBackend
    counter = CompileCounterWithBackend("inductor")
    return torch.compile(fn, backend=counter, fullgraph=True, **kw), counter


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    yield
    torch._dynamo.reset()


@pytest.mark.torch_compile
def test_compile_dynamic_n_decode():
    """Torch ops around the op, no graph break (fullgraph), one compile for n = 10 and 23.
    The op's output is eager's bit for bit; inductor's sum may add in another order."""
    op = as_custom_op(kernel("decode", target="openmp"))

    def f(q, K, V):
        out = op(q * 0.5, K, V)
        return out, out.sum() + 1
    g, counter = compiled(f, dynamic=True)
    for n in (10, 23):
        args = decode_args(n, seed=n)
        (out, total), (want, want_total) = g(*args), f(*args)
        assert torch.equal(out, want) and torch.allclose(total, want_total, rtol=1e-6, atol=0)
    assert counter.frame_count == 1


@pytest.mark.torch_compile
def test_compile_dynamic_gqa_bf16_every_size():
    """GQA with bf16 K/V: n, hkv and g all change and it is still one graph (g comes from
    Q's first axis divided by hkv, no guard on it)."""
    op = as_custom_op(kernel("gqa_bf16", text=gqa_bf16()))

    def f(Q, K, V):
        return op(Q * 2, K, V) * 3
    g, counter = compiled(f, dynamic=True)
    for hkv, grp, n in ((2, 3, 10), (3, 4, 23)):
        args = gqa_args(hkv, grp, n, seed=n, kv=torch.bfloat16)
        got = g(*args)
        assert got.shape == (hkv * grp, 8) and torch.equal(got, f(*args))
    assert counter.frame_count == 1


@pytest.mark.torch_compile
def test_compile_update_in_place():
    """decode_step: the caches the op updates in place come out of the compiled function
    as out of eager, for two n passed as ints (symbolic: one compile)."""
    op = as_custom_op(kernel("decode_step"))

    def f(Kc, Vc, q, k, v, n):
        return op(Kc, Vc, q, k * 2, v, n) + 1
    g, counter = compiled(f, dynamic=True)
    for n in (3, 7):
        a, b = step_args(n, seed=n), step_args(n, seed=n)
        assert torch.equal(g(*a), f(*b))
        assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) and torch.equal(a[0][n], b[3] * 2)
    assert counter.frame_count == 1


@pytest.mark.torch_compile
def test_the_docs_example_runs(monkeypatch):
    """The Python blocks of docs/torch.md, as written, run from the repository root."""
    text = (ROOT / "docs/torch.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert blocks
    monkeypatch.chdir(ROOT)
    exec(compile("\n".join(blocks), "docs/torch.md", "exec"), {"__name__": "docs_torch"})
