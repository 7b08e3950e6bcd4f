"""Combine rules of reductions, as algebra.

A reduction whose combine is a monoid can be split: any partition of its axis into
chunks gives partial states that merge into the whole.  moac's plans use

    max      (a, b) ↦ max(a, b),  identity −∞
    sum      (a, b) ↦ a + b,      identity 0
    lse      (m, z, o) ⊕ (m′, z′, o′) = (M, z·e^{m−M} + z′·e^{m′−M}, o·e^{m−M} + o′·e^{m′−M}),
             M = max(m, m′), identity (−∞, 0, 0): the state of Σ_l e^{E_l − max E}·w_l.

`lse_fold` is the n-ary fold of lse over G partial states as Schedule statements:
M = max_g m_g, Z = Σ_g e^{m_g − M}·z_g, O = Σ_g e^{m_g − M}·o_g, and the result O ÷ Z
(0 for an empty axis, where Z = 0; otherwise Z ≥ 1 because the maximum contributes e⁰).
"""
from __future__ import annotations

import math

import sympy as sp

from .ir import Const, Let, Local, Loop, Op, Select, Set


def _exp_diff(m, M):
    return Op("exp", (Op("sub", (m, M)),))


def lse_fold_scale(g, G, read_m, read_z) -> tuple:
    """M and Z of G partial states, lanes over the partials g (two vector reductions)."""
    c1 = Loop(g, G, "vector", (Set("M", Op("max", (Local("M"), read_m()))),), note="global maximum M = max_g m_g",
              reduce=(("max", ("M",)),))
    c2 = Loop(g, G, "vector", (Set("Z", Op("add", (Local("Z"), Op("mul", (_exp_diff(read_m(), Local("M")),
                                                                          read_z()))))),),
              note="Z = Σ_g exp(m_g − M)·z_g", reduce=(("add", ("Z",)),))
    return (Let("M", Const(-math.inf)), c1, Let("Z", Const(0.0)), c2)


def lse_fold_value(g, G, read_o, read_m, ways: int = 4) -> tuple:
    """O = Σ_g e^{m_g − M}·o_g given M, then the value O ÷ Z.  The sum runs over `ways`
    partial accumulators, g = ways·gq + u (a monoid's terms may be grouped any way), so
    that many loads are in flight per lane; the last G mod ways partials follow.
    read_o(gexpr) and read_m(gexpr) load partial gexpr."""
    from .index import internal

    def term(acc, gx):
        return Set(acc, Op("add", (Local(acc), Op("mul", (read_o(gx), _exp_diff(read_m(gx), Local("M")))))))
    if ways <= 1:
        acc = Loop(g, G, "seq", (term("o", g),), note="Σ_g exp(m_g − M)·o_g")
        value = Select(Op("gt", (Local("Z"), Const(0.0))), Op("div", (Local("o"), Local("Z"))), Const(0.0))
        return (Let("o", Const(0.0)), acc), value
    gq = internal("gq")
    accs = [f"o{u}" for u in range(ways)]
    main = Loop(gq, sp.floor(G / ways), "seq", tuple(term(a, ways * gq + u) for u, a in enumerate(accs)),
                note=f"Σ_g exp(m_g − M)·o_g, {ways} partials per iteration", trip=G / ways)
    rest = Loop(g, G, "seq", (term(accs[0], g),), start=ways * sp.floor(G / ways), trip=sp.Integer(0),
                note=f"the last G mod {ways} partials")
    total = Local(accs[0])
    for a in accs[1:]:
        total = Op("add", (total, Local(a)))
    value = Select(Op("gt", (Local("Z"), Const(0.0))), Op("div", (total, Local("Z"))), Const(0.0))
    return tuple(Let(a, Const(0.0)) for a in accs) + (main, rest), value


def lse_fold_lanes(g, G, read_o: list, read_m, accs: list, guards: list | None = None) -> tuple:
    """O_r = Σ_g e^{m_g − M}·o_g[r] for R outputs r at once, lanes over the partials g
    (one vector reduction with R accumulators: the weight e^{m_g − M} is computed once
    per partial and shared by the R outputs).  read_o[r](g) loads partial g's output r;
    guards[r], if given, is the condition under which output r exists."""
    from .ir import Guard
    body = [Let("e", _exp_diff(read_m(), Local("M")))]
    for r, acc in enumerate(accs):
        st = Set(acc, Op("add", (Local(acc), Op("mul", (Local("e"), read_o[r](g))))))
        cond = guards[r] if guards else None
        body.append(st if cond is None or cond is True else Guard(cond, (st,)))
    loop = Loop(g, G, "vector", tuple(body), reduce=(("add", tuple(accs)),),
                note=f"Σ_g exp(m_g − M)·o_g for {len(accs)} outputs per gang, lanes over the partials g")
    return tuple(Let(a, Const(0.0)) for a in accs) + (loop,)
