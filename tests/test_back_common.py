"""Shared helpers of the back-end tests (tests/test_back_*.py); this module has no tests.

Compiled kernels are memoised per (example, target, compile-time sizes) for the whole
session, so the numerical, bit-for-bit and argument-checking tests share one build each.
The build cache itself is the per-session MOAC_CACHE_DIR set up in conftest.py.
"""
from __future__ import annotations

import functools
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

import moac
from moac import commands

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
EXAMPLE_NAMES = tuple(sorted(p.stem for p in EXAMPLES.glob("*.moa")))
TARGETS = ("c", "openmp", "openacc")
NP_DTYPE = {"float": np.float32, "double": np.float64}

# Run-time sizes every example is checked at (besides moac's default 13 for every size):
# n = 1 and other degenerate extents, and extents that 32 (the vector length) and 128 (the
# largest split-K chunk) do not divide.
SIZES = {
    "catenate": [dict(n=1, m=1, d=1), dict(n=0, m=2, d=3), dict(n=33, m=31, d=129)],
    "decode": [dict(n=1, dk=1, dv=1), dict(n=1, dk=128, dv=128), dict(n=0, dk=4, dv=4),
               dict(n=33, dk=7, dv=5), dict(n=4099, dk=33, dv=65), dict(n=129, dk=128, dv=96)],
    "decode_mha": [dict(B=1, h=1, n=1, dk=1, dv=1), dict(B=2, h=3, n=130, dk=33, dv=40),
                   dict(B=1, h=2, n=17, dk=128, dv=128)],
    "matmul": [dict(n=1, m=1, p=1), dict(n=33, m=129, p=31), dict(n=1, m=300, p=1)],
    "omega": [dict(n=1, w=1, dk=1), dict(n=33, w=129, dk=65)],
    "outer": [dict(n=1, m=1), dict(n=33, m=31)],
    "reshape": [dict(n=1, m=1), dict(n=33, m=31)],
    "take_reverse": [dict(n=3, m=1), dict(n=33, m=129)],
    "transpose": [dict(n=1, m=1, p=1), dict(n=33, m=5, p=31)],
    "attention_forward": [dict(m=1, n=1, dk=1, dv=1), dict(m=3, n=130, dk=33, dv=40)],
    "decode_window": [dict(n=1, w=1, dk=1, dv=1), dict(n=300, w=129, dk=33, dv=65), dict(n=40, w=40, dk=4, dv=4),
                      dict(n=5, w=40, dk=3, dv=2), dict(n=0, w=3, dk=2, dv=2)],     # the window longer than the cache
    # the sinks and the window: n < s, s < n < s + w, n > s + w, no sinks, no window, an empty cache
    "decode_sinks": [dict(n=3, s=4, w=8, dk=2, dv=3), dict(n=9, s=4, w=8, dk=5, dv=4),
                     dict(n=300, s=4, w=129, dk=33, dv=65), dict(n=40, s=0, w=7, dk=4, dv=4),
                     dict(n=40, s=3, w=0, dk=4, dv=4), dict(n=0, s=2, w=2, dk=3, dv=3)],
    # lse beside out: one token, many, an empty cache, no values (dv = 0: lse alone)
    "decode_lse": [dict(B=1, hkv=1, g=1, n=1, dk=1, dv=1), dict(B=2, hkv=2, g=3, n=130, dk=33, dv=40),
                   dict(B=1, hkv=2, g=2, n=0, dk=4, dv=4), dict(B=2, hkv=1, g=4, n=9, dk=8, dv=0)],
    "decode_softcap": [dict(B=1, hkv=1, g=1, n=1, dk=1, dv=1, cap=1), dict(B=2, hkv=2, g=3, n=130, dk=33, dv=40, cap=2)],
    "decode_gqa": [dict(hkv=1, g=1, n=1, dk=1, dv=1), dict(hkv=2, g=3, n=130, dk=33, dv=40),
                   dict(hkv=3, g=1, n=17, dk=128, dv=128), dict(hkv=1, g=5, n=40, dk=16, dv=8)],
}
# The first size set of an example (default: moac's 13 for every size) where 13 does not fit.
BASE = {"decode_step": dict(N=20, n=13), "decode_layer": dict(N=20, n=13), "decode_paged": dict(B=3, P=9, maxp=4),
        "decode_paged_step": dict(B=3, P=9, maxp=4)}
# ragged and paged: one sequence of one token, and pages of 1 and of 16 tokens
SIZES["decode_ragged"] = [dict(B=1, hkv=1, g=1, N=1, dk=1, dv=1)]
SIZES["decode_paged"] = [dict(B=2, hkv=1, g=4, P=7, page=1, maxp=9, d=8), dict(B=2, hkv=2, g=2, P=5, page=16, maxp=2, d=33)]
# the paged append: pages of 1 token (every append opens a page) and of 16; lens up to maxp·page − 1
SIZES["decode_paged_step"] = [dict(B=2, hkv=1, g=4, P=7, page=1, maxp=9, d=8),
                              dict(B=2, hkv=2, g=2, P=5, page=16, maxp=2, d=33)]
SIZES["decode_layer"] = [dict(N=1, n=0, dm=1, dk=1), dict(N=300, n=129, dm=70, dk=33)]
SIZES["decode_step"] = [dict(N=1, n=0, dk=1, dv=1), dict(N=2, n=1, dk=1, dv=1), dict(N=300, n=129, dk=33, dv=65),
                        dict(N=130, n=129, dk=128, dv=128)]

# Sizes fixed at compile time (-D) for a second build of every example: none divisible by 32.
FIXED = {
    "catenate": dict(n=33, m=31, d=129),
    "decode": dict(dk=33, dv=65),
    "decode_mha": dict(B=2, h=3, dk=33, dv=40),
    "matmul": dict(n=33, m=129, p=31),
    "omega": dict(n=33, w=129, dk=65),
    "outer": dict(n=33, m=31),
    "reshape": dict(n=33, m=31),
    "take_reverse": dict(n=33, m=129),
    "transpose": dict(n=33, m=5, p=31),
    "attention_forward": dict(m=3, dk=33, dv=40),
    "decode_window": dict(w=11, dk=33, dv=65),
    "decode_sinks": dict(s=4, w=11, dk=33, dv=65),
    "decode_lse": dict(hkv=2, g=3, dk=33, dv=40),
    "decode_softcap": dict(hkv=2, g=3, dk=33, dv=40, cap=30),
    "decode_gqa": dict(hkv=2, g=3, dk=33, dv=40),
    "decode_step": dict(N=40, dk=33, dv=65),
    "decode_layer": dict(N=40, dm=65, dk=33),
    "decode_ragged": dict(hkv=2, g=3, dk=33, dv=17),
    "decode_paged": dict(hkv=2, g=3, page=5, d=33),
    "decode_paged_step": dict(hkv=2, g=3, page=5, d=33),
}


def sizes_for(name: str) -> list:
    """Extra run-time size sets of an example (none for an example added after this suite)."""
    return SIZES.get(name, [])


def base_for(name: str) -> dict:
    return BASE.get(name, {})


def fixed_for(name: str) -> dict:
    """Compile-time sizes of an example; every size 33 for an example this table lacks."""
    if name in FIXED:
        return FIXED[name]
    return {s.name: 33 for s in example(name).core.sizes}


def example_path(name: str) -> str:
    """The path an example is loaded from: relative to the repository root, as a user in
    the checkout types it (the path is printed into the C header)."""
    return f"examples/{name}.moa"


@functools.cache
def example(name: str) -> moac.Program:
    """moac.load("examples/NAME.moa") as seen from the repository root, whatever the cwd."""
    return moac.parse((EXAMPLES / f"{name}.moa").read_text(encoding="utf-8"), example_path(name))


@functools.cache
def kernel(name: str, target: str, fixed: tuple = ()) -> "moac.jit.kernel.Kernel":
    """The example compiled with -Wall -Werror, memoised for the session."""
    return example(name).compile(target=target, sizes=dict(fixed), werror=True)


def fixed_key(sizes: dict) -> tuple:
    return tuple(sorted(sizes.items()))


def undetermined(prog: moac.Program) -> set:
    """Sizes the arrays' shapes do not determine, solving the axis equations one unknown at
    a time as moac does (⟨n + p⟩ alone determines neither): a kernel takes them fixed at
    compile time or by name at call time (test_back_build.py::test_size_not_determined_by_inputs)."""
    import sympy as sp
    axes = [sp.sympify(e).free_symbols for info in prog.inputs for e in info.shape]
    known: set = set()
    progress = True
    while progress:
        progress = False
        for syms in axes:
            left = {x.name for x in syms} - known
            if len(left) == 1:
                known |= left
                progress = True
    return {s.name for s in prog.core.sizes} - known


def runtime_kernel(name: str, target: str, sizes: dict | None = None):
    """The example with every size a run-time size (those no input determines are passed
    by name at call time, see check_kernel)."""
    return kernel(name, target)


def inputs(prog: moac.Program, kern, sizes: dict, seed: int = 0) -> tuple[dict, dict]:
    """Seeded inputs of the kernel's dtype (moac.commands.random_inputs) and all sizes."""
    return commands.random_inputs(prog, sizes, seed)


def tolerance(kern, sizes: dict) -> float:
    """moac check's bound (commands.tolerance) for this kernel at these sizes."""
    return commands.tolerance(kern.signature.ctype, commands.reduction_length(kern.onf, sizes))


def assert_close(name: str, got: np.ndarray, ref, tol: float, floor: float = 0.0) -> None:
    """max |got − ref| ≤ tol · max(max|ref|, floor), non-finite values in the same places."""
    ref = np.asarray(ref, dtype=np.float64)
    assert got.shape == ref.shape, f"{name}: shape {got.shape}, reference {ref.shape}"
    if ref.size == 0:
        return
    g = got.astype(np.float64)
    fin = np.isfinite(ref)
    assert np.array_equal(np.isnan(g), np.isnan(ref)), f"{name}: NaNs differ"
    assert np.array_equal(g[np.isinf(ref)], ref[np.isinf(ref)]), f"{name}: infinities differ"
    if not fin.any():
        return
    scale = max(float(np.max(np.abs(ref[fin]))), floor)
    err = float(np.max(np.abs(g[fin] - ref[fin])))
    assert err <= tol * scale, (f"{name}: max abs error {err:.3e} > {tol:.2e} · {scale:.3e} "
                                f"(max |ref|)")


def call(prog: moac.Program, kern, arrays: dict, all_sizes: dict) -> dict:
    """kern(**arrays), with the sizes no input determines passed by name; an input the
    program updates in place is passed as a copy (the caller's arrays stay the seeded ones:
    a paged append may write a slot another sequence's attention reads)."""
    by_name = {s: all_sizes[s] for s in undetermined(prog) - set(kern.onf.fixed)}
    updated = {u for u, _ in prog.core.updates}
    return kern(**{k: v.copy() if k in updated else v for k, v in arrays.items()}, **by_name)


_REFERENCES: dict = {}     # (file, text, sizes, seed) -> the interpreter's results (inputs are seeded)


def check_kernel(prog: moac.Program, kern, sizes: dict, seed: int = 0, floor: float = 0.0) -> dict:
    """Run the kernel on seeded data and compare every result with the interpreter (the
    outputs, and the inputs an `update` rewrites in place, which both return)."""
    arrays, all_sizes = inputs(prog, kern, sizes, seed)
    key = (prog.source.filename, prog.source.text, tuple(sorted(all_sizes.items())), seed)
    if key not in _REFERENCES:            # the interpreter is slow; each target is checked against one run
        _REFERENCES[key] = prog.evaluate(sizes=all_sizes, **{k: v.copy() for k, v in arrays.items()})
    ref = _REFERENCES[key]
    got = call(prog, kern, arrays, all_sizes)
    assert set(prog.outputs) <= set(got) and set(got) == set(ref), (sorted(got), sorted(ref))
    tol = tolerance(kern, all_sizes)
    for name in ref:
        assert_close(name, got[name], ref[name], tol, floor)
    return got


def moac_cli(*args: str, cwd: Path | str = ROOT, timeout: float = 120) -> subprocess.CompletedProcess:
    """`python -m moac ARGS` in a subprocess (inherits MOAC_CACHE_DIR from conftest)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    return subprocess.run([sys.executable, "-m", "moac", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout, check=False)


def gcc(*args: str, cwd: Path | str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(["gcc", *args], cwd=cwd, capture_output=True, text=True, check=False)
