"""Golden C files: the emitted C of every example for every target, reviewed in diffs.

    tests/golden/<example>.<target>.c           default sizes (all sizes run-time)
    tests/golden/decode-dk128-dv128.<target>.c  decode with -D dk=128 -D dv=128
    (.cu for the cuda target)

To regenerate them on purpose (after an intended change to the generated code), run

    MOAC_REGEN_GOLDEN=1 python -m pytest tests/test_back_golden.py

and review `git diff tests/golden` before committing.  Without the variable a difference
fails the test with a unified diff.
"""
from __future__ import annotations

import difflib
import os
from pathlib import Path

import pytest

from test_back_common import EXAMPLE_NAMES, TARGETS, example

GOLDEN = Path(__file__).resolve().parent / "golden"
REGEN = os.environ.get("MOAC_REGEN_GOLDEN") == "1"

GOLDEN_TARGETS = TARGETS + ("cuda",)
SUFFIX = {"cuda": "cu"}
CASES = [(name, name, {}) for name in EXAMPLE_NAMES] + [("decode-dk128-dv128", "decode", {"dk": 128, "dv": 128})]


@pytest.mark.parametrize("target", GOLDEN_TARGETS)
@pytest.mark.parametrize("golden, name, sizes", CASES, ids=[c[0] for c in CASES])
def test_golden_c(golden, name, sizes, target):
    src = example(name).c_source(target=target, sizes=sizes)
    path = GOLDEN / f"{golden}.{target}.{SUFFIX.get(target, 'c')}"
    if REGEN:
        GOLDEN.mkdir(exist_ok=True)
        path.write_text(src, encoding="utf-8")
    assert path.exists(), f"{path} is missing; run MOAC_REGEN_GOLDEN=1 python -m pytest {__file__}"
    want = path.read_text(encoding="utf-8")
    if src != want:
        diff = "".join(difflib.unified_diff(want.splitlines(True), src.splitlines(True),
                                            f"golden/{path.name}", "generated", n=2))
        pytest.fail(f"generated C differs from {path.name} (MOAC_REGEN_GOLDEN=1 rewrites it):\n{diff[:6000]}")


def test_no_stray_golden_files():
    want = {f"{g}.{t}.{SUFFIX.get(t, 'c')}" for g, _, _ in CASES for t in GOLDEN_TARGETS}
    have = {p.name for p in GOLDEN.glob("*.c")} | {p.name for p in GOLDEN.glob("*.cu")}
    assert have == want, f"unexpected {sorted(have - want)}, missing {sorted(want - have)}"


def test_c_source_is_deterministic_and_matches_kernel_source():
    """The same program and options give the same text (goldens depend on it), and the
    kernel compiles exactly the text c_source shows."""
    prog = example("decode")
    assert prog.c_source(target="openacc") == example("decode").c_source(target="openacc")
    from test_back_common import kernel
    assert kernel("decode", "c").c_source == prog.c_source(target="c")
