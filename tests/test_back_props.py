"""Property: random well-shaped programs (tests/progen.py) compile with -Wall -Werror for
the c and openacc targets and agree with the reference interpreter: their outputs, and the
input a third of them update through a selection (a scatter, progen's `update` line).

progen declares the sizes n, m, p in every program, whether or not an input's shape
mentions them.  In the first test every size is a run-time size (those no input shape
determines are passed by name, test_back_build.py::test_size_not_determined_by_inputs);
in the second every size is fixed at compile time.

Every bug this test found is a regression test in test_back_regressions.py.
"""
from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings

import moac
from moac import commands
from progen import programs

from test_back_common import assert_close, call, tolerance

SETTINGS = settings(max_examples=15, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much,
                                           HealthCheck.data_too_large])


@SETTINGS
@given(programs())
def test_random_programs_compile_and_match(case):
    source, sizes = case
    prog = moac.parse(source, "generated.moa")
    results = {}
    for target in ("c", "openacc", "openmp"):          # openmp: its own host mapping and flags
        kern = prog.compile(target=target, werror=True)
        arrays, all_sizes = commands.random_inputs(prog, sizes, 0)
        ref = prog.evaluate(sizes=all_sizes, **arrays)
        got = call(prog, kern, arrays, all_sizes)
        tol = tolerance(kern, all_sizes)
        assert set(got) == set(ref)
        for name in ref:                                # the outputs and an input updated in place
            # inputs are O(1); relative to max(1, max|ref|) like `moac check`, so that a
            # cancellation to a tiny result is not held to a relative bound
            assert_close(name, got[name], ref[name], tol, floor=1.0)
        results[target] = got
    for name in ref:
        assert np.array_equal(results["c"][name], results["openacc"][name], equal_nan=True), name


@settings(SETTINGS, max_examples=10)
@given(programs(max_statements=2))
def test_random_programs_all_sizes_fixed(case):
    """Every size fixed at compile time: literal extents, folded guards."""
    source, sizes = case
    prog = moac.parse(source, "generated.moa")
    kern = prog.compile(target="c", sizes=sizes, werror=True)
    arrays, all_sizes = commands.random_inputs(prog, sizes, 1)
    ref = prog.evaluate(sizes=all_sizes, **arrays)
    got = call(prog, kern, arrays, all_sizes)
    tol = tolerance(kern, all_sizes)
    for name in ref:
        assert_close(name, got[name], ref[name], tol, floor=1.0)


@settings(SETTINGS, max_examples=25)
@given(programs(max_statements=2))
def test_random_programs_with_nans_infinities_and_signed_zeros(case):
    """A tenth of the float inputs NaN, ±∞ or ±0: the c target (IEEE throughout) and the
    interpreter agree on where NaNs are and on every infinity (max and min once did not,
    2026-12-05).  openmp's flags may fold x − x to 0 (docs/cpu.md#flags): not here."""
    source, sizes = case
    prog = moac.parse(source, "generated.moa")
    arrays, all_sizes = commands.random_inputs(prog, sizes, 2)
    rng = np.random.default_rng(len(source))
    specials = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0])
    for i in prog.inputs:
        a = arrays[i.name]
        if i.dtype in ("f32", "f64") and a.size:
            a = arrays[i.name] = a.copy()
            pick = rng.random(a.shape) < 0.1
            a[pick] = rng.choice(specials, size=int(pick.sum())).astype(a.dtype)
    with np.errstate(all="ignore"):
        ref = prog.evaluate(sizes=all_sizes, **arrays)
    kern = prog.compile(target="c", werror=True)
    got = call(prog, kern, arrays, all_sizes)
    for name in ref:
        assert_close(name, got[name], ref[name], tolerance(kern, all_sizes), floor=1.0)
