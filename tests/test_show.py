"""Objects that show themselves (#12): Kernel.bench and its Timing, and the notebook
displays (_repr_html_, _repr_pretty_) of Program, DNF, ONF and Kernel."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import moac
from moac import cost
from moac.jit.kernel import Timing

from test_back_common import example

MATMUL = dict(n=7, m=5, p=3)


def matmul_inputs(seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    n, m, p = MATMUL["n"], MATMUL["m"], MATMUL["p"]
    return {"A": rng.standard_normal((n, m)).astype(np.float32), "B": rng.standard_normal((m, p)).astype(np.float32),
            "x": rng.standard_normal(m).astype(np.float32)}


@pytest.fixture(scope="module")
def matmul():
    return example("matmul").compile(target="c")


# --------------------------------------------------------------------------- bench


def test_bench_fields_are_consistent(matmul):
    t = matmul.bench(**matmul_inputs(), reps=7, warmup=2)
    assert isinstance(t, Timing)
    assert t.reps == len(t.samples) == 7 and t.warmup == 2
    assert all(s > 0 for s in t.samples)
    assert t.best == min(t.samples) <= t.median <= max(t.samples)
    assert t.best <= t.mean <= max(t.samples)
    assert dict(t.sizes) == MATMUL
    assert t.kernel == "moac_matmul"
    with pytest.raises(dataclasses.FrozenInstanceError):
        t.samples = ()


def test_bench_counts_are_the_cost_formulas_at_the_call_sizes(matmul):
    t = matmul.bench(**matmul_inputs(), reps=1)
    n, m, p = MATMUL["n"], MATMUL["m"], MATMUL["p"]
    # docs/cli.md, `moac onf examples/matmul.moa`: DRAM traffic 4·(2·m·n + m·p + m + n·p + n), flops 2·m·n·(p + 1)
    assert t.dram_bytes == 4 * (2 * m * n + m * p + m + n * p + n)
    assert t.minimum_bytes == 4 * (m * n + m * p + m + n * p + n)
    assert t.flops == 2 * m * n * (p + 1)
    assert t.gbps == pytest.approx(t.dram_bytes / t.best / 1e9)
    assert t.gflops == pytest.approx(t.flops / t.best / 1e9)


def test_bench_counts_evaluate_the_run_time_chunk_as_cost_does():
    prog = example("decode_gqa")
    hkv, g, n = 2, 3, 300
    # the same fixed sizes as cost's ONF below (with g and hkv fixed the query heads of a KV
    # head share a gang, which sets the chunk's floor), n given at run time
    kern = prog.compile(target="c", sizes={"dk": 16, "dv": 8, "hkv": hkv, "g": g})
    rng = np.random.default_rng(1)
    arrays = {"Q": rng.standard_normal((hkv * g, 16)).astype(np.float32),
              "K": rng.standard_normal((hkv, n, 16)).astype(np.float32),
              "V": rng.standard_normal((hkv, n, 8)).astype(np.float32)}
    t = kern.bench(**arrays, reps=2, warmup=0)
    c = cost.analyse(prog, {"hkv": hkv, "g": g, "n": n, "dk": 16, "dv": 8}, target="c", token=None)
    assert any(ch.var in c.values for ch in c.onf.choices)           # the chunk is part of the counts
    assert t.dram_bytes == int(c.traffic.xreplace(c.values))
    assert t.flops == int(c.flops.xreplace(c.values))
    assert dict(t.sizes)["n"] == n and dict(t.sizes)["hq"] == hkv * g


def test_min_time_takes_more_samples(matmul):
    t = matmul.bench(**matmul_inputs(), reps=1, warmup=0, min_time=0.02)
    assert sum(t.samples) >= 0.02 and t.reps > 1


@pytest.mark.parametrize("kw", [dict(reps=0), dict(reps=-3), dict(reps=2.5), dict(reps=True), dict(warmup=-1),
                                dict(min_time=-1.0), dict(min_time=float("inf")), dict(min_time="1")])
def test_bad_bench_arguments_are_argument_errors(matmul, kw):
    with pytest.raises(moac.ArgumentError, match="bench: "):
        matmul.bench(**matmul_inputs(), **kw)


def test_bench_checks_its_inputs_like_a_call(matmul):
    arrays = matmul_inputs()
    del arrays["x"]
    with pytest.raises(moac.ArgumentError, match="missing input 'x'"):
        matmul.bench(**arrays)


def test_bench_keeps_no_outputs_and_leaves_the_kernel_as_it_was(matmul):
    arrays = matmul_inputs()
    before = {k: v.copy() for k, v in arrays.items()}
    t = matmul.bench(**arrays, reps=3)
    for f in dataclasses.fields(t):                   # numbers and names only: no array kept alive
        v = getattr(t, f.name)
        assert not isinstance(v, np.ndarray)
        assert all(not isinstance(x, np.ndarray) for x in (v if isinstance(v, tuple) else ()))
    for k in arrays:
        np.testing.assert_array_equal(arrays[k], before[k])
    got1, got2 = matmul(**arrays), matmul(**arrays)   # later calls allocate their own outputs again
    assert not np.shares_memory(got1["C"], got2["C"])
    ref = example("matmul").evaluate(**arrays)
    np.testing.assert_allclose(got1["C"], ref["C"], rtol=1e-5, atol=1e-5)


def test_bench_allocates_the_outputs_once_and_lets_them_go(matmul, monkeypatch):
    import gc
    import weakref
    made = []
    real_empty = np.empty

    def empty(shape, dtype=float, *a, **k):          # numpy.empty, recording what the kernel allocates
        arr = real_empty(shape, dtype, *a, **k)
        made.append((tuple(arr.shape), weakref.ref(arr)))
        return arr
    monkeypatch.setattr(np, "empty", empty)
    matmul.bench(**matmul_inputs(), reps=5, warmup=2)
    monkeypatch.undo()
    n, p = MATMUL["n"], MATMUL["p"]
    outputs = [ref for shape, ref in made if shape in ((n, p), (n,))]
    assert len(outputs) == 2                          # C and y, once, for the eight calls
    gc.collect()
    assert all(ref() is None for ref in outputs)      # nothing bench returned keeps them


def test_bench_does_not_update_the_callers_arrays():
    prog = example("decode_step")
    kern = prog.compile(target="c")
    rng = np.random.default_rng(2)
    N, n, dk, dv = 10, 4, 8, 8
    arrays = {"Kc": rng.standard_normal((N, dk)).astype(np.float32),
              "Vc": rng.standard_normal((N, dv)).astype(np.float32),
              "q": rng.standard_normal(dk).astype(np.float32), "k": rng.standard_normal(dk).astype(np.float32),
              "v": rng.standard_normal(dv).astype(np.float32), "n": n}
    before = {k: np.copy(v) for k, v in arrays.items()}
    t = kern.bench(**arrays, reps=2)
    assert dict(t.sizes)["n"] == n
    for k in ("Kc", "Vc"):
        np.testing.assert_array_equal(arrays[k], before[k])     # bench updated a copy
    kern(**arrays)
    np.testing.assert_array_equal(arrays["Kc"][n], arrays["k"])  # the call itself still updates in place


def test_timing_prints_itself():
    t = Timing("moac_x", (2e-6, 1e-6, 3e-6), 1, (("n", 4),), 4000, 3000, 1000)
    assert t.best == 1e-6 and t.median == 2e-6 and t.mean == pytest.approx(2e-6)
    assert t.gbps == pytest.approx(4.0) and t.gflops == pytest.approx(1.0)
    s = str(t)
    assert s.startswith("moac_x (n=4): best 1 µs, median 2 µs, mean 2 µs over 3 calls;")
    assert "4,000 DRAM bytes" in s and "4 GB/s" in s and "1 GFLOP/s" in s
    assert repr(t) == f"<moac Timing of {s}>"


# --------------------------------------------------------------------------- notebook displays


class Printer:
    """What IPython hands to _repr_pretty_: an object with text()."""

    def __init__(self):
        self.parts = []

    def text(self, s: str):
        self.parts.append(s)


def pretty(obj, cycle: bool = False) -> str:
    p = Printer()
    obj._repr_pretty_(p, cycle)
    return "".join(p.parts)


def test_html_displays_escape_the_dumps(matmul):
    prog = example("matmul")
    for obj, dump in ((prog, prog.source.text), (prog.dnf(), str(prog.dnf())), (prog.onf(), str(prog.onf())),
                      (matmul, matmul.c_source)):
        h = obj._repr_html_()
        assert isinstance(h, str) and h.startswith('<div class="moac">')
        assert "<details>" in h and "<pre>" in h
        assert "&lt;moac" in h                           # the one-line repr, escaped
        assert "<" in dump and "&lt;" in h
        assert "<script" not in h
    assert "index i &lt; n, k &lt; m, j &lt; p" in prog._repr_html_()
    assert "Σ_{k&lt;m}" in prog.dnf()._repr_html_()


def test_kernel_html_has_the_signature_counts_and_source(matmul):
    h = matmul._repr_html_()
    for cell in ("<td>A</td><td>input</td><td>float</td><td>⟨n m⟩</td>", "<td>C</td><td>output</td>",
                 "<td>p</td><td>size</td>", "<th>target</th><td>c</td>", "<th>fixed sizes</th><td>none</td>",
                 "<th>DRAM bytes</th><td>4·(2·m·n + m·p + m + n·p + n)</td>", "<th>flops</th><td>2·m·n·(p + 1)</td>"):
        assert cell in h, cell
    assert "<summary>C source (" in h and "int moac_matmul(" in h


def test_a_hostile_file_name_is_shown_as_text():
    prog = moac.parse("size n\ninput x : f32 ⟨n⟩\ny = + red x\noutput y\n", "<script>alert(1)</script>.moa")
    for obj in (prog, prog.dnf(), prog.onf(target="c"), prog.compile(target="c")):
        h = obj._repr_html_()
        assert "<script" not in h and "&lt;script&gt;alert(1)&lt;/script&gt;.moa" in h


def test_pretty_prints_the_dump_and_the_repr_in_a_cycle(matmul):
    prog = example("matmul")
    assert pretty(prog.dnf()) == str(prog.dnf())
    assert pretty(prog.onf()) == str(prog.onf())
    assert pretty(prog) == repr(prog) + "\n" + prog.source.text.rstrip()
    for obj in (prog, prog.dnf(), prog.onf(), matmul):
        assert pretty(obj, cycle=True) == repr(obj)
    text = pretty(matmul)
    assert text.startswith(repr(matmul) + "\nparameters:\n")
    assert "DRAM bytes   4·(2·m·n + m·p + m + n·p + n)" in text and "flops        2·m·n·(p + 1)" in text
    assert matmul.c_source not in text and f"{len(matmul.c_source):,} characters" in text
