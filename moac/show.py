"""How moac's objects show themselves in a notebook: `_repr_html_` (Jupyter's rich display)
and `_repr_pretty_` (IPython's pretty printer).  Neither needs IPython: the pretty printer
is handed in by IPython when it calls.  Every piece of text is escaped with html.escape."""
from __future__ import annotations

from html import escape


def shown(name: str) -> str:
    """A buffer's name in the dumps (an internal scratch buffer's leading @ dropped)."""
    return name.lstrip("@")


def pretty(obj, p, cycle: bool, dump: str) -> None:
    """IPython's pretty protocol: the full dump, or the one-line repr inside a cycle."""
    p.text(repr(obj) if cycle else dump)


def html(header: str, dump: str, body: str = "", summary: str = "dump") -> str:
    """The one-line repr as a header, `body` (HTML already escaped), and the dump in a
    collapsed <details><pre> block."""
    return (f'<div class="moac"><div><code>{escape(header)}</code></div>{body}'
            f"<details><summary>{escape(summary)}</summary><pre>{escape(dump)}</pre></details></div>")


def table(head: tuple, rows: list) -> str:
    """An HTML table of text cells (escaped here)."""
    cells = "".join(f"<th>{escape(str(h))}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td>{escape(str(c))}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table><tr>{cells}</tr>{body}</table>"
