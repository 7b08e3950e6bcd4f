"""LaTeX of the normal forms: `moac dnf --latex` and `moac onf --latex` print a standalone
article (amsmath and amssymb only, for plain pdflatex); `DNF._repr_latex_` and
`ONF._repr_latex_` give a notebook a math fragment.  The math itself is moac.latex_math's:
here it is laid out, long statements broken over lines at their outermost operators.
"""
from __future__ import annotations

import re

from .latex_math import MARK, expr, for_clause, index, moa, name, prose, read, shape, text, tt

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
    return read(s.name, s.target), body          # a scatter writes at ⟨at⟩, the others at ⟨vars⟩


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
    L += _statements(d.stmts, d.notes)
    L += _conditions(p)
    if d.trace:
        L += [r"\subsection*{\ensuremath{\psi}-reduction trace}", r"\begin{enumerate}\small\raggedright"]
        L += [rf"\item \textsf{{{text(t.rule)}}}: ${moa(t.before)} \;\Rightarrow\; {moa(t.after)}$" for t in d.trace]
        L.append(r"\end{enumerate}")
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
