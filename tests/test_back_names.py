"""Identifier escaping: a user's C compiler never sees an identifier that came unescaped
from their source.  Inputs, outputs, sizes and index variables named like C keywords,
libc/libm functions or moac's own helpers and locals still compile with -Wall -Werror and
compute the right thing."""
from __future__ import annotations

import re

import pytest

import moac

from test_back_common import check_kernel

KEYWORDS_ATTENTION = """\
size int, double, main
index l < int, j < double, d < main
input q : f32 ⟨double⟩
input moac_exp : f32 ⟨int double⟩
input acc1 : f32 ⟨int main⟩
s = (q +.× ⍉moac_exp) ÷ √double
a = softmax s
return = a +.× acc1
output return
"""

KEYWORDS_GENERIC = """\
size int, double, chunk
index for < int, while < double
input float : f32 ⟨int double⟩
input moac_floordiv : f32 ⟨double⟩
input expf : f32 ⟨double chunk⟩
input g : f32 ⟨int⟩
if = float +.× moac_floordiv
static = + red g
void = float +.× expf
main = ⍉ float
sizeof = max red (+ red float)
output if, static, void, main, sizeof
"""

LOCALS = """\
size n, cn, M
input acc0 : f32 ⟨n M⟩
input o : f32 ⟨M⟩
input Z : f32 ⟨cn⟩
input sqrtf : f32 ⟨n⟩
sel1 = acc0 +.× o
mg = + red Z
i_ = sqrtf × 2
output sel1, mg, i_
"""

CASES = {"keywords-attention": (KEYWORDS_ATTENTION, dict(int=37, double=33, main=40)),
         "keywords-generic": (KEYWORDS_GENERIC, dict(int=5, double=33, chunk=3)),
         "moac-locals": (LOCALS, dict(n=7, cn=2, M=33))}


@pytest.mark.parametrize("target", ["c", "openmp", "openacc"])
@pytest.mark.parametrize("case", list(CASES))
def test_reserved_names_compile_and_check(case, target):
    text, sizes = CASES[case]
    prog = moac.parse(text, f"{case}.moa")
    kern = prog.compile(target=target, werror=True)
    check_kernel(prog, kern, sizes, seed=2)
    check_kernel(prog, kern, {}, seed=3)
    # every user identifier reaches C with the escape suffix only
    for p in kern.signature.params:
        assert p.cname == p.name + "_", p
        assert re.search(rf"\b{re.escape(p.cname)}\b", kern.c_source)


def test_filename_becomes_a_valid_function_name():
    text, sizes = CASES["keywords-generic"]
    for filename, fname in [("int.moa", "moac_int"), ("my-prog.v2.moa", "moac_my_prog_v2"),
                            ("dir/2x.moa", "moac_2x"), ("<stdin>", "moac_program")]:
        prog = moac.parse(text, filename)
        kern = prog.compile(target="c", werror=True)
        assert kern.signature.fname == fname
        check_kernel(prog, kern, sizes, seed=1)


# Regressions (fixed in bcda98b): scratch buffers the back end adds were escaped like user
# names (name + "_"), so a user input or output with the same name was redeclared.

SPLIT_K_P = """\
size n, dk, dv
index l < n, j < dk, d < dv
input q : f32 ⟨dk⟩
input K : f32 ⟨n dk⟩
input p : f32 ⟨n dv⟩
s = (q +.× ⍉K) ÷ √dk
a = softmax s
m_part = a +.× p
output m_part
"""

SCALAR_PART = """\
size n
input x : f32 ⟨n⟩
input s_part : f32 ⟨n⟩
s = + red x
t = s_part × 2
output s, t
"""


@pytest.mark.parametrize("target", ["c", "openacc"])
def test_user_names_equal_to_split_k_scratch(target):
    prog = moac.parse(SPLIT_K_P, "collide.moa")
    kern = prog.compile(target=target, werror=True)
    assert kern.onf.plan.startswith("split-K")
    check_kernel(prog, kern, {"n": 40, "dk": 8, "dv": 8})


@pytest.mark.parametrize("target", ["c", "openacc"])
def test_user_name_equal_to_reduction_partials(target):
    prog = moac.parse(SCALAR_PART, "collide2.moa")
    kern = prog.compile(target=target, werror=True)
    check_kernel(prog, kern, {"n": 300})


def test_user_names_equal_to_softmax_temporaries():
    """The DNF's materialised temporaries (softmax's max and sum) avoid input names."""
    text = "size n, w\ninput S : f32 ⟨n w⟩\ninput m : f32 ⟨n w⟩\ninput z : f32 ⟨n w⟩\n" \
           "P = (softmax Ω⟨1⟩ S) + m + z\noutput P\n"
    prog = moac.parse(text, "temps.moa")
    kern = prog.compile(target="openacc", werror=True)
    check_kernel(prog, kern, {"n": 5, "w": 40})
