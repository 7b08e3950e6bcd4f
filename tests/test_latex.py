"""LaTeX export (#11 item 7): `moac dnf --latex`, `moac onf --latex` and the `_repr_latex_`
of a DNF and an ONF.  Exact text of small pieces; every example's documents well formed,
ASCII and stable; pdflatex compiles a few where it is installed."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import pytest
import sympy as sp

from moac import cli
from moac.dnf import DConst, DIndex, DOp, DRead, DReduce, DSelect
from moac.dnf.ir import index_var
from moac.front.data import Distinct, read_term
from moac.latex_math import MARK, count, expr, index, moa, name, text

from conftest import EXAMPLES, ROOT, sym
from test_back_common import example

NAMES = sorted(p.stem for p in EXAMPLES.glob("*.moa"))
i, j, k = (index_var(v) for v in "ijk")
n, m, g, page, chunk = (sym(v) for v in ("n", "m", "g", "page", "chunk"))


def flat(s: str) -> str:
    return s.replace(MARK, "")


# --------------------------------------------------------------------------- exact pieces


def test_a_sum_of_products():
    e = DReduce("add", k, m, DOp("mul", (DRead("A", (i, k)), DRead("B", (k, j)))))
    assert flat(expr(e)) == r"\sum_{k<m} \langle i\;k\rangle\psi A \times \langle k\;j\rangle\psi B"


def test_operators_and_their_parentheses():
    s = DRead("s", (i,))
    e = DOp("div", (DOp("exp", (DOp("sub", (s, DRead("m", ()))),)), DOp("sqrt", (DIndex(n),))))
    assert flat(expr(e)) == r"\exp(\langle i\rangle\psi s - m) \div \sqrt{n}"
    assert flat(expr(DOp("mul", (DConst(2.0), DOp("add", (s, DConst(0.5))))))) == \
        r"2 \times (\langle i\rangle\psi s + 0.5)"
    assert flat(expr(DReduce("max", k, n, DOp("neg", (s,))))) == r"\max_{k<n} (-\langle i\rangle\psi s)"
    assert flat(expr(DOp("max", (s, DConst(0.0))))) == r"\max(\langle i\rangle\psi s, 0)"


def test_a_select_is_cases_alone_and_if_else_inside():
    sel = DSelect(sp.Lt(i, 3), DIndex(i), DSelect(sp.Eq(i - 3, 0), DConst(7.0), DConst(8.0)))
    assert expr(sel) == r"\begin{cases}i & \text{if } i < 3 \\ 7 & \text{if } i - 3 = 0 \\ 8 & " \
                        r"\text{otherwise}\end{cases}"
    inner = DSelect(sp.Lt(i, n), DRead("K", (i,)), DRead("k", ()))
    assert flat(expr(DOp("mul", (DRead("q", ()), inner)))) == \
        r"q \times (\langle i\rangle\psi K \ \text{if}\ i < n \ \text{else}\ k)"


def test_index_expressions_in_moa_notation():
    assert index(sp.floor(i / g)) == r"\lfloor i \div g\rfloor"
    assert index(sp.ceiling(n / chunk)) == r"\lceil n \div \mathit{chunk}\rceil"
    assert index(sp.Mod(j, page)) == r"j \bmod \mathit{page}"
    assert index(sp.Min(n, m) + sp.Max(0, n - m)) == r"\max(0, -m + n) + \min(m, n)"
    assert index(g * sym("hkv")) == r"g \cdot \mathit{hkv}"
    assert index(read_term("lens", (sym("b"),))) == r"\langle b\rangle\psi \mathit{lens}"
    assert index(sp.Le(read_term("lens", (sym("b"),)), n)) == r"\langle b\rangle\psi \mathit{lens} \le n"
    vec = flat(expr(DRead("K", (sp.floor(i / g), sp.Mod(j, page), n - i - 1))))
    assert vec == r"\langle \lfloor i \div g\rfloor\;(j \bmod \mathit{page})\;(-i + n - 1)\rangle\psi K"
    for e in (sp.floor(i / g), sp.ceiling(n / chunk), sp.Mod(j, page), sp.Min(n, m), sp.Max(n, m)):
        assert not re.search(r"(?<![\\a-z])(floor|ceiling|Mod|Min|Max)", index(e)), index(e)
    # a scatter's condition: its keys pairwise distinct, as the dumps print distinct⟨…⟩
    key = Distinct(read_term("table", (sym("b"), sp.floor(j / page))), sp.Mod(j, page))
    assert index(key) == (r"\operatorname{distinct}\langle \langle b\;\lfloor j \div \mathit{page}\rfloor\rangle"
                          r"\psi \mathit{table}\;(j \bmod \mathit{page})\rangle")


def test_counts_break_between_terms():
    e = 4 * n * (n + m + chunk)
    assert count(e) == rf"4 \cdot n \cdot (\mathit{{chunk}}{MARK} + m{MARK} + n)"
    assert flat(count((n * m + 2 * n + 3 * m + 4) / chunk)) == \
        r"\frac{1}{\mathit{chunk}} \cdot (m \cdot n + 3 \cdot m + 2 \cdot n + 4)"


def test_names_and_text_are_escaped():
    assert name("m_part") == r"\mathit{m\_part}"
    assert name("K") == "K" and name("dk") == r"\mathit{dk}"
    assert text("50% of {x} & y_1 -- ψ⟨n⟩ ≥ #") == \
        r"50\% of \{x\} \& y\_1 -{}- \ensuremath{\psi}\ensuremath{\langle}n\ensuremath{\rangle} \ensuremath{\ge} \#"
    assert text("café ☃") == r"caf\'{e} \texttt{U+2603}"


def test_the_trace_text_as_math():
    assert moa("⟨j l⟩ψ⍉K") == r"\langle j\;\allowbreak l\rangle\psi\mathord{\bigcirc\mkern-13.5mu\backslash" \
                              r"\mkern4.5mu}K"
    assert moa("maxred s") == r"\max\mathrm{red}\ \allowbreak s"
    assert moa("Σ_{j<dk} ⟨j⟩ψq × ⟨l j⟩ψK") == \
        r"\sum_{j<\mathit{dk}}\ \allowbreak \langle j\rangle\psi q\times\langle l\;\allowbreak j\rangle\psi K"
    assert moa("m (a reduction reused under scalar extension)") == \
        r"m\ \allowbreak \text{(a reduction reused under scalar extension)}"
    assert moa("⟨floor(i/g) Mod(i, g)⟩ψO") == r"\langle \lfloor i/g\rfloor\;\allowbreak (i \bmod g)\rangle\psi O"
    assert moa("⟨⌊i÷g⌋ (i mod g)⟩ψO") == \
        r"\langle \lfloor i\div g\rfloor\;\allowbreak (i\bmod g)\rangle\psi O"
    assert moa("√dk ÷ cap") == r"\sqrt{\mathit{dk}}\div\mathit{cap}"
    assert moa("q +.× ⍉K").startswith(r"q\mathbin{+.\times}")


# --------------------------------------------------------------------------- every example


def _run(argv, capsys) -> tuple:
    rc = cli.main(argv)
    out = capsys.readouterr()
    return rc, out.out, out.err


@pytest.fixture(scope="module")
def documents():
    """(example, subcommand) -> (exit status, LaTeX), each written once."""
    import contextlib
    import io
    out = {}
    for ex in NAMES:
        for cmd in ("dnf", "onf"):
            buf = io.StringIO()
            with contextlib.redirect_stdout(buf):
                rc = cli.main([cmd, "--latex", f"examples/{ex}.moa"])
            out[ex, cmd] = rc, buf.getvalue()
    return out


def well_formed(tex: str) -> None:
    """Braces balance (escaped ones aside), every \\begin has its \\end, no character but
    ASCII (no glyph that would stop pdflatex), no package beyond amsmath and amssymb."""
    assert tex.isascii(), sorted({c for c in tex if not c.isascii()})
    depth = 0
    for tok in re.findall(r"\\.|[{}]", tex, re.S):
        depth += {"{": 1, "}": -1}.get(tok, 0)
        assert depth >= 0
    assert depth == 0
    stack = []
    for kind, env in re.findall(r"\\(begin|end)\{([^}]*)\}", tex):
        if kind == "begin":
            stack.append(env)
        else:
            assert stack and stack.pop() == env
    assert not stack
    assert set(re.findall(r"\\usepackage(?:\[[^]]*\])?\{([^}]*)\}", tex)) <= {"amsmath,amssymb"}


@pytest.mark.parametrize("ex", NAMES)
def test_every_example_gives_well_formed_documents(ex, documents):
    for cmd in ("dnf", "onf"):
        rc, tex = documents[ex, cmd]
        assert rc == 0
        assert tex.startswith("% ") and r"\documentclass[10pt,a4paper]{article}" in tex
        assert tex.rstrip().endswith(r"\end{document}")
        well_formed(tex)
        assert "\\psi" in tex and not re.search(r"\b(Min|Max|Mod|floor|ceiling)\(", tex)


def test_documents_show_what_the_dumps_show(documents):
    _, dnf = documents["decode", "dnf"]
    assert r"input $q$ & \texttt{f32} & $\langle \mathit{dk}\rangle$ \\" in dnf
    assert r"\langle d\rangle\psi \mathit{out} &= \sum_{l<n} \exp(" in dnf
    assert dnf.count(r"\item \textsf{") == len(example("decode").dnf().trace)
    assert r"\textsf{\ensuremath{\psi}-transpose}: $\langle j\;\allowbreak l\rangle\psi" in dnf
    _, onf = documents["decode", "onf"]
    assert "plan: split-K softmax contraction" in onf and r"\subsection*{Kernel \texttt{k1\_partials}}" in onf
    assert r"\textsf{gang}\quad $g < \lceil n \div \mathit{chunk}\rceil$" in onf
    assert r"\ensuremath{\gamma}-difference $\mathit{dv}$ \ensuremath{\to} NOT coalesced (stride dv)" in onf
    assert r"$\mathit{m\_part}$ & scratch & \texttt{f32} & $\langle \lceil n \div \mathit{chunk}\rceil\rangle$" in onf
    assert r"\text{minimum} &= 4 \cdot (n + 1) \cdot (\mathit{dk} + \mathit{dv})\ \text{bytes}" in onf
    _, ragged = documents["decode_ragged", "dnf"]
    assert r"\subsection*{Conditions (\texttt{require})}" in ragged
    assert r"\item $\langle b\rangle\psi \mathit{lens} \le N\quad\text{for } b < B$" in ragged


def test_the_text_is_stable(documents, capsys):
    assert _run(["dnf", "--latex", "examples/decode_gqa.moa"], capsys)[1] == documents["decode_gqa", "dnf"][1]
    env = dict(os.environ, PYTHONHASHSEED="12345", PYTHONPATH=str(ROOT))
    r = subprocess.run([sys.executable, "-m", "moac", "onf", "--latex", "examples/decode_gqa.moa"], cwd=ROOT,
                       capture_output=True, text=True, env=env, check=True)
    assert r.stdout == documents["decode_gqa", "onf"][1]


def test_fixed_sizes_are_shown(capsys):
    rc, tex, _ = _run(["dnf", "--latex", "examples/decode.moa", "-D", "dk=128"], capsys)
    assert rc == 0 and r"fixed & \multicolumn{2}{l}{$\mathit{dk} = 128$} \\" in tex
    rc, tex, _ = _run(["onf", "--latex", "examples/decode.moa", "-D", "dk=128"], capsys)
    assert rc == 0 and r"Fixed sizes $\mathit{dk} = 128$." in tex


def test_latex_and_json_exclude_each_other(capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["dnf", "--latex", "--json", "examples/decode.moa"])
    assert e.value.code == 2 and "--latex and --json" in capsys.readouterr().err


def test_errors_stay_positioned(tmp_path, capsys):
    bad = tmp_path / "bad.moa"
    bad.write_text("size n\ninput x : f32 ⟨n⟩\ny = x + zz\noutput y\n", encoding="utf-8")
    for cmd in ("dnf", "onf"):
        rc, out, err = _run([cmd, "--latex", str(bad)], capsys)
        assert rc == 1 and out == ""
        assert err.startswith(f"{bad}:3:9: error:"), err


# --------------------------------------------------------------------------- notebooks


def test_repr_latex_is_a_math_fragment():
    prog = example("matmul")
    d, o = prog.dnf(), prog.onf(target="c")
    assert d._repr_latex_() == "\n".join([
        r"$$\begin{aligned}",
        r"&\text{sizes} && n,\ m,\ p \\",
        r"&\text{input} && A : \text{f32}\ \langle n\;m\rangle \\",
        r"&\text{input} && B : \text{f32}\ \langle m\;p\rangle \\",
        r"&\text{input} && x : \text{f32}\ \langle m\rangle \\",
        r"&\text{output} && \langle i\;j\rangle\psi C = \sum_{k<m} \langle i\;k\rangle\psi A \times "
        r"\langle k\;j\rangle\psi B\quad\text{for } i < n,\ j < p \\",
        r"&\text{output} && \langle i\rangle\psi y = \sum_{k<m} \langle i\;k\rangle\psi A \times "
        r"\langle k\rangle\psi x\quad\text{for } i < n",
        r"\end{aligned}$$"])
    frag = o._repr_latex_()
    assert frag.startswith(r"$$\begin{aligned}") and frag.endswith(r"\end{aligned}$$")
    assert r"&\text{kernel k1\_C} && \text{DRAM bytes } 4 \cdot m \cdot n" in frag
    assert r"&\text{flops} && 2 \cdot m \cdot n \cdot (p + 1)" in frag
    for f in (d._repr_latex_(), frag, example("decode_paged").dnf()._repr_latex_()):
        well_formed(f)
        assert MARK not in f
    assert d._repr_html_().startswith('<div class="moac">')        # the HTML display stays


# --------------------------------------------------------------------------- pdflatex


@pytest.mark.skipif(shutil.which("pdflatex") is None, reason="no pdflatex (texlive-latex-base) installed")
def test_pdflatex_compiles_the_documents(documents, tmp_path):
    frags = [example(x).dnf()._repr_latex_() for x in ("decode_gqa", "catenate")] + \
        [example("decode_gqa").onf()._repr_latex_()]
    fragments = "\n".join([r"\documentclass{article}", r"\usepackage{amsmath,amssymb}", r"\begin{document}",
                           *frags, r"\end{document}", ""])
    docs = {f"{cmd}_{ex}": documents[ex, cmd][1] for ex in ("decode", "decode_gqa") for cmd in ("dnf", "onf")}
    docs["fragments"] = fragments
    for stem, tex in docs.items():
        (tmp_path / f"{stem}.tex").write_text(tex, encoding="ascii")
        r = subprocess.run(["pdflatex", "-interaction=nonstopmode", "-halt-on-error", f"{stem}.tex"],
                           cwd=tmp_path, capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, f"{stem}: " + r.stdout[-3000:]
        assert (tmp_path / f"{stem}.pdf").stat().st_size > 1000
