"""docs/language.md is executable: every ```moa block loads and its DNF evaluates equal to the
interpreter; a ```dnf block after a program is its exact DNF dump; every ```moa-error block is
rejected, and a ```text block after it is the exact error report."""
from __future__ import annotations

import re

import pytest
import sympy as sp

import moac
from conftest import ROOT, check_dnf

DOC = ROOT / "docs" / "language.md"
FENCE = re.compile(r"^```([\w-]*)\n(.*?)^```$", re.M | re.S)
SIZE_VALUES = (4, 3, 5, 2, 3, 4)      # given to the sizes in declaration order


def _blocks():
    text = DOC.read_text(encoding="utf-8")
    out = []
    for m in FENCE.finditer(text):
        line = text.count("\n", 0, m.start()) + 1
        out.append((m.group(1), m.group(2), line))
    return out


BLOCKS = _blocks()
PROGRAMS = [(body, line) for kind, body, line in BLOCKS if kind == "moa"]
ERRORS = [(body, line) for kind, body, line in BLOCKS if kind == "moa-error"]
# (program kind, program body, expected output, line of the expected block)
PAIRS = [(BLOCKS[i - 1][0], BLOCKS[i - 1][1], body, line)
         for i, (kind, body, line) in enumerate(BLOCKS) if kind in ("dnf", "text") and i > 0
         and BLOCKS[i - 1][0] in ("moa", "moa-error")]


def test_the_doc_has_examples():
    assert len(PROGRAMS) >= 15 and len(ERRORS) >= 5 and len(PAIRS) >= 10


@pytest.mark.parametrize("body, line", PROGRAMS, ids=[f"line{line}" for _, line in PROGRAMS])
def test_doc_program_dnf_matches_interpreter(body, line):
    prog = moac.parse(body, "example.moa")
    sizes = {s.name: v for s, v in zip(prog.core.sizes, SIZE_VALUES)}
    for c in prog.core.constraints:                 # sizes that unify: satisfy the equalities
        if isinstance(c.cond, sp.Equality):
            lhs, rhs = c.cond.args
            sym = rhs if isinstance(rhs, sp.Symbol) else lhs
            other = lhs if sym is rhs else rhs
            sizes[sym.name] = int(other.subs({sp.Symbol(k, integer=True, nonnegative=True): v
                                              for k, v in sizes.items()}))
    for seed in (0, 1):
        check_dnf(prog, sizes, seed=seed)


@pytest.mark.parametrize("body, line", ERRORS, ids=[f"line{line}" for _, line in ERRORS])
def test_doc_error_block_is_rejected(body, line):
    with pytest.raises(moac.MoacError) as info:
        moac.parse(body, "example.moa")
    assert info.value.span is not None


@pytest.mark.parametrize("kind, body, want, line", PAIRS, ids=[f"line{p[3]}" for p in PAIRS])
def test_doc_shown_output_is_exact(kind, body, want, line):
    if kind == "moa":
        got = str(moac.parse(body, "example.moa").dnf())
    else:
        with pytest.raises(moac.MoacError) as info:
            moac.parse(body, "example.moa")
        got = info.value.render()
    assert got == want.rstrip("\n")


def test_every_ascii_spelling_in_the_table_parses():
    """The spelling table's ASCII column: each word is a keyword the lexer knows."""
    from moac.front.syntax import KEYWORDS
    table = DOC.read_text(encoding="utf-8").split("## Spellings", 1)[1].split("```", 1)[0]
    words = set(re.findall(r"`([a-z]+)", table)) - {"exp", "log", "abs", "red", "same"}
    assert words <= set(KEYWORDS) | {"outer", "omega"}, words - set(KEYWORDS)
