"""Error messages: exact text and position for malformed and ill-shaped programs, and the
CLI's `file:line:col: error:` report with a non-zero exit and never a traceback."""
from __future__ import annotations

import subprocess
import sys

import pytest

import moac
from moac import cli
from conftest import ROOT

V = "size n, m\ninput x : f32 ⟨n⟩\ninput y : f32 ⟨m⟩\ninput A : f32 ⟨n m⟩\ninput B : f32 ⟨m n⟩\n"  # 5 lines
SCORES = "size n, dk\ninput q : f32 ⟨dk⟩\ninput K : f32 ⟨n dk⟩\n"  # 3 lines

# id: (source, error class, exact message, line, column)
CASES = {
    "syntax-dangling-operator": (
        V + "z = x + \noutput z", moac.ParseError,
        "unexpected end of line; expected an expression or statement", 6, 9),
    "syntax-unclosed-paren": (
        V + "z = (x + 1\noutput z", moac.ParseError, "unexpected end of line; expected )", 6, 11),
    "syntax-bad-character": (
        V + "z = x @ 1\noutput z", moac.ParseError, "unexpected character '@'", 6, 7),
    "syntax-bad-dtype": (
        "size n\ninput x : u32 ⟨n⟩\n", moac.ParseError,
        "unexpected 'u32'; expected a dtype (f32, f64, f16, bf16, f8e4m3, f8e5m2, i8, i32, i64)", 2, 11),
    "syntax-two-operands": (
        V + "z = x y\noutput z", moac.ParseError,
        "unexpected 'y'; expected an expression or statement", 6, 7),
    "undefined-name": (
        V + "z = x + w\noutput z", moac.NameError_, "undefined name 'w'", 6, 9),
    "undefined-size": (
        "input x : f32 ⟨n⟩\ny = x\n", moac.NameError_, "undefined name 'n'", 1, 16),
    "undefined-output": (
        V + "z = x\noutput w", moac.NameError_, "output 'w' is not defined", 7, 8),
    "redefinition": (
        V + "x = x + 1\n", moac.NameError_, "'x' is already defined (line 2)", 6, 1),
    "elementwise-shape-mismatch": (
        V + "z = x + 1 ▽ x\noutput z", moac.ShapeError,
        "+ needs operands of equal shape or a scalar; got ⟨n⟩ and ⟨(n - 1)⟩", 6, 5),
    "elementwise-mismatch-inner-position": (
        V + "z = 2 × A − B\noutput z", moac.ShapeError,
        "− needs operands of equal shape or a scalar; got ⟨n m⟩ and ⟨m n⟩", 6, 9),
    "omega-frames-differ": (
        V + "z = A (+ Ω⟨1 1⟩) B\noutput z", moac.ShapeError,
        "Ω frames must be equal or one empty: the left frame is ⟨n⟩, the right frame ⟨m⟩", 6, 5),
    "omega-rank-too-large": (
        V + "z = (+ red) Ω⟨3⟩ A\noutput z", moac.ShapeError,
        "Ω cell rank 3 is not within 0 … 2 (the rank of 'A')", 6, 14),
    "omega-wrong-number-of-ranks": (
        V + "z = A (+ Ω⟨1⟩) A\noutput z", moac.ShapeError, "a dyadic Ω needs 2 rank(s), got ⟨1⟩", 6, 11),
    "transpose-not-a-permutation": (
        V + "z = ⟨0 0⟩ ⍉ A\noutput z", moac.ShapeError,
        "dyadic ⍉ needs a permutation of ⟨0 … 1⟩ for an operand of rank 2; got ⟨0 0⟩", 6, 5),
    "transpose-wrong-length": (
        V + "z = ⟨1 2 0⟩ ⍉ A\noutput z", moac.ShapeError,
        "dyadic ⍉ needs a permutation of ⟨0 … 1⟩ for an operand of rank 2; got ⟨1 2 0⟩", 6, 5),
    "reshape-changes-tau-symbolic": (
        V + "z = ⟨n n⟩ ρ A\noutput z", moac.ShapeError,
        "reshape to ⟨n n⟩ must keep the number of elements: π⟨n n⟩ = n^2 but τA = m·n", 6, 5),
    "reshape-changes-tau-constant": (
        "input A : f32 ⟨2 3⟩\nz = ⟨4 2⟩ ρ A\n", moac.ShapeError,
        "reshape to ⟨4 2⟩ must keep the number of elements: π⟨4 2⟩ = 8 but τA = 6", 2, 5),
    "psi-index-equals-length": (
        "size n\ninput A : f32 ⟨3 n⟩\nz = ⟨3⟩ ψ A\n", moac.ShapeError,
        "ψ index component 0 is 3, outside 0 ≤ i < 3", 3, 5),
    "psi-index-equals-symbolic-length": (
        "size n\ninput A : f32 ⟨3 n⟩\nz = ⟨0 n⟩ ψ A\n", moac.ShapeError,
        "ψ index component 1 is n, outside 0 ≤ i < n", 3, 5),
    "psi-index-negative": (
        "size n\ninput A : f32 ⟨3 n⟩\nz = ⟨¯1⟩ ψ A\n", moac.ShapeError,
        "ψ index component 0 is -1, outside 0 ≤ i < 3", 3, 5),
    "psi-index-too-long": (
        "size n\ninput A : f32 ⟨3 n⟩\nz = ⟨0 0 0⟩ ψ A\n", moac.ShapeError,
        "ψ index ⟨0 0 0⟩ has 3 components but the array has rank 2", 3, 5),
    "recursion": (
        "fn f x {\n  f x + 1\n}\nsize n\ninput x : f32 ⟨n⟩\ny = f x\n", moac.NameError_,
        "'f' calls itself; recursive functions are not supported", 2, 3),
    "mutual-recursion": (
        "fn f x {\n  g x\n}\nfn g x {\n  f x\n}\nsize n\ninput x : f32 ⟨n⟩\ny = f x\n", moac.NameError_,
        "'f' calls itself; recursive functions are not supported", 5, 3),
    "catenation-items-differ": (
        V + "z = A # B\noutput z", moac.ShapeError,
        "# needs items of the same shape: ⟨n m⟩ # ⟨m n⟩ (1 ▽ ρ of each side, or an item of shape ⟨m⟩)", 6, 5),
    "take-too-many": (
        "input A : f32 ⟨3 4⟩\nz = ¯5 △ A\n", moac.ShapeError,
        "△ count -5 is larger than the axis length 3", 2, 5),
    "reduce-with-power": (
        V + "z = ⋆ red x\noutput z", moac.ShapeError, "red reduces with +, −, ×, ÷, max or min", 6, 5),
    "reduce-a-scalar": (
        "z = + red 3\n", moac.ShapeError, "+ red needs an array of rank ≥ 1, got a scalar", 1, 11),
    "inner-lengths-differ": (
        V + "z = A +.× A\noutput z", moac.ShapeError,
        "inner product +.× contracts the last axis of the left operand (length m) with the first axis of "
        "the right operand (length n); they differ (shapes ⟨n m⟩ and ⟨n m⟩)", 6, 5),
    "monadic-function-used-dyadically": (
        V + "z = x softmax x\noutput z", moac.ShapeError,
        "'softmax' is monadic (takes 1 argument(s)), given 2", 6, 7),
    "iota-of-an-array": (
        V + "z = ι x\noutput z", moac.ShapeError, "ι needs a static integer or a static shape vector, got 'x'", 6, 7),
    "psi-index-not-static": (
        V + "z = x ψ A\noutput z", moac.ShapeError,
        "a ψ index must be a static vector (numbers and sizes, or elements of an integer input), got 'x'", 6, 5),
    "function-as-value": (
        V + "z = softmax\noutput z", moac.ParseError,
        "unexpected end of line; expected an expression or statement", 6, 12),
    "output-before-its-definition": (
        V + "output z\nz = x + 1", moac.NameError_, "output 'z' is defined only later, on line 7; list it after "
        "its definition", 6, 8),
    "update-with-a-row-for-a-matrix": (
        "size n\ninput x : f32 ⟨n⟩\ninput A : f32 ⟨n n⟩\nupdate A ← x + 1\n", moac.ShapeError,
        "update of 'A' ⟨n n⟩ needs an array of rank 2 (rows of shape ⟨n⟩); got rank 1, ⟨n⟩", 4, 12),
    "iota-negative": (
        V + "z = ι ¯3\noutput z", moac.ShapeError, "ι count -3 is negative", 6, 7),
    "size-divided-by-zero": (
        "size n\nsize k = n ÷ 0\ninput x : f32 ⟨n⟩\n", moac.ShapeError,
        "size k = n ÷ 0: the divisor must be positive (it would make n = k·0)", 2, 14),
    "reshape-negative": (
        "input x : f32 ⟨6⟩\nw = ⟨¯2 ¯3⟩ ρ x\noutput w\n", moac.ShapeError,
        "the new shape of ρ has a negative item -2 (item 0)", 2, 5),
}


@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
def test_error_message_and_position(case):
    src, cls, msg, line, col = CASES[case]
    with pytest.raises(cls) as info:
        moac.parse(src, "bad.moa")
    e = info.value
    assert e.message == msg
    assert (e.span.line, e.span.col) == (line, col)
    text = e.render()
    assert text.startswith(f"bad.moa:{line}:{col}: error: {msg}")
    # the source line and a caret under the offending column
    lines = text.splitlines()
    assert lines[1] == "    " + src.splitlines()[line - 1]
    assert lines[2].index("^") == 4 + col - 1


def test_caret_spans_the_offending_expression():
    with pytest.raises(moac.ShapeError) as info:
        moac.parse(V + "z = A + B\noutput z", "bad.moa")      # ⟨n m⟩ and ⟨m n⟩: a transpose left out
    assert info.value.render().splitlines()[2] == "        ^~~~~"


def test_seed_paper_score_step_names_both_fixes():
    """`q (+.× Ω⟨1 2⟩) K` contracts q with K's first axis: a shape error naming both fixes."""
    with pytest.raises(moac.ShapeError) as info:
        moac.parse(SCORES + "s = q (+.× Ω⟨1 2⟩) K\noutput s", "paper.moa")
    e = info.value
    assert (e.span.line, e.span.col) == (4, 5)
    assert e.message == ("inner product +.× contracts the last axis of the left operand (length dk) with "
                         "the first axis of the right operand (length n); they differ (shapes ⟨dk⟩ and ⟨n dk⟩)")
    note = " ".join(e.notes)
    assert "`q +.× ⍉K`" in note
    assert "`q (+.× Ω⟨1 1⟩) K`" in note
    assert "q +.× ⍉K" in e.render() and "q (+.× Ω⟨1 1⟩) K" in e.render()


def test_suggested_fixes_in_the_note_are_valid_programs():
    for lhs in ("q", "(q × 2)"):
        with pytest.raises(moac.ShapeError) as info:
            moac.parse(SCORES + f"s = {lhs} +.× K + 1\noutput s")
        fixes = info.value.notes[0].split("`")[1::2]
        assert len(fixes) == 2
        dnfs = {str(moac.parse(SCORES + f"s = {f}\noutput s").dnf()) for f in fixes}
        assert len(dnfs) == 1


def test_error_inside_a_prelude_function_says_where_it_was_applied():
    with pytest.raises(moac.ShapeError) as info:
        moac.parse(V + "z = softmax A\noutput z", "bad.moa")
    e = info.value                      # at the user's call, the prelude's line a note (it was the reverse)
    assert e.source.filename == "bad.moa" and (e.span.line, e.span.col) == (6, 5)
    assert e.message.startswith("in 'softmax' (the prelude's): − needs operands of equal shape")
    assert e.notes == ("at <prelude>:6:11: e = exp x − m",
                       "the prelude's 'softmax' works along axis 0 of a vector; for each row of a rank-2 array "
                       "apply it to the cells with Ω: `softmax Ω⟨1⟩ A`")


@pytest.mark.parametrize("src", ["", "-- only a comment\n", "size n\ninput x : f32 ⟨n⟩\n"])
def test_program_without_result(src):
    with pytest.raises(moac.MoacError, match="the program computes nothing") as info:
        moac.parse(src, "empty.moa")
    assert info.value.render().startswith("empty.moa:1:1: error: the program computes nothing")


def test_runtime_size_constraints_are_checked():
    import numpy as np
    p = moac.parse("size n\ninput x : f32 ⟨n⟩\ny = 3 △ x\noutput y")
    assert "3 <= n" in str(p.dnf())
    with pytest.raises(moac.ArgumentError, match="must not exceed"):
        p.evaluate(x=np.zeros(2))
    assert p.evaluate(x=np.arange(4.0))["y"].tolist() == [0.0, 1.0, 2.0]


# --------------------------------------------------------------------------- CLI


@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
def test_cli_reports_position_and_exits_nonzero(case, tmp_path, capsys):
    src, _cls, msg, line, col = CASES[case]
    f = tmp_path / "bad.moa"
    f.write_text(src, encoding="utf-8")
    rc = cli.main(["dnf", str(f)])
    out, err = capsys.readouterr()
    assert rc != 0
    assert err.startswith(f"{f}:{line}:{col}: error: {msg}\n")
    assert "^" in err
    assert "Traceback" not in err and out == ""


@pytest.mark.parametrize("case", ["syntax-unclosed-paren", "omega-frames-differ", "recursion"])
def test_cli_subprocess_no_traceback(case, tmp_path):
    src, _cls, msg, line, col = CASES[case]
    f = tmp_path / "bad.moa"
    f.write_text(src, encoding="utf-8")
    r = subprocess.run([sys.executable, "-m", "moac", "dnf", str(f)], capture_output=True, text=True,
                       cwd=ROOT, timeout=120)
    assert r.returncode != 0
    assert r.stderr.startswith(f"{f}:{line}:{col}: error: {msg}")
    assert "Traceback" not in r.stderr


def test_cli_seed_paper_form(tmp_path):
    f = tmp_path / "paper.moa"
    f.write_text(SCORES + "s = q (+.× Ω⟨1 2⟩) K\noutput s\n", encoding="utf-8")
    r = subprocess.run([sys.executable, "-m", "moac", "dnf", str(f)], capture_output=True, text=True,
                       cwd=ROOT, timeout=120)
    assert r.returncode != 0
    assert r.stderr.startswith(f"{f}:4:5: error: inner product +.×")
    assert "q +.× ⍉K" in r.stderr and "q (+.× Ω⟨1 1⟩) K" in r.stderr
    assert "Traceback" not in r.stderr


def test_cli_missing_file_is_a_usage_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(["dnf", str(tmp_path / "nope.moa")])
    assert info.value.code != 0
    assert "Traceback" not in capsys.readouterr().err


def test_cli_good_file_prints_dnf_and_trace(capsys):
    rc = cli.main(["dnf", str(ROOT / "examples" / "decode.moa"), "--trace"])
    out, err = capsys.readouterr()
    assert rc == 0 and err == ""
    assert "[ψ-transpose]" in out and "[ψ-inner]" in out and "[temporary]" in out
    assert "⟨l j⟩ψK" in out


# --------------------------------------------------------------------------- odd input text


def test_a_lone_carriage_return_ends_a_line():
    prog = moac.parse("size n\rinput x : f32 ⟨n⟩\ry = x + x\routput y\r")
    assert prog.outputs == ("y",)
    with pytest.raises(moac.MoacError) as e:
        moac.parse("size n\r\ninput x : f32 ⟨n⟩\ry = x + q\r\noutput y")
    assert e.value.span.line == 3 and e.value.render().splitlines()[1].strip() == "y = x + q"


@pytest.mark.parametrize("sep", ["\u2028", "\u0085", "\x0b", "\x0c"])
def test_unicode_separators_in_a_comment_do_not_shift_carets(sep):
    with pytest.raises(moac.MoacError) as e:
        moac.parse(f"size n\ninput x : f32 ⟨n⟩ -- one{sep}comment\ny = x + q\noutput y\n")
    assert (e.value.span.line, e.value.span.col) == (3, 9)
    assert e.value.render().splitlines()[1] == "    y = x + q"


@pytest.mark.parametrize("literal, message", [
    ("9" * 400, "does not fit in 64 bits"), ("7" * 5000, "does not fit in 64 bits"),
    ("9223372036854775808", "does not fit in 64 bits"), ("1e309", "larger than the largest f64")])
def test_number_literals_beyond_64_bits_are_positioned_errors(literal, message):
    with pytest.raises(moac.ParseError, match=message) as e:
        moac.parse(f"size n\ninput x : f32 ⟨n⟩\ny = x + {literal}\noutput y\n")
    assert (e.value.span.line, e.value.span.col) == (3, 9)
    assert moac.parse("size n\ninput x : f32 ⟨n⟩\ny = x + 9223372036854775807\noutput y\n")


@pytest.mark.parametrize("chain", ["− " * 600 + "x", "x" + " + x" * 600])
def test_a_very_deep_expression_is_a_user_error_not_an_internal_one(chain, tmp_path):
    f = tmp_path / "deep.moa"
    f.write_text(f"size n\ninput x : f32 ⟨n⟩\ny = {chain}\noutput y\n", encoding="utf-8")
    r = subprocess.run([sys.executable, "-m", "moac", "onf", str(f)], capture_output=True, text=True,
                       cwd=ROOT, timeout=120)
    assert r.returncode == 1, r.stderr
    assert "nests its expressions too deeply" in r.stderr and "internal error" not in r.stderr
    assert f"{f}:3:1: error" in r.stderr          # at the line of the chain (it had no position)


def test_a_divisor_size_fixed_to_zero_gives_the_empty_kernel():
    # g = 0 leaves Q, and so the output, without elements; the reshape's ⌊h ÷ g⌋ and h mod g
    # index a read that never runs (they were "divides an index expression by zero" before
    # 2026-12-05, and an internal error where the statement was an update)
    r = subprocess.run([sys.executable, "-m", "moac", "check", "examples/decode_gqa.moa", "-D", "g=0", "-D", "hkv=2",
                        "-D", "n=5", "-D", "dk=4", "-D", "dv=4", "--target", "c"],
                       capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 0 and "out: max abs error 0.000e+00" in r.stdout, r.stdout + r.stderr


def test_check_refuses_inputs_too_large_for_memory():
    r = subprocess.run([sys.executable, "-m", "moac", "check", "examples/decode.moa", "-D", "n=999999999999999999"],
                       capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 1 and "GiB" in r.stderr and "internal error" not in r.stderr, r.stderr
    # a size of 2^63 or more is no C int64_t: refused with the flags, before any compile
    r = subprocess.run([sys.executable, "-m", "moac", "check", "examples/decode.moa", "-D", "n=99999999999999999999"],
                       capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 2 and "does not fit in 64 bits" in r.stderr, r.stderr


@pytest.mark.parametrize("comment, reads", [("# a comment", "catenation"), ("// a comment", "division")])
def test_another_languages_comment_gets_a_note(comment, reads):
    with pytest.raises(moac.ParseError) as e:          # two names: `a comment`
        moac.parse(f"size n\ninput x : f32 ⟨n⟩\ny = x + 1  {comment}\noutput y\n", "c.moa")
    assert e.value.message == "unexpected 'comment'; expected an expression or statement"
    assert e.value.notes and "a comment starts with --" in e.value.notes[0]
    with pytest.raises(moac.NameError_) as e:          # one
        moac.parse(f"size n\ninput x : f32 ⟨n⟩\ny = x + 1  {comment.replace('a ', '')}\noutput y\n", "c.moa")
    assert e.value.message == "undefined name 'comment'"
    mark = comment.split()[0]
    assert e.value.notes == (f"if `{mark} …` is meant as a comment: a comment starts with -- ({mark} is {reads} in MoA, "
                             "and what follows it is read as names)",)


def test_the_caret_keeps_the_lines_tabs():
    # with tabs before the error the caret stood at the character count, left of where a
    # terminal shows the name; the caret line now repeats the source line's tabs
    with pytest.raises(moac.NameError_) as e:
        moac.parse("size n\ninput x : f32 ⟨n⟩\ny = x +\t\tq\noutput y\n", "tab.moa")
    assert e.value.render().splitlines()[1:] == ["    y = x +\t\tq", "           \t\t^"]


def test_an_inner_product_of_lengths_with_different_names_requires_them_equal():
    # x +.× y with x : ⟨n⟩ and y : ⟨m⟩ was a hard error while x + y unified n and m with a
    # run-time condition; the inner product now does the same (q +.× K, a transpose left
    # out, stays the error it was)
    prog = moac.parse("size n, m\ninput x : f32 ⟨n⟩\ninput y : f32 ⟨m⟩\nz = x +.× y\noutput z\n", "ip.moa")
    assert "require n = m    -- +.× contracts the last axis of x (n) with the first of y (m)" in str(prog.dnf())
    import numpy as np
    kern = prog.compile(target="c")
    assert float(kern(x=np.ones(3, np.float32), y=np.full(3, 2.0, np.float32))["z"]) == 6.0
    with pytest.raises(moac.ArgumentError, match=r"they must be equal, but n = 3, m = 4"):
        kern(x=np.ones(3, np.float32), y=np.ones(4, np.float32))
    with pytest.raises(moac.ShapeError, match="they differ"):
        moac.parse("size n\ninput x : f32 ⟨n⟩\ninput y : f32 ⟨(n + 1)⟩\nz = x +.× y\noutput z\n", "ip.moa")


def test_a_reserved_word_as_a_name_gets_a_note():
    with pytest.raises(moac.ParseError) as e:
        moac.parse("size n, max\ninput x : f32 ⟨n⟩\n", "kw.moa")
    assert e.value.message == "unexpected 'max'; expected a name"
    assert e.value.notes == ("'max' is a reserved word (a function or operator of the notation); choose another name",)


@pytest.mark.parametrize("src,col,fix", [("r = ⟨n − 1⟩ △ A", 8, "⟨(n − 1)⟩"), ("r = <1 -2> take A", 8, "⟨(1 − 2)⟩"),
                                         ("r = ⟨n -1⟩ △ A", 8, "⟨(n − 1)⟩")])
def test_a_minus_number_after_an_item_of_a_vector_is_refused(src, col, fix):
    # ⟨n − 1⟩ △ A was read as ⟨n ¯1⟩ △ A (the last column), silently: `-1` is an item of ⟨…⟩
    # (ASCII's ¯1), so n − 1 there was two items (a review, 2026-12-05)
    with pytest.raises(moac.ParseError, match="reads as a second item") as e:
        moac.parse(f"size n, m\ninput A : f32 ⟨n m⟩\n{src}\noutput r\n", "v.moa")
    assert (e.value.span.line, e.value.span.col) == (3, col) and fix in e.value.notes[0]
    for ok in ("r = ⟨(n − 1)⟩ ψ A", "r = <-1 2> take A", "r = ⟨¯1 ¯2⟩ △ A", "r = ⟨n, ¯1⟩ △ A",
               "r = <1, -2> take A", "r = ⟨n,−1⟩ △ A", "r = ⟨n (-1)⟩ △ A"):     # a comma says two items
        moac.parse(f"size n, m\ninput A : f32 ⟨n m⟩\n{ok}\noutput r\n", "v.moa").dnf()


@pytest.mark.parametrize("src,cls,msg,pos", [
    # exit 3 (KeyError 'r') from moac onf and evaluate: the update was recorded under the alias
    ("input C : f32 ⟨3 4⟩\ninput v : f32 ⟨5⟩\nr = v\nupdate r ← v\n", moac.NameError_,
     "only an input can be updated; 'r' is a name for input 'v'", (4, 8)),
    # exit 3 (numpy's "negative dimensions") from moac check
    ("input y : f32 ⟨¯2⟩\nr = y\n", moac.ShapeError, "input 'y': a length must be ≥ 0, got -2", (1, 16)),
])
def test_user_mistakes_that_were_internal_errors(src, cls, msg, pos):
    with pytest.raises(cls, match=msg) as e:
        moac.parse(src, "m.moa").onf(target="c")
    assert (e.value.span.line, e.value.span.col) == pos


def test_a_size_named_as_another_size_is_one_parameter():
    # size m = n declared n twice ("sizes n, n, m = n"): gcc refused the C (parameter n_ twice)
    import numpy as np
    for src in ("size n\nsize m = n\ninput y : f32 ⟨m⟩\nr = y + 1\n",
                "size a, b\nsize g = a ÷ b\nsize g2 = a ÷ b\ninput y : f32 ⟨g g2⟩\nr = y + 1\n"):
        prog = moac.parse(src, "s.moa")
        assert str(prog.dnf()).splitlines()[1].count("n, n") == 0
        two = "⟨g g2⟩" in src
        y = np.ones((3, 3) if two else (3,), np.float32)
        assert np.all(prog.compile(target="c")(y=y, **({"b": 2} if two else {}))["r"] == 2)


@pytest.mark.parametrize("expr", ["0.5 ▽ x", "⟨1.5⟩ ψ x", "1.5 (△ Ω⟨0 1⟩) T", "¯1.5 (▽ Ω⟨0 1⟩) T"])
def test_a_non_integer_constant_where_a_count_is_needed_is_positioned(expr):
    # the Ω-cell fix (a constant as the left cell) recursed without end on 0.5, reported as
    # "nests its expressions too deeply" with no position (a review of the fix)
    with pytest.raises(moac.MoacError, match="expected a static integer|must be a static vector") as e:
        moac.parse(f"size n, b\ninput x : f32 ⟨n⟩\ninput T : f32 ⟨b n⟩\nr = {expr}\noutput r\n", "q.moa")
    assert e.value.span is not None and e.value.span.line == 4 and "too deeply" not in e.value.message


def test_the_vector_minus_check_reads_the_line_an_item_ends_on():
    # the text between two items was sliced from the line the first item began on: after a
    # backslash continuation, ⟨3, 4, (1 + \ 2) -2⟩ passed (a comma of line 1 counted) and
    # ⟨(1 + \ 2), -2⟩ was refused (a review of the check)
    with pytest.raises(moac.ParseError, match="reads as a second item"):
        moac.parse("x = ⟨3, 4, (1 + \\\n     2) -2⟩\noutput x\n", "v.moa")
    assert moac.parse("x = ⟨(1 + \\\n2), -2⟩\noutput x\n", "v.moa").evaluate()["x"].tolist() == [3, -2]


@pytest.mark.parametrize("body,line", [("x = " + "exp " * 1500 + "a\ny = a + 1\noutput x, y", 2),
                                       ("x = a" + (" + a" * 50 + " \\\n") * 30 + " + a\noutput x", 2)])
def test_a_too_deep_statement_is_found_by_its_tokens(body, line):
    # the busiest line counted only arithmetic characters: exp exp … a was blamed on the last
    # line, and a chain over continuation lines too
    with pytest.raises(moac.MoacError, match="nests its expressions too deeply") as e:
        moac.parse("input a : f32 ⟨4⟩\n" + body + "\n", "deep.moa")
    assert e.value.span.line == line
