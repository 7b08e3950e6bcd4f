"""The DNF traversal helpers (children, map_children, substitute) and the verifier."""
from __future__ import annotations

import dataclasses
import os

import pytest
import sympy as sp

import moac
import moac.dnf.program as program
from moac.dnf import (DConst, DIndex, DOp, DRead, DReduce, DSelect, DStmt, children, map_children, substitute,
                      to_dnf, verify_dnf)
from conftest import EXAMPLES, sym


def ix(name: str) -> sp.Symbol:
    return sp.Symbol(name, integer=True, nonnegative=True)


i, j, k = ix("i"), ix("j"), ix("k")
n, m, p = sym("n"), sym("m"), sym("p")
SUM = DReduce("add", k, m, DOp("mul", (DRead("A", (i, k)), DRead("B", (k, j)))))


def test_children_in_order():
    sel = DSelect(sp.Lt(i, 2), DConst(1.0), DIndex(i))
    assert children(SUM) == (SUM.body,)
    assert children(SUM.body) == (DRead("A", (i, k)), DRead("B", (k, j)))
    assert children(sel) == (DConst(1.0), DIndex(i))
    assert children(DRead("A", (i, k))) == children(DConst(0.0)) == children(DIndex(i)) == ()
    with pytest.raises(TypeError):
        children("not a DNF node")


def test_map_children_rebuilds_one_level():
    swapped = map_children(SUM.body, lambda c: DRead(c.array + "2", c.index))
    assert swapped == DOp("mul", (DRead("A2", (i, k)), DRead("B2", (k, j))))
    assert map_children(SUM, lambda c: DConst(0.0)) == DReduce("add", k, m, DConst(0.0))
    leaf = DRead("A", (i, k))
    assert map_children(leaf, lambda c: 1 / 0) is leaf


def test_substitute_reaches_every_expression_but_not_a_bound_variable():
    e = DSelect(sp.Lt(i, n), DOp("add", (DIndex(i + 1), SUM)), DConst(0.0))
    got = substitute(e, {i: sp.Integer(3), k: j, m: p})
    want = DSelect(sp.Lt(3, n), DOp("add", (DIndex(sp.Integer(4)), DReduce(
        "add", k, p, DOp("mul", (DRead("A", (3, k)), DRead("B", (k, j))))))), DConst(0.0))
    assert got == want
    assert substitute(e, {}) is e


# --------------------------------------------------------------------------- the verifier


def matmul_dnf():
    return moac.load(EXAMPLES / "matmul.moa").dnf()


def with_stmts(d, *stmts):
    return dataclasses.replace(d, stmts=tuple(stmts))


def out(body, vars_=(i, j), shape=(n, p), name="C", role="output"):
    return DStmt(name, tuple(vars_), tuple(shape), body, role)


def test_the_verifier_is_on_in_the_tests():
    assert os.environ.get("MOAC_VERIFY") == "1"


def test_to_dnf_runs_the_verifier(monkeypatch):
    seen = []
    monkeypatch.setattr(program, "verify_dnf", seen.append)
    d = to_dnf(moac.load(EXAMPLES / "matmul.moa").core)
    assert seen == [d]
    monkeypatch.setenv("MOAC_VERIFY", "0")
    to_dnf(moac.load(EXAMPLES / "matmul.moa").core)
    assert seen == [d]


def test_a_good_dnf_passes():
    d = matmul_dnf()
    verify_dnf(d)
    verify_dnf(with_stmts(d, out(SUM)))


@pytest.mark.parametrize("stmts, message", [
    ((out(DReduce("add", k, m, DOp("mul", (DRead("A", (i, k)), DRead("B", (k, ix("z"))))))),),
     "invalid DNF, statement C: index variable(s) z bound neither by the statement ⟨i j⟩ nor by an enclosing "
     "reduction, in Σ_{k<m} ⟨i k⟩ψA × ⟨k z⟩ψB"),
    ((out(DOp("mul", (DRead("A", (i, k)), DConst(2.0)))),), "index variable(s) k bound neither"),
    ((out(DRead("Q", (i, j))),), "statement C: reads Q, which is neither an input nor an earlier statement"),
    ((out(DRead("A", (i,))),), "reads ⟨i⟩ψA with 1 index component(s); A has rank 2"),
    ((out(DRead("A", (n, j))),), "reads ⟨n j⟩ψA: index component 0 is n, outside 0 ≤ i < n"),
    ((out(DRead("A", (sp.Integer(-1), j))),), "index component 0 is -1, outside 0 ≤ i < n"),
    ((out(DRead("t", (i,))), out(DConst(1.0), (i,), (n,), "t", "temp")),
     "statement C: reads t, which is neither an input nor an earlier statement"),
    ((out(DConst(1.0), (i,), (n,), "t", "temp"), out(DRead("t", (i, j)))),
     "reads ⟨i j⟩ψt with 2 index component(s); t has rank 1"),
    ((out(DReduce("add", i, m, DRead("A", (i, j)))),), "a reduction binds i again inside its scope"),
    ((out(DReduce("sub", k, m, DRead("A", (i, k)))),), "reduces with sub, which has no identity"),
    ((out(DOp("exp", (DConst(1.0), DConst(2.0)))),), "operator exp applied to 2 argument(s)"),
    ((out(DConst(1.0), (i, i)),), "needs one distinct index variable per axis, has ⟨i i⟩ for ⟨n p⟩"),
    ((out(DConst(1.0), (i,), (n, p)),), "needs one distinct index variable per axis"),
    ((out(DConst(1.0), (i, j), (n, i)),), "extent i is not an expression of the sizes"),
    ((out(DConst(1.0), name="A"),), "statement A: defines A again"),
    ((out(DConst(1.0), (i,), (n,), name="C", role="update"),), "updates C, which is not an input of rank 1"),
])
def test_a_bad_dnf_is_rejected(stmts, message):
    with pytest.raises(AssertionError, match="^invalid DNF") as e:
        verify_dnf(with_stmts(matmul_dnf(), *stmts))
    assert message in str(e.value)


def test_a_constant_index_the_sizes_do_not_decide_is_accepted():
    # n - 1 lies in [0, n) for n ≥ 1 but not for n = 0: not decidable, so not rejected
    verify_dnf(with_stmts(matmul_dnf(), out(DRead("A", (n - 1, j)))))


def test_a_read_that_never_runs_is_not_bounds_checked():
    # a statement over an empty domain, or a reduction of no terms, evaluates nothing: the
    # index 0 that ψ-reshape gives a read of an array with no elements is never used there
    # (found by tests/test_front_props.py: ⟨0 n⟩ ρ a1 with a1 : ⟨n 0⟩)
    bad = DRead("A", (n, j))
    verify_dnf(with_stmts(matmul_dnf(), out(bad, (i, j), (sp.Integer(0), p))))
    verify_dnf(with_stmts(matmul_dnf(), out(DReduce("add", k, sp.Integer(0), bad))))
    with pytest.raises(AssertionError, match="outside 0 ≤ i < n"):     # a reduction of one term runs
        verify_dnf(with_stmts(matmul_dnf(), out(DReduce("add", k, sp.Integer(1), bad))))


def test_an_update_of_no_rows_from_a_reshaped_empty_array_compiles():
    src = ("size n\ninput a0 : f32 ⟨n n⟩\ninput a1 : f32 ⟨n 0⟩\nt0 = a0 × 1\n"
           "update 0 △ a0 = ⟨0 n⟩ ρ a1\noutput t0\n")
    d = moac.parse(src, "<test>").dnf()
    assert [st.role for st in d.stmts][-1] == "update"


def test_a_reshape_round_trip_reads_the_array_in_place():
    # ⟨h m d⟩ ρ (⟨hkv (g × m) d⟩ ρ Q) left ⌊(g·m·⌊(i·m + j)÷(g·m)⌋ + ((i·m + j) mod (g·m)))÷m⌋
    # and its like in the DNF, the ONF and the C (13 floor divisions and mods in the openmp
    # C of a block-attention program); the index is ⟨i j k⟩ itself
    import numpy as np
    src = ("size h, hkv, m, d\nsize g = h ÷ hkv\ninput Q : f32 ⟨h m d⟩\nQg = ⟨hkv (g × m) d⟩ ρ Q\n"
           "Y = Qg × 2\nX = ⟨h m d⟩ ρ Y\noutput X\n")
    prog = moac.parse(src, "rr.moa")
    assert "output  ⟨i j k⟩ψX = ⟨i j k⟩ψQ × 2    for i < g·hkv, j < m, k < d" in str(prog.dnf())
    Q = np.random.default_rng(0).standard_normal((6, 5, 3)).astype(np.float32)
    got = prog.compile(target="c")(Q=Q, hkv=2)["X"]
    np.testing.assert_array_equal(got, 2 * Q)


def test_simplify_index_keeps_the_value():
    # each rule of simplify_index on random integers: the identities without ranges for any
    # sign, the ones that use an index's extent for indices within it
    import random
    import sympy as sp
    from moac.dnf.reshape import simplify_index
    i, j, m, g = sp.symbols("i j m g", integer=True)
    x = i * m + j
    cases = [(g * m * sp.floor(x / (g * m)) + sp.Mod(x, g * m), None),
             (sp.floor((g * m * sp.floor(x / (g * m)) + sp.Mod(x, g * m)) / m), {j: m}),
             (sp.Mod(g * m * sp.floor(x / (g * m)) + j, m), {j: m}),
             (sp.floor((3 * m * i + j) / m), None),
             (sp.floor((-j - 1) / m), {j: m}), (sp.Mod(-j - 1, m), {j: m})]       # a reverse's
    rng = random.Random(1)
    for e, scope in cases:
        s = simplify_index(e, scope)
        assert s != e and (scope is None or not s.has(sp.floor, sp.Mod)), (e, s)
        for _ in range(200):
            mv, gv = rng.randint(1, 7), rng.randint(1, 5)
            jv = rng.randrange(mv) if scope else rng.randint(-20, 20)
            env = {i: rng.randint(-20 if scope is None else 0, 20), j: jv, m: mv, g: gv}
            env = {k: sp.Integer(v) for k, v in env.items()}      # all at once (subs evaluates as it goes)
            assert e.xreplace(env) == s.xreplace(env), (e, s, env)
