"""LaTeX of the normal forms: `moac dnf --latex` and `moac onf --latex` print a standalone
article (amsmath and amssymb only, for plain pdflatex); `DNF._repr_latex_` and
`ONF._repr_latex_` give a notebook a math fragment.  The math itself is moac.latex_math's:
here it is laid out, long statements broken over lines at their outermost operators.
"""
from __future__ import annotations

import re

import sympy as sp

from .latex_math import MARK, count, expr, for_clause, index, moa, name, prose, read, shape, text, tt

WIDTH = 80          # what fits on one display line of the document, in _width's units


# --------------------------------------------------------------------------- layout

_CMD = {"mathit": 0, "text": 0, "mathrm": 0, "operatorname": 0, "mathord": 0, "mathbin": 0, "frac": 0,
        "quad": 2, "qquad": 4, "times": 2, "div": 2, "le": 2, "ge": 2, "ne": 2,
        "to": 2, "bmod": 3, "sum": 1.5, "prod": 1.5, "exp": 2.5, "log": 2.5, "tanh": 3.5, "max": 3, "min": 3,
        ",": 0.3, ";": 0.5, " ": 0.5, "!": 0, "mkern": -1, "cdot": 1.5, "lfloor": 0.6, "rfloor": 0.6,
        "lceil": 0.6, "rceil": 0.6, "langle": 0.6, "rangle": 0.6, "sqrt": 1.2}


def _width(s: str) -> float:
    """About how wide s sets, in letters (a subscript counts half, cases their widest row)."""
    def widest(m):
        rows = [sum(_width(c) for c in r.split("&")) for r in m.group(1).split(r"\\")]
        return "x" * int(max(rows) + 2)
    s = re.sub(r"\\begin\{cases\}(.*?)\\end\{cases\}", widest, s)
    w, k, stack = 0.0, 0, []
    while k < len(s):
        scale = 0.5 if any(stack) else 1.0
        ch = s[k]
        if ch == "\\":
            m = re.match(r"\\([A-Za-z]+|.)", s[k:])
            w += scale * _CMD.get(m.group(1), 1.0)
            k += len(m.group(0))
            continue
        if ch in "_^" and s[k + 1:k + 2] == "{":
            stack.append(True)
            k += 2
            continue
        if ch == "{":
            stack.append(False)
        elif ch == "}":
            stack = stack[:-1]
        elif ch not in " " + MARK:
            w += scale * (2.0 if ch in "+-=<>" else 1.0)
        k += 1
    return w


def _pieces(s: str) -> list:
    """s cut at its MARKs outside braces (the others dropped)."""
    out, cur, depth, k = [], "", 0, 0
    while k < len(s):
        ch = s[k]
        if ch == "\\":
            cur += s[k:k + 2]
            k += 2
            continue
        depth += 1 if ch == "{" else -1 if ch == "}" else 0
        if ch == MARK:
            if depth == 0:
                out.append(cur)
                cur = ""
        else:
            cur += ch
        k += 1
    return out + [cur]


def _lines(pieces: list, width: float) -> list:
    """The pieces filled into lines of at most `width` (a piece wider than that alone); a
    line that starts with an operator gets an empty atom before it, so it stays binary."""
    lines, cur, w = [], "", 0.0
    for p in pieces:
        pw = _width(p)
        if cur and w + pw > width:
            lines.append(cur)
            cur, w = "{}" + p.lstrip(), 2 + pw
        else:
            cur, w = cur + p, w + pw
    return lines + [cur]


def _row(lhs: str, body: str, sep: str, width: float = WIDTH) -> str:
    """One statement of an align: lhs, then the body on as many lines as it needs."""
    lines = _lines(_pieces(body), width - _width(lhs) - 2)
    return lhs + " &= " + (r" \\" + "\n" + sep).join(lines)


def _stmt_math(s) -> tuple:
    """(lhs, body with its for clause) of a DStmt."""
    body = expr(s.body)
    if s.vars:
        body += MARK + for_clause(s.vars, s.shape)
    return read(s.name, s.vars), body


def _runs(stmts):
    """Consecutive statements of one role."""
    out = []
    for s in stmts:
        if out and out[-1][0] == s.role:
            out[-1][1].append(s)
        else:
            out.append((s.role, [s]))
    return out


_ROLE = {"temp": "Temporaries", "output": "Outputs", "update": "Updates (in place)"}


def _statements(stmts, notes=()) -> list:
    """One align per run of statements of a role; `notes` (temporary, why it is stored)
    listed after the temporaries they concern."""
    L, why = [], dict(notes)
    for role, group in _runs(stmts):
        L.append(rf"\subsection*{{{_ROLE.get(role, text(role))}}}")
        rows = [_row(*_stmt_math(s), r"&\quad ") for s in group]
        L += [r"\begin{align*}", (r" \\[1ex]" + "\n").join(rows), r"\end{align*}"]
        told = [rf"\item ${name(s.name)}$: {prose(why[s.name])}" for s in group if s.role == "temp" and s.name in why]
        L += [r"\begin{itemize}"] + told + [r"\end{itemize}"] if told else []
    return L


def _preamble(title: str) -> list:
    title = title.encode("ascii", "replace").decode().replace("\n", " ")
    return [f"% {title}: written by moac, compile with pdflatex",
            r"\documentclass[10pt,a4paper]{article}", r"\usepackage{amsmath,amssymb}",
            r"\setlength{\textwidth}{16cm}", r"\setlength{\oddsidemargin}{-0.04cm}",
            r"\setlength{\evensidemargin}{-0.04cm}", r"\setlength{\textheight}{23cm}",
            r"\setlength{\topmargin}{-1cm}", r"\setlength{\parindent}{0pt}", r"\allowdisplaybreaks",
            r"\begin{document}", r"\raggedright"]


def _sizes(p) -> str:
    shown = [name(s.name) for s in p.sizes] + [f"{name(n)} = {index(e)}" for n, e in p.derived]
    return r",\ ".join(shown)


def _conditions(p) -> list:
    if not p.constraints:
        return []
    L = [r"\subsection*{Conditions (\texttt{require})}", r"\begin{itemize}"]
    for c in p.constraints:
        over = for_clause([v for v, _ in c.over], [e for _, e in c.over]) if c.over else ""
        L.append(rf"\item ${index(c.cond)}{over}$\\ {prose(c.message)}")
    return L + [r"\end{itemize}"]


def dnf_document(d, sizes: dict | None = None) -> str:
    """`moac dnf --latex`: the sizes, inputs, statements, conditions and the ψ-reduction trace."""
    p = d.program
    L = _preamble(f"DNF of {p.source.filename}")
    L.append(rf"\section*{{Denotational Normal Form of {tt(p.source.filename)}}}")
    L.append(r"\begin{tabular}{@{}lll@{}}")
    if p.sizes or p.derived:
        L.append(rf"sizes & \multicolumn{{2}}{{l}}{{${_sizes(p)}$}} \\")
    if sizes:
        L.append(r"fixed & \multicolumn{2}{l}{$" + r",\ ".join(f"{name(k)} = {v}" for k, v in sizes.items()) + r"$} \\")
    L += [rf"input ${name(i.name)}$ & {tt(i.dtype)} & ${shape(i.shape)}$ \\" for i in p.inputs]
    L.append(r"\end{tabular}")
    L += _statements(d.stmts, getattr(d, "notes", ()))
    L += _conditions(p)
    if d.trace:
        L += [r"\subsection*{\ensuremath{\psi}-reduction trace}", r"\begin{enumerate}\small\raggedright"]
        L += [rf"\item \textsf{{{text(t.rule)}}}: ${moa(t.before)} \;\Rightarrow\; {moa(t.after)}$" for t in d.trace]
        L.append(r"\end{enumerate}")
    return "\n".join(L + [r"\end{document}", ""])


def _hang(indent: float, line: str) -> str:
    """A paragraph indented by `indent` em whose continuation lines hang 2 em further."""
    return rf"{{\hangindent={indent + 2:g}em\hangafter=1\hspace*{{{indent:g}em}}{line}\par}}"


def _kernel(k) -> list:
    from .schedule.onf import shown
    L = [rf"\subsection*{{Kernel {tt(k.name)}}}", prose(k.comment), "", r"\textbf{Mapping tree}\par"]
    L += [_hang(1.5 * lp.depth, rf"\textsf{{{text(lp.level)}}}\quad ${name(lp.var)} < {index(lp.extent)}$\quad "
                + prose(lp.meaning)) for lp in k.loops]
    L += [r"\medskip", r"\textbf{Accesses}\par"]
    seen = set()
    for a in k.accesses:
        key = (a.array, a.offset, a.write, a.lanes)
        if key in seen:
            continue
        seen.add(key)
        lanes = rf"lanes over ${name(a.lanes)}$: \ensuremath{{\gamma}}-difference ${index(a.diff)}$ " \
                rf"\ensuremath{{\to}} {prose(a.verdict)}" if a.lanes else "no vector lanes"
        L.append(_hang(0, rf"\textsf{{{'write' if a.write else 'read'}}}\quad ${name(shown(a.array))}[{moa(a.text)}]$"
                       rf"\quad {lanes}"))
    L += [r"\medskip", "", rf"DRAM bytes ${count(k.traffic)}$, flops ${count(k.flops)}$".replace(MARK, ""), ""]
    return L


def onf_document(o) -> str:
    """`moac onf --latex`: the plan, statements, buffers, liftings, every kernel's mapping
    tree and accesses with their coalescing verdicts, and the counts."""
    from .schedule.onf import shown
    s, c, p = o.schedule, o.counts, o.dnf.program
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
            (r"\text{minimum}", c.minimum, "bytes"), (r"\text{flops}", c.flops, "")]
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
    if s.notes:
        L += [r"\subsection*{Notes}", r"\begin{itemize}"] + [rf"\item {prose(n)}" for n in s.notes] + [r"\end{itemize}"]
    return "\n".join(L + [r"\end{document}", ""])


# --------------------------------------------------------------------------- notebook fragments


def _aligned(rows: list) -> str:
    """rows (tag, math) as one aligned display: the tags in a column, the math beside."""
    out = []
    for tag, lhs, body in rows:
        lines = _lines(_pieces(body), WIDTH - _width(lhs)) if body else [""]
        out.append(rf"&\text{{{text(tag)}}} && {lhs}{' = ' if body and lhs else ''}" +
                   (r" \\" + "\n" + r"&&& \qquad ").join(lines))
    return "$$\\begin{aligned}\n" + (r" \\" + "\n").join(out) + "\n\\end{aligned}$$"


def dnf_fragment(d) -> str:
    """The DNF's `_repr_latex_`: sizes, inputs, statements and conditions as one display."""
    p = d.program
    rows = [("sizes", _sizes(p), "")] if p.sizes or p.derived else []
    rows += [("input", rf"{name(i.name)} : \text{{{text(i.dtype)}}}\ {shape(i.shape)}", "") for i in p.inputs]
    rows += [(s.role, *_stmt_math(s)) for s in d.stmts]
    rows += [("require", "", index(c.cond) + (MARK + for_clause([v for v, _ in c.over], [e for _, e in c.over])
                                              if c.over else "")) for c in p.constraints]
    return _aligned(rows)


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
