"""− red, ÷ red and the inner products −.g, ÷.g (#11): the right folds of MoA/APL in the
interpreter, an alternating fold of the associative partner in the DNF, the same values
from every target."""
from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest

import moac
from moac.commands import random_inputs, tolerance, reduction_length

SRC = ("size n, m\ninput x : f32 ⟨n⟩\ninput A : f32 ⟨m n⟩\n"
       "a = − red x\nq = ÷ red x\nw = A −.× x\nv = A ÷.+ x\noutput a, q, w, v\n")


def test_the_interpreter_folds_from_the_right():
    prog = moac.parse("size n\ninput x : f32 ⟨n⟩\na = − red x\nq = ÷ red x\noutput a, q\n", "f.moa")
    x = np.array([8.0, 4.0, 2.0], np.float32)
    r = prog.evaluate(x=x)
    assert float(r["a"]) == 8 - (4 - 2) == 6 and float(r["q"]) == 8 / (4 / 2) == 4
    e = prog.evaluate(x=np.zeros(0, np.float32))
    assert float(e["a"]) == 0.0 and float(e["q"]) == 1.0          # the partners' identities
    one = prog.evaluate(x=np.array([5.0], np.float32))
    assert float(one["a"]) == 5.0 and float(one["q"]) == 5.0


def test_the_dnf_is_the_alternating_fold():
    text = str(moac.parse(SRC, "f.moa").dnf())
    assert "a = Σ_{i<n} (−⟨i⟩ψx if (i mod 2) = 1 else ⟨i⟩ψx)" in text
    assert "q = Π_{i<n} (1 ÷ ⟨i⟩ψx if (i mod 2) = 1 else ⟨i⟩ψx)" in text
    trace = moac.dnf.format_trace(moac.parse(SRC, "f.moa").dnf())
    assert "ψ-reduce, right fold" in trace and "ψ-inner, right fold" in trace


@pytest.mark.parametrize("target", ["c", "openmp", "openacc"])
@pytest.mark.parametrize("n", [0, 1, 2, 7, 64])
def test_every_target_agrees_with_the_interpreter(target, n):
    prog = moac.parse(SRC, "f.moa")
    kern = prog.compile(target=target, werror=True)
    arrays, sizes = random_inputs(prog, {"n": n, "m": 5}, n)
    arrays["x"] = np.abs(arrays["x"]) + 0.5                 # keep the quotients away from 0
    arrays["A"] = np.abs(arrays["A"]) + 0.5
    got, ref = kern(**arrays), prog.evaluate(sizes=sizes, **arrays)
    tol = tolerance(kern.signature.ctype, reduction_length(kern.onf, sizes))
    for k in prog.outputs:
        r = np.asarray(ref[k], np.float64)
        np.testing.assert_allclose(got[k], r, rtol=0, atol=tol * max(1.0, float(np.abs(r).max(initial=0))))


def test_other_reductions_are_still_refused_with_the_list():
    with pytest.raises(moac.ShapeError, match=r"red reduces with \+, −, ×, ÷, max or min"):
        moac.parse("size n\ninput x : f32 ⟨n⟩\ny = ⋆ red x\noutput y\n", "p.moa").dnf()


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
def test_the_cuda_kernels_compile(tmp_path):
    src = moac.parse(SRC, "f.moa").c_source(target="cuda")
    (tmp_path / "f.cu").write_text(src)
    r = subprocess.run(["nvcc", "-arch=sm_90a", "-c", "-o", str(tmp_path / "f.o"), str(tmp_path / "f.cu")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]


# --------------------------------------------------------------------------- rav, τ, δ (#11)

CLASSIC = ("size n, m\ninput A : f32 ⟨n m⟩\nr = rav A\nt = τ A\nd = δ A\n"
           "mean = (+ red rav A) ÷ τ A\noutput r, t, d, mean\n")


def test_classic_names_mean_what_moa_says():
    prog = moac.parse(CLASSIC, "c.moa")
    A = np.arange(6, dtype=np.float32).reshape(2, 3)
    r = prog.evaluate(A=A)
    np.testing.assert_array_equal(r["r"], A.reshape(-1))
    assert float(r["t"]) == 6 and float(r["d"]) == 2 and float(r["mean"]) == 2.5


def test_ascii_spellings_are_the_same_program():
    ascii_src = CLASSIC.replace("τ", "tau").replace("δ", "dim")
    assert str(moac.parse(ascii_src, "a.moa").dnf()).split("\n", 1)[1] == \
        str(moac.parse(CLASSIC, "c.moa").dnf()).split("\n", 1)[1]


@pytest.mark.parametrize("target", ["c", "openmp", "openacc"])
def test_classic_names_compile(target):
    prog = moac.parse(CLASSIC, "c.moa")
    kern = prog.compile(target=target, werror=True)
    A = np.random.default_rng(0).standard_normal((5, 7)).astype(np.float32)
    got, ref = kern(A=A), prog.evaluate(A=A)
    np.testing.assert_array_equal(got["r"], A.reshape(-1))
    assert float(got["t"]) == 35 and float(got["d"]) == 2
    np.testing.assert_allclose(got["mean"], ref["mean"], rtol=1e-5)


def test_classic_names_are_monadic():
    with pytest.raises(moac.MoacError, match="has no dyadic meaning|monadic"):
        moac.parse("size n\ninput x : f32 ⟨n⟩\ny = x τ x\noutput y\n", "m.moa").dnf()


# --------------------------------------------------------------------------- vector take/drop (#11)

@pytest.mark.parametrize("expr, want", [
    ("⟨1 2⟩ ▽ A", lambda A: A[1:, 2:]),
    ("⟨1⟩ ▽ A", lambda A: A[1:]),                          # a one-element vector acts like the scalar
    ("⟨2 ¯1⟩ △ A", lambda A: A[:2, -1:]),
    ("⟨¯2 3⟩ ▽ A", lambda A: A[:-2, 3:]),
    ("⟨0 0⟩ △ A", lambda A: A[:0, :0]),
])
@pytest.mark.parametrize("target", ["c", "openmp"])
def test_vector_counts_act_on_the_leading_axes(expr, want, target):
    prog = moac.parse(f"size n, m\ninput A : f32 ⟨n m⟩\ny = {expr}\noutput y\n", "v.moa")
    A = np.random.default_rng(1).standard_normal((4, 5)).astype(np.float32)
    np.testing.assert_array_equal(prog.evaluate(A=A)["y"], want(A))
    np.testing.assert_array_equal(prog.compile(target=target, werror=True)(A=A)["y"], want(A))


def test_too_many_counts_is_a_positioned_error():
    with pytest.raises(moac.ShapeError, match="3 counts for △ but the array has rank 2") as e:
        moac.parse("size n, m\ninput A : f32 ⟨n m⟩\ny = ⟨1 1 1⟩ △ A\noutput y\n", "v.moa").dnf()
    assert e.value.span.line == 3


# --------------------------------------------------------------------------- sizes that unify (#11)

UNIFY = "size p, q, r\ninput X : f32 ⟨p q⟩\ninput Y : f32 ⟨r 5⟩\nZ = X × Y\noutput Z\n"


def test_sizes_that_unify_compile_with_their_equalities():
    prog = moac.parse(UNIFY, "u.moa")
    text = str(prog.dnf())
    assert "require p = r    -- × pairs axis 0 of X (p) with axis 0 of Y (r): they must be equal" in text
    assert "require q = 5" in text
    X, Y = np.ones((3, 5), np.float32), np.full((3, 5), 2.0, np.float32)
    for target in ("c", "openmp"):
        np.testing.assert_array_equal(prog.compile(target=target)(X=X, Y=Y)["Z"], X * Y)
    np.testing.assert_array_equal(prog.evaluate(X=X, Y=Y)["Z"], X * Y)


@pytest.mark.parametrize("shapes, why", [(((3, 5), (4, 5)), "p = 3, r = 4"), (((3, 4), (3, 5)), "q = 4")])
def test_a_failed_equality_is_a_positioned_error_naming_both_operands(shapes, why):
    prog = moac.parse(UNIFY, "u.moa")
    kern = prog.compile(target="c")
    X, Y = np.ones(shapes[0], np.float32), np.ones(shapes[1], np.float32)
    for call in (lambda: kern(X=X, Y=Y), lambda: prog.evaluate(X=X, Y=Y)):
        with pytest.raises(moac.ArgumentError) as e:
            call()
        text = e.value.render()
        assert text.startswith("u.moa:4:5: error: × pairs axis") and "of X" in text and "of Y" in text and why in text


@pytest.mark.parametrize("decl, expr, msg", [
    ("input x : f32 ⟨n⟩", "x + 1 ▽ x", "got ⟨n⟩ and ⟨(n - 1)⟩"),                 # known to differ
    ("input A : f32 ⟨n m⟩\ninput B : f32 ⟨m n⟩", "A + B", "got ⟨n m⟩ and ⟨m n⟩"),  # a transpose left out
    ("input A : f32 ⟨4 m⟩\ninput B : f32 ⟨5 m⟩", "A + B", "got ⟨4 m⟩ and ⟨5 m⟩"),
])
def test_extents_known_to_differ_stay_compile_time_errors(decl, expr, msg):
    with pytest.raises(moac.ShapeError, match=msg.replace("(", r"\(").replace(")", r"\)")):
        moac.parse(f"size n, m\n{decl}\nz = {expr}\noutput z\n", "d.moa")


# --------------------------------------------------------------------------- γ′ (#11)

@pytest.mark.parametrize("off, shape", [(0, (2, 3, 4)), (7, (2, 3, 4)), (23, (2, 3, 4)), (5, (6,)), (11, (3, 4))])
def test_inverse_gamma_unravels_row_major(off, shape):
    vec = "⟨" + " ".join(map(str, shape)) + "⟩"
    prog = moac.parse(f"size n\ninput x : f32 ⟨n⟩\ni = {off} γ′ {vec}\nb = ({off} γ′ {vec}) γ {vec}\noutput i, b\n", "g.moa")
    r = prog.evaluate(x=np.zeros(1, np.float32))
    np.testing.assert_array_equal(r["i"], np.unravel_index(off, shape))
    assert float(r["b"]) == off
    got = prog.compile(target="c", werror=True)(x=np.zeros(1, np.float32))
    np.testing.assert_array_equal(got["i"], np.unravel_index(off, shape))


def test_inverse_gamma_ascii_and_bounds():
    a = moac.parse("size n\ninput x : f32 ⟨n⟩\nix = 7 gammainv <2 3 4>\noutput ix\n", "a.moa").dnf()
    assert "(0 if i = 0 else (1 if i = 1 else 3))" in str(a)
    with pytest.raises(moac.ShapeError, match="γ′ offset 30 is outside 0 ≤ o < 24"):
        moac.parse("size n\ninput x : f32 ⟨n⟩\ni = 30 γ′ ⟨2 3 4⟩\noutput i\n", "b.moa")
    text = str(moac.parse("size n\ninput x : f32 ⟨n⟩\ni = n γ′ ⟨n 3⟩\noutput i\n", "c.moa").dnf())
    assert "require n < 3·n    -- γ′ offset n must lie in [0, 3·n)" in text
