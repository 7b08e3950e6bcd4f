"""The Operational Normal Form as users see it: the Schedule with its counts, printable
(`moac onf`).  Everything here is derived; nothing is stored twice."""
from __future__ import annotations

from dataclasses import dataclass

import sympy as sp

from ..dnf import fmt_index, format_stmt
from ..front.core import show_shape
from ..show import shown
from .counts import Counts, distinct_accesses, source_count
from .ir import Schedule


@dataclass(frozen=True)
class ONF:
    schedule: Schedule
    counts: Counts
    mapping: str = "auto"

    def __repr__(self) -> str:        # the dump is str(); this is one line
        kernels = ", ".join(k.name for k in self.schedule.kernels)
        return (f"<moac ONF of {self.schedule.dnf.program.source.filename}: target {self.target}, plan "
                f"{self.plan.split(' (')[0]}, kernels {kernels}; traffic {self.traffic}>")

    def __str__(self) -> str:
        return format_onf(self)

    def _repr_pretty_(self, p, cycle: bool) -> None:       # IPython: the dump
        from ..show import pretty
        pretty(self, p, cycle, str(self))

    def _repr_html_(self) -> str:                           # Jupyter: the one line, the counts, the dump folded
        from ..show import html, table
        rows = [("DRAM bytes", fmt_index(sp.factor(self.traffic))), ("minimum", fmt_index(sp.factor(self.minimum))),
                ("flops", fmt_index(sp.factor(self.flops)))]
        return html(repr(self), str(self), table(("count", "per call"), rows))

    def _repr_latex_(self) -> str:                          # Jupyter: the plan, statements and counts as math
        from ..latex_onf import onf_fragment
        return onf_fragment(self)

    # the Schedule's and the counts' parts, by the names the ONF has always used
    dnf = property(lambda self: self.schedule.dnf)
    target = property(lambda self: self.schedule.target)
    plan = property(lambda self: self.schedule.description)
    declined = property(lambda self: self.schedule.declined)
    fixed = property(lambda self: self.schedule.fixed)
    params = property(lambda self: self.schedule.params)
    buffers = property(lambda self: self.schedule.buffers)
    lifts = property(lambda self: self.schedule.lifts)
    statements = property(lambda self: self.schedule.statements)
    notes = property(lambda self: self.schedule.notes)
    choices = property(lambda self: self.schedule.choices)
    kernels = property(lambda self: self.counts.kernels)
    traffic = property(lambda self: self.counts.traffic)
    minimum = property(lambda self: self.counts.minimum)
    flops = property(lambda self: self.counts.flops)
    scratch_traffic = property(lambda self: self.counts.scratch_traffic)
    compulsory = property(lambda self: self.counts.compulsory)
    minimal = property(lambda self: self.counts.minimal)
    compulsory_minimal = property(lambda self: self.counts.compulsory_minimal)

    @property
    def ctype(self) -> str:
        return "double" if self.schedule.dtype == "f64" else "float"


def format_onf(o: ONF) -> str:
    s, c = o.schedule, o.counts
    prog = s.dnf.program
    L = [f"-- ONF of {prog.source.filename}   target {s.target}, plan: {s.description}"]
    for name, why in s.declined:
        L.append(f"   plan {name} declined: {why}")
    if s.fixed:
        env = {sp.Symbol(k, integer=True, nonnegative=True): v for k, v in s.fixed.items()}
        derived = [f"{n} = {sp.sympify(e).xreplace(env)}" for n, e in prog.derived
                   if not sp.sympify(e).xreplace(env).free_symbols]
        L.append("fixed sizes   " + ", ".join([f"{k} = {v}" for k, v in s.fixed.items()] + derived))
    if s.params:
        L.append("run-time sizes " + ", ".join(s.params))
    L.append("")
    L.append("statements (DNF after the passes):")
    for st in s.statements:
        L.append(f"  {st.role:6} {format_stmt(st)}")
    L.append("")
    L.append("buffers:")
    for buf in s.buffers:
        L.append(f"  {shown(buf.name):8} {buf.role:7} {buf.dtype} {show_shape(buf.shape):18} {buf.placement}")
    if s.lifts:
        L.append("")
        L.append("dimension lifting:")
        for lf in s.lifts:
            guard = f", guard {lf.var} < {fmt_index(lf.extent)} ({fmt_index(lf.factor)} ∤ {fmt_index(lf.extent)} " \
                "in general)" if lf.guarded else f" ({fmt_index(lf.factor)} | {fmt_index(lf.extent)}, no guard)"
            L.append(f"  {lf.var} ∈ ⟨{fmt_index(lf.extent)}⟩ → ⟨{lf.outer} {lf.inner}⟩: {lf.level}{guard}")
    for k in c.kernels:
        L.append("")
        L.append(f"kernel {k.name}: {k.comment}")
        L.append("  mapping tree:")
        for lp in k.loops:
            L.append(f"  {'  ' * lp.depth}{lp.level:6} {lp.var} < {fmt_index(lp.extent)}   {lp.meaning}")
        for a in distinct_accesses(k):
            rw = "write" if a.write else "read "
            lanes = f"lanes over {a.lanes}: γ-difference {fmt_index(a.diff)} → {a.verdict}" if a.lanes else "no vector lanes"
            L.append(f"  {rw} {shown(a.array)}[{a.text}]   {lanes}")
        L.append(f"  DRAM bytes {fmt_index(k.traffic)}   flops {fmt_index(k.flops)}")
    L.append("")
    L.append("traffic model: each kernel moves every distinct element it touches once (a perfect cache within "
             "a kernel, none between kernels)")
    L.append(f"DRAM traffic   {fmt_index(sp.factor(c.traffic))} bytes")
    L.append(f"no gang cache  {fmt_index(sp.factor(c.gang_traffic))} bytes (what each gang loads, summed over the "
             "gangs: rows that several gangs read count each time)")
    L.append(f"minimum        {fmt_index(sp.factor(c.minimum))} bytes (each input element the outputs depend on "
             "read once, each output element written once)")
    if c.minimal:
        L.append("verdict        traffic = minimum ✓ (minimal)")
    elif c.compulsory_minimal:
        L.append(f"verdict        inputs and outputs move exactly the minimum ✓ (minimal); scratch adds "
                 f"{fmt_index(sp.factor(c.scratch_traffic))} bytes")
    else:
        L.append(f"verdict        NOT minimal: {fmt_index(sp.factor(c.traffic - c.minimum))} bytes over the minimum")
    L.append(f"flops          {fmt_index(sp.factor(c.flops))}")
    src, grows = source_count(s, c)
    L.append(f"source ops     {fmt_index(sp.factor(src))} (the program's operations, each named array evaluated once)")
    if grows is not None:
        L.append(f"⚠ repeated work: the kernels' flops have a term {fmt_index(grows)} that no term of the program's "
                 "operations bounds (a value recomputed under a loop it does not depend on?)")
    for n in s.notes:
        L.append(f"note: {n}")
    return "\n".join(L)
