"""`moac onf --latex` and the ONF's `_repr_latex_`: the Schedule's plan, buffers, liftings,
mapping trees, coalescing verdicts and counts as LaTeX (amsmath only), with the layout
and the printers of moac/latex.py and moac/latex_math.py."""
from __future__ import annotations

import sympy as sp

from .latex import _aligned, _preamble, _row, _stmt_math, _statements
from .latex_math import MARK, count, index, moa, name, prose, shape, text, tt
from .schedule.counts import distinct_accesses, source_count


def _hang(indent: float, line: str) -> str:
    """A paragraph indented by `indent` em whose continuation lines hang 2 em further."""
    return rf"{{\hangindent={indent + 2:g}em\hangafter=1\hspace*{{{indent:g}em}}{line}\par}}"


def _kernel(k) -> list:
    from .show import shown
    L = [rf"\subsection*{{Kernel {tt(k.name)}}}", prose(k.comment), "", r"\textbf{Mapping tree}\par"]
    L += [_hang(1.5 * lp.depth, rf"\textsf{{{text(lp.level)}}}\quad ${name(lp.var)} < {index(lp.extent)}$\quad "
                + prose(lp.meaning)) for lp in k.loops]
    L += [r"\medskip", r"\textbf{Accesses}\par"]
    for a in distinct_accesses(k):
        lanes = rf"lanes over ${name(a.lanes)}$: \ensuremath{{\gamma}}-difference ${index(a.diff)}$ " \
                rf"\ensuremath{{\to}} {prose(a.verdict)}" if a.lanes else "no vector lanes"
        L.append(_hang(0, rf"\textsf{{{'write' if a.write else 'read'}}}\quad ${name(shown(a.array))}[{moa(a.text)}]$"
                       rf"\quad {lanes}"))
    L += [r"\medskip", "", rf"DRAM bytes ${count(k.traffic)}$, flops ${count(k.flops)}$".replace(MARK, ""), ""]
    return L


def onf_document(o) -> str:
    """`moac onf --latex`: the plan, statements, buffers, liftings, every kernel's mapping
    tree and accesses with their coalescing verdicts, and the counts."""
    from .show import shown
    s, c, p = o.schedule, o.counts, o.dnf.program
    src, grows = source_count(s, c)
    L = _preamble(f"ONF of {p.source.filename}")
    L += [rf"\section*{{Operational Normal Form of {tt(p.source.filename)}}}",
          rf"Target {tt(s.target)}, plan: {prose(s.description)}.", ""]
    if s.declined:
        L += [r"\begin{itemize}"] + [rf"\item plan {text(n)} declined: {prose(why)}" for n, why in s.declined] + \
             [r"\end{itemize}"]
    if s.fixed:
        env = {sp.Symbol(k, integer=True, nonnegative=True): v for k, v in s.fixed.items()}
        fixed = [f"{name(k)} = {v}" for k, v in s.fixed.items()]
        fixed += [f"{name(n)} = {index(sp.sympify(e).xreplace(env))}" for n, e in p.derived
                  if not sp.sympify(e).xreplace(env).free_symbols]
        L += [r"Fixed sizes $" + r",\ ".join(fixed) + "$.", ""]
    if s.params:
        L += [r"Run-time sizes $" + r",\ ".join(name(n) for n in s.params) + "$.", ""]
    L += _statements(s.statements)
    L += [r"\subsection*{Buffers}", r"\begin{tabular}{@{}lllll@{}}",
          r"name & role & dtype & shape & placement \\ \hline"]
    L += [rf"${name(shown(b.name))}$ & {text(b.role)} & {tt(b.dtype)} & ${shape(b.shape)}$ & {text(b.placement)} \\"
          for b in s.buffers]
    L.append(r"\end{tabular}")
    if s.lifts:
        L += [r"\subsection*{Dimension lifting}", r"\begin{itemize}"]
        for lf in s.lifts:
            guard = rf", guard ${name(lf.var)} < {index(lf.extent)}$ (${index(lf.factor)} \nmid " \
                    rf"{index(lf.extent)}$ in general)" if lf.guarded else \
                rf" (${index(lf.factor)} \mid {index(lf.extent)}$, no guard)"
            L.append(rf"\item ${name(lf.var)} \in \langle {index(lf.extent)}\rangle \to \langle {name(lf.outer)}\;"
                     rf"{name(lf.inner)}\rangle$: {prose(lf.level)}{guard}")
        L.append(r"\end{itemize}")
    for k in c.kernels:
        L += _kernel(k)
    L += [r"\subsection*{Counts}", "Traffic model: each kernel moves every distinct element it touches once "
          "(a perfect cache within a kernel, none between kernels).", r"\begin{align*}"]
    rows = [(r"\text{DRAM traffic}", c.traffic, "bytes"), (r"\text{no gang cache}", c.gang_traffic, "bytes"),
            (r"\text{minimum}", c.minimum, "bytes"), (r"\text{flops}", c.flops, ""),
            (r"\text{source ops}", src, "")]
    L.append((r" \\" + "\n").join(_row(lhs, count(sp.factor(e)) + (rf"\ \text{{{unit}}}" if unit else ""),
                                       r"&\quad ") for lhs, e, unit in rows))
    L.append(r"\end{align*}")
    if c.minimal:
        L.append(r"Verdict: traffic = minimum \ensuremath{\checkmark} (minimal).")
    elif c.compulsory_minimal:
        L.append(r"Verdict: inputs and outputs move exactly the minimum \ensuremath{\checkmark} (minimal); scratch "
                 rf"adds ${count(sp.factor(c.scratch_traffic))}$ bytes.".replace(MARK, ""))
    else:
        L.append(rf"Verdict: NOT minimal, ${count(sp.factor(c.traffic - c.minimum))}$ bytes over the minimum."
                 .replace(MARK, ""))
    L.append("The source ops are the program's operations, each named array evaluated once.")
    if grows is not None:
        L.append(rf"\textbf{{Repeated work:}} the kernels' flops have a term ${count(grows)}$ that no term of the "
                 "program's operations bounds.".replace(MARK, ""))
    if s.notes:
        L += [r"\subsection*{Notes}", r"\begin{itemize}"] + [rf"\item {prose(n)}" for n in s.notes] + [r"\end{itemize}"]
    return "\n".join(L + [r"\end{document}", ""])


def onf_fragment(o) -> str:
    """The ONF's `_repr_latex_`: the plan, the statements after the passes, each kernel's
    counts and the totals."""
    c = o.counts
    rows = [(f"target {o.target}, plan {o.plan.split(' (')[0]}", "", "")]
    rows += [(s.role, *_stmt_math(s)) for s in o.statements]
    rows += [(f"kernel {k.name}", "", rf"\text{{DRAM bytes }} {count(k.traffic)},{MARK}\ \text{{flops }} "
              + count(k.flops)) for k in c.kernels]
    rows += [(label, "", count(sp.factor(e))) for label, e in
             (("DRAM bytes", c.traffic), ("minimum", c.minimum), ("flops", c.flops))]
    return _aligned(rows)
