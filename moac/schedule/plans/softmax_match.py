"""Recognising a softmax contraction in a DNF: the reductions over one axis l

    m = max_l E_l                  (monoid max)
    z = Σ_l exp(E_l − m)           (log-sum-exp: pairs (m, z) merge)
    o = Σ_l exp(E_l − m) · W_l     (log-sum-exp with a weighted sum: (m, z, o) merge)
    out = o ÷ z

(and, beside the contraction, any outputs that are functions of m and z alone, row by row:
the log-sum-exp m + log z), whose combine rules are all monoids, so the axis can be split into chunks and the
chunks' partial states merged (moac.schedule.monoids).  The output may be written in
any of the equivalent forms the algebra allows: the normalisation ÷ z inside the sum
(Σ_l (e_l ÷ z)·W_l, what `softmax s +.× V` gives) or outside it ((Σ_l e_l·W_l) ÷ z),
the factors in any order, the maximum and sum written by hand or as user functions.
Each refusal says why.
"""
from __future__ import annotations

from dataclasses import dataclass

import sympy as sp

from ...dnf import DOp, DRead, DReduce, DStmt, canonical_key, free_index_vars, reads
from ...dnf import substitute
from ...dnf.walk import factor_list, has_reduce
from ...front import core as C


@dataclass(frozen=True)
class SoftmaxContraction:
    m: DStmt              # the maximum temporary
    z: DStmt              # the sum temporary
    out: DStmt
    frame: tuple          # frame vars of out (those m and z are indexed by)
    rest: tuple           # out's remaining vars
    l: sp.Symbol          # the contracted (token) axis
    N: object
    E: object             # score expression in terms of l (and out's vars)
    W: object             # weight expression in terms of l and out's vars
    rows: tuple = ()      # outputs of m and z alone, indexed like them (a log-sum-exp m + log z)


def _product(xs: list):
    out = xs[0]
    for x in xs[1:]:
        out = DOp("mul", (out, x))
    return out


def _outside(body, temps: dict):
    """The output's Σ with what multiplies it from outside: ((Σ_l e_l·W_l) ÷ z, the
    normalisation outside the sum) -> (Σ, z's read); constant factors outside (the DNF
    takes them out of a sum: (Σ_l …) × 2) go back into the summand, as factors of the
    weights (read nothing, they do not depend on l).  Anything else: (body, None), for
    the caller to refuse."""
    num, den = factor_list(body, [], [])
    sums = [f for f in num if isinstance(f, DReduce) and f.op == "add"]
    zs = [f for f in den if isinstance(f, DRead) and f.array in temps]
    rest_num = [f for f in num if not any(f is x for x in sums)]
    rest_den = [f for f in den if not any(f is x for x in zs)]
    if len(sums) != 1 or len(zs) > 1 or any(reads(f) for f in rest_num + rest_den):
        return body, None
    if not rest_num and not rest_den:
        return sums[0], (zs[0] if zs else None)
    s = sums[0]
    summand = _product([s.body] + rest_num)
    for f in rest_den:
        summand = DOp("div", (summand, f))
    return DReduce(s.op, s.var, s.extent, summand), (zs[0] if zs else None)


def _split_terms(body, temps: dict):
    """exp(E − m) · W (÷ z) → (E, m read, W, z read or None), or a reason."""
    num, den = factor_list(body, [], [])
    exps = [f for f in num if isinstance(f, DOp) and f.op == "exp" and isinstance(f.args[0], DOp)
            and f.args[0].op == "sub" and isinstance(f.args[0].args[1], DRead) and f.args[0].args[1].array in temps]
    if len(exps) != 1:
        return "the summand is not exp(E − m)·W with m a stored maximum"
    if len(den) > 1 or (den and not (isinstance(den[0], DRead) and den[0].array in temps)):
        return "the summand divides by something other than a stored sum"
    rest = [f for f in num if f is not exps[0]]
    if not rest:
        return "the sum has no weights W (a plain Σ exp is not a contraction)"
    E, mr = exps[0].args[0].args
    return E, mr, _product(rest), (den[0] if den else None)


def _of_temps_alone(st: DStmt, temps: dict) -> bool:
    """Whether every element of st is a function of the temporaries at st's own index (no
    reduction, no other read): ⟨i⟩ψlse = ⟨i⟩ψm + log(⟨i⟩ψz)."""
    rs = reads(st.body)
    return bool(rs) and not has_reduce(st.body) and all(r.array in temps and tuple(r.index) == tuple(st.vars)
                                                        for r in rs)


def match_softmax(stmts: tuple):
    """A SoftmaxContraction, or the reason there is none."""
    outs = [s for s in stmts if s.role == "output"]
    temps = {s.name: s for s in stmts if s.role == "temp"}
    rows = [s for s in outs if _of_temps_alone(s, temps)] if len(temps) == 2 else []
    outs = [s for s in outs if s not in rows]
    if len(outs) != 1:
        return f"{len(outs)} outputs (the plan computes one" + (
            ", besides those of the maximum and the sum alone)" if rows else ")")
    if len(temps) != 2:
        return f"{len(temps)} stored temporaries, not the two of a softmax (its maximum and its sum)"
    out = outs[0]
    body, zr = _outside(out.body, temps)
    if not (isinstance(body, DReduce) and body.op == "add"):
        return f"output {out.name} is not a Σ over one axis (nor such a Σ divided by a stored sum)"
    l, N = body.var, body.extent
    parts = _split_terms(body.body, temps)
    if isinstance(parts, str):
        return parts
    E, mr, W, zin = parts
    if (zr is None) == (zin is None):
        return "the sum is normalised twice or not at all" if zr is not None else \
            "the weighted sum is not divided by a stored sum"
    zr = zr or zin
    if zr.array == mr.array or mr.index != zr.index:
        return "the maximum and the sum are not two temporaries over the same frame"
    if any(l in free_index_vars(x) for x in (zr, mr)):
        return f"the maximum or the sum depends on the contracted axis {l.name}"
    m, z = temps[mr.array], temps[zr.array]
    frame = tuple(mr.index)
    if not all(isinstance(f, sp.Symbol) and f in out.vars for f in frame) or tuple(out.vars[:len(frame)]) != frame:
        return "the temporaries are not indexed by the leading axes of the output"
    if not (isinstance(m.body, DReduce) and m.body.op == "max"):
        return f"temporary {m.name} is not a maximum"
    if canonical_key(DReduce("max", l, N, E)) != canonical_key(substitute(m.body, dict(zip(m.vars, frame)))):
        return f"temporary {m.name} is not the maximum of the scores the output exponentiates"
    want = DReduce("add", l, N, DOp("exp", (DOp("sub", (E, DRead(m.name, frame))),)))
    if canonical_key(want) != canonical_key(substitute(z.body, dict(zip(z.vars, frame)))):
        return f"temporary {z.name} is not Σ exp(E − {m.name}) over the contracted axis"
    for r in rows:
        if not C.same_shape(tuple(r.shape), tuple(out.shape[:len(frame)])):
            return f"output {r.name} of the maximum and the sum is not indexed like them"
        if len(out.vars) - len(frame) > 1:
            return f"output {r.name} of the maximum and the sum beside a contraction with several remaining axes"
    return SoftmaxContraction(m, z, out, frame, tuple(out.vars[len(frame):]), l, N, E, W, tuple(rows))
