"""Ragged batches and a paged KV cache (examples/decode_ragged.moa, decode_paged.moa): integer
inputs used as sizes per Ω frame (`lens`) and as ψ indices (`table`).

Each kernel is compared, sequence by sequence, with PyTorch's scaled_dot_product_attention
on that sequence's rows gathered by the test (float64), across page sizes 1, 16 and 64,
lengths 0, 1 and the capacity, and GQA ratios 1, 4 and 8; the DNF, the traffic counts and
the run-time checks of the data are tested too.
"""
from __future__ import annotations

import numpy as np
import pytest

import moac
from conftest import EXAMPLES, check_dnf

torch = pytest.importorskip("torch")
F = torch.nn.functional

RAGGED = EXAMPLES / "decode_ragged.moa"
PAGED = EXAMPLES / "decode_paged.moa"
TARGETS = ("c", "openmp", "openacc")


def sdpa(q, k, v) -> np.ndarray:
    """One query row against n rows of K and V (n = 0: zeros, moac's empty sum)."""
    if k.shape[0] == 0:
        return np.zeros(v.shape[1])
    t = lambda a: torch.from_numpy(np.asarray(a, dtype=np.float64))     # noqa: E731
    with torch.no_grad():
        return F.scaled_dot_product_attention(t(q)[None, None], t(k)[None], t(v)[None])[0, 0].numpy()


def ragged_inputs(rng, B, hq, hkv, N, dk, dv, lens):
    Q = rng.standard_normal((B, hq, dk)).astype(np.float32)
    K = rng.standard_normal((B, hkv, N, dk)).astype(np.float32)
    V = rng.standard_normal((B, hkv, N, dv)).astype(np.float32)
    return dict(Q=Q, K=K, V=V, lens=np.asarray(lens, dtype=np.int32))


def ragged_reference(a) -> np.ndarray:
    Q, K, V, lens = a["Q"], a["K"], a["V"], a["lens"]
    B, hq, _ = Q.shape
    g = hq // K.shape[1]
    out = np.zeros((B, hq, V.shape[3]))
    for b in range(B):
        for h in range(hq):
            n = int(lens[b])
            out[b, h] = sdpa(Q[b, h], K[b, h // g, :n], V[b, h // g, :n])
    return out


def paged_inputs(rng, B, hq, hkv, d, page, maxp, lens):
    P = 2 * B * maxp + 1
    return dict(Q=rng.standard_normal((B, hq, d)).astype(np.float32),
                Kp=rng.standard_normal((P, page, hkv, d)).astype(np.float32),
                Vp=rng.standard_normal((P, page, hkv, d)).astype(np.float32),
                table=rng.permutation(P)[:B * maxp].reshape(B, maxp).astype(np.int32),
                lens=np.asarray(lens, dtype=np.int32))


def paged_reference(a) -> np.ndarray:
    Q, Kp, Vp, table, lens = a["Q"], a["Kp"], a["Vp"], a["table"], a["lens"]
    B, hq, d = Q.shape
    g = hq // Kp.shape[2]
    out = np.zeros((B, hq, d))
    for b in range(B):
        Ks = np.concatenate([Kp[p] for p in table[b]])     # the sequence's tokens, gathered by the test
        Vs = np.concatenate([Vp[p] for p in table[b]])
        for h in range(hq):
            n = int(lens[b])
            out[b, h] = sdpa(Q[b, h], Ks[:n, h // g], Vs[:n, h // g])
    return out


@pytest.fixture(scope="module")
def kernels():
    return {(path.stem, t): moac.load(path).compile(target=t) for path in (RAGGED, PAGED) for t in TARGETS}


# --------------------------------------------------------------------------- the normal forms

def test_ragged_dnf_reduces_over_each_sequences_length():
    dnf = str(moac.load(RAGGED).dnf())
    assert "Σ_{k<⟨b⟩ψlens} exp(" in dnf and "max_{j<⟨b⟩ψlens}" in dnf
    assert "require ⟨b⟩ψlens <= N    for b < B" in dnf
    assert "require ⟨b⟩ψlens >= 0    for b < B" in dnf


def test_paged_dnf_reads_the_pool_through_the_table():
    dnf = str(moac.load(PAGED).dnf())
    assert "⟨⟨b ⌊k÷page⌋⟩ψtable (k mod page) ⌊i÷g⌋ j⟩ψVp" in dnf
    assert "require ⟨b i⟩ψtable < P    for b < B, i < maxp" in dnf
    assert "require ⟨b⟩ψlens <= maxp·page    for b < B" in dnf


@pytest.mark.parametrize("path", (RAGGED, PAGED), ids=("ragged", "paged"))
def test_traffic_counts_the_valid_rows_only(path):
    """The KV rows counted are the valid ones, Σ_{b<B} ⟨b⟩ψlens; the integer inputs count
    too (lens, the page numbers read), and the only excess over the minimum beside the
    partials' scratch is lens read again by the combine kernel (4·B bytes)."""
    import sympy as sp
    o = moac.load(path).onf(target="openacc")
    text = str(o)
    line = next(x for x in text.splitlines() if x.startswith("minimum"))
    assert "Σ_{b<B} ⟨b⟩ψlens" in line
    c = o.counts
    B = sp.Symbol("B", integer=True, nonnegative=True)
    assert sp.expand(c.compulsory - c.minimum - 4 * B) == 0
    assert any(a.array == "lens" for k in c.kernels for a in k.accesses)
    if path == PAGED:
        assert "Σ_{b<B} ⌈⟨b⟩ψlens÷page⌉" in line   # the page numbers read


def test_interpreter_and_dnf_agree_on_ragged_data():
    rng = np.random.default_rng(3)
    a = ragged_inputs(rng, 3, 4, 2, 5, 3, 2, [0, 5, 2])
    ref = check_dnf(moac.load(RAGGED), dict(B=3, g=2, hkv=2, N=5, dk=3, dv=2), arrays=a)
    np.testing.assert_allclose(ref["out"], ragged_reference(a), rtol=1e-12, atol=1e-12)
    b = paged_inputs(rng, 3, 4, 2, 3, 2, 3, [0, 6, 3])
    ref = check_dnf(moac.load(PAGED), dict(B=3, g=2, hkv=2, P=19, page=2, maxp=3, d=3), arrays=b)
    np.testing.assert_allclose(ref["out"], paged_reference(b), rtol=1e-12, atol=1e-12)


# --------------------------------------------------------------------------- compiled, against SDPA

@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("ratio", (1, 4, 8))
def test_ragged_against_sdpa(kernels, target, ratio):
    rng = np.random.default_rng(ratio)
    N = 70
    a = ragged_inputs(rng, 5, 2 * ratio, 2, N, 16, 8, [0, 1, N, 33, 64])
    out = kernels["decode_ragged", target](**a)["out"]
    np.testing.assert_allclose(out, ragged_reference(a), rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("page", (1, 16, 64))
def test_paged_against_sdpa(kernels, target, page):
    rng = np.random.default_rng(page)
    maxp = 3
    for ratio in (1, 4, 8):
        full = maxp * page
        a = paged_inputs(rng, 4, ratio, 1, 16, page, maxp, [0, 1, full, full // 2 + 1])
        out = kernels["decode_paged", target](**a)["out"]
        np.testing.assert_allclose(out, paged_reference(a), rtol=2e-5, atol=2e-5, err_msg=f"g = {ratio}")


@pytest.mark.parametrize("target", TARGETS)
def test_rows_past_a_length_are_never_read(kernels, target):
    rng = np.random.default_rng(9)
    a = ragged_inputs(rng, 3, 4, 2, 40, 8, 8, [0, 17, 40])
    want = kernels["decode_ragged", target](**a)["out"]
    for b, n in enumerate(a["lens"]):                       # poison every row beyond a length
        a["K"][b, :, n:] = np.nan
        a["V"][b, :, n:] = np.inf
    np.testing.assert_array_equal(kernels["decode_ragged", target](**a)["out"], want)


# --------------------------------------------------------------------------- data the kernel refuses

@pytest.mark.parametrize("target", ("c", "openacc"))
def test_bad_data_is_a_positioned_error(kernels, target):
    rng = np.random.default_rng(5)
    a = ragged_inputs(rng, 3, 4, 2, 10, 4, 4, [1, 11, 2])
    with pytest.raises(moac.ArgumentError, match=r"decode_ragged.moa:\d+:\d+: error: △ count ⟨b⟩ψlens must not "
                       r"exceed N, but at b = 1 it is 11"):
        kernels["decode_ragged", target](**a)
    a["lens"][1] = -1
    with pytest.raises(moac.ArgumentError, match=r"'lens' must be ≥ 0 .*, but at b = 1 it is -1"):
        kernels["decode_ragged", target](**a)
    p = paged_inputs(rng, 2, 2, 1, 4, 4, 2, [3, 8])
    p["table"][1, 1] = p["Kp"].shape[0]                       # one past the pool
    with pytest.raises(moac.ArgumentError, match=r"ψ index component 0 .* must lie in \[0, P\), but at b = 1, "
                       r"i = 1 it is 9"):
        kernels["decode_paged", target](**p)
    with pytest.raises(moac.ArgumentError, match="must not exceed N"):
        moac.load(RAGGED).evaluate(**ragged_inputs(rng, 2, 2, 1, 3, 2, 2, [4, 0]))


@pytest.mark.parametrize("path", (RAGGED, PAGED), ids=("ragged", "paged"))
def test_moac_check_draws_valid_data(path):
    """`moac check` draws each integer input within the program's conditions (lens ≤ N,
    page numbers < P) and passes (one target each here; every target in test_back_numeric)."""
    import subprocess
    import sys
    for target in (("c",) if path == RAGGED else ("openacc",)):     # the others: tests above
        r = subprocess.run([sys.executable, "-m", "moac", "check", str(path), "--target", target, "-D", "B=3",
                            "-D", "hkv=2", "-D", "g=2"], capture_output=True, text=True)
        assert r.returncode == 0, r.stdout + r.stderr
        assert r.stdout.count(" OK") == 1, r.stdout


@pytest.mark.parametrize("src, message", [
    ("size B, N\ninput K : f32 ⟨B N⟩\ninput lens : i32 ⟨B⟩\nfn t n X { n △ X }\nout = lens (t Ω⟨0 1⟩) K\n",
     "'out' has shape ⟨B ⟨@0⟩ψlens⟩, which depends on integer data"),
    ("size B, N\ninput K : f32 ⟨B N⟩\ninput lens : i32 ⟨B⟩\nfn t n X { ι n }\nout = lens (t Ω⟨0 1⟩) K\n",
     "is read from an integer array; only a take or drop count and a ψ index may be"),
    ("size B, N\ninput K : f32 ⟨B N⟩\ninput lens : i32 ⟨B⟩\nfn t n X { ⟨2 1⟩ ρ n △ X }\n"
     "out = lens (t Ω⟨0 1⟩) K\n", "ρ needs an array of rectangular shape"),
])
def test_ragged_shape_errors(src, message):
    with pytest.raises(moac.MoacError, match=message.replace("(", r"\(").replace(")", r"\)")):
        moac.parse(src).dnf()


def test_dense_chunk_enumeration_helper(tmp_path):
    """moac_ragged_pick (the CUDA gangs' dense enumeration of a ragged batch's chunks,
    plans/split_k._dense_chunks) against the enumeration in Python: every (sequence,
    chunk) once, in order, then b = B for the gangs past the last chunk."""
    import shutil
    import subprocess
    from moac.emit.codegen import OPTIONAL_HELPERS
    cc = shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        pytest.skip("no C compiler")
    lens = [0, 1, 64, 65, 200, 0, 7]
    chunk, B = 64, len(lens)
    total = B * 4                                    # the bound: ⌈256 / 64⌉ chunks per sequence
    src = tmp_path / "pick.c"
    src.write_text("#include <stdint.h>\n#include <stdio.h>\n" + OPTIONAL_HELPERS["moac_ragged_pick_i32"] + "\n"
                   f"int main(void) {{ int32_t lens[] = {{{', '.join(map(str, lens))}}};\n"
                   f"  for (int64_t w = 0; w < {total}; ++w) {{ int64_t x = moac_ragged_pick_i32(w, lens, {B}, {chunk});\n"
                   f"    printf(\"%lld %lld\\n\", (long long)(x % {B + 1}), (long long)(x / {B + 1})); }}\n"
                   "  return 0; }\n")
    exe = tmp_path / "pick"
    subprocess.run([cc, "-std=c11", "-o", str(exe), str(src)], check=True)
    got = [tuple(map(int, line.split())) for line in subprocess.run([str(exe)], capture_output=True, text=True,
                                                                     check=True).stdout.splitlines()]
    want = [(b, g) for b, n in enumerate(lens) for g in range(-(-n // chunk))]
    assert got[:len(want)] == want
    assert all(b == B for b, _ in got[len(want):])


@pytest.mark.parametrize("target", ("c", "openmp"))
def test_an_index_computed_from_data_is_checked_both_ways(target):
    """⟨p − 1⟩ψT with p read from data may go below 0: the condition keeps both bounds
    (a plain read is ≥ 0 by its input's own condition, an expression of it is not)."""
    src = ("size B, P, m\ninput T : f32 ⟨P m⟩\ninput idx : i32 ⟨B⟩\nfn pick p A { ⟨(p − 1)⟩ ψ A }\n"
           "G = idx (pick Ω⟨0 2⟩) T\noutput G\n")
    prog = moac.parse(src)
    kern = prog.compile(target=target)
    T = np.arange(6, dtype=np.float32).reshape(3, 2)
    np.testing.assert_array_equal(kern(T=T, idx=np.array([1, 3], np.int32))["G"], T[[0, 2]])
    for bad, at in (([1, 0], "i = 1"), ([4, 1], "i = 0")):
        with pytest.raises(moac.ArgumentError, match=rf"<input>:4:15: error: ψ index component 0 .* must lie in "
                                                     rf"\[0, P\), but it fails at {at}"):
            kern(T=T, idx=np.array(bad, np.int32))


EDGE = {
    "drop": ("size B, N\ninput X : f32 ⟨B N⟩\ninput lens : i32 ⟨B⟩\nfn t n x { n ▽ x }\n"
             "s = (+ red) Ω⟨1⟩ lens (t Ω⟨0 1⟩) X\noutput s\n"),
    "elementwise": ("size B, N\ninput X : f32 ⟨B N⟩\ninput lens : i32 ⟨B⟩\nfn t n x { n △ x }\n"
                    "R = lens (t Ω⟨0 1⟩) X\ns = (⌈ red) Ω⟨1⟩ R × 2\noutput s\n"),
    "static element": ("size B, P, m\ninput T : f32 ⟨P m⟩\ninput idx : i32 ⟨B⟩\ns = (+ red) idx\n"
                       "r = ⟨(⟨0⟩ ψ idx)⟩ ψ T\noutput s, r\n"),
}


@pytest.mark.parametrize("name", sorted(EDGE))
@pytest.mark.parametrize("target", ("c",))
def test_other_uses_of_integer_data(tmp_path, name, target):
    """A drop by a length (the rest of each row), an elementwise function of a ragged array
    before its reduction, an integer input as values and one element of it as a ψ index:
    `moac check` draws valid data and the kernel agrees with the interpreter."""
    import subprocess
    import sys
    path = tmp_path / "p.moa"
    path.write_text("-- " + name + "\n" + EDGE[name], encoding="utf-8")
    sizes = ["-D", "B=3", "-D", "P=4", "-D", "m=2"] if name == "static element" else ["-D", "B=3", "-D", "N=5"]
    r = subprocess.run([sys.executable, "-m", "moac", "check", str(path), "--target", target] + sizes,
                       capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.count(" OK") >= 1, r.stdout + r.stderr


def test_one_element_of_integer_data_out_of_range():
    prog = moac.parse(EDGE["static element"])
    kern = prog.compile(target="c")
    T = np.ones((4, 2), np.float32)
    with pytest.raises(moac.ArgumentError, match=r"ψ index component 0 \(⟨0⟩ψidx\) must lie in \[0, P\), but it is 4"):
        kern(T=T, idx=np.array([4, 0, 1], np.int32))
    out = kern(T=np.arange(8, dtype=np.float32).reshape(4, 2), idx=np.array([3, 0, 1], np.int32))
    np.testing.assert_array_equal(out["r"], [6, 7])
    assert out["s"] == 4


ODD = {   # name: (program, None if it compiles and agrees with the interpreter, else the error's words)
    "rank-0 count": ("size n\ninput k : i32 ⟨⟩\ninput x : f32 ⟨n⟩\ny = + red k △ x\noutput y\n", None),
    "the last n": ("size B, N\ninput X : f32 ⟨B N⟩\ninput lens : i32 ⟨B⟩\nfn t n x { (−n) △ x }\n"
                   "y = (+ red) Ω⟨1⟩ lens (t Ω⟨0 1⟩) X\noutput y\n", None),
    "n + 1, i64": ("size B, N\ninput X : f32 ⟨B N⟩\ninput lens : i64 ⟨B⟩\nfn t n x { (n + 1) △ x }\n"
                   "y = (+ red) Ω⟨1⟩ lens (t Ω⟨0 1⟩) X\noutput y\n", None),
    "ragged result": ("size n\ninput k : i32 ⟨⟩\ninput x : f32 ⟨n⟩\ny = k △ x\noutput y\n",
                      "which depends on integer data: a result must be rectangular"),
    "ι of data": ("size B\ninput lens : i32 ⟨B⟩\nfn f n { + red ι n }\ny = f Ω⟨0⟩ lens\noutput y\n",
                  "is read from an integer array"),
    "ragged transpose": ("size B, N\ninput X : f32 ⟨B N⟩\ninput lens : i32 ⟨B⟩\nfn t n x { n △ x }\n"
                         "R = ⍉ lens (t Ω⟨0 1⟩) X\ny = (+ red) R\noutput y\n",
                         "⍉ of an array whose axis lengths depend on another axis"),
    "ragged reduction": ("size B, N\ninput X : f32 ⟨B N⟩\ninput lens : i32 ⟨B⟩\nfn t n x { n △ x }\n"
                         "R = lens (t Ω⟨0 1⟩) X\ny = + red R\noutput y\n", "apply it to each cell with Ω"),
    "a float count": ("size B, N\ninput X : f32 ⟨B N⟩\ninput f : f32 ⟨B⟩\nfn t n x { n △ x }\n"
                      "y = (+ red) Ω⟨1⟩ f (t Ω⟨0 1⟩) X\noutput y\n", "or an element of an integer input"),
}


@pytest.mark.parametrize("name", sorted(ODD))
def test_odd_programs_compile_or_refuse_with_a_position(name):
    src, refused = ODD[name]
    if refused is not None:
        with pytest.raises(moac.MoacError, match=refused.replace("(", r"\(")) as e:
            moac.parse(src).dnf()
        assert str(e.value).startswith("<input>:")
        return
    prog = moac.parse(src)
    for t in ("openacc", "cuda"):
        prog.onf(target=t)
    kern = prog.compile(target="c")
    rng = np.random.default_rng(1)
    arrays = {}
    for i in prog.inputs:
        shape = tuple(3 if str(s) == "B" else 5 for s in i.shape)
        arrays[i.name] = rng.integers(0, 4, shape).astype(i.dtype.replace("i", "int")) if i.dtype in ("i32", "i64") \
            else rng.standard_normal(shape).astype(np.float32)
    got, want = kern(**arrays), prog.evaluate(**arrays)
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-5)
