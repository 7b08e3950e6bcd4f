"""Every example compiled with -Wall -Werror for every target and checked against the
reference interpreter (seeded data, tolerance 16·eps·√L relative to max|ref| where L is the
reduction length); `moac check` on the acceptance shapes; the sequential C target and the
OpenACC host build agreeing bit for bit."""
from __future__ import annotations

import numpy as np
import pytest

from test_back_common import (EXAMPLE_NAMES, call, FIXED, TARGETS, check_kernel, example, fixed_for, fixed_key, inputs,
                              kernel, moac_cli, runtime_kernel, sizes_for, base_for)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", EXAMPLE_NAMES)
def test_example_runtime_sizes(name, target):
    """One build (-Wall -Werror, all sizes run-time), checked at the default sizes (13, prime)
    and at every size set of SIZES: n = 1, empty axes, extents 32 and 128 do not divide."""
    prog = example(name)
    for k, sizes in enumerate([base_for(name)] + sizes_for(name)):
        kern = runtime_kernel(name, target, sizes)
        assert kern.onf.fixed == {}
        assert "-Wall" in kern.flags and "-Werror" in kern.flags
        check_kernel(prog, kern, sizes, seed=k)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", EXAMPLE_NAMES)
def test_example_fixed_sizes(name, target):
    """Sizes fixed at compile time (-D): literals in the C, still correct."""
    prog, kern = example(name), kernel(name, target, fixed_key(fixed_for(name)))
    assert kern.onf.fixed == fixed_for(name)
    run_time = {p.name for p in kern.signature.params if p.kind == "size"}
    assert not run_time & set(fixed_for(name)), run_time
    check_kernel(prog, kern, fixed_for(name), seed=7)
    if name in ("decode", "decode_window"):   # n stays run-time: several token counts
        for n in (11, 31, 257) if name == "decode_window" else (1, 31, 257):
            check_kernel(prog, kern, dict(fixed_for(name), n=n), seed=n)


@pytest.mark.parametrize("target", TARGETS)
def test_decode_head_dim_128(target):
    """The flagship shape: dk = dv = 128 fixed (register-blocked weighted sum d = r·32 + v),
    token counts around the chunk sizes (16 … 128) and not divisible by them."""
    prog = example("decode")
    kern = kernel("decode", target, fixed_key({"dk": 128, "dv": 128}))
    for n in (1, 2, 15, 127, 129, 1000, 4097):
        check_kernel(prog, kern, {"dk": 128, "dv": 128, "n": n}, seed=n)


def test_decode_many_tokens_tolerance_grows_with_reduction():
    """At n = 20000 the reduction length is large; the bound 16·eps·√L still holds and is
    tighter than a fixed 1e-3."""
    from test_back_common import tolerance
    prog = example("decode")
    kern = kernel("decode", "c", fixed_key({"dk": 128, "dv": 128}))
    sizes = {"n": 20000, "dk": 128, "dv": 128}
    tol = tolerance(kern, sizes)
    assert tol < 1e-3
    check_kernel(prog, kern, sizes, seed=3)


@pytest.mark.parametrize("target", TARGETS)
def test_moac_check_acceptance(target):
    r = moac_cli("check", "examples/decode.moa", "-D", "n=4096", "-D", "dk=128", "-D", "dv=128",
                 "--target", target)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "out: max abs error" in r.stdout and "OK" in r.stdout, r.stdout
    assert f"target {target}" in r.stdout
    assert "Traceback" not in r.stderr


# --------------------------------------------------------------------------- bit for bit

# All examples: the c target and the OpenACC host build run the same loops in the same
# order (the host fallback of libgomp runs one gang at a time, vector length 1, and the
# vector reductions fold in index order), so they must agree exactly.
BITWISE = [(name, (), sizes) for name in EXAMPLE_NAMES for sizes in (sizes_for(name) or [base_for(name)])[-1:]] + [
    ("decode", fixed_key({"dk": 128, "dv": 128}), {"n": 4096, "dk": 128, "dv": 128}),
    ("decode", fixed_key(FIXED["decode"]), dict(FIXED["decode"], n=1000)),
    ("matmul", fixed_key(FIXED["matmul"]), FIXED["matmul"]),
]


@pytest.mark.parametrize("name, fixed, sizes", BITWISE,
                         ids=[f"{n}-{'fixed' if f else 'runtime'}-{'-'.join(map(str, s.values()))}" for n, f, s in BITWISE])
def test_c_and_openacc_host_agree_bit_for_bit(name, fixed, sizes):
    prog = example(name)
    if fixed:
        kc, ka = kernel(name, "c", fixed), kernel(name, "openacc", fixed)
    else:
        kc, ka = runtime_kernel(name, "c", sizes), runtime_kernel(name, "openacc", sizes)
    arrays, all_sizes = inputs(prog, kc, sizes, seed=11)
    got_c, got_a = call(prog, kc, arrays, all_sizes), call(prog, ka, arrays, all_sizes)
    assert set(got_c) == set(got_a)
    for out in got_c:
        assert got_c[out].dtype == got_a[out].dtype == np.float32
        assert np.array_equal(got_c[out], got_a[out], equal_nan=True), (
            f"{name}.{out}: c and openacc differ by up to {np.max(np.abs(got_c[out] - got_a[out])):.3e}")


def test_outputs_are_fresh_arrays():
    """Each call returns new output arrays (a second call does not overwrite the first)."""
    prog = example("matmul")
    kern = kernel("matmul", "c")
    a1, _ = inputs(prog, kern, {"n": 3, "m": 4, "p": 5}, seed=1)
    a2, _ = inputs(prog, kern, {"n": 3, "m": 4, "p": 5}, seed=2)
    r1 = kern(**a1)
    c1 = r1["C"].copy()
    r2 = kern(**a2)
    assert np.array_equal(r1["C"], c1) and not np.array_equal(r1["C"], r2["C"])
    assert r1["C"].flags.c_contiguous and r1["C"].shape == (3, 5)
