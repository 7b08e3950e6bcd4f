"""API abuse (#10): each misuse is a clear error or a correct result, and the caller's
arrays are byte-identical after any refused call.  (Wrong dtypes, Fortran order, strided
views, wrong ranks and extents, missing and extra arguments are in test_back_build.py.)"""
from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

import moac
from moac.commands import random_inputs

from test_back_common import ROOT, example

TARGETS = ("c", "openmp", "openacc")
pytestmark = pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")


def _snapshot(arrays: dict) -> dict:
    return {k: v.copy() for k, v in arrays.items()}


def _same(a: dict, b: dict) -> bool:
    return all(a[k].tobytes() == b[k].tobytes() for k in a)


@pytest.mark.parametrize("target", TARGETS)
def test_a_reversed_view_is_refused_and_left_alone(target):
    prog = example("decode")
    kern = prog.compile(target=target)
    arrays, _ = random_inputs(prog, {"n": 9, "dk": 4, "dv": 3}, 0)
    arrays["K"] = arrays["K"][::-1]                       # negative strides
    before = _snapshot(arrays)
    with pytest.raises(moac.ArgumentError, match="'K' must be C-contiguous"):
        kern(**arrays)
    assert _same(arrays, before)


@pytest.mark.parametrize("target", TARGETS)
def test_a_read_only_input_is_read(target):
    prog = example("decode")
    kern = prog.compile(target=target)
    arrays, sizes = random_inputs(prog, {"n": 9, "dk": 4, "dv": 3}, 0)
    for a in arrays.values():
        a.flags.writeable = False
    got = kern(**arrays)["out"]
    np.testing.assert_allclose(got, prog.evaluate(**arrays)["out"], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("target", TARGETS)
def test_infinities_and_nans_in_the_inputs_agree_with_the_interpreter(target):
    prog = example("matmul")
    kern = prog.compile(target=target)
    arrays, _ = random_inputs(prog, {"n": 3, "m": 4, "p": 2}, 1)
    arrays["A"][0, 0], arrays["A"][1, 2], arrays["B"][3, 1] = np.inf, np.nan, -np.inf
    got, ref = kern(**arrays), prog.evaluate(**arrays)
    for out in got:
        assert np.array_equal(np.isnan(got[out]), np.isnan(ref[out])), out
        fin = np.isfinite(ref[out])
        assert np.array_equal(got[out][~fin & ~np.isnan(ref[out])], ref[out][~fin & ~np.isnan(ref[out])]), out
        np.testing.assert_allclose(got[out][fin], ref[out][fin], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("target", TARGETS)
def test_max_and_min_with_nans_agree_with_the_interpreter(target):
    # the kernels' max and min are C's fmax and fmin (a NaN gives way), the interpreter's
    # were numpy's maximum and minimum (a NaN wins): x max y, max red x and (log x) max 0
    # differed wherever x held a NaN (a review, 2026-12-05); now both follow fmax
    from moac.dnf.evaluate import evaluate_dnf
    prog = moac.parse("size n\ninput x : f32 ⟨n⟩\ninput y : f32 ⟨n⟩\na = x max y\nb = x min y\nc = max red x\n"
                      "d = min red x\nm = x (max.+) y\noutput a, b, c, d, m\n", "nan.moa")
    kern = prog.compile(target=target)
    for x, y in (([-1, 0, 2, np.nan, np.inf, -np.inf], [0, 0, 1, 1, 1, 0]), ([np.nan] * 3, [np.nan, 1, 2])):
        x, y = np.array(x, np.float32), np.array(y, np.float32)
        got, ref = kern(x=x, y=y), prog.evaluate(x=x, y=y)
        with np.errstate(invalid="ignore"):
            dnf = evaluate_dnf(prog.dnf(), {"x": x.astype(np.float64), "y": y.astype(np.float64)}, {"n": x.size})
        for out in ref:
            assert np.array_equal(np.asarray(got[out], np.float64), ref[out], equal_nan=True), (out, got[out], ref[out])
            assert np.array_equal(np.asarray(dnf[out], np.float64), ref[out], equal_nan=True), (out, dnf[out], ref[out])
    assert float(prog.evaluate(x=np.full(3, np.nan, np.float32), y=np.zeros(3, np.float32))["c"]) == -np.inf


@pytest.mark.parametrize("target", TARGETS)
def test_no_tokens_gives_what_the_interpreter_gives(target):
    prog = example("decode")
    kern = prog.compile(target=target)
    arrays, _ = random_inputs(prog, {"n": 0, "dk": 4, "dv": 3}, 0)
    got, ref = kern(**arrays)["out"], prog.evaluate(**arrays)["out"]
    np.testing.assert_array_equal(got, ref)                   # the empty softmax contraction is 0


def test_a_size_whose_buffers_overflow_is_refused():
    """A size passed by name that no input determines, so large that the output's byte
    count overflows: a clear error, no allocation attempt that crashes."""
    prog = moac.parse("size n, m\ninput x : f32 ⟨m⟩\ny = (ι n) + 0\nz = x × 2\noutput y, z\n", "iota.moa")
    kern = prog.compile(target="c")
    x = np.ones(3, np.float32)
    with pytest.raises((moac.ArgumentError, MemoryError)):
        kern(x=x, n=2 ** 62)
    with pytest.raises(moac.ArgumentError):
        kern(x=x, n=2 ** 64)
    assert np.array_equal(x, np.ones(3, np.float32))


@pytest.mark.parametrize("target", ("c", "openmp"))
def test_eight_threads_calling_one_kernel(target):
    prog = example("decode_gqa")
    kern = prog.compile(target=target, sizes={"dk": 32, "dv": 32, "hq": 4, "hkv": 2})
    cases = [random_inputs(prog, {"dk": 32, "dv": 32, "hq": 4, "hkv": 2, "n": 100 + 37 * s}, s)[0] for s in range(8)]
    want = [kern(**a)["out"] for a in cases]
    bad = []

    def worker(i):
        for _ in range(10):
            if not np.array_equal(kern(**cases[i])["out"], want[i]):
                bad.append(i)
    ts = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not bad


CHILD = """
import sys, numpy as np
sys.path.insert(0, {root!r})
import moac
prog = moac.parse(open({src!r}).read(), "race.moa")
k = prog.compile(target="c")
print(float(k(x=np.arange(4, dtype=np.float32))["y"].sum()))
"""


def test_four_processes_building_one_new_program_into_one_cache(tmp_path):
    import uuid
    src = tmp_path / "race.moa"
    src.write_text(f"-- {uuid.uuid4().hex}\nsize n\ninput x : f32 ⟨n⟩\ny = x × 3 + 1\noutput y\n", encoding="utf-8")
    env = dict(os.environ, MOAC_CACHE_DIR=str(tmp_path / "cache"))
    procs = [subprocess.Popen([sys.executable, "-c", CHILD.format(root=str(ROOT), src=str(src))], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(4)]
    outs = [p.communicate(timeout=180) for p in procs]
    assert all(p.returncode == 0 for p in procs), [e for _, e in outs]
    assert {o.strip() for o, _ in outs} == {"24.0"}             # Σ x × (3 + 1) for x = 0..3 (right to left)
    libs = list((tmp_path / "cache").glob("moac_*.so"))
    assert len(libs) == 1 and not list((tmp_path / "cache").glob(".moac_*"))


def test_a_cache_that_cannot_be_created_is_a_clear_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    env = dict(os.environ, MOAC_CACHE_DIR=str(blocker / "cache"))
    r = subprocess.run([sys.executable, "-m", "moac", "check", "examples/matmul.moa", "--target", "c"],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 1 and "Traceback" not in r.stderr and "internal error" not in r.stderr, r.stderr
    assert str(blocker) in r.stderr


def test_unreadable_cache_entry_is_rebuilt(tmp_path, monkeypatch):
    """A cache entry that is a directory where a library should be: rebuilt elsewhere or a
    clear error, never a crash."""
    from moac.jit import build
    monkeypatch.setenv("MOAC_CACHE_DIR", str(tmp_path / "c2"))
    text = "size n\ninput x : f32 ⟨n⟩\ny = x − 1\noutput y\n"
    c_source = moac.parse(text, "u.moa").c_source(target="c")
    lib = build.build_library(c_source, build.compile_flags("c"))
    lib.unlink()
    lib.with_suffix(".sha256").unlink()
    lib.mkdir()                                                  # something that is not a library
    with pytest.raises((moac.BuildError, OSError)):
        build.build_library(c_source, build.compile_flags("c"))
    assert Path(lib).is_dir()


@pytest.mark.parametrize("target", TARGETS)
def test_all_scores_minus_infinity_agree_with_the_interpreter(target):
    """A softmax over scores that are all −∞ has no maximum to subtract: NaN in the
    interpreter (exp(−∞ − (−∞))), and NaN in every target, never a silent 0."""
    prog = example("decode")
    q = np.zeros(4, np.float32)
    q[0] = -np.inf
    K = np.abs(np.random.default_rng(0).standard_normal((5, 4))).astype(np.float32) + 0.1
    V = np.ones((5, 3), np.float32)
    ref = prog.evaluate(q=q, K=K, V=V)["out"]
    got = prog.compile(target=target)(q=q, K=K, V=V)["out"]
    assert np.isnan(ref).all() and np.isnan(got).all()


@pytest.mark.parametrize("target", TARGETS)
def test_an_empty_head_dimension_agrees_with_the_interpreter(target):
    """dk = 0: every score is 0 / √0, NaN, in the interpreter and in the kernels."""
    prog = example("decode")
    q, K, V = np.zeros(0, np.float32), np.zeros((5, 0), np.float32), np.ones((5, 3), np.float32)
    ref = prog.evaluate(q=q, K=K, V=V)["out"]
    got = prog.compile(target=target)(q=q, K=K, V=V)["out"]
    np.testing.assert_array_equal(np.isnan(got), np.isnan(ref))
    assert np.isnan(ref).all()


def test_out_arrays_that_share_memory_are_refused():
    # out={"C": buf, "y": buf[0]} gave a wrong C with no error: out= was checked against
    # the inputs only (a review, 2026-12-05)
    kern = example("matmul").compile(target="c")
    rng = np.random.default_rng(0)
    A, B, x = (rng.standard_normal(s).astype(np.float32) for s in ((3, 3), (3, 3), 3))
    buf = np.zeros((3, 3), np.float32)
    with pytest.raises(moac.ArgumentError, match=r"out\['y'\] shares memory with out\['C'\]"):
        kern(A=A, B=B, x=x, out={"C": buf, "y": buf[0]})
    with pytest.raises(moac.ArgumentError, match=r"out= must map output names to arrays \(a dict\), got ndarray"):
        kern(A=A, B=B, x=x, out=buf)
    y = np.zeros(3, np.float32)
    got = kern(A=A, B=B, x=x, out={"C": buf, "y": y})
    assert got["C"] is buf and got["y"] is y and np.allclose(buf, A @ B, atol=1e-5)


def test_a_size_of_2_to_the_63_at_the_call_is_an_argument_error():
    # cffi raised OverflowError ("int too big to convert") for w = 2^63 or np.uint64(2^64 - 1)
    kern = example("decode_window").compile(target="c")
    q, K = np.ones(4, np.float32), np.ones((8, 4), np.float32)
    for w in (2**63, np.uint64(2**64 - 1)):
        with pytest.raises(moac.ArgumentError, match="size w must be a non-negative integer below 2\\^63"):
            kern(q=q, K=K, V=K, w=w)


def test_a_torch_float8_of_the_other_format_is_refused():
    # both float8 dtypes were viewed as the same uint8 bits, so an e5m2 tensor was read as
    # e4m3: [6.0, 2.5] for [6.0, 3.5], silently
    torch = pytest.importorskip("torch")
    prog = moac.parse("size n, d\ninput x : f8e4m3 ⟨n d⟩\ninput y : f32 ⟨d⟩\nz = x +.× y\noutput z\n", "f8.moa")
    kern = prog.compile(target="c")
    v, y = torch.tensor([[1.0, 2.0, 3.0], [0.5, -1.0, 4.0]]), np.ones(3, np.float32)
    with pytest.raises(moac.ArgumentError, match=r"input 'x' must have dtype .*\(declared f8e4m3\), got torch.float8_e5m2"):
        kern(x=v.to(torch.float8_e5m2), y=y)
    assert kern(x=v.to(torch.float8_e4m3fn), y=y)["z"].tolist() == [6.0, 3.5]
    f = moac.parse("size n\ninput x : f32 ⟨n⟩\ny = x + 1\noutput y\n", "f.moa").compile(target="c")
    with pytest.raises(moac.ArgumentError, match=r"input 'x' must have dtype float32 \(declared f32\), got torch.bfloat16"):
        f(x=torch.ones(3, dtype=torch.bfloat16))           # it said "got uint16", the bits it was viewed as


def test_evaluate_reads_inputs_as_a_kernel_does():
    # evaluate took f32 values for a bf16 input unrounded and uint16 bits for an f16 input as
    # integers, and a torch bf16 tensor was a TypeError; the DNF evaluator read bf16 and fp8
    # bits as integers, and monadic ÷ 0 raised ZeroDivisionError there (a review, 2026-12-05)
    from moac.dnf.evaluate import evaluate_dnf
    prog = moac.parse("size n\ninput x : bf16 ⟨n⟩\ninput h : f16 ⟨n⟩\ny = (÷ x) + h\noutput y\n", "e.moa")
    x, h = np.array([16256, 0, 16384], np.uint16), np.array([1, 2, 3], np.float16)     # bf16 1, 0, 2
    want = [2.0, np.inf, 3.5]
    assert prog.evaluate(x=x, h=h)["y"].tolist() == want
    assert evaluate_dnf(prog.dnf(), {"x": x, "h": h})["y"].tolist() == want
    with pytest.raises(moac.ArgumentError, match=r"input 'x' must have dtype uint16 bf16 .* got float32"):
        prog.evaluate(x=x.astype(np.float32), h=h)
    with pytest.raises(moac.ArgumentError, match=r"input 'h' must have dtype float16 \(declared f16\), got uint16"):
        prog.evaluate(x=x, h=h.view(np.uint16))
    torch = pytest.importorskip("torch")
    assert prog.evaluate(x=torch.tensor([1.0, 0.0, 2.0], dtype=torch.bfloat16), h=h)["y"].tolist() == want
    with pytest.raises(moac.ArgumentError, match="unknown option"):
        prog.compile(target="c", block=4)
    with pytest.raises(moac.ArgumentError, match="sizes must be a dict"):
        prog.compile(target="c", sizes=[("n", 3)])
    assert prog.compile(target="c", extra_flags="-O1 -g").flags[-2:] == ["-O1", "-g"]    # words, not letters
    ids = moac.parse("size V, T\ninput E : f32 ⟨V⟩\ninput ids : i32 ⟨T⟩\nX = ids (ψ Ω⟨0 1⟩) E\noutput X\n", "g.moa")
    with pytest.raises(moac.ArgumentError, match="input 'ids' holds sizes and indices .* got float64"):
        ids.evaluate(E=np.ones(3), ids=np.array([2.5]))          # it was read as 2
    assert ids.evaluate(E=np.arange(3.0), ids=[2, 0])["X"].tolist() == [2.0, 0.0]
    signs = evaluate_dnf(moac.parse("size n\ninput x : f32 ⟨n⟩\na = ÷ x\noutput a\n", "z.moa").dnf(),
                         {"x": np.array([-0.0, 0.0], np.float32)})["a"]
    assert signs.tolist() == [-np.inf, np.inf]                  # ÷ −0 is −∞ (it gave +∞)


def test_a_numpy_scalar_is_a_rank_0_input():
    # np.float32(2.5) for an input of shape ⟨⟩ was refused ("must be a numpy array")
    k = moac.parse("size n\ninput x : f32 ⟨n⟩\ninput s : f32 ⟨⟩\ny = x × s\noutput y\n", "s.moa").compile(target="c")
    assert k(x=np.ones(3, np.float32), s=np.float32(2.5))["y"].tolist() == [2.5] * 3
    with pytest.raises(moac.ArgumentError, match="input 's' must have dtype float32"):
        k(x=np.ones(3, np.float32), s=np.float64(2.5))
