"""The C expression/statement printer (moac.cir) and the pragma text of every target.

Exact strings: what the printer prints is what a user reads in the emitted C, so each case
pins the text.  A second test compiles the printed expressions with -Wall -Werror and
checks their *values* against a Python evaluation of the same tree (precedence bugs that
still compile would otherwise go unnoticed).
"""
from __future__ import annotations

import math
import re

import numpy as np
import pytest

from moac.jit import build
from moac.emit import cir
from moac.emit.cir import Assign, Bin, Block, Call, Cast, Comment, Cond, Decl, For, If, Int, Load, Neg, Num, Store, Var
from moac.targets import TARGETS, get_target

from test_back_common import EXAMPLE_NAMES, example

a, b, c, x, i, n = (Var(s) for s in "abcxin")
p, q, r = Var("p"), Var("q"), Var("r")

# (tree, printed with ctype float, printed with ctype double)
EXPRS = [
    # associativity: only the right operand of a left-associative operator needs parentheses
    (Bin("-", a, Bin("-", b, c)), "a - (b - c)", None),
    (Bin("-", Bin("-", a, b), c), "a - b - c", None),
    (Bin("+", a, Bin("+", b, c)), "a + (b + c)", None),   # float + is not associative
    (Bin("/", a, Bin("/", b, c)), "a / (b / c)", None),
    (Bin("/", a, Bin("*", b, c)), "a / (b * c)", None),
    (Bin("*", Bin("/", a, b), c), "a / b * c", None),
    # precedence
    (Bin("*", Bin("+", a, b), c), "(a + b) * c", None),
    (Bin("+", a, Bin("*", b, c)), "a + b * c", None),
    (Bin("+", Bin("*", a, b), c), "a * b + c", None),
    (Bin("%", Bin("+", i, n), Int(7)), "(i + n) % 7", None),
    (Bin("<", Bin("+", i, Int(1)), n), "i + 1 < n", None),
    (Bin("&&", Bin("<", i, n), Bin("||", p, q)), "i < n && (p || q)", None),
    (Bin("&&", Bin("<", i, n), Bin(">=", i, Int(0))), "i < n && i >= 0", None),
    # negative literals are parenthesised inside an operator, bare at the top
    (Int(-3), "-3", None),
    (Bin("+", i, Int(-1)), "i + (-1)", None),
    (Bin("*", Int(-2), i), "(-2) * i", None),
    (Num(-1.5), "-1.5f", "-1.5"),
    (Bin("*", Num(-1.5), x), "(-1.5f) * x", "(-1.5) * x"),
    (Bin("-", x, Num(-0.25)), "x - (-0.25f)", "x - (-0.25)"),
    (Neg(Int(-1)), "-(-1)", None),
    (Neg(Num(-1.0)), "-(-1.0f)", "-(-1.0)"),
    (Bin("-", a, Neg(b)), "a - -b", None),
    (Neg(Bin("+", a, b)), "-(a + b)", None),
    (Neg(Bin("*", a, b)), "-(a * b)", None),
    (Neg(Load("x_", i)), "-x_[i]", None),
    # float literals: always a decimal point or exponent; f suffix only for float
    (Num(2.0), "2.0f", "2.0"),
    (Num(0.1), "0.1f", "0.1"),
    (Num(1e20), "1e+20f", "1e+20"),
    (Num(1e-5), "1e-05f", "1e-05"),
    (Num(0.0), "0.0f", "0.0"),
    (Num(math.inf), "INFINITY", "INFINITY"),
    (Num(-math.inf), "-INFINITY", "-INFINITY"),
    (Bin("-", x, Num(-math.inf)), "x - (-INFINITY)", None),
    (Num(math.nan), "NAN", "NAN"),
    # Cond: bare at the top, parenthesised as an operand, nested ones parenthesised
    (Cond(Bin("<", i, n), Load("a_", i), Num(0.0)), "i < n ? a_[i] : 0.0f", "i < n ? a_[i] : 0.0"),
    (Bin("+", Cond(p, a, b), Num(1.0)), "(p ? a : b) + 1.0f", "(p ? a : b) + 1.0"),
    (Cond(p, Cond(q, a, b), Cond(r, x, c)), "p ? (q ? a : b) : (r ? x : c)", None),
    (Cond(Bin("||", p, q), Int(1), Int(-1)), "p || q ? 1 : (-1)", None),
    # Cast binds tighter than every binary operator
    (Cast("float", i), "(float)i", None),
    (Cast("float", Bin("+", i, Int(1))), "(float)(i + 1)", None),
    (Bin("*", Cast("float", i), Num(0.5)), "(float)i * 0.5f", "(float)i * 0.5"),
    (Cast("double", Call("moac_floordiv", (i, Int(2)))), "(double)moac_floordiv(i, 2)", None),
    (Neg(Cast("float", i)), "-(float)i", None),
    # calls and loads: arguments and indices never need parentheses
    (Call("fmaxf", (Bin("+", a, b), Num(-2.0))), "fmaxf(a + b, -2.0f)", "fmaxf(a + b, -2.0)"),
    (Load("K_", Bin("+", Bin("*", Var("l_"), Var("dk_")), Var("j_"))), "K_[l_ * dk_ + j_]", None),
    (Load("A_", Bin("*", Bin("+", i, n), Int(3))), "A_[(i + n) * 3]", None),
]


@pytest.mark.parametrize("tree, want_f, want_d", EXPRS, ids=[w for _, w, _ in EXPRS])
def test_expr_exact(tree, want_f, want_d):
    assert cir.expr(tree) == want_f
    assert cir.expr(tree, "float") == want_f
    assert cir.expr(tree, "double") == (want_d if want_d is not None else want_f)


def test_stmts_exact():
    body = (
        Decl("float", "acc1", Num(0.0)),
        For("j_", Var("dk_"),
            (Assign("acc1", Bin("+", Var("acc1"), Bin("*", Load("q_", Var("j_")),
                                                       Load("K_", Bin("+", Bin("*", Var("l_"), Var("dk_")), Var("j_")))))),),
            "#pragma acc loop vector reduction(+:acc1)", "vector reduction over DNF axis j < dk"),
        If(Bin("<", Var("l_"), Var("n_")), (Store("out_", Var("l_"), Var("acc1")),), (Comment("nothing"),)),
        If(Var("p"), (Assign("x", Num(1.0)),)),
        Block((Decl("int64_t", "c", Int(3)),), "#pragma acc parallel num_gangs(1)", "serial"),
        For("c", Var("cn"), (), None, None, Bin("*", Bin("/", Var("cn"), Int(4)), Int(4))),
        Decl("double", "y"),
    )
    assert cir.stmts(body, "float", indent=1) == [
        "    float acc1 = 0.0f;",
        "    #pragma acc loop vector reduction(+:acc1)",
        "    for (int64_t j_ = 0; j_ < dk_; ++j_) {  /* vector reduction over DNF axis j < dk */",
        "        acc1 = acc1 + q_[j_] * K_[l_ * dk_ + j_];",
        "    }",
        "    if (l_ < n_) {",
        "        out_[l_] = acc1;",
        "    } else {",
        "        /* nothing */",
        "    }",
        "    if (p) {",
        "        x = 1.0f;",
        "    }",
        "    /* serial */",
        "    #pragma acc parallel num_gangs(1)",
        "    {",
        "        int64_t c = 3;",
        "    }",
        "    for (int64_t c = cn / 4 * 4; c < cn; ++c) {",
        "    }",
        "    double y;",
    ]
    assert cir.stmts((Assign("y", Num(0.5)),), "double", indent=0) == ["y = 0.5;"]


def test_for_loops_are_int64():
    loop = For("i", Bin("*", Var("n_"), Var("m_")), (Store("a_", Var("i"), Num(0.0)),))
    assert cir.stmts((loop,), indent=0)[0] == "for (int64_t i = 0; i < n_ * m_; ++i) {"
    # every loop moac emits for the examples counts in int64_t
    for name in EXAMPLE_NAMES:
        src = example(name).c_source(target="c")
        heads = re.findall(r"^\s*for \((.*?);", src, re.M)
        assert heads, name
        assert all(h.startswith("int64_t ") for h in heads), (name, heads)


def test_small_builders():
    assert cir.add(Int(0), a) == a and cir.add(a, Int(0)) == a
    assert cir.expr(cir.add(a, Int(-2))) == "a - 2"
    assert cir.mul(Int(1), a) == a and cir.mul(a, Int(1)) == a
    assert cir.expr(cir.mul(cir.add(a, b), c)) == "(a + b) * c"


# --------------------------------------------------------------------------- semantics in C

# Trees over double a b c x and int64 i n p q r, evaluated in Python with C's rules.


def _py(e, env):
    match e:
        case Var(name=nm):
            return env[nm]
        case Int(value=v):
            return v
        case Num(value=v):
            return v
        case Neg(a=u):
            return -_py(u, env)
        case Cast(ctype=t, a=u):
            v = _py(u, env)
            return float(np.float32(v)) if t == "float" else float(v)
        case Cond(cond=k, a=u, b=w):
            return _py(u, env) if _py(k, env) else _py(w, env)
        case Call(fn=fn, args=args):
            vs = [_py(v, env) for v in args]
            return {"fmax": max, "fmin": min, "moac_floordiv": lambda s, t: s // t}[fn](*vs)
        case Bin(op=op, a=u, b=w):
            s, t = _py(u, env), _py(w, env)
            match op:
                case "&&":
                    return int(bool(s) and bool(t))
                case "||":
                    return int(bool(s) or bool(t))
                case "/":
                    assert isinstance(s, float) or isinstance(t, float), "no integer division here"
                    return s / t
                case "%":
                    assert s >= 0 and t > 0
                    return s % t
            return int(eval(f"s {op} t")) if op in ("<", "<=", ">", ">=", "==", "!=") else eval(f"s {op} t")
    raise TypeError(e)


SEM_TREES = [
    Bin("-", a, Bin("-", b, c)), Bin("-", Bin("-", a, b), c), Bin("/", a, Bin("/", b, c)),
    Bin("/", a, Bin("*", b, c)), Bin("*", Bin("/", a, b), c), Bin("*", Bin("+", a, b), c),
    Bin("+", a, Bin("*", b, c)), Bin("-", a, Neg(b)), Neg(Bin("-", a, b)), Neg(Int(-1)), Neg(Num(-1.0)),
    Bin("*", Num(-1.5), x), Bin("-", x, Num(-0.25)), Bin("+", i, Int(-1)), Bin("*", Int(-2), i),
    Bin("%", Bin("+", i, n), Int(7)), Bin("&&", Bin("<", i, n), Bin("||", p, q)),
    Cond(Bin("<", i, n), a, Num(0.0)), Bin("+", Cond(p, a, b), Num(1.0)),
    Cond(p, Cond(q, a, b), Cond(r, x, c)), Cond(Bin("||", p, q), Int(1), Int(-1)),
    Bin("*", Cast("float", i), Num(0.5)), Cast("double", Call("moac_floordiv", (i, Int(2)))),
    Neg(Cast("double", Bin("-", i, n))), Call("fmax", (Bin("-", a, b), Neg(c))),
    Bin("-", Bin("*", Bin("-", a, b), Bin("+", c, x)), Bin("/", Neg(a), Bin("-", b, Num(3.0)))),
]
VALUES = [dict(a=1.25, b=-3.5, c=0.75, x=2.0, i=5, n=3, p=1, q=0, r=1),
          dict(a=-2.0, b=0.5, c=-1.25, x=-4.0, i=2, n=9, p=0, q=1, r=0),
          dict(a=7.0, b=6.0, c=3.0, x=0.125, i=-7, n=9, p=0, q=0, r=1)]


def _compile_exprs(trees, ctype="double"):
    import cffi
    params = "double a, double b, double c, double x, int64_t i, int64_t n, int64_t p, int64_t q, int64_t r"
    helpers = ("static inline int64_t moac_floordiv(int64_t a, int64_t b) { int64_t q = a / b; "
               "return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q; }")
    fns = [f"double e{k}({params}) {{ return (double)({cir.expr(t, ctype)}); }}" for k, t in enumerate(trees)]
    src = "#include <math.h>\n#include <stdint.h>\n" + helpers + "\n" + "\n".join(fns) + "\n"
    lib_path = build.build_library(src, build.compile_flags("c", werror=True))
    ffi = cffi.FFI()
    ffi.cdef("\n".join(f"double e{k}(double, double, double, double, int64_t, int64_t, int64_t, int64_t, int64_t);"
                       for k in range(len(trees))))
    return ffi.dlopen(str(lib_path))


def test_printed_expressions_compute_what_the_tree_says():
    lib = _compile_exprs(SEM_TREES)
    for k, t in enumerate(SEM_TREES):
        for env in VALUES:
            got = getattr(lib, f"e{k}")(*(env[v] for v in "abcxinpqr"))
            want = float(_py(t, env))
            assert got == pytest.approx(want, rel=1e-15, abs=0), (cir.expr(t, "double"), env)


# Regressions (fixed in bcda98b): valid IR whose printed C was wrong.

def test_double_negation_is_not_a_decrement():
    """Neg(Neg(x)) was printed '--x': C's pre-decrement."""
    assert cir.expr(Neg(Neg(Var("acc1")))) == "-(-acc1)"
    assert cir.expr(Neg(Neg(Neg(Var("x"))))) == "-(-(-x))"
    lib = _compile_exprs([Neg(Neg(a)), Neg(Neg(Neg(Bin("-", a, b))))])
    assert lib.e0(1.5, 0, 0, 0, 0, 0, 0, 0, 0) == 1.5
    assert lib.e1(1.5, 4.0, 0, 0, 0, 0, 0, 0, 0) == 2.5


def test_mixed_logical_operators_compile_with_werror():
    """'&&' inside '||' and a comparison inside '==' were printed bare; gcc -Wall
    (-Wparentheses) then failed -Werror."""
    trees = [Bin("||", Bin("&&", p, q), r), Bin("==", Bin("<", i, n), Int(0)),
             Bin("||", p, Bin("&&", q, r)), Bin("!=", Bin("==", a, b), Int(1))]
    assert [cir.expr(t) for t in trees] == ["(p && q) || r", "(i < n) == 0", "p || (q && r)", "(a == b) != 1"]
    lib = _compile_exprs(trees)
    for k, t in enumerate(trees):
        for env in VALUES:
            assert getattr(lib, f"e{k}")(*(env[v] for v in "abcxinpqr")) == float(_py(t, env))


# --------------------------------------------------------------------------- pragmas


def test_target_table():
    assert set(TARGETS) == {"openacc", "openmp", "c", "cuda"}
    assert get_target("openacc").vector_length == 32
    with pytest.raises(ValueError, match="unknown target 'hip'"):
        get_target("hip")


def test_openacc_pragmas_exact():
    t = get_target("openacc")
    assert t.cflags == ("-fopenacc",)
    assert t.gang_pragma(1, ("K_", "q_")) == "#pragma acc parallel loop gang vector_length(32) deviceptr(K_, q_)"
    assert t.gang_pragma(3, ()) == "#pragma acc parallel loop gang collapse(3) vector_length(32)"
    assert t.vector_pragma() == "#pragma acc loop vector"
    assert t.vector_pragma((("add", ("acc1",)),)) == "#pragma acc loop vector reduction(+:acc1)"
    assert t.vector_pragma((("mul", ("acc2",)),)) == "#pragma acc loop vector reduction(*:acc2)"
    assert t.vector_pragma((("max", ("M",)),)) == "#pragma acc loop vector reduction(max:M)"
    assert t.vector_pragma((("min", ("m",)),)) == "#pragma acc loop vector reduction(min:m)"
    assert t.seq == "#pragma acc loop seq"
    assert t.serial_pragma(("x_",)) == "#pragma acc parallel num_gangs(1) vector_length(32) deviceptr(x_)"
    assert t.serial_pragma(()) == "#pragma acc parallel num_gangs(1) vector_length(32)"
    assert t.device_entry


def test_openmp_pragmas_exact():
    t = get_target("openmp")
    assert t.cflags == ("-fopenmp", "-fno-math-errno", "-fno-trapping-math", "-fassociative-math", "-fno-signed-zeros")
    assert "-ffinite-math-only" not in t.cflags and "-ffast-math" not in t.cflags   # NaN and ±inf keep their meaning
    assert t.native_flags == ("-march=native",) and t.lanes == "simd"
    assert t.gang_pragma(1, ("ignored",)) == "#pragma omp parallel for schedule(static)"
    assert t.gang_pragma(2, ()) == "#pragma omp parallel for collapse(2) schedule(static)"
    assert t.vector_pragma() == "#pragma omp simd"
    assert t.vector_pragma((("add", ("acc1",)),)) is None      # reassociated by the compiler
    assert t.seq is None and t.serial_pragma(("x",)) is None
    assert not t.device_entry


def test_c_target_has_no_pragmas():
    t = get_target("c")
    assert t.cflags == ()
    assert t.gang_pragma(2, ("x",)) is None
    assert t.vector_pragma() is None and t.vector_pragma((("max", ("M",)),)) is None
    assert t.seq is None and t.serial_pragma(()) is None
    for name in EXAMPLE_NAMES:
        assert "#pragma" not in example(name).c_source(target="c"), name


# Extra programs whose OpenACC code exercises the scalar-reduction and serial paths.
EXTRA = {
    "scalar_sum": "size n\ninput x : f32 ⟨n⟩\ns = + red x\noutput s\n",
    "row_max": "size n, m\ninput A : f32 ⟨n m⟩\nr = (max red) Ω⟨1⟩ A\noutput r\n",
    "scalar": "size n\ninput x : f32 ⟨n⟩\ny = ⟨0⟩ ψ x\nz = y × 2\noutput z\n",
}


def _openacc_sources():
    import moac
    for name in EXAMPLE_NAMES:
        yield name, example(name).c_source(target="openacc")
    yield "decode dk=dv=128", example("decode").c_source(target="openacc", sizes={"dk": 128, "dv": 128})
    yield "decode naive", example("decode").c_source(target="openacc", mapping="naive")
    for name, text in EXTRA.items():
        yield name, moac.parse(text, f"{name}.moa").c_source(target="openacc")


def test_openacc_launch_rules_in_generated_code():
    """GPU.md: vector reductions only at vector_length(32), a literal; never a `reduction`
    clause on a gang loop or parallel construct (per-gang partials + combine instead)."""
    for name, src in _openacc_sources():
        pragmas = [ln.strip() for ln in src.splitlines() if ln.strip().startswith("#pragma acc")]
        assert pragmas, name
        for pr in pragmas:
            if "parallel" in pr:
                assert "vector_length(32)" in pr, (name, pr)
                assert "reduction" not in pr, (name, pr)
            if "gang" in pr:
                assert "reduction" not in pr, (name, pr)
            if "reduction" in pr:
                assert pr.startswith("#pragma acc loop vector reduction("), (name, pr)
            m = re.search(r"vector_length\(([^)]*)\)", pr)
            if m:
                assert m.group(1) == "32", (name, pr)
            assert "num_workers(" not in pr or re.search(r"num_workers\(\d+\)", pr), (name, pr)
        assert "kernels" not in " ".join(pragmas), name


def test_openmp_has_no_acc_and_openacc_has_no_omp():
    for name in EXAMPLE_NAMES:
        omp = example(name).c_source(target="openmp")
        acc = example(name).c_source(target="openacc")
        assert "#pragma acc" not in omp and "#pragma omp" not in acc, name
        assert "#pragma omp parallel for" in omp, name


def test_openacc_host_entry_copies_into_device_memory_of_its_own():
    """The host entry allocates each array's device copy with acc_malloc (aligned for the
    packed loads; a data region places copies at their element type's alignment only),
    copies inputs in and outputs back, and runs in place on the host."""
    src = example("decode").c_source(target="openacc", sizes={"dk": 128, "dv": 128})
    assert "#pragma acc data" not in src and "host_data" not in src
    for line in ("    if (acc_get_device_type() != acc_device_host) {",
                 "        void *K_d = acc_malloc(sizeof(float) * (size_t)(128 * n_) + 1);",
                 "            acc_memcpy_to_device(K_d, (void *)K_, sizeof(float) * (size_t)(128 * n_));",
                 "            rc = moac_decode_device(q_d, K_d, V_d, out_d, n_, NULL);",
                 "                acc_memcpy_from_device(out_, out_d, sizeof(float) * (size_t)(128));",
                 "    return moac_decode_device(q_, K_, V_, out_, n_, NULL);"):
        assert line in src.splitlines(), line
