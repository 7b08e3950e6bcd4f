"""Shared helpers for the front-end tests (parser, shapes, DNF, interpreter).

The helpers are plain functions so that any test module can `from conftest import ...`
(pytest puts tests/ on sys.path).  None of them needs a C compiler.
"""
from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import numpy as np
import pytest
import sympy as sp
from hypothesis import settings

import moac
from moac.front.core import size_symbol
from moac.dnf import evaluate_dnf

# every DNF the tests build is checked by verify_dnf (in `python -m moac` subprocesses too)
os.environ["MOAC_VERIFY"] = "1"

# The property tests draw the same programs on every run, so the suite passes or fails the
# same way everywhere; MOAC_EXPLORE=1 draws new ones each run (how the empty-reshape bug of
# the DNF verifier was found), to look for bugs rather than to gate a commit.
settings.register_profile("fixed", derandomize=True)
settings.register_profile("explore", derandomize=False)
settings.load_profile("explore" if os.environ.get("MOAC_EXPLORE") == "1" else "fixed")

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"


def sym(name: str) -> sp.Symbol:
    """The sympy symbol moac uses for the size `name`."""
    return size_symbol(name)


def concrete_shape(shape, sizes: dict) -> tuple:
    env = {sym(k): v for k, v in sizes.items()}
    return tuple(int(sp.sympify(s).xreplace(env)) for s in shape)


def random_inputs(prog: moac.Program, sizes: dict, seed: int = 0) -> dict:
    """Seeded standard-normal arrays for every input of `prog`: float64 values, or the bits of
    an input stored narrow (bf16, f16, fp8, i8), which evaluate and evaluate_dnf both decode."""
    rng = np.random.default_rng(seed)
    from moac.front.data import INDEX_DTYPES, random_index_inputs
    env = {sym(k): v for k, v in sizes.items()}
    for name, e in prog.core.derived:
        env.setdefault(sym(name), sp.sympify(e).xreplace(env))
    shapes = {i.name: concrete_shape(i.shape, sizes) for i in prog.inputs}
    ints = random_index_inputs(prog.core, shapes, env, rng)
    from moac.dtypes import WIDENED, random
    return {i.name: ints[i.name] if i.dtype in INDEX_DTYPES else random(i.dtype, rng, shapes[i.name])
            if i.dtype in WIDENED else rng.standard_normal(shapes[i.name]) for i in prog.inputs}


def program(src_or_prog, filename: str = "<test>") -> moac.Program:
    if isinstance(src_or_prog, moac.Program):
        return src_or_prog
    return moac.parse(src_or_prog, filename)


def check_dnf(src_or_prog, sizes: dict, seed: int = 0, arrays: dict | None = None) -> dict:
    """Evaluate the DNF index by index and the source program with numpy; assert they agree.

    Returns the interpreter's results."""
    prog = program(src_or_prog)
    arrays = random_inputs(prog, sizes, seed) if arrays is None else arrays
    ref = prog.evaluate(sizes=sizes, **arrays)     # inputs of narrow storage as their bits, read by both
    got = evaluate_dnf(prog.dnf(), arrays, sizes)
    assert set(got) == set(ref)
    for name, want in ref.items():
        want = np.asarray(want, dtype=np.float64)
        assert got[name].shape == want.shape, (name, got[name].shape, want.shape)
        declared = {**{i.name: i.shape for i in prog.inputs}, **{n: v.shape for n, v in prog.core.outputs}}
        expect_shape = concrete_shape(declared[name], sizes)   # an updated input keeps its shape
        assert want.shape == expect_shape, (name, want.shape, expect_shape)
        np.testing.assert_allclose(got[name], want, rtol=1e-12, atol=1e-12, err_msg=name)
    return ref


def strip(node):
    """An AST as nested tuples without source spans or spellings (for structural equality)."""
    if dataclasses.is_dataclass(node) and not isinstance(node, type):
        return (type(node).__name__,) + tuple(
            strip(getattr(node, f.name)) for f in dataclasses.fields(node) if f.name not in ("span", "text"))
    if isinstance(node, (tuple, list)):
        return tuple(strip(x) for x in node)
    return node


def output_shapes(src: str) -> dict:
    return {name: node.shape for name, node in moac.parse(src).core.outputs}


@pytest.fixture
def rng():
    return np.random.default_rng(12345)


# --------------------------------------------------------------------------- back-end tests
# (appended by the back-end test suite, tests/test_back_*.py)


@pytest.fixture(scope="session", autouse=True)
def moac_cache_dir(tmp_path_factory):
    """A fresh build cache for the whole test session: every kernel the tests compile, and
    every `python -m moac` subprocess they start (it inherits the environment), builds into
    it, so a stale library in ~/.cache/moac can neither hide a bug nor be polluted."""
    path = tmp_path_factory.mktemp("moac-cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MOAC_CACHE_DIR", str(path))
        yield path


# --------------------------------------------------------------------------- parallel runs
# The README's test command runs the suite on every CPU with pytest-xdist, a whole file per
# worker (--dist loadfile: a module's fixtures, such as the docs' console outputs or the nvcc
# builds, and the session's memoised kernels are then built once, not once per worker).
# Files are handed out in collection order (--no-loadscope-reorder), so a worker's
# collection puts the longest files first: a long file left for last would keep one
# worker busy while the others wait.  Seconds on one core of the 2-core CI machine,
# measured with --durations; the files not listed follow in their usual order.
LONG_FILES = {
    "test_back_numeric.py": 54, "test_docs_commands.py": 45, "test_sanitizers.py": 43,
    "test_back_packing.py": 37, "test_back_cli.py": 33, "test_kv8.py": 33, "test_cuda.py": 27,
    "test_fuzz.py": 21, "test_torch_sdpa.py": 17, "test_decode_extras.py": 16, "test_tiles.py": 15,
    "test_ragged_paged.py": 14, "test_back_call.py": 14, "test_output16.py": 14, "test_gpu_package.py": 14,
}


def pytest_collection_modifyitems(config, items):
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return                                  # a run in one process keeps the usual order
    items.sort(key=lambda item: -LONG_FILES.get(item.path.name, 0))     # stable: files stay whole


@pytest.fixture(autouse=True, scope="session")
def _at_the_repository_root():
    """The tests name examples/, docs/ and bench/ relative to the repository root, as the
    docs' commands do: they run there whatever directory pytest was started in (from
    tests/, every path of test_cost.py failed).  After collection, so that the command
    line's own relative paths keep their meaning."""
    here = os.getcwd()
    os.chdir(ROOT)
    yield
    os.chdir(here)
