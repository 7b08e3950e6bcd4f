"""moac.gpu: the light package that loads GPU bundles and calls their device entry on torch
CUDA tensors.  Without a GPU: the import stays light, the size binder works on manifests,
a real OpenACC bundle loads (dlopen works without a GPU; libgomp then sees no device), the
argument errors are messages, the command lines parse.  Calls on a GPU are marked `gpu`
(bench/gpu_tensors.py checks the tensor path there in one run)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from moac.errors import ArgumentError, DeviceError, return_code_error
from moac.gpu import Binder, Expr, Manifest

from test_back_common import ROOT, moac_cli
from test_back_offload import _OK as OFFLOAD_OK, _WHY as OFFLOAD_WHY


def _env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    return env


def py(code: str, cwd=ROOT, timeout: float = 120) -> subprocess.CompletedProcess:
    """`python -c CODE` in a fresh process (a bundle's libgomp must not enter this one)."""
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=cwd, env=_env(), capture_output=True,
                          text=True, timeout=timeout, check=False)


# ---------------------------------------------------------------- import lightness
def test_import_needs_no_compiler_dependency():
    r = py("""
        import sys
        import moac.gpu, moac.gpu.run
        heavy = {'sympy', 'lark', 'jinja2', 'cffi', 'moac.program', 'moac.front', 'moac.jit.kernel', 'torch'}
        print(sorted(heavy & set(sys.modules)))
        assert 'sympy' not in sys.modules
    """)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"
    t = subprocess.run([sys.executable, "-X", "importtime", "-c", "import moac.gpu"], env=_env(),
                       capture_output=True, text=True, check=True)
    modules = {line.rsplit("|", 1)[-1].strip() for line in t.stderr.splitlines() if line.startswith("import time:")}
    assert "moac.gpu.bundle" in modules
    assert not {m for m in modules if m.split(".")[0] in ("sympy", "lark", "jinja2", "cffi", "torch")}


def test_lazy_package_still_offers_the_compiler_api():
    r = py("""
        import sys, moac
        assert 'moac.program' not in sys.modules
        print(moac.load.__module__, moac.Program.__name__, moac.options.Options.__name__)
        try:
            moac.no_such_thing
        except AttributeError as e:
            print('AttributeError', e)
    """)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["moac.program Program Options",
                                     "AttributeError module 'moac' has no attribute 'no_such_thing'"]


# ---------------------------------------------------------------- expressions and binding
@pytest.mark.parametrize("text, env, want", [
    ("g*hkv", {"g": 4, "hkv": 8}, 32), ("n + 1 <= N", {"n": 3, "N": 4}, True), ("n + 1 <= N", {"n": 4, "N": 4}, False),
    ("(w <= n) & (1 <= n)", {"w": 2, "n": 3}, True), ("Max(n, 3)", {"n": 1}, 3), ("ceiling(n/4)", {"n": 9}, 3),
    ("2*n**2 - 1", {"n": 3}, 17), ("128", {}, 128), ("Eq(n, 2)", {"n": 2}, True)])
def test_expressions_evaluate_exactly(text, env, want):
    assert Expr(text)(env) == want


def test_division_is_exact():
    from fractions import Fraction
    assert Expr("n/2")({"n": 3}) == Fraction(3, 2)
    assert Expr("n/2")({"n": 4}) == 2 and isinstance(Expr("n/2")({"n": 4}), int)


@pytest.mark.parametrize("text", ["__import__('os')", "n.real", "[n]", "lambda: 1", "open('x')", "n if m else k", "1.5"])
def test_expressions_outside_the_grammar_are_refused(text):
    with pytest.raises(ValueError, match="cannot read the expression"):
        Expr(text)


GQA = {
    "function": "moac_decode_gqa", "target": "cuda", "stream": True, "ctype": "float", "fixed": {},
    "params": [{"name": "Q", "kind": "input", "shape": ["g*hkv", "dk"], "dtype": "f32"},
               {"name": "K", "kind": "input", "shape": ["hkv", "n", "dk"], "dtype": "bf16"},
               {"name": "V", "kind": "input", "shape": ["hkv", "n", "dv"], "dtype": "bf16"},
               {"name": "out", "kind": "output", "shape": ["g*hkv", "dv"], "dtype": "f32"},
               {"name": "hkv", "kind": "size", "shape": [], "dtype": "i64"},
               {"name": "n", "kind": "size", "shape": [], "dtype": "i64"},
               {"name": "dk", "kind": "size", "shape": [], "dtype": "i64"},
               {"name": "dv", "kind": "size", "shape": [], "dtype": "i64"},
               {"name": "g", "kind": "size", "shape": [], "dtype": "i64"}],
    "derived": {"hq": "g*hkv"},
}


def shapes(hq=32, hkv=8, n=100, dk=16, dv=8):
    return {"Q": (hq, dk), "K": (hkv, n, dk), "V": (hkv, n, dv)}


def test_binder_binds_plain_sizes_and_solves_g_from_the_shapes():
    m = Manifest(GQA)
    assert m.binder.bind(shapes(), {}) == {"hkv": 8, "n": 100, "dk": 16, "dv": 8, "g": 4, "hq": 32}
    env = m.binder.bind(shapes(hq=8, hkv=8), {})                # MHA: g = 1
    assert env["g"] == 1
    assert m.shapes(env, ("output",)) == {"out": (8, 8)}


@pytest.mark.parametrize("sh, given, message", [
    (shapes(hq=31), {}, "input 'Q' axis 0 is 31, but it must be g*hkv (hkv = 8 from input 'K' axis 0), and no "
                        "non-negative integer g gives 31"),
    ({**shapes(), "V": (8, 99, 8)}, {}, "input 'V' axis 1 must have length n = 100 (from input 'K' axis 1), got 99"),
    ({**shapes(), "V": (8, 100)}, {}, "input 'V' must have rank 3 (shape ⟨hkv n dv⟩), got shape (8, 100)"),
    (shapes(), {"g": 3}, "input 'Q' axis 0 must have length g*hkv = 24 (hkv = 8 from input 'K' axis 0, g = 3 given), "
                         "got 32"),
    (shapes(), {"hq": 30}, "no non-negative integer g gives 30"),
    (shapes(), {"hq": 16, "g": 2}, "input 'Q' axis 0 must have length g*hkv = 16"),
    (shapes(), {"zz": 1}, "the bundle has no size 'zz' (sizes: hkv, n, dk, dv, g, hq)"),
    (shapes(), {"n": -1}, "size n must be a non-negative integer, got -1"),
    (shapes(), {"n": 2.0}, "size n must be a non-negative integer, got 2.0"),
    ({"Q": (32, 16), "K": (8, 100, 16)}, {}, "missing input 'V'"),
])
def test_binder_errors_name_the_input_axis_and_sizes(sh, given, message):
    with pytest.raises(ArgumentError) as e:
        Manifest(GQA).binder.bind(sh, given)
    assert message in e.value.message


def test_binder_checks_sizes_fixed_at_build_time():
    fixed = dict(GQA, fixed={"dk": 16, "dv": 8, "hkv": 8, "g": 4},
                 params=[dict(p, shape=[s.replace("g*hkv", "32").replace("hkv", "8").replace("dk", "16")
                                        .replace("dv", "8") for s in p["shape"]])
                         for p in GQA["params"] if p["kind"] != "size" or p["name"] == "n"])
    m = Manifest(fixed)
    assert m.size_params == ["n"]
    assert m.binder.bind(shapes(), {})["n"] == 100
    with pytest.raises(ArgumentError, match="size dk = 64, but the bundle was built for dk = 16"):
        m.binder.bind(shapes(), {"dk": 64})
    with pytest.raises(ArgumentError, match=r"input 'Q' axis 0 must have length 32, got 16"):
        m.binder.bind(shapes(hq=16), {})


def test_a_size_no_shape_fixes_must_be_given_and_conditions_hold():
    window = Binder([("q", [Expr("dk")]), ("K", [Expr("n"), Expr("dk")])], ["n", "w", "dk"], {}, {},
                    [(Expr("w <= n"), "△ count |-w| must not exceed n")])
    with pytest.raises(ArgumentError, match="size w is not fixed by any input's shape; pass it by name"):
        window.bind({"q": (4,), "K": (10, 4)})
    assert window.bind({"q": (4,), "K": (10, 4)}, {"w": 3}) == {"n": 10, "dk": 4, "w": 3}
    with pytest.raises(ArgumentError, match=r"△ count \|-w\| must not exceed n, but n = 10, w = 11"):
        window.bind({"q": (4,), "K": (10, 4)}, {"w": 11})


def test_sizes_from_names_alone_solve_a_derived_size():
    m = Manifest(GQA)
    assert m.sizes({"hq": 32, "hkv": 8, "n": 10, "dk": 4, "dv": 2})["g"] == 4
    with pytest.raises(ArgumentError, match=r"sizes hkv, dk, dv, g are not given \(-D NAME=VALUE\)"):
        m.sizes({"n": 4}, " (-D NAME=VALUE)")


def test_a_manifest_that_is_not_one_is_a_message(tmp_path):
    from moac.errors import MoacError
    p = tmp_path / "x.json"
    p.write_text("[1, 2]")
    with pytest.raises(MoacError, match="not a moac bundle manifest"):
        Manifest.read(p)
    p.write_text(json.dumps({"function": "f", "params": [{"name": "x", "kind": "input", "shape": ["n("]}]}))
    with pytest.raises(MoacError, match="not a moac bundle manifest .*cannot read the expression"):
        Manifest.read(p)


def test_return_codes_map_to_the_host_kernels_messages():
    assert isinstance(return_code_error("f", 5), DeviceError)
    assert "shows none (cudaGetDeviceCount)" in str(return_code_error("f", 5))
    e = return_code_error("f", 2, ("K", "V"))
    assert isinstance(e, ArgumentError) and e.message.startswith("K, V: the kernel reads these inputs in packed")
    assert "--index-bits 64" in return_code_error("f", 3).message
    assert isinstance(return_code_error("f", 4), DeviceError) and "launch failed" in return_code_error("f", 4).message
    e = return_code_error("f", 1)
    assert isinstance(e, MemoryError) and "scratch memory could not be allocated" in str(e)


# ---------------------------------------------------------------- a real bundle
@pytest.fixture(scope="module")
def bundles(tmp_path_factory):
    if not OFFLOAD_OK:
        pytest.skip(OFFLOAD_WHY)
    d = tmp_path_factory.mktemp("bundles")
    for name in ("decode", "decode_gqa"):
        r = moac_cli("compile", f"examples/{name}.moa", "--target", "openacc", "--offload", "nvptx",
                     "-o", str(d / f"{name}.c"))
        assert r.returncode == 0, r.stdout + r.stderr
    return d


@pytest.mark.offload
def test_load_bundle_makes_the_bundles_libgomp_the_process_one(bundles):
    r = py(f"""
        import sys
        from moac.gpu import load_bundle
        k = load_bundle({str(bundles / 'decode.json')!r})
        print(repr(k))
        maps = sorted({{l.split()[-1] for l in open('/proc/self/maps') if 'libgomp' in l}})
        print(maps)
        print(k.runtime.acc_get_num_devices(5), k.stream, k.manifest.size_params, k.manifest.data['constraints'])
        assert 'torch' not in sys.modules
    """)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "<moac.gpu.DeviceKernel moac_decode target openacc: inputs q, K, V; outputs out; decode.so>"
    lib = str((bundles / "lib").resolve())
    assert eval(lines[1]) == [f"{lib}/libgomp-plugin-nvptx.so.1", f"{lib}/libgomp.so.1"]
    ndev, rest = lines[2].split(" ", 1)
    if shutil.which("nvidia-smi") is None:             # no GPU here: the runtime says so, and does not crash
        assert ndev == "0"
    assert rest == "False ['n', 'dk', 'dv'] []"


@pytest.mark.offload
def test_argument_errors_are_messages(bundles):
    r = py(f"""
        from moac.gpu import load_bundle
        k = load_bundle({str(bundles / 'decode_gqa.json')!r})
        import numpy as np, torch
        from moac.errors import ArgumentError
        Q, K, V = torch.zeros(32, 16), torch.zeros(8, 10, 16), torch.zeros(8, 10, 4)
        cases = dict(cpu=dict(Q=Q, K=K, V=V), dtype=dict(Q=Q.double(), K=K, V=V), strided=dict(Q=torch.zeros(16, 32).t(), K=K, V=V),
                     numpy=dict(Q=Q.numpy(), K=K, V=V), other=dict(Q=[1.0], K=K, V=V), missing=dict(Q=Q, K=K),
                     extra=dict(Q=Q, K=K, V=V, x=1))
        for name, kw in cases.items():
            try:
                k(**kw)
                print(name, 'NO ERROR')
            except ArgumentError as e:
                print(name, '|', e.message)
    """)
    assert r.returncode == 0, r.stderr
    got = dict(line.split(" | ", 1) for line in r.stdout.splitlines())
    assert got == {
        "cpu": "input 'Q' is a cpu tensor: a bundle's device entry takes CUDA tensors (move it with .cuda(), or "
               "call the host Kernel, moac.load(FILE).compile(...), which takes CPU tensors)",
        "dtype": "input 'Q' must have dtype torch.float32 (declared f32), got torch.float64",
        "strided": "input 'Q' must be C-contiguous (use .contiguous())",
        "numpy": "input 'Q' is a numpy array: a bundle's device entry takes torch CUDA tensors (host arrays go to "
                 "the host Kernel, moac.load(FILE).compile(...))",
        "other": "input 'Q' must be a torch CUDA tensor, got list",
        "missing": "missing input 'V'",
        "extra": "unexpected argument(s) x; the kernel takes Q, K, V (and sizes by name: hkv, n, dk, dv, g, hq)",
    }


@pytest.mark.offload
def test_torch_loaded_first_is_a_clear_error(bundles):
    torch = pytest.importorskip("torch")
    if not (Path(torch.__file__).parent / "lib" / "libgomp.so.1").exists():
        pytest.skip("this torch ships no libgomp.so.1")
    r = py(f"""
        import torch
        from moac.gpu import load_bundle
        from moac.errors import MoacError
        try:
            load_bundle({str(bundles / 'decode.json')!r})
        except MoacError as e:
            print(e.message)
    """)
    assert r.returncode == 0, r.stderr
    assert "another libgomp.so.1 is loaded already" in r.stdout
    assert "load OpenACC bundles before `import torch`, or start Python with LD_LIBRARY_PATH=" in r.stdout
    # the way out it names: with LD_LIBRARY_PATH, torch itself loads the bundle's libgomp
    lib = (bundles / "lib").resolve()
    env = dict(_env(), LD_LIBRARY_PATH=str(lib))
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(f"""
        import torch
        from moac.gpu import load_bundle
        load_bundle({str(bundles / 'decode.json')!r})
        print(sorted({{l.split()[-1] for l in open('/proc/self/maps') if 'libgomp' in l}}))
    """)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert eval(r.stdout) == [f"{lib}/libgomp-plugin-nvptx.so.1", f"{lib}/libgomp.so.1"]


@pytest.mark.offload
def test_two_bundle_directories_share_one_libgomp(bundles, tmp_path):
    shutil.copytree(bundles / "lib", tmp_path / "lib")
    for ext in (".json", ".so"):
        shutil.copy(bundles / f"decode{ext}", tmp_path / f"decode{ext}")
    r = py(f"""
        from moac.gpu import load_bundle
        a = load_bundle({str(bundles / 'decode.json')!r})
        b = load_bundle({str(tmp_path / 'decode.json')!r})
        print(len({{l.split()[-1] for l in open('/proc/self/maps') if 'libgomp.so' in l}}))
    """)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "1"          # the copy is not loaded a second time


@pytest.mark.offload
def test_a_bundle_without_its_library_is_a_message(bundles, tmp_path):
    shutil.copy(bundles / "decode.json", tmp_path / "decode.json")
    r = py(f"""
        from moac.gpu import load_bundle
        from moac.errors import MoacError
        try:
            load_bundle({str(tmp_path / 'decode')!r})
        except MoacError as e:
            print(e.message)
    """)
    assert r.returncode == 0 and "decode.so is missing" in r.stdout, r.stdout + r.stderr


@pytest.mark.offload
def test_the_call_path_end_to_end_on_libgomps_host_fallback(bundles):
    """Without a GPU libgomp runs an OpenACC device entry on the host, deviceptr() being host
    addresses: with torch's CUDA parts stubbed (the device check, the stream, the device
    set-up) the whole call — binding, argument order, workspace, outputs, out= — runs the
    real bundle on CPU tensors, against float64."""
    if shutil.which("nvidia-smi") is not None:
        pytest.skip("a GPU is visible: libgomp would not fall back to the host")
    env = {k: v for k, v in _env().items() if k != "ACC_DEVICE_TYPE"}
    code = textwrap.dedent(f"""
        import contextlib
        from moac.gpu import DeviceKernel, load_bundle
        from moac.gpu.run import decode_reference
        k = load_bundle({str(bundles / 'decode_gqa.json')!r})
        import torch

        class Stream:
            cuda_stream = 0
            def synchronize(self):
                pass
        torch.cuda.device = lambda d: contextlib.nullcontext()
        torch.cuda.current_stream = lambda d=None: Stream()
        torch.cuda.is_current_stream_capturing = lambda: False
        check = DeviceKernel._check
        def host_ok(what, t, dtype, torch):
            try:
                check(what, t, dtype, torch)
            except Exception as e:
                if "cpu tensor" not in str(e):
                    raise
        DeviceKernel._check = staticmethod(host_ok)
        DeviceKernel._acc_ready = lambda self, torch, device: None
        g = torch.Generator().manual_seed(0)
        Q, K, V = (torch.randn(s, generator=g) for s in ((12, 16), (4, 100, 16), (4, 100, 8)))
        out = k(Q=Q, K=K, V=V)["out"]
        print(tuple(out.shape), (out.double() - decode_reference(Q, K, V, torch)).abs().max().item())
        mine = torch.full((12, 8), float("nan"))
        r = k(out={{"out": mine}}, Q=Q, K=K, V=V)
        print(r["out"] is mine, torch.equal(mine, out), k.prepare(Q=Q, K=K, V=V).sizes)
        import gc, weakref
        Q2, K2, V2 = (x.clone() for x in (Q, K, V))
        L = k.prepare(Q=Q2, K=K2, V=V2)
        held = [weakref.ref(x) for x in (Q2, K2, V2)]
        del Q2, K2, V2
        gc.collect()
        print(all(w() is not None for w in held), torch.equal(L()["out"], out))
    """)
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    first, second, third = r.stdout.splitlines()
    shape, err = first.rsplit(" ", 1)
    assert shape == "(12, 8)" and float(err) < 1e-5
    assert second == "True True {'dk': 16, 'hkv': 4, 'n': 100, 'dv': 8, 'g': 3, 'hq': 12}"
    assert third == "True True"          # a Launch holds its inputs: the caller's copies may go


# ---------------------------------------------------------------- command lines
def test_cli_help_and_usage_errors(tmp_path):
    for argv in ([sys.executable, "-m", "moac.gpu", "--help"], [sys.executable, "-m", "moac", "run", "--help"]):
        r = subprocess.run(argv, env=_env(), capture_output=True, text=True, check=False)
        assert r.returncode == 0, r.stderr
        assert "-D NAME=VALUE" in r.stdout and "--reps" in r.stdout and "--json OUT" in r.stdout
        assert "--cold" in r.stdout and "L2 cache evicted" in " ".join(r.stdout.split())
    assert "usage: moac run " in r.stdout
    top = moac_cli("--help")
    assert "run" in top.stdout and "python -m moac.gpu" in top.stdout
    r = moac_cli("run", str(tmp_path / "none.json"))
    assert r.returncode == 1 and r.stderr.strip() == f"error: cannot read {tmp_path / 'none.json'}: No such file or directory"
    r = moac_cli("run", "x.json", "-D", "n=four")
    assert r.returncode == 2 and "moac run: error: -D n: 'four' is not an integer" in r.stderr
    r = moac_cli("run", "x.json", "--reps", "0")
    assert r.returncode == 2 and "must be at least 1" in r.stderr
    r = moac_cli("run")
    assert r.returncode == 2 and "required: BUNDLE.json" in r.stderr


@pytest.mark.offload
def test_cli_without_a_gpu_says_so(bundles):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    r = subprocess.run([sys.executable, "-m", "moac.gpu", str(bundles / "decode.json"), "-D", "n=64"], env=_env(),
                       capture_output=True, text=True, check=False)
    assert r.returncode == 1 and r.stderr.strip() == "error: torch sees no CUDA device: GPU bundles run on an NVIDIA GPU"
    assert "Traceback" not in r.stderr


def test_bench_scripts_find_the_package_without_pythonpath(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    for script in ("gpu_run.py", "gpu_tensors.py", "gpu_check.py"):
        r = subprocess.run([sys.executable, str(ROOT / "bench" / script), "--help"], cwd=tmp_path, env=env,
                           capture_output=True, text=True, check=False)
        assert r.returncode == 0 and r.stdout.startswith("usage:"), script + r.stderr


# ---------------------------------------------------------------- on a GPU
def _gpu() -> bool:
    try:
        import torch
        return torch.cuda.is_available()
    except ImportError:
        return False


@pytest.mark.gpu
@pytest.mark.offload
@pytest.mark.skipif(not _gpu(), reason="needs an NVIDIA GPU visible to torch")
def test_device_kernel_on_cuda_tensors(bundles):
    r = py(f"""
        from moac.gpu import load_bundle
        from moac.gpu.run import decode_reference
        k = load_bundle({str(bundles / 'decode_gqa.json')!r})
        import torch
        g = torch.Generator(device='cuda').manual_seed(0)
        Q, K, V = (torch.randn(s, device='cuda', generator=g) for s in ((32, 128), (8, 1000, 128), (8, 1000, 64)))
        out = k(Q=Q, K=K, V=V)['out']
        assert out.is_cuda and out.shape == (32, 64) and out.dtype == torch.float32
        print((out.double() - decode_reference(Q, K, V, torch)).abs().max().item())
        mine = torch.full((32, 64), float('nan'), device='cuda')
        assert k(out={{'out': mine}}, Q=Q, K=K, V=V)['out'] is mine
        assert torch.equal(mine, out)
    """, timeout=300)
    assert r.returncode == 0, r.stderr
    assert float(r.stdout) < 1e-4


@pytest.mark.gpu
@pytest.mark.skipif(not _gpu(), reason="needs an NVIDIA GPU visible to torch")
def test_kernel_time_on_cold_l2_leaves_the_flush_out():
    """kernel_time(flush=l2_flush(torch)): the flush's kernels run before every call and are
    not counted, and a read that L2 could keep is no faster cold than the same read warm
    (the cold time is at least the warm one, less the noise of a few per cent)."""
    r = py("""
        import torch
        from moac.gpu.run import kernel_time, l2_flush
        x = torch.ones(4 << 20, device='cuda')          # 16 MB: L2 keeps it between calls
        f = lambda: x * 2                               # not a reduction: none of its kernels is the flush's
        flush = l2_flush(torch)
        warm = kernel_time(f, lambda name: True, torch, 20)
        cold = kernel_time(f, lambda name: True, torch, 20, flush=flush)
        both = kernel_time(lambda: (flush(), f()), lambda name: True, torch, 20)
        print(warm, cold, both)
    """, timeout=300)
    assert r.returncode == 0, r.stderr
    warm, cold, both = map(float, r.stdout.split())
    assert cold >= 0.95 * warm
    assert both > 2 * cold                   # the flush (a read of twice the L2) counted only here


def test_alternated_rounds_turn_the_order_so_drift_falls_on_every_timer():
    """moac.gpu.run.alternated: each timer once a round, the order turned by one a round. A
    clock that drifts upward by one a call gives every timer the same median, where timing
    each timer's rounds in a block (the old run_one) gave the later ones larger figures."""
    from moac.gpu.run import alternated
    calls, clock = [], iter(range(100))
    timers = {k: (lambda k=k: (calls.append(k), next(clock))[1]) for k in ("moac", "moac_cold", "sdpa", "sdpa_cold")}
    got = alternated(timers, 4)
    assert calls == ["moac", "moac_cold", "sdpa", "sdpa_cold", "moac_cold", "sdpa", "sdpa_cold", "moac",
                     "sdpa", "sdpa_cold", "moac", "moac_cold", "sdpa_cold", "moac", "moac_cold", "sdpa"]
    assert got["moac"] == [0, 7, 10, 13] and got["sdpa"] == [2, 5, 8, 15]
    assert sum(got["moac"]) == sum(got["sdpa"]) == sum(got["moac_cold"]) == sum(got["sdpa_cold"])
    assert alternated({}, 3) == {} and alternated(timers, 0) == {k: [] for k in timers}


def test_the_gpu_runners_take_rounds():
    """--rounds is one option of both runners (moac.gpu.run.parser), a positive count."""
    from moac.gpu.run import parser
    ap = parser()
    assert ap.parse_args(["x.json"]).rounds == 5
    assert ap.parse_args(["x.json", "--rounds", "2"]).rounds == 2
    with pytest.raises(SystemExit):
        ap.parse_args(["x.json", "--rounds", "0"])
