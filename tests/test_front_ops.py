"""The operator table (moac/ops.py) against the grammar and against itself."""
from __future__ import annotations

import math
import re

import numpy as np
import pytest

from moac.front.syntax import grammar_text
from moac.ops import BY_TOKEN, MONADIC_ONLY, OPS, REDUCIBLE, STATIC_LEFT, STRUCTURAL, monadic


def test_every_primitive_token_of_the_grammar_names_one_primitive():
    rule = re.search(r"^prim:(.*?)^\s*$", grammar_text(), re.S | re.M).group(1)
    tokens = set(re.findall(r"[A-Z]+", rule))
    assert tokens == set(BY_TOKEN)
    assert set(BY_TOKEN.values()) <= set(OPS) | set(STRUCTURAL)


@pytest.mark.parametrize("name", sorted(OPS))
def test_python_and_numpy_functions_agree(name):
    op = OPS[name]
    args = (2.5, 0.75)[:op.arity]
    assert op.python(*args) == pytest.approx(float(op.numpy(*map(np.float64, args))), rel=1e-15)


def test_reducible_operators_have_their_identity():
    for name in REDUCIBLE:
        op = OPS[name]
        for x in (-3.0, 0.0, 2.0):
            assert op.python(op.identity, x) == x
            assert op.numpy.reduce(np.array([x])) == x


def test_python_division_is_ieee():
    div = OPS["div"].python
    assert div(1.0, 0.0) == math.inf and div(-2.0, 0.0) == -math.inf and math.isnan(div(0.0, 0.0))


def test_monadic_meanings():
    assert [monadic(o) for o in ("sub", "div", "exp", "max", "rho")] == ["neg", "recip", "exp", None, None]
    assert MONADIC_ONLY == {"exp", "log", "sqrt", "abs", "tanh", "iota", "reverse", "rav", "tau", "delta"}
    assert STATIC_LEFT == {"psi", "rho", "take", "drop", "transpose", "gamma", "gammacol", "gammainv"}
