"""What engines ask of a decode kernel besides attention itself (issue 13, item 5), each an
example of examples/ checked against PyTorch (float64, on the very float32 arrays the kernel
receives), compiled for c, openmp and openacc (host build):

* decode_lse.moa: the log-sum-exp of each query head's scaled scores as a second output,
  torch.logsumexp's value; two halves of a KV cache merged by their lse give the whole.
* decode_softcap.moa: softmax(cap·tanh(s ÷ cap))·V (Gemma-2's logit soft-cap).
* decode_sinks.moa: the first s tokens and the last w, as an explicit boolean mask over all
  n tokens for SDPA; every token at most once while n < s + w.
* decode_window.moa: the last w tokens, or all n while n < w.

The bound is the one of tests/test_torch_sdpa.py: 16·eps32·√(dk + T) relative to
max(1, max|ref|), T the tokens attended.  The traffic the ONF counts is checked against the
bytes of the rows the reference reads, worked out here from the sizes.

Needs the `torch` extra; skipped without it.
"""
from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import pytest
import sympy as sp

import moac
from moac.cost import counts_at
from moac.dnf import DOp, DRead, DReduce
from moac.dnf.walk import has_reduce, reads

torch = pytest.importorskip("torch")
F = torch.nn.functional

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
TARGETS = ("c", "openmp", "openacc")
EPS32 = float(np.finfo(np.float32).eps)


@functools.cache
def example(name: str) -> moac.Program:
    return moac.load(EXAMPLES / f"{name}.moa")


@functools.cache
def kernel(name: str, target: str, fixed: tuple = ()):
    return example(name).compile(target=target, sizes=dict(fixed), werror=True)


def randn(rng, *shape, scale: float = 1.0) -> np.ndarray:
    return (scale * rng.standard_normal(shape)).astype(np.float32)


def t64(a: np.ndarray):
    return torch.from_numpy(np.asarray(a, dtype=np.float64))


def bound(dk: int, tokens: int, ref) -> float:
    return 16 * EPS32 * float(np.sqrt(dk + tokens)) * max(1.0, float(np.max(np.abs(ref))) if np.size(ref) else 1.0)


def assert_close(what: str, got, ref, tol: float) -> None:
    got, ref = np.asarray(got, dtype=np.float64), np.asarray(ref, dtype=np.float64)
    assert got.shape == ref.shape, f"{what}: shape {got.shape}, reference {ref.shape}"
    assert np.all(np.isfinite(got)), f"{what}: non-finite values"
    err = float(np.max(np.abs(got - ref))) if got.size else 0.0
    assert err <= tol, f"{what}: max error {err:.3e} > {tol:.3e}"


def gqa_scores(Q, K):
    """⟨B hq n⟩ scaled scores of grouped-query attention: query head h reads KV head ⌊h ÷ g⌋."""
    g = Q.shape[1] // K.shape[1]
    Kr = t64(K).repeat_interleave(g, dim=1)                     # ⟨B hq n dk⟩
    return torch.einsum("bhd,bhnd->bhn", t64(Q), Kr) / np.sqrt(Q.shape[-1])


def gqa_sdpa(Q, K, V):
    with torch.no_grad():
        return F.scaled_dot_product_attention(t64(Q)[:, :, None, :], t64(K), t64(V), enable_gqa=True)[:, :, 0, :]


def at(expr, **sizes) -> int:
    """A count of the ONF at these sizes (the chunk must not be in it)."""
    v = sp.sympify(expr).xreplace({s: sizes[s.name] for s in sp.sympify(expr).free_symbols})
    return int(v)


# --------------------------------------------------------------------------- log-sum-exp

LSE_SIZES = [dict(B=2, hq=8, hkv=2, n=97, dk=64, dv=64), dict(B=1, hq=4, hkv=4, n=1, dk=16, dv=8),
             dict(B=3, hq=6, hkv=1, n=1000, dk=80, dv=32)]


def lse_inputs(s: dict, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    return dict(Q=randn(rng, s["B"], s["hq"], s["dk"]), K=randn(rng, s["B"], s["hkv"], s["n"], s["dk"]),
                V=randn(rng, s["B"], s["hkv"], s["n"], s["dv"]))


def test_lse_shares_the_softmax_maximum_and_sum():
    """The DNF keeps two temporaries, the softmax's m and z, and lse reads them (m + log z):
    no reduction of its own.  The split-K plan takes both outputs, and lse costs exactly its
    own writes over the plain GQA decode."""
    d = example("decode_lse").dnf()
    temps = [st for st in d.stmts if st.role == "temp"]
    assert sorted(st.name for st in temps) == ["m", "z"]
    assert [st.body.op for st in temps] == ["max", "add"] and all(isinstance(st.body, DReduce) for st in temps)
    (lse,) = [st for st in d.stmts if st.name == "lse"]
    assert not has_reduce(lse.body)
    assert sorted(r.array for r in reads(lse.body)) == ["m", "z"]
    assert lse.body == DOp("add", (DRead("m", lse.vars), DOp("log", (DRead("z", lse.vars),))))
    (out,) = [st for st in d.stmts if st.name == "out"]
    assert {r.array for r in reads(out.body)} == {"Q", "K", "V", "m", "z"}

    fixed = dict(hq=32, hkv=8, dk=128, dv=128)
    onf = example("decode_lse").onf(sizes=fixed)
    assert onf.schedule.plan == "split-K", onf.declined
    assert onf.compulsory_minimal
    plain = example("decode_gqa_batched").onf(sizes=fixed)
    for B, n in ((1, 1), (4, 4096)):
        want = 4 * (B * 32 * 128 + 2 * B * 8 * n * 128 + B * 32 * 128 + B * 32)   # Q, K, V, out, lse: f32
        assert at(onf.minimum, B=B, n=n) == want
        assert at(onf.compulsory, B=B, n=n) == want
        assert at(onf.compulsory, B=B, n=n) - at(plain.compulsory, B=B, n=n) == 4 * B * 32


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("s", LSE_SIZES, ids=lambda s: "-".join(f"{k}{v}" for k, v in s.items()))
def test_lse_is_torch_logsumexp_of_the_scaled_scores(target, s):
    a = lse_inputs(s)
    got = kernel("decode_lse", target)(**a)
    scores = gqa_scores(a["Q"], a["K"])
    lse_ref = torch.logsumexp(scores, dim=-1).numpy()           # natural log of Σ exp(q·k / √dk)
    out_ref = gqa_sdpa(a["Q"], a["K"], a["V"]).numpy()
    assert_close("lse", got["lse"], lse_ref, bound(s["dk"], s["n"], lse_ref))
    assert_close("out", got["out"], out_ref, bound(s["dk"], s["n"], out_ref))
    # the convention is the scaled scores': the unscaled ones give another value
    unscaled = torch.logsumexp(scores * np.sqrt(s["dk"]), dim=-1).numpy()
    assert np.max(np.abs(got["lse"] - unscaled)) > 100 * bound(s["dk"], s["n"], lse_ref)


def merge(out1, lse1, out2, lse2):
    """Two partial attentions over disjoint token sets, merged by their log-sum-exps:
    out = (e^lse1·out1 + e^lse2·out2) ÷ (e^lse1 + e^lse2), computed with the larger lse
    taken out; lse = log(e^lse1 + e^lse2).  An empty part (lse = −∞) has weight 0."""
    lse1, lse2 = np.asarray(lse1, np.float64), np.asarray(lse2, np.float64)
    big = np.maximum(lse1, lse2)
    w1, w2 = np.exp(lse1 - big), np.exp(lse2 - big)
    out = (w1[..., None] * out1 + w2[..., None] * out2) / (w1 + w2)[..., None]
    return out, big + np.log(w1 + w2)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("n, cut", [(97, 48), (1000, 1), (1000, 999), (40, 0)])
def test_two_halves_merged_by_their_lse_give_the_whole(target, n, cut):
    """The use of the second output: attention over K[:cut] and K[cut:] separately (two
    devices, or a cached prefix and the new tokens), merged by lse, is attention over all n."""
    s = dict(B=2, hq=8, hkv=2, n=n, dk=64, dv=64)
    a = lse_inputs(s, seed=n + cut)
    kern = kernel("decode_lse", target)
    part = [kern(Q=a["Q"], K=np.ascontiguousarray(a["K"][:, :, sl]), V=np.ascontiguousarray(a["V"][:, :, sl]))
            for sl in (slice(0, cut), slice(cut, n))]
    if cut == 0:
        assert np.all(part[0]["lse"] == -np.inf) and np.all(part[0]["out"] == 0)   # no tokens: Σ = 0
    out, lse = merge(part[0]["out"], part[0]["lse"], part[1]["out"], part[1]["lse"])
    whole = kern(**a)
    out_ref = gqa_sdpa(a["Q"], a["K"], a["V"]).numpy()
    lse_ref = torch.logsumexp(gqa_scores(a["Q"], a["K"]), dim=-1).numpy()
    tol = 2 * bound(s["dk"], n, out_ref)
    assert_close("merged out", out, out_ref, tol)
    assert_close("merged lse", lse, lse_ref, 2 * bound(s["dk"], n, lse_ref))
    assert_close("merged out vs one call", out, whole["out"], tol)
    # where both parts hold tokens, neither alone is the whole: the merge makes them agree
    for p in part if 0 < cut < n else ():
        assert np.max(np.abs(p["out"] - out_ref)) > tol


# --------------------------------------------------------------------------- logit soft-cap

def softcap_reference(Q, K, V, cap: float):
    s = gqa_scores(Q, K)
    s = cap * torch.tanh(s / cap)
    p = torch.softmax(s, dim=-1)
    g = Q.shape[1] // K.shape[1]
    return torch.einsum("bhn,bhnd->bhd", p, t64(V).repeat_interleave(g, dim=1)).numpy()


SOFTCAP_BUILDS = [((), 30), ((("cap", 50),), 50), ((("cap", 50), ("hq", 8), ("hkv", 2), ("dk", 64), ("dv", 64)), 50)]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("fixed, cap", SOFTCAP_BUILDS, ids=["runtime-cap30", "fixed-cap50", "fixed-all"])
@pytest.mark.parametrize("n", [1, 97, 1000])
def test_softcap_is_softmax_of_capped_scores(target, fixed, cap, n):
    s = dict(B=2, hq=8, hkv=2, n=n, dk=64, dv=64)
    rng = np.random.default_rng(n)
    # queries scaled so that scores reach beyond the cap (|s| up to ~ 8·20 = 160): the cap matters
    a = dict(Q=randn(rng, 2, 8, 64, scale=20.0), K=randn(rng, 2, 2, n, 64), V=randn(rng, 2, 2, n, 64))
    by_name = {} if "cap" in dict(fixed) else {"cap": cap}
    got = kernel("decode_softcap", target, fixed)(**a, **by_name)["out"]
    ref = softcap_reference(a["Q"], a["K"], a["V"], float(cap))
    tol = bound(64, n, ref)             # measured errors: at most 6% of it
    assert_close(f"softcap [{target}]", got, ref, tol)
    if n > 1:
        plain = gqa_sdpa(a["Q"], a["K"], a["V"]).numpy()
        assert np.max(np.abs(plain - ref)) > 100 * tol, "the cap must change the result for the test to mean anything"


def test_softcap_adds_tanh_and_no_traffic():
    d = str(example("decode_softcap").dnf())
    assert d.count("cap × tanh(") == 3            # in m, z and out: the capped score, nothing stored
    fixed = dict(hq=32, hkv=8, dk=128, dv=128, cap=50)
    onf = example("decode_softcap").onf(sizes=fixed)
    plain = example("decode_gqa_batched").onf(sizes={k: v for k, v in fixed.items() if k != "cap"})
    assert onf.schedule.plan == "split-K" and onf.compulsory_minimal
    assert sp.expand(onf.traffic - plain.traffic) == 0 and sp.expand(onf.minimum - plain.minimum) == 0
    assert "tanhf(" in kernel("decode_softcap", "c", tuple(fixed.items())).c_source


# --------------------------------------------------------------------------- sinks and window

def masked_decode(q, K, V, keep: np.ndarray):
    """SDPA of one query over the tokens `keep` marks (a boolean mask over all n)."""
    with torch.no_grad():
        return F.scaled_dot_product_attention(t64(q)[None, :], t64(K), t64(V),
                                              attn_mask=torch.from_numpy(keep)[None, :])[0].numpy()


def sink_mask(n: int, s: int, w: int) -> np.ndarray:
    t = np.arange(n)
    return (t < s) | (t >= n - w)                  # the first s tokens and the last w, each once


def window_mask(n: int, w: int) -> np.ndarray:
    return np.arange(n) >= n - w


# (n, s, w): n < s; n = s; s < n < s + w; n = s + w; n > s + w (twice); no sinks; no window
SINK_LENS = [(3, 4, 8), (4, 4, 8), (9, 4, 8), (12, 4, 8), (20, 4, 8), (300, 4, 100), (50, 0, 16), (50, 4, 0),
             (1, 1, 1)]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("fixed", [(), (("s", 4), ("w", 8))], ids=["runtime", "fixed-s4-w8"])
def test_sinks_and_window_match_a_masked_sdpa(target, fixed):
    kern = kernel("decode_sinks", target, fixed)
    rng = np.random.default_rng(3)
    lens = [c for c in SINK_LENS if not fixed or (c[1], c[2]) == (4, 8)]
    assert len(lens) >= 5
    for n, s, w in lens:
        dk, dv = 64, 32
        q, K, V = randn(rng, dk), randn(rng, n, dk), randn(rng, n, dv)
        keep = sink_mask(n, s, w)
        by_name = {} if fixed else {"s": s, "w": w}
        got = kern(q=q, K=K, V=V, **by_name)["out"]
        ref = masked_decode(q, K, V, keep)
        assert_close(f"sinks [{target}] n={n} s={s} w={w}", got, ref, bound(dk, int(keep.sum()), ref))
        if n < s + w:                              # every token once: plain decode over the cache
            assert keep.all()


def test_sinks_count_only_the_rows_they_read():
    """K and V traffic is min(n, s + w) rows: the sinks and the window, no row twice."""
    onf = example("decode_sinks").onf(sizes=dict(dk=64, dv=32))
    assert onf.schedule.plan == "split-K" and onf.compulsory_minimal
    assert not example("decode_sinks").dnf().program.constraints     # nothing left to check at run time
    for n, s, w in SINK_LENS:
        rows = int(sink_mask(n, s, w).sum())
        want = 4 * (64 + 32) * rows + 4 * 64 + 4 * 32                # K, V rows, q, out
        assert at(onf.minimum, n=n, s=s, w=w) == want, (n, s, w)
        assert at(onf.compulsory, n=n, s=s, w=w) == want, (n, s, w)


WINDOW_LENS = [(5, 8), (8, 8), (9, 8), (1000, 97), (1, 97)]    # (n, w): n < w, n = w, n > w


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("fixed", [(), (("w", 8),)], ids=["runtime", "fixed-w8"])
def test_window_matches_a_masked_sdpa_for_every_length(target, fixed):
    kern = kernel("decode_window", target, fixed)
    rng = np.random.default_rng(5)
    for n, w in WINDOW_LENS:
        if fixed and w != 8:
            continue
        dk, dv = 80, 64
        q, K, V = randn(rng, dk), randn(rng, n, dk), randn(rng, n, dv)
        keep = window_mask(n, w)
        got = kern(q=q, K=K, V=V, **({} if fixed else {"w": w}))["out"]
        ref = masked_decode(q, K, V, keep)
        assert_close(f"window [{target}] n={n} w={w}", got, ref, bound(dk, int(keep.sum()), ref))


def test_window_counts_min_n_w_rows_and_needs_no_run_time_check():
    prog = example("decode_window")
    assert not prog.dnf().program.constraints
    onf = prog.onf(sizes=dict(dk=128, dv=128))
    assert onf.compulsory_minimal
    for n, w in WINDOW_LENS:
        assert at(onf.minimum, n=n, w=w) == 4 * 256 * min(n, w) + 4 * 256, (n, w)


def test_counts_at_evaluates_the_clipped_extents():
    """moac cost's evaluation (the chunk chosen as the kernel chooses it) takes Min and Max."""
    onf = example("decode_sinks").onf(sizes=dict(dk=64, dv=32))
    traffic, minimum, _ = counts_at(onf, dict(n=9, s=4, w=8))
    assert minimum == 4 * 96 * 9 + 4 * 96 and traffic >= minimum


# --------------------------------------------------------------------------- the prover the clipping relies on

def test_bounds_of_min_and_max_prove_only_what_holds():
    """core.provably through Min and Max: every relation it proves holds at all sizes 0…6
    (random relations over n, s, w), and it proves the ones the examples need."""
    import itertools
    import random
    from moac.front.core import provably, size_symbol
    n, s, w = (size_symbol(x) for x in "nsw")
    assert provably(sp.Le(sp.Min(n, w), n)) and provably(sp.Le(sp.Min(w, sp.Max(0, n - s)), n))
    assert provably(sp.Le(sp.Min(n, s) + sp.Min(w, sp.Max(0, n - s)), n))
    assert not provably(sp.Le(n, sp.Min(n, w))) and not provably(sp.Lt(sp.Min(n, w), n))
    rng = random.Random(13)
    atoms = [n, s, w, sp.Integer(0), sp.Integer(1)]

    def term(depth):
        if depth == 0 or rng.random() < 0.3:
            return rng.choice(atoms)
        a, b = term(depth - 1), term(depth - 1)
        return rng.choice([sp.Min, sp.Max, lambda x, y: x + y, lambda x, y: x - y])(a, b)
    proved = 0
    for _ in range(400):
        rel = rng.choice([sp.Le, sp.Lt, sp.Ge, sp.Gt])(term(3), term(3))
        if rel in (sp.true, sp.false) or not provably(rel):
            continue
        proved += 1
        for vals in itertools.product(range(7), repeat=3):
            assert bool(rel.subs(dict(zip((n, s, w), vals)))), (rel, vals)
    assert proved >= 10                     # 20 with this seed, each through the bounds, none by sympy alone
