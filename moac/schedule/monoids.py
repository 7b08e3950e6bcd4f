"""Combine rules of reductions, as algebra.

A reduction whose combine is a monoid can be split: any partition of its axis into
chunks gives partial states that merge into the whole.  moac's plans use

    max      (a, b) ↦ max(a, b),  identity −∞
    sum      (a, b) ↦ a + b,      identity 0
    lse      (m, z, o) ⊕ (m′, z′, o′) = (M, z·e^{m−M} + z′·e^{m′−M}, o·e^{m−M} + o′·e^{m′−M}),
             M = max(m, m′), identity (−∞, 0, 0): the state of Σ_l e^{E_l − max E}·w_l.

`lse_fold_lanes` is the n-ary fold of lse over G partial states as Schedule statements:
M = max_g m_g, Z = Σ_g e^{m_g − M}·z_g, O = Σ_g e^{m_g − M}·o_g, and the result O ÷ Z
(0 for an empty axis, where Z = 0; otherwise Z ≥ 1 because the maximum contributes e⁰, or
NaN where a score is NaN or every score is −∞: the result is then NaN, as the interpreter's).
"""
from __future__ import annotations

import math

from .ir import Const, Let, Local, Loop, Op, Set


def _exp_diff(m, M):
    return Op("exp", (Op("sub", (m, M)),))


def lse_weight(g, G, read_m, read_z, level: str = "seq") -> tuple:
    """The pieces of the lse fold over the partials g, at `level` ("seq": the partials in
    sequence; "vector": lanes over them, M a max reduction): (statements before the loop:
    M = max_g m_g and Z = 0; statements of the loop body: the weight e = e^{m_g − M} and
    Z += e·z_g), the caller adding its outputs' terms e·o_g."""
    c1 = Loop(g, G, level, (Set("M", Op("max", (Local("M"), read_m()))),), note="global maximum M = max_g m_g",
              reduce=(("max", ("M",)),) if level == "vector" else ())
    return ((Let("M", Const(-math.inf)), c1, Let("Z", Const(0.0))),
            (Let("e", _exp_diff(read_m(), Local("M"))), Set("Z", Op("add", (Local("Z"), Op("mul", (Local("e"), read_z())))))))


def lse_fold_lanes(g, G, read_o: list, read_m, read_z, accs: list, guards: list | None = None, pre: tuple = ()) -> tuple:
    """M = max_g m_g (one vector reduction), then in one more pass Z = Σ_g e^{m_g − M}·z_g
    and O_r = Σ_g e^{m_g − M}·o_g[r] for R outputs r at once, lanes over the partials g
    (one vector reduction with R + 1 accumulators: the weight e^{m_g − M} is computed once
    per partial and shared by Z and the R outputs).  read_o[r](g) loads partial g's output
    r; guards[r], if given, is the condition under which output r exists; `pre`, statements
    the loop body starts with (a packed load of the R outputs that read_o then names)."""
    from .ir import Guard
    first, weight = lse_weight(g, G, read_m, read_z, "vector")
    body = list(pre) + list(weight)
    for r, acc in enumerate(accs):
        st = Set(acc, Op("add", (Local(acc), Op("mul", (Local("e"), read_o[r](g))))))
        cond = guards[r] if guards else None
        body.append(st if cond is None or cond is True else Guard(cond, (st,)))
    loop = Loop(g, G, "vector", tuple(body), reduce=(("add", ("Z",) + tuple(accs)),),
                note=f"Z = Σ_g exp(m_g − M)·z_g and Σ_g exp(m_g − M)·o_g for {len(accs)} output"
                     f"{'s' if len(accs) != 1 else ''} per gang, "
                     "lanes over the partials g")
    return first + tuple(Let(a, Const(0.0)) for a in accs) + (loop,)
