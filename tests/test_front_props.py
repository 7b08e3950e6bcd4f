"""Property tests: random well-shaped programs (tests/progen.py) — their DNF, evaluated index
by index, equals the reference interpreter, and their inferred shapes are the intended ones."""
from __future__ import annotations

import sympy as sp
from hypothesis import HealthCheck, given, settings

import moac
from conftest import check_dnf
from progen import expected_shapes, programs

SETTINGS = settings(max_examples=40, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@settings(SETTINGS, max_examples=80)
@given(programs())
def test_random_program_dnf_matches_interpreter(case):
    source, sizes = case
    prog = moac.parse(source, "<generated>")
    check_dnf(prog, sizes)


@SETTINGS
@given(programs(max_statements=2, max_depth=2))
def test_random_program_shapes_are_the_intended_ones(case):
    source, _sizes = case
    prog = moac.parse(source, "<generated>")
    want = expected_shapes(source)
    for name, node in prog.core.outputs:
        assert len(node.shape) == len(want[name]), (name, node.shape, want[name])
        for got, exp in zip(node.shape, want[name]):
            assert sp.expand(sp.sympify(got) - exp) == 0, (name, node.shape, want[name])


@SETTINGS
@given(programs(max_statements=2))
def test_random_program_dnf_is_closed_over_inputs(case):
    """Only stored inputs and temporaries are read; every index variable is bound."""
    from moac.dnf import free_index_vars
    source, _sizes = case
    d = moac.parse(source, "<generated>").dnf()
    sizes = set(d.program.sizes)
    for st in d.stmts:
        free = free_index_vars(st.body) - set(st.vars) - sizes
        assert not free, (st.name, free)
