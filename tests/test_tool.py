"""The tool itself (#12): a light `import moac`, one parser for every program, the output
cache of `moac compile`, -v/--time, --json, colour, fix-it notes, and the fast path of a
kernel call (the same results and errors as the full path)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

import moac
from moac import cli

from test_back_common import ROOT, moac_cli


def _py(code: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False)


def test_import_moac_loads_no_compiler_stage():
    r = _py("import sys, moac; heavy = {'sympy', 'lark', 'jinja2', 'cffi', 'numpy'} & set(sys.modules); "
            "print(sorted(heavy)); print(moac.__version__)")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[0] == "[]"
    r = _py("import moac; p = moac.load('examples/matmul.moa'); print(type(p).__name__, moac.Program is type(p))")
    assert r.stdout.split() == ["Program", "True"], r.stderr
    assert "Program" in dir(moac) and "load" in moac.__all__
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        moac.nope


def test_one_parser_serves_programs_with_different_functions():
    """A name one program defines with `fn` is an ordinary name in the next (the parser is
    shared; the function names of a parse are its own)."""
    a = moac.parse("size n\ninput x : f32 ⟨n⟩\nfn f y {\n  y × 2\n}\nz = f x\noutput z\n", "a.moa")
    b = moac.parse("size n\ninput x : f32 ⟨n⟩\nf = x + 1\noutput f\n", "b.moa")
    x = np.arange(3.0)
    assert np.array_equal(a.evaluate(x=x)["z"], 2 * x)
    assert np.array_equal(b.evaluate(x=x)["f"], x + 1)
    from moac.front import syntax
    assert syntax._parser() is syntax._parser()


def test_parser_tables_come_from_the_cache(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(ROOT), MOAC_CACHE_DIR=str(tmp_path))
    code = "import moac; moac.load('examples/decode.moa')"
    for _ in range(2):
        r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
    tables = list(tmp_path.glob("moac_parser_*.lark"))
    assert len(tables) == 1 and tables[0].stat().st_size > 1000


def _no_verify(monkeypatch, tmp_path):
    monkeypatch.delenv("MOAC_VERIFY", raising=False)         # a verifying compile bypasses the cache
    monkeypatch.setenv("MOAC_CACHE_DIR", str(tmp_path / "cache"))


def test_compile_output_cache_hits_only_for_the_same_source_and_options(tmp_path, monkeypatch, capsys):
    _no_verify(monkeypatch, tmp_path)
    src = tmp_path / "p.moa"
    src.write_text("size n\ninput x : f32 ⟨n⟩\ny = x × 3\noutput y\n")
    out = tmp_path / "p.c"
    assert cli.main(["compile", str(src), "-o", str(out), "-v"]) == 0
    first = out.read_text()
    assert "C stored in the output cache" in capsys.readouterr().err
    out.unlink()
    assert cli.main(["compile", str(src), "-o", str(out), "-v"]) == 0
    assert out.read_text() == first
    assert "C from the output cache" in capsys.readouterr().err
    assert cli.main(["compile", str(src), "-o", str(out), "-v", "--target", "c"]) == 0     # another option
    err = capsys.readouterr().err
    assert "output cache (same" not in err and out.read_text() == moac.load(src).c_source(target="c")
    src.write_text("size n\ninput x : f32 ⟨n⟩\ny = x × 4\noutput y\n")                   # another source
    assert cli.main(["compile", str(src), "-o", str(out), "-v"]) == 0
    assert "output cache (same" not in capsys.readouterr().err and "4.0f" in out.read_text()
    assert "4.0f" not in first
    monkeypatch.setenv("MOAC_NO_CACHE", "1")
    assert cli.main(["compile", str(src), "-o", str(out), "-v"]) == 0
    assert "output cache" not in capsys.readouterr().err


def test_compile_output_cache_key_has_moac_settings(tmp_path, monkeypatch):
    _no_verify(monkeypatch, tmp_path)
    from moac.cache import _out_path
    args = cli.argparse.Namespace(file="p.moa", cmd="compile", target="cuda", out=None)
    k1 = cli._output_key(args, b"x", {})
    monkeypatch.setenv("MOAC_CUDA_GANGS", "128")
    k2 = cli._output_key(args, b"x", {})
    assert _out_path(k1) != _out_path(k2)
    assert _out_path(cli._output_key(args, b"y", {})) != _out_path(k1)
    assert _out_path(cli._output_key(args, b"x", {"n": 4})) != _out_path(k2)


def test_verbose_prints_stages_and_the_compiler_command(capsys):
    assert cli.main(["check", "examples/matmul.moa", "--target", "c", "-v"]) == 0
    err = capsys.readouterr().err
    for stage in ("parse", "to_core", "to_dnf", "to_schedule", "count", "to_cunit", "to_c", "total"):
        assert f"moac: {stage}" in err, err
    assert ("gcc " in err and " -O3 " in err) or "library from the cache" in err
    assert cli.main(["dnf", "examples/matmul.moa", "--time"]) == 0
    err = capsys.readouterr().err
    assert "moac: parse" in err and "gcc" not in err and " ms" in err


def test_json_dnf_onf_cost_check(capsys):
    assert cli.main(["dnf", "examples/decode.moa", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["stage"] == "dnf" and d["file"] == "examples/decode.moa" and d["sizes"] == ["n", "dk", "dv"]
    assert [s["role"] for s in d["statements"]] == ["temp", "temp", "output"]
    assert {i["name"]: i["shape"] for i in d["inputs"]} == {"q": ["dk"], "K": ["n", "dk"], "V": ["n", "dv"]}
    assert cli.main(["onf", "examples/decode.moa", "--json", "--target", "c"]) == 0
    o = json.loads(capsys.readouterr().out)
    assert o["stage"] == "onf" and o["target"] == "c" and o["kernels"] and o["minimal"] in (True, False)
    assert all({"name", "loops", "accesses", "traffic_bytes", "flops"} <= set(k) for k in o["kernels"])
    assert o["source_ops"] == "2·dk·n + 2·dv·n + 6·n + 1" and o["repeated_work"] is None
    assert cli.main(["cost", "examples/decode.moa", "--json", "-D", "n=4096", "-D", "dk=128", "-D", "dv=128"]) == 0
    c = json.loads(capsys.readouterr().out)
    assert c["stage"] == "cost" and c["sizes"] == {"n": 4096, "dk": 128, "dv": 128}
    assert c["minimum_bytes"]["value"] == 4 * (4096 * 128 * 2 + 128 + 128)
    assert c["intensity"] == pytest.approx(c["flops"]["value"] / c["traffic_bytes"]["value"])
    assert {r["hardware"] for r in c["roofline"]} >= {"H200"}
    assert cli.main(["check", "examples/matmul.moa", "--target", "c", "--json"]) == 0
    k = json.loads(capsys.readouterr().out)
    assert k["stage"] == "check" and k["ok"] is True and k["outputs"][0]["name"] == "C"
    assert k["outputs"][0]["max_abs_error"] <= k["outputs"][0]["absolute_bound"]


def test_json_errors(tmp_path, capsys):
    bad = tmp_path / "bad.moa"
    bad.write_text("size n\ninput A : f32 ⟨n⟩\nC = A @ A\noutput C\n")
    assert cli.main(["dnf", str(bad), "--json"]) == 1
    cap = capsys.readouterr()
    assert cap.out == ""
    e = json.loads(cap.err)["error"]
    assert e["class"] == "ParseError" and e["span"] == {"line": 3, "col": 7, "end_line": 3, "end_col": 7}
    assert e["file"] == str(bad) and e["source_line"] == "C = A @ A" and "+.×" in e["notes"][0]
    assert e["rendered"].startswith(f"{bad}:3:7: error: unexpected character '@'")


def test_colour_only_when_asked_or_on_a_terminal(tmp_path, capsys, monkeypatch):
    bad = tmp_path / "bad.moa"
    bad.write_text("size n\ninput A : f32 ⟨n⟩\nC = A[0]\noutput C\n")
    assert cli.main(["dnf", str(bad), "--color", "always"]) == 1
    err = capsys.readouterr().err
    assert "\033[1;31merror:\033[0m" in err and "\033[1;32m^" in err
    assert cli.main(["dnf", str(bad)]) == 1                      # captured stderr is no terminal
    assert "\033[" not in capsys.readouterr().err
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True, raising=False)
    assert cli._color("auto") is False
    monkeypatch.delenv("NO_COLOR")
    assert cli._color("auto") is True and cli._color("never") is False


@pytest.mark.parametrize("text, where, note", [
    ("size n, m\ninput A : f32 ⟨n m⟩\ninput B : f32 ⟨m n⟩\nC = A @ B\noutput C\n", "4:7", "`A +.× B`"),
    ("size n\ninput A : f32 ⟨n⟩\nC = A[0]\noutput C\n", "3:6", "`⟨i⟩ ψ A`"),
    ("size n\ninput A : f32 ⟨n⟩\noutput C = A + 1\n", "3:10", "write `C = …` on its own line, then `output C`"),
    ("size n\ninput A : f32 ⟨n m⟩\nC = A + 1\noutput C\n", "2:18", "declare it first with `size m`"),
    ("size n, m\ninput A : f32 ⟨n m⟩\nC = softmax A\noutput C\n", "3:5", "`softmax Ω⟨1⟩ A`"),   # at the call
])
def test_fixit_notes_for_first_mistakes(text, where, note):
    with pytest.raises(moac.MoacError) as info:
        moac.parse(text, "first.moa")
    rendered = info.value.render()
    assert f":{where}: error:" in rendered.splitlines()[0]
    assert any(note in n for n in info.value.notes), info.value.notes


def test_fixit_softmax_is_right():
    """The Ω spelling the note suggests is a valid program with the row-wise meaning."""
    p = moac.parse("size n, m\ninput A : f32 ⟨n m⟩\nC = softmax Ω⟨1⟩ A\noutput C\n", "ok.moa")
    a = np.random.default_rng(0).standard_normal((3, 4))
    e = np.exp(a - a.max(axis=1, keepdims=True))
    assert np.allclose(p.evaluate(A=a)["C"], e / e.sum(axis=1, keepdims=True))


# ---- the fast path of a kernel call

GQA = {"n": 16, "dk": 16, "dv": 16, "hq": 8, "hkv": 2}


@pytest.fixture(scope="module")
def gqa():
    from moac.commands import random_inputs
    prog = moac.load(ROOT / "examples" / "decode_gqa.moa")
    return prog, prog.compile(target="c"), random_inputs(prog, GQA, 0)[0]


def test_fast_path_equals_the_full_path(gqa):
    prog, kern, arrays = gqa
    fast = kern(**arrays)
    assert kern._plans, "the plain numpy call took the fast path"
    kern._fast_ok = False
    try:
        full = kern(**arrays)
    finally:
        kern._fast_ok = True
    assert np.array_equal(fast["out"], full["out"])
    mine = np.full_like(fast["out"], np.nan)
    assert kern(out={"out": mine}, **arrays)["out"] is mine and np.array_equal(mine, fast["out"])
    ref = prog.evaluate(**arrays)["out"]
    assert np.allclose(fast["out"], ref, atol=1e-5)


def test_fast_path_follows_new_shapes(gqa):
    from moac.commands import random_inputs
    prog, kern, _ = gqa
    for n, hkv in ((5, 1), (33, 4), (5, 1)):
        arrays, _ = random_inputs(prog, {**GQA, "n": n, "hkv": hkv, "hq": 2 * hkv}, n)
        got = kern(**arrays)["out"]
        assert got.shape == (2 * hkv, 16)
        assert np.allclose(got, prog.evaluate(**arrays)["out"], atol=1e-5)


def test_fast_path_keeps_every_check(gqa):
    prog, kern, arrays = gqa
    kern(**arrays)
    bad = dict(arrays, K=arrays["K"].astype(np.float64))
    with pytest.raises(moac.ArgumentError, match="input 'K' must have dtype float32"):
        kern(**bad)
    with pytest.raises(moac.ArgumentError, match="C-contiguous"):
        kern(**dict(arrays, K=np.asfortranarray(arrays["K"])))
    good = kern(**arrays)["out"]
    for bad_out, why in ((np.empty(good.shape, np.float64), "float32 array of shape"),
                         (np.empty((1,) + good.shape, np.float32), "float32 array of shape"),
                         (np.empty(good.shape, np.float32)[::-1], "C-contiguous")):
        with pytest.raises(moac.ArgumentError, match=why):
            kern(out={"out": bad_out}, **arrays)
    with pytest.raises(moac.ArgumentError, match="shares memory with input 'Q'"):
        kern(out={"out": arrays["Q"].reshape(good.shape)}, **arrays)
    with pytest.raises(moac.ArgumentError, match="unexpected argument"):
        kern(**arrays, bogus=1)
    short = dict(arrays)
    short.pop("V")
    with pytest.raises(moac.ArgumentError, match="missing input 'V'"):
        kern(**short)
    wrong = dict(arrays, V=np.zeros((2, 7, 16), np.float32))
    with pytest.raises(moac.ArgumentError, match="axis 1"):
        kern(**wrong)


def test_fast_path_takes_sizes_by_name_and_still_checks_them(gqa):
    prog, kern, arrays = gqa
    want = kern(**arrays)["out"]
    kern._plans.clear()
    for _ in range(2):                      # the first call makes the plan, the second reuses it
        assert np.array_equal(kern(**arrays, n=16)["out"], want)
    assert any(given == (("n", 16),) for _, given in kern._plans), "sizes by name took the fast path"
    for _ in range(2):
        with pytest.raises(moac.ArgumentError, match="must have length n = 17, got 16"):
            kern(**arrays, n=17)            # the shapes say 16
    with pytest.raises(moac.ArgumentError, match="non-negative integer"):
        kern(**arrays, n=-1)
    with pytest.raises(moac.ArgumentError, match="non-negative integer"):
        kern(**arrays, n=16.0)              # not an int: the full path says why
