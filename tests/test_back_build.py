"""Build and load (content-hashed cache, BuildError, concurrent builds) and the argument
checks a compiled kernel makes before any C runs."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import numpy as np
import pytest

import moac
from moac.jit import build

from test_back_common import ROOT, example, inputs, kernel, fixed_key


# --------------------------------------------------------------------------- the cache


def test_cache_dir_is_the_session_one(moac_cache_dir):
    assert build.cache_dir() == Path(moac_cache_dir)
    assert os.environ["MOAC_CACHE_DIR"] == str(moac_cache_dir)


def test_same_source_is_a_cache_hit(monkeypatch):
    prog = moac.parse(example("matmul").source.text, "examples/matmul.moa")   # a fresh Program
    k1 = prog.compile(target="c", sizes={"m": 17}, werror=True)
    lib = Path(k1.library)
    assert lib.parent == build.cache_dir() and lib.name.startswith("moac_") and lib.suffix == ".so"
    mtime = lib.stat().st_mtime_ns
    time.sleep(0.01)

    def no_compiler(argv, *a, **kw):           # a second build must not run gcc at all
        raise AssertionError(f"compiler run on a cache hit: {argv}")
    monkeypatch.setattr(build.subprocess, "run", no_compiler)
    k2 = moac.parse(prog.source.text, "examples/matmul.moa").compile(target="c", sizes={"m": 17}, werror=True)
    assert k2.library == k1.library
    assert lib.stat().st_mtime_ns == mtime
    # and the cached library works
    arrays, sizes = inputs(prog, k2, {"m": 17, "n": 3, "p": 2})
    np.testing.assert_allclose(k2(**arrays)["C"], arrays["A"].astype(np.float64) @ arrays["B"], rtol=1e-5)


def test_different_sizes_or_target_different_library():
    prog = example("matmul")
    libs = {
        prog.compile(target="c", sizes={"m": 17}).library,
        prog.compile(target="c", sizes={"m": 18}).library,
        prog.compile(target="c").library,
        prog.compile(target="openmp", sizes={"m": 17}).library,
        prog.compile(target="c", sizes={"m": 17}, werror=True).library,   # other flags
    }
    assert len(libs) == 5
    k17, k18 = prog.compile(target="c", sizes={"m": 17}), prog.compile(target="c", sizes={"m": 18})
    # both loaded at once: each call runs its own code (no stale dlopen handle)
    a17, _ = inputs(prog, k17, {"n": 2, "m": 17, "p": 3})
    a18, _ = inputs(prog, k18, {"n": 2, "m": 18, "p": 3})
    assert k17(**a17)["C"].shape == k18(**a18)["C"].shape == (2, 3)
    with pytest.raises(moac.ArgumentError):
        k17(**a18)


def test_library_named_by_content_hash():
    src = f"/* {uuid.uuid4()} */\nint moac_probe(void) {{ return 7; }}\n"
    flags = build.compile_flags("c")
    lib1 = build.build_library(src, flags)
    assert lib1 == build.build_library(src, flags)
    assert build.build_library(src + "\n", flags) != lib1
    assert build.build_library(src, flags + ["-g"]) != lib1
    c_file = lib1.with_suffix(".c")
    assert c_file.read_text() == src


def test_build_error_shows_command_stderr_and_c_file():
    flags = build.compile_flags("c", werror=True)
    src = f"/* {uuid.uuid4()} */\nint x = ;\n"
    with pytest.raises(moac.BuildError) as info:
        build.build_library(src, flags)
    e = info.value
    text = str(e)
    assert "the C compiler failed" in text
    assert e.argv[0] == "gcc" and "-Werror" in e.argv
    assert " ".join(e.argv) in text                        # the exact command
    assert "expected expression" in e.stderr and "expected expression" in text   # gcc's stderr
    assert e.c_file and e.c_file in text and Path(e.c_file).read_text() == src   # the C file, kept
    assert not list(build.cache_dir().glob(".moac_*.so*")), "a temporary library was left behind"
    assert not Path(e.c_file).with_suffix(".so").exists()
    assert isinstance(e, moac.MoacError)


def test_missing_compiler_is_a_build_error():
    with pytest.raises(moac.BuildError, match="not found"):
        build.build(example("matmul").lower(moac.options.Options(target="c")), cc="/nonexistent/gcc-42")


CHILD = textwrap.dedent("""
    import sys, time, pathlib, cffi
    sys.path.insert(0, {root!r})
    from moac.jit import build
    src = pathlib.Path({src!r}).read_text()
    pathlib.Path({ready!r} + sys.argv[1]).touch()
    while not pathlib.Path({go!r}).exists():
        time.sleep(0.001)
    lib = build.build_library(src, build.compile_flags("c"))
    ffi = cffi.FFI()
    ffi.cdef("int moac_probe(int);")
    print(lib, ffi.dlopen(str(lib)).moac_probe(int(sys.argv[1])))
""")


def test_concurrent_builds_of_a_new_source(tmp_path):
    """Two processes build the same never-seen source at the same moment: both succeed,
    both load the same library, no temporary file is left."""
    body = "\n".join(f"double f{i}(double x) {{ return x * {i}.0 + {i}; }}" for i in range(400))
    src = f"/* {uuid.uuid4()} */\n{body}\nint moac_probe(int k) {{ return 100 + k; }}\n"
    (tmp_path / "src.c").write_text(src)
    script = CHILD.format(root=str(ROOT), src=str(tmp_path / "src.c"), ready=str(tmp_path / "ready"),
                          go=str(tmp_path / "go"))
    procs = [subprocess.Popen([sys.executable, "-c", script, str(k)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for k in (1, 2)]
    deadline = time.time() + 60
    while not all((tmp_path / f"ready{k}").exists() for k in (1, 2)):
        assert time.time() < deadline and all(p.poll() is None for p in procs), \
            [p.communicate() for p in procs if p.poll() is not None]
        time.sleep(0.005)
    (tmp_path / "go").touch()
    outs = [p.communicate(timeout=120) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err
    (lib1, r1), (lib2, r2) = (o.split() for o, _ in outs)
    assert lib1 == lib2 and (r1, r2) == ("101", "102")
    assert Path(lib1).exists()
    assert not list(build.cache_dir().glob(".moac_*")), "temporary files left in the cache"


# --------------------------------------------------------------------------- argument checks


@pytest.fixture(scope="module")
def decode_c():
    return kernel("decode", "c")


@pytest.fixture(scope="module")
def decode_128():
    return kernel("decode", "c", fixed_key({"dk": 128, "dv": 128}))


@pytest.fixture
def calls(monkeypatch):
    """Counts the calls into C of the kernels it wraps (proof that no C ran)."""
    count = {"n": 0}

    def wrap(kern):
        real = kern._fn

        def counted(*args):
            count["n"] += 1
            return real(*args)
        monkeypatch.setattr(kern, "_fn", counted)
        return kern
    count["wrap"] = wrap
    return count


def _good(kern, n=13, dk=13, dv=13):
    arrays, _ = inputs(example("decode"), kern, {"n": n, "dk": dk, "dv": dv}, seed=5)
    return arrays


BAD = {
    "dtype": (lambda a: {**a, "q": a["q"].astype(np.float64)}, ["'q'", "float32", "float64"]),
    "non-contiguous": (lambda a: {**a, "K": np.asfortranarray(a["K"])}, ["'K'", "contiguous"]),
    "strided view": (lambda a: {**a, "V": np.concatenate([a["V"], a["V"]], axis=1)[:, ::2]}, ["'V'", "contiguous"]),
    "rank": (lambda a: {**a, "K": a["K"].reshape(-1)}, ["'K'", "rank 2"]),
    "inconsistent n": (lambda a: {**a, "V": a["V"][:12].copy()}, ["'V'", "axis 0", "12"]),
    "inconsistent dk": (lambda a: {**a, "q": a["q"][:5].copy()}, ["axis", "5"]),
    "missing": (lambda a: {k: v for k, v in a.items() if k != "V"}, ["missing input 'V'"]),
    "extra": (lambda a: {**a, "W": a["V"]}, ["unexpected argument", "W"]),
    "not an array": (lambda a: {**a, "q": a["q"].tolist()}, ["'q'", "numpy array"]),
}


@pytest.mark.parametrize("case", list(BAD))
def test_argument_errors_before_any_c(decode_c, calls, case):
    kern = calls["wrap"](decode_c)
    good = _good(kern)
    kern(**good)
    assert calls["n"] == 1                       # the wrapper sees real calls
    mutate, words = BAD[case]
    bad = mutate(good)
    with pytest.raises(moac.ArgumentError) as info:
        kern(**bad)
    msg = info.value.message
    for w in words:
        assert w in msg, (w, msg)
    assert "Traceback" not in str(info.value)
    assert calls["n"] == 1, "C ran although the arguments were rejected"


def test_wrong_size_for_compile_time_size(decode_128, calls):
    kern = calls["wrap"](decode_128)
    good = _good(kern, n=40, dk=128, dv=128)
    kern(**good)
    bad = _good(kern, n=40, dk=64, dv=128)
    with pytest.raises(moac.ArgumentError) as info:
        kern(**bad)
    msg = info.value.message
    assert "'K'" in msg or "'q'" in msg
    assert "128" in msg and "64" in msg
    assert calls["n"] == 1


def test_run_time_condition_checked_before_c(calls):
    """take_reverse needs n ≥ 3 (¯3 △ A): a call with n = 2 is refused before C runs."""
    kern = calls["wrap"](kernel("take_reverse", "c"))
    prog = example("take_reverse")
    ok, _ = inputs(prog, kern, {"n": 3, "m": 4})
    kern(**ok)
    bad, _ = inputs(prog, kern, {"n": 2, "m": 4})
    with pytest.raises(moac.ArgumentError, match="must not exceed n"):
        kern(**bad)
    assert calls["n"] == 1


def test_argument_error_is_a_type_error_and_inputs_untouched(decode_c):
    good = _good(decode_c)
    before = {k: v.copy() for k, v in good.items()}
    with pytest.raises(TypeError):
        decode_c(**{**good, "q": good["q"].astype(np.float64)})
    decode_c(**good)
    for k in good:
        assert np.array_equal(good[k], before[k]), f"input {k} was modified"


IOTA = "size n, m\ninput x : f32 ⟨m⟩\ny = (ι n) + 0\nz = x × 2\noutput y, z\n"


@pytest.fixture(scope="module")
def iota_kernel():
    return moac.parse(IOTA, "iota.moa").compile(target="c", werror=True)


def test_size_not_determined_by_inputs(iota_kernel, calls):
    """A declared size no input shape mentions, not fixed at compile time: passed by name
    at call time; without it a clear ArgumentError naming it (it was a KeyError/TypeError
    from inside Kernel.__call__ before the size binder of 79d39f4)."""
    kern = calls["wrap"](iota_kernel)
    x = np.ones(3, np.float32)
    with pytest.raises(moac.ArgumentError) as info:
        kern(x=x)
    assert "n" in info.value.message
    assert calls["n"] == 0
    got = kern(x=x, n=4)
    assert np.array_equal(got["y"], np.arange(4, dtype=np.float32))
    assert np.array_equal(got["z"], np.full(3, 2, np.float32))
    assert kern(x=x, n=0)["y"].shape == (0,)
    # a size given by name that contradicts the arrays
    with pytest.raises(moac.ArgumentError, match="'x'"):
        kern(x=x, n=4, m=5)
    fixed = moac.parse(IOTA, "iota.moa").compile(target="c", sizes={"n": 4}, werror=True)
    assert np.array_equal(fixed(x=x)["y"], np.arange(4, dtype=np.float32))


def test_size_by_name_contradicting_compile_time_value(decode_128, calls):
    kern = calls["wrap"](decode_128)
    good = _good(kern, n=40, dk=128, dv=128)
    assert kern(**good, dk=128)["out"].shape == (128,)
    with pytest.raises(moac.ArgumentError, match="dk"):
        kern(**good, dk=64)
    assert calls["n"] == 1


@pytest.mark.parametrize("value", [-1, 2.7, "abc", None])
def test_size_by_name_must_be_a_non_negative_integer(iota_kernel, calls, value):
    """Regression (fixed in bcda98b): n=-1 raised numpy's ValueError, n=2.7 was truncated
    to 2, n='abc' / n=None raised ValueError / TypeError."""
    kern = calls["wrap"](iota_kernel)
    with pytest.raises(moac.ArgumentError, match="n"):
        kern(x=np.ones(3, np.float32), n=value)
    assert calls["n"] == 0


# --------------------------------------------------------------------------- cache integrity (#10)

def _fresh_source(tag: str) -> str:
    # a program text of its own, so its library is built by this test alone
    return f"-- {tag} {uuid.uuid4().hex}\nsize n\ninput x : f32 ⟨n⟩\ny = x + 1\noutput y\n"


def test_truncated_library_in_the_cache_is_rebuilt_not_loaded():
    """A truncated library would crash the process (SIGBUS) when mapped: its hash does
    not match the one recorded at build time, so it is rebuilt."""
    src = _fresh_source("truncated")
    c_source = moac.parse(src, "t.moa").c_source(target="c")
    lib = build.build_library(c_source, build.compile_flags("c"))
    good = lib.read_bytes()
    lib.write_bytes(good[:len(good) // 3])
    again = build.build_library(c_source, build.compile_flags("c"))
    assert again == lib and lib.read_bytes() == good
    k = moac.parse(src, "t.moa").compile(target="c")
    np.testing.assert_array_equal(k(x=np.arange(3, dtype=np.float32))["y"], [1, 2, 3])


def test_library_without_its_recorded_hash_is_rebuilt():
    c_source = moac.parse(_fresh_source("nohash"), "t.moa").c_source(target="c")
    lib = build.build_library(c_source, build.compile_flags("c"))
    lib.with_suffix(".sha256").unlink()
    mtime = lib.stat().st_mtime_ns
    time.sleep(0.01)
    assert build.build_library(c_source, build.compile_flags("c")) == lib
    assert lib.stat().st_mtime_ns != mtime and lib.with_suffix(".sha256").exists()


def test_edited_c_file_in_the_cache_is_not_trusted():
    """The compiler reads the source moac generated, not whatever the cache's .c holds."""
    src = _fresh_source("edited")
    c_source = moac.parse(src, "t.moa").c_source(target="c")
    lib = build.build_library(c_source, build.compile_flags("c"))
    c_file = lib.with_suffix(".c")
    assert c_file.read_text(encoding="utf-8") == c_source
    c_file.write_text(c_source.replace("+ 1.0f", "+ 2.0f"), encoding="utf-8")
    lib.unlink()                                   # force a rebuild from the cache's files
    build.build_library(c_source, build.compile_flags("c"))
    assert c_file.read_text(encoding="utf-8") == c_source
    k = moac.parse(src, "t.moa").compile(target="c")
    np.testing.assert_array_equal(k(x=np.zeros(2, np.float32))["y"], [1, 1])


def test_writing_to_dev_null_does_not_replace_it():
    """`moac compile … -o /dev/null` writes through a path that is not a regular file."""
    before = os.stat("/dev/null")
    r = subprocess.run([sys.executable, "-m", "moac", "compile", str(ROOT / "examples/matmul.moa"), "-o", "/dev/null"],
                       capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    after = os.stat("/dev/null")
    assert (after.st_ino, after.st_rdev, after.st_mode) == (before.st_ino, before.st_rdev, before.st_mode)


def test_writing_to_a_fifo_writes_through_it(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    reader = subprocess.Popen(["cat", str(fifo)], stdout=subprocess.PIPE)
    build.write_atomic(fifo, "hello\n")
    assert reader.communicate(timeout=10)[0] == b"hello\n"
    assert fifo.is_fifo()


def test_output_path_that_is_a_directory_is_a_positioned_refusal(tmp_path):
    r = subprocess.run([sys.executable, "-m", "moac", "compile", str(ROOT / "examples/matmul.moa"), "-o", str(tmp_path)],
                       capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 1 and "is a directory" in r.stderr and "Traceback" not in r.stderr
    assert tmp_path.is_dir()
