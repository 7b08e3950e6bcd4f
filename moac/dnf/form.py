"""The Denotational Normal Form of a program (stage 3's result): its statements, the log
of the ψ-reduction and the decisions it took, and how the whole form prints.  The nodes
and their printers are in dnf/ir.py; this module sits above them (and above the LaTeX
printer, which a notebook asks for through `_repr_latex_`)."""
from __future__ import annotations

from dataclasses import dataclass

from ..front import core as C
from .ir import fmt_index, format_stmt


@dataclass(frozen=True, slots=True)
class DNF:
    program: C.CoreProgram
    stmts: tuple
    trace: tuple
    notes: tuple = ()     # (temporary, why it is stored): the decisions of the ψ-reduction

    def __repr__(self) -> str:        # the dump is str(); this is one line
        outs = ", ".join(s.name for s in self.stmts if s.role != "temp")
        return (f"<moac DNF of {self.program.source.filename}: {len(self.stmts)} statements "
                f"({len(self.temps)} temporaries); outputs {outs}>")

    @property
    def temps(self):
        return tuple(s for s in self.stmts if s.role == "temp")

    def __str__(self) -> str:
        return format_dnf(self)

    def _repr_pretty_(self, p, cycle: bool) -> None:       # IPython: the dump
        from ..show import pretty
        pretty(self, p, cycle, str(self))

    def _repr_html_(self) -> str:                           # Jupyter: the one line, the dump folded
        from ..show import html
        return html(repr(self), str(self))

    def _repr_latex_(self) -> str:                          # Jupyter: the statements as math
        from ..latex import dnf_fragment
        return dnf_fragment(self)



def format_dnf(d: DNF) -> str:
    p = d.program
    lines = [f"-- DNF of {p.source.filename}"]
    if p.sizes:
        derived = "".join(f", {n} = {fmt_index(e)}" for n, e in p.derived)
        lines.append("sizes   " + ", ".join(s.name for s in p.sizes) + derived)
    for i in p.inputs:
        lines.append(f"input   {i.name} : {i.dtype} {C.show_shape(i.shape)}")
    notes = dict(d.notes)
    for s in d.stmts:
        tag = {"temp": "temp   ", "output": "output ", "update": "update "}[s.role]
        why = f"    -- {notes[s.name]}" if s.role == "temp" and s.name in notes else ""
        lines.append(f"{tag} {format_stmt(s)}{why}")
    for c in p.constraints:
        over = ("    for " + ", ".join(f"{fmt_index(v)} < {fmt_index(e)}" for v, e in c.over)) if c.over else ""
        lines.append(f"require {fmt_index(c.cond)}{over}    -- {c.message}")
    return "\n".join(lines)


def format_trace(d: DNF) -> str:
    return "\n".join(f"[{t.rule}] {t.before}  ⇒  {t.after}" for t in d.trace)
