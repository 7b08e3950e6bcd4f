"""The Schedule IR and what is built on it: plans tried in order with their reasons,
re-spelled attention taking the split-K plan, counts derived from the tree, the
verifiers, the driver's intermediates, and the import boundaries of the back half."""
from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import numpy as np
import pytest
import sympy as sp

import moac
from moac.emit import cir
from moac.options import Options
from moac.schedule import ir
from moac.verify import verify_cunit, verify_schedule

ROOT = Path(__file__).resolve().parent.parent
PKG = ROOT / "moac"

HEAD = """size n, dk, dv
input q : f32 ⟨dk⟩
input K : f32 ⟨n dk⟩
input V : f32 ⟨n dv⟩
"""

RESPELLED = {
    # max and sum as user functions, the normalisation after the contraction
    "user-functions": HEAD + """fn top x { max red x }
fn total x { + red x }
s = (q +.× ⍉K) ÷ √dk
e = exp (s − top s)
out = (e +.× V) ÷ total e
output out
""",
    # the prelude's softmax, the scale applied to the scores after the contraction
    "scale-after": HEAD + """s = q +.× ⍉K
out = (softmax s × ÷ √dk) +.× V
output out
""",
    # softmax written out by hand, weights first in the product
    "by-hand": HEAD + """s = (q +.× ⍉K) ÷ √dk
m = max red s
e = exp s − m
z = + red e
out = (e ÷ z) +.× V
output out
""",
}


@pytest.mark.parametrize("name", sorted(RESPELLED))
def test_respelled_attention_takes_split_k(name):
    prog = moac.parse(RESPELLED[name], f"<{name}>")
    onf = prog.onf()
    assert onf.schedule.plan == "split-K", (name, onf.declined)
    assert onf.declined == ()
    # and it computes attention
    rng = np.random.default_rng(1)
    q, K, V = (rng.standard_normal(s).astype(np.float32) for s in ((16,), (37, 16), (37, 8)))
    got = prog.compile(target="c")(q=q, K=K, V=V)["out"]
    s = K.astype(np.float64) @ q / np.sqrt(16)
    a = np.exp(s - s.max())
    np.testing.assert_allclose(got, (a / a.sum()) @ V, rtol=2e-5, atol=2e-6)


def test_decode_takes_split_k_and_matmul_says_why_not():
    assert moac.load(ROOT / "examples/decode.moa").onf().schedule.plan == "split-K"
    onf = moac.load(ROOT / "examples/matmul.moa").onf()
    assert onf.schedule.plan == "generic"
    assert onf.declined == (("split-K", "2 outputs (the plan computes one)"),)
    assert "   plan split-K declined: 2 outputs (the plan computes one)" in str(onf).splitlines()


@pytest.mark.parametrize("body, reason", [
    ("out = (exp (q +.× ⍉K)) +.× V", "0 stored temporaries, not the two of a softmax (its maximum and its sum)"),
    ("s = q +.× ⍉K\nm = max red s\nz = + red exp s\nout = ((exp s − m) +.× V) ÷ z",
     "temporary z is not Σ exp(E − m) over the contracted axis"),
    ("s = q +.× ⍉K\nm = min red s\nz = + red exp s − m\nout = ((exp s − m) +.× V) ÷ z",
     "temporary m is not a maximum"),
    ("s = q +.× ⍉K\nm = max red s\nz = + red exp s − m\nout = ((exp s − m) +.× V) × z",
     "output out is not a Σ over one axis (nor such a Σ divided by a stored sum)"),
])
def test_split_k_declines_with_its_reason(body, reason):
    onf = moac.parse(HEAD + body + "\noutput out\n").onf()
    assert onf.schedule.plan == "generic"
    (plan, why), = onf.declined
    assert plan == "split-K" and why == reason


def test_naive_mapping_declines_split_k():
    onf = moac.load(ROOT / "examples/decode.moa").onf(mapping="naive")
    assert onf.declined == (("split-K", "mapping 'naive' asks for the generic plan"),)


def test_program_keeps_every_intermediate():
    prog = moac.load(ROOT / "examples/decode.moa")
    kern = prog.compile(target="c", sizes={"dk": 16})
    opts = Options.make("c", {"dk": 16})
    art = prog.artifacts[opts]
    assert prog.module is not None and prog.core is not None and prog.dnf() is art.schedule.dnf
    assert art.onf.schedule is art.schedule and art.onf.counts is art.counts
    assert kern.c_source == art.c_source and kern.signature == art.signature
    assert prog.lower(opts) is art                           # not recomputed
    assert prog.compile(target="c", sizes={"dk": 16}) is kern
    hash(opts)                                               # the cache key is hashable


def test_schedule_has_levels_and_no_c():
    s = moac.load(ROOT / "examples/decode.moa").lower(Options()).schedule
    levels = set()

    def walk(body):
        for st in body:
            for f in dataclasses.fields(st):
                v = getattr(st, f.name)
                assert not isinstance(v, (cir.For, cir.Decl, cir.Bin)), st
                if isinstance(v, str):
                    assert "#pragma" not in v and "int64_t" not in v, v
            if isinstance(st, ir.Loop):
                levels.add(st.level)
                walk(st.body)
            elif isinstance(st, (ir.Serial, ir.Scope)):
                walk(st.body)
            elif isinstance(st, ir.Guard):
                walk(st.then + st.other)
    for k in s.kernels:
        walk(k.body)
    assert {"gang", "vector", "seq"} <= levels
    assert s.choices and s.choices[0].rule == "moac_chunk"


def test_counts_follow_the_tree():
    """Flops are the operators in the tree times the iterations around them: squaring the
    values adds one multiplication per (token, d); doubling them adds one per token, since
    a factor of the weights that does not depend on d multiplies the weight once per token."""
    base = moac.parse(HEAD + "out = (softmax (q +.× ⍉K)) +.× V\noutput out\n").onf()
    square = moac.parse(HEAD + "out = (softmax (q +.× ⍉K)) +.× (V × V)\noutput out\n").onf()
    double = moac.parse(HEAD + "out = (softmax (q +.× ⍉K)) +.× (V × 2)\noutput out\n").onf()
    n, dv = sp.Symbol("n", integer=True, nonnegative=True), sp.Symbol("dv", integer=True, nonnegative=True)
    assert sp.expand(square.flops - base.flops - n * dv) == 0
    assert sp.expand(double.flops - base.flops - n) == 0


def _schedule():
    return moac.load(ROOT / "examples/decode.moa").lower(Options()).schedule


def test_schedule_verifier_rejects_an_unbound_variable():
    s = _schedule()
    k = s.kernels[0]
    stray = sp.Symbol("stray", integer=True)
    bad = dataclasses.replace(k, body=(ir.Serial((ir.Store("out", (stray,), (stray,), ir.Const(0.0)),)),))
    with pytest.raises(AssertionError, match="stray unbound"):
        verify_schedule(dataclasses.replace(s, kernels=(bad,)))


def test_schedule_verifier_rejects_a_wrong_rank_and_a_missing_buffer():
    s = _schedule()
    k = s.kernels[0]
    for store, msg in ((ir.Store("K", (sp.Integer(0),), (sp.Integer(0),), ir.Const(0.0)), "K has rank 2"),
                       (ir.Store("nowhere", (), (), ir.Const(0.0)), "no buffer")):
        bad = dataclasses.replace(k, body=(ir.Serial((store,)),))
        with pytest.raises(AssertionError, match=msg):
            verify_schedule(dataclasses.replace(s, kernels=(bad,)))
    verify_schedule(s)


def test_cunit_verifier_rejects_sympy_and_undeclared_names():
    art = moac.load(ROOT / "examples/decode.moa").lower(Options())
    params = tuple(p.cname for p in art.signature.params)
    verify_cunit(art.cunit, params)
    k = art.cunit.kernels[0]
    leaked = dataclasses.replace(k, code=(cir.Assign("x", sp.Symbol("n")),))
    with pytest.raises(AssertionError, match="sympy object survived"):
        verify_cunit(dataclasses.replace(art.cunit, kernels=(leaked,)), params)
    undeclared = dataclasses.replace(k, code=(cir.Decl("float", "x", cir.Var("ghost")),))
    with pytest.raises(AssertionError, match="ghost used, never declared"):
        verify_cunit(dataclasses.replace(art.cunit, kernels=(undeclared,)), params)


# --------------------------------------------------------------------------- structure


def _module_name(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")


def _imports(path: Path) -> set:
    """The modules a module imports, at any depth (`from pkg import mod` imports pkg.mod)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    here = _module_name(path).split(".")
    pkg = here if path.name == "__init__.py" else here[:-1]
    mods = _modules()
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = ".".join(pkg[:len(pkg) - node.level + 1] + ([node.module] if node.module else [])) \
                if node.level else node.module
            subs = {f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in mods}
            out |= subs if subs and len(subs) == len(node.names) else {base}
    return out


def _modules() -> dict:
    return {_module_name(p): p for p in PKG.rglob("*.py")}


def test_back_half_has_no_import_cycle():
    mods = _modules()
    graph = {m: {i for i in _imports(p) if i in mods and i != m} for m, p in mods.items()}
    # a package's __init__ importing its own submodules is not a cycle of the stages
    state: dict = {}

    def visit(m, path):
        state[m] = 1
        for n in graph[m]:
            if state.get(n) == 1:
                raise AssertionError(f"import cycle: {' -> '.join(path[path.index(n):] + [n])}")
            if n not in state:
                visit(n, path + [n])
        state[m] = 2
    for m in graph:
        if m not in state:
            visit(m, [m])


@pytest.mark.parametrize("module", ["moac/emit/codegen.py", "moac/emit/cir.py", "moac/targets/base.py",
                                    "moac/targets/openacc.py", "moac/targets/openmp.py", "moac/targets/c.py"])
def test_sympy_stays_out_of_codegen_and_targets(module):
    assert not any(i == "sympy" or i.startswith("sympy.") for i in _imports(ROOT / module)), module


def test_no_stage_tests_a_target_name():
    """Plans emit levels; codegen, build and the CLI ask the target's data."""
    for rel in ("moac/emit/codegen.py", "moac/emit/freeze.py", "moac/jit/build.py", "moac/jit/kernel.py", "moac/cli.py", "moac/commands.py",
                "moac/schedule"):
        paths = [ROOT / rel] if rel.endswith(".py") else list((ROOT / rel).rglob("*.py"))
        for p in paths:
            text = p.read_text(encoding="utf-8")
            for name in ('"openacc"', '"openmp"', "'openacc'", '"c"'):
                for line in text.splitlines():
                    if name in line and "==" in line or (name in line and "!=" in line):
                        raise AssertionError(f"{p.relative_to(ROOT)} tests a target name: {line.strip()}")


def test_no_module_over_500_lines():
    long = {str(p.relative_to(ROOT)): n for p in PKG.rglob("*.py")
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > 500}
    assert not long, long


def test_gang_traffic_shows_the_gqa_rereads_and_sharing_removes_them():
    """With no cache between gangs, one gang per query head loads each K/V row g = 4 times;
    with the heads of a KV group in one gang (--share-kv), once."""
    prog = moac.load(ROOT / "examples/decode_gqa.moa")
    sizes = {"dk": 128, "dv": 128, "hq": 32, "hkv": 8}
    n = sp.Symbol("n", integer=True, nonnegative=True)
    kv_per_token = 8 * 128 * 4 * 2                          # hkv rows of K and V, f32
    for share, times in ((False, 4), (True, 1)):
        onf = prog.onf(sizes=sizes, share_kv=share)
        per_token = sp.limit(onf.counts.gang_traffic / n, n, sp.oo)
        per_token = per_token.subs({s: 1024 for s in per_token.free_symbols})   # any chunk
        assert times * kv_per_token <= per_token < (times + 1) * kv_per_token, (share, per_token)
        assert sp.expand(onf.minimum.coeff(n)) == kv_per_token
    assert "no gang cache" in str(prog.onf(sizes=sizes))


def test_the_c_chunk_choice_is_the_python_one(tmp_path):
    """moac_chunk as printed (codegen.chunk_helper) gives what moac.schedule.choices.chunk_size
    gives, which the cost model and the ONF's counts use: across tokens, frames, gang targets
    and the chunk bounds of plain and tile kernels (cuda's 128 … 65536, formerly … 8192)."""
    import shutil
    import subprocess
    from moac.emit.codegen import chunk_helper
    from moac.schedule.choices import chunk_size
    if shutil.which("gcc") is None:
        pytest.skip("gcc not found")
    grid = [(t, f, lo) for t in (1, 15, 16, 100, 4096, 32768, 131072, 10 ** 7) for f in (1, 8, 256, 1024)
            for lo in (16, 128, 300)]
    bounds = [(16384, 16, 1024), (4096, 16, 1024), (512, 128, 8192), (1024, 128, 8192), (2048, 128, 8192), (128, 128, 65536), (256, 128, 65536)]
    src = "#include <stdint.h>\n#include <stdio.h>\n"
    calls = []
    for k, (gangs, lo, hi) in enumerate(bounds):
        src += chunk_helper(gangs, lo, hi).replace("moac_chunk(", f"chunk{k}(") + "\n"
        calls += [f'printf("%lld\\n", (long long)chunk{k}({t}LL, {f}LL, {lo}LL));' for t, f, lo in grid]
    src += "int main(void) {\n" + "\n".join(calls) + "\nreturn 0;\n}\n"
    (tmp_path / "chunk.c").write_text(src)
    subprocess.run(["gcc", "-O1", "-o", str(tmp_path / "chunk"), str(tmp_path / "chunk.c")], check=True)
    got = [int(x) for x in subprocess.run([str(tmp_path / "chunk")], capture_output=True, text=True, check=True).stdout.split()]
    want = [chunk_size(t, f, fl, gangs, lo, hi) for gangs, lo, hi in bounds for t, f, fl in grid]
    assert got == want
    assert chunk_size(4096, 256, 16, 512, 128, 8192) == 2048 and chunk_size(4096, 256, 16, 1024, 128, 1024) == 1024
    assert chunk_size(32768, 8, 128) == 128 and chunk_size(32768, 8, 16) == 16    # the plan's floor binds
