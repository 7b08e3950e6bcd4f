"""Regression tests for the two defects of issue #10 that the fuzzing campaign
(tests/fuzz.py, bench/fuzz_run.py) did not reproduce: an ONF stage that took many
seconds on a short valid program, and an internal TypeError in guard hoisting.  Both
were in guard hoisting (hoist_selects: moac/plans.py on 25cc8b8, moac/dnf/passes.py
now), both were still there on ddb2d4b, the tree before the fix (which went in with
a57b038); docs/reliability.md says how the inputs were found.

Each docstring says what the tree the issue was filed against (25cc8b8) did with the
same input.  The time bounds are generous for a loaded 2-core CI machine: the fixed
tree takes about 0.3 s where the old one took more than 5 s.
"""
from __future__ import annotations

import time

import pytest
import sympy as sp

import moac

from conftest import sym
from test_back_common import check_kernel

BOUND = 2.0          # seconds for one ONF stage

# Seven catenations multiplied elementwise under a Σ (Ω⟨1⟩ of an outer product): each
# catenation's guard tests the row i, not the reduced j, so guard hoisting moved every
# one of them out of the Σ, doubling it each time.
SEVEN_GUARDED_CATENATIONS = """\
size n, m, p
input A : f32 ⟨n⟩
input B : f32 ⟨m⟩
input v : f32 ⟨p⟩
X = A # B
Y = B # A
y = (+ red) Ω⟨1⟩ ((X × Y × (Φ X) × (Φ Y) × (1 ▽ X # 0) × (1 ▽ Y # 0) × Φ 1 ▽ X # 0) ∘.× v)
output y
"""

# A catenation along the reduced axis j (through ⍉) whose first part is itself a
# catenation along the row axis i: the Σ over j holds `a if j < p else b` with the guard
# `i < n − m` (two sizes) inside a; the second program has `i < n`.
GUARD_OVER_TWO_SIZES = """\
size n, m, p, q
input A : f32 ⟨n p⟩
input B : f32 ⟨m p⟩
input V : f32 ⟨n q⟩
Z = ⍉ ((⍉ ((m ▽ A) # B)) # ⍉ V)
y = (+ red) Ω⟨1⟩ Z
output y
"""

GUARD_OVER_ONE_SIZE = """\
size n, m, p, q
input A : f32 ⟨n p⟩
input B : f32 ⟨m p⟩
input V : f32 ⟨(n + m) q⟩
Z = ⍉ ((⍉ (A # B)) # ⍉ V)
y = (+ red) Ω⟨1⟩ Z
output y
"""

# The smallest of 13 programs that tests/progen.py produced (with catenation, reduction
# and Ω drawn more often than it draws them) and 25cc8b8 failed on the same way.
GENERATED = """\
size n, m, p
input a0 : f32 ⟨2 (p − 2) m⟩
input a1 : f32 ⟨(n - 1) 1⟩
input a2 : f32 ⟨1⟩
input a3 : f32 ⟨1 n⟩
input a4 : f32 ⟨n n p⟩
input a5 : f32 ⟨p⟩
input a6 : f32 ⟨m 2⟩
input a7 : f32 ⟨1 2 m n n⟩
t0 = max red ((((× red a0) outer.+ (a1 # a2)) (⌈.⌊ Ω⟨1, 2⟩) a3) # (((a4 (max.+ omega⟨1 1⟩) a5) \
(⌈ omega⟨2, 0⟩) (⍉ a6)) − (max red (a7 / (1 + (abs a7))))))
output t0
"""


def _timed_onf(prog, **options):
    t0 = time.perf_counter()
    onf = prog.onf(**options)
    return onf, time.perf_counter() - t0


def _count_reductions(e) -> int:
    name = type(e).__name__
    if name == "DReduce":
        return 1 + _count_reductions(e.body)
    if name == "DOp":
        return sum(_count_reductions(a) for a in e.args)
    if name == "DSelect":
        return _count_reductions(e.then) + _count_reductions(e.other)
    return 0


def test_onf_of_a_sum_over_seven_guarded_catenations_takes_under_two_seconds():
    """On 25cc8b8 `prog.onf(target="openacc")` of this 187-character program took 8.5 s
    alone on a core (9.1 s and 13.1 s in two runs of this test there, beside other work),
    sizes left symbolic: hoist_selects moved every guard out of the Σ, one doubling per
    guard, and the ONF lowered 240 copies of the reduction.  A 207-character variant
    took 8.8 s.  The tree before the fix took 10.5 s (15.1 s beside other work).  At
    most three guards now leave one reduction (8 copies, 0.3 s); the others are tested
    inside it."""
    prog = moac.parse(SEVEN_GUARDED_CATENATIONS, "seven_guarded_catenations.moa")
    prog.dnf()
    for target in ("openacc", "openmp", "c"):
        onf, took = _timed_onf(prog, target=target)
        assert took < BOUND, f"ONF for {target} took {took:.2f} s"
    (st,) = [s for s in onf.statements if s.name == "y"]
    assert _count_reductions(st.body) <= 2 ** 3
    kern = prog.compile(target="c", werror=True)
    check_kernel(prog, kern, {"n": 4, "m": 3, "p": 2})


@pytest.mark.parametrize("source, guard", [(GUARD_OVER_TWO_SIZES, ("i", "n", "m")), (GUARD_OVER_ONE_SIZE, ("i", "n"))],
                         ids=["two_sizes", "one_size"])
def test_guard_over_two_sizes_is_hoisted_without_typeerror(source, guard):
    """On 25cc8b8 every target's ONF stage of these programs (sizes symbolic or fixed)
    raised an internal error in guard hoisting:

        File "moac/plans.py", line 63, in _find_guard
          return _find_guard(t, bound) or _find_guard(o, bound)
        TypeError: cannot determine truth value of Relational: i < -m + n

    (`i < n` for the second program): the guard found inside the branch of a guard over
    the reduced axis was a sympy relation, and `or` asked for its truth value.  The
    tree before the fix raised the same TypeError in moac/dnf/passes.py."""
    prog = moac.parse(source, "guard_in_a_guarded_branch.moa")
    i, n, *m = (sym(x) for x in guard)
    want = sp.Lt(i, n - (m[0] if m else 0))               # i < n − m, or i < n
    for target in ("openacc", "openmp", "c"):
        onf, took = _timed_onf(prog, target=target)
        assert took < BOUND
        (st,) = [s for s in onf.statements if s.name == "y"]
        # the guard over the rows left the Σ over j: one Σ on each side of it
        assert type(st.body).__name__ == "DSelect" and st.body.cond == want, st.body
        assert type(st.body.then).__name__ == type(st.body.other).__name__ == "DReduce"
    sizes = {"n": 5, "m": 2, "p": 3, "q": 2}
    prog.onf(target="c", sizes=sizes)                     # fixed sizes go through the same pass
    kern = prog.compile(target="c", werror=True)
    check_kernel(prog, kern, sizes)


def test_generated_program_with_a_guard_inside_a_guarded_branch_agrees_with_the_interpreter():
    """On 25cc8b8 (and on the tree before the fix) the ONF stage of this generated program
    raised `TypeError: cannot determine truth value of Relational: j < n - 1` in
    _find_guard, for every target."""
    prog = moac.parse(GENERATED, "generated.moa")
    sizes = {"n": 3, "m": 1, "p": 2}
    for target in ("openacc", "openmp", "c"):
        _, took = _timed_onf(prog, target=target)
        assert took < BOUND
    kern = prog.compile(target="c", werror=True)
    check_kernel(prog, kern, sizes)
