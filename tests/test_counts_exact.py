"""The traffic count against the elements a program touches, counted by enumeration: reads
of one array that overlap count their union (inclusion–exclusion), and a read capped by its
buffer is capped exactly, whatever the sizes are (docs/cost.md#how-exact-the-counts-are)."""
import random
from pathlib import Path

import pytest
import sympy as sp

import moac

# (source, the elements touched at the sizes: the output written plus the distinct reads)
OVERLAPS = {
    "take_both": ("size n, m, N\ninput x : f32 ⟨N⟩\nc = (n △ x) # (m △ x)\noutput c\n",
                  lambda n, m, N: n + m + len(set(range(n)) | set(range(m)))),
    "neighbours": ("size n\ninput x : f32 ⟨n⟩\nc = (¯1 ▽ x) + (1 ▽ x)\noutput c\n",
                   lambda n: (n - 1) + len(set(range(n - 1)) | set(range(1, n)))),
    "drop_both_ends": ("size n, h\ninput x : f32 ⟨n⟩\nc = ((−h) ▽ x) + (h ▽ x)\noutput c\n",
                       lambda n, h: (n - h) + len(set(range(n - h)) | set(range(h, n)))),
}


def draw(name, rng):
    if name == "take_both":
        n, m = rng.randint(1, 60), rng.randint(1, 60)
        return {"n": n, "m": m, "N": max(n, m) + rng.randint(0, 5)}
    if name == "neighbours":
        return {"n": rng.randint(1, 40)}
    n = rng.randint(1, 40)
    return {"n": n, "h": rng.randint(0, n)}


def at(expr, sizes):
    return int(sp.sympify(expr).xreplace({s: sizes[s.name] for s in sp.sympify(expr).free_symbols}))


@pytest.mark.parametrize("name", OVERLAPS)
def test_overlapping_reads_count_their_union(name):
    # they counted as the larger read alone: (n △ x) # (m △ x) 46 % low at n = 3, m = 50
    src, truth = OVERLAPS[name]
    prog = moac.parse(src, f"{name}.moa")
    free = prog.onf(target="c")                     # one formula for every size
    rng = random.Random(7)
    for _ in range(25):
        sizes = draw(name, rng)
        want = 4 * truth(**sizes)
        assert at(free.traffic, sizes) == want, (sizes, free.traffic)
        assert at(free.minimum, sizes) == want
        assert prog.onf(target="c", sizes=sizes).traffic == want


def _union(*ranges):
    return len(set().union(*(set(r) for r in ranges)))


# found by a review of the first version: each was wrong there (the whole array for item 1
# with no size fixed, a branch that never runs counted where a size is 0, catenations of
# three pieces whose inner guard did not narrow the loop)
REVIEWED = [
    ("size n, L\ninput x : f32 ⟨n⟩\nr = (L △ 1 ▽ x) + ((−L) △ x)\noutput r\n",
     lambda rng: (lambda L: {"L": L, "n": rng.randint(L + 1, 40)})(rng.randint(0, 12)),
     lambda n, L: L + _union(range(1, L + 1), range(n - L, n))),
    ("size n, m, a, b, p, q\ninput A : f32 ⟨n m⟩\nr = (⟨a b⟩ △ A) + (⟨a b⟩ △ ⟨p q⟩ ▽ A)\noutput r\n",
     lambda rng: (lambda a, b, p, q: {"a": a, "b": b, "p": p, "q": q, "n": a + p + rng.randint(0, 3),
                                      "m": b + q + rng.randint(0, 3)})(*(rng.randint(0, 6) for _ in range(4))),
     lambda n, m, a, b, p, q: a * b + len({(i, j) for i in range(a) for j in range(b)}
                                          | {(p + i, q + j) for i in range(a) for j in range(b)})),
    ("size n, m, k, N\ninput x : f32 ⟨N⟩\nc = (n △ x) # (m △ x) # (k △ x)\noutput c\n",
     lambda rng: (lambda n, m, k: {"n": n, "m": m, "k": k, "N": max(n, m, k) + rng.randint(0, 4)})(
         *(rng.randint(0, 9) for _ in range(3))),
     lambda n, m, k, N: n + m + k + _union(range(n), range(m), range(k))),
    ("size n, m, k, N\ninput x : f32 ⟨N⟩\nc = (n ▽ x) # ((−m) △ x) # (k △ x)\noutput c\n",
     lambda rng: (lambda n, m, k: {"n": n, "m": m, "k": k, "N": max(n, m, k) + rng.randint(0, 4)})(
         *(rng.randint(0, 9) for _ in range(3))),
     lambda n, m, k, N: (N - n) + m + k + _union(range(n, N), range(N - m, N), range(k))),
]


def _taps(k):
    """A stencil of k taps: x shifted by 0 … k − 1, each over n − k + 1 elements."""
    terms = [f"({j} ▽ ¯{k - 1 - j} ▽ x)" if 0 < j < k - 1 else (f"(¯{k - 1} ▽ x)" if j == 0 else f"({k - 1} ▽ x)")
             for j in range(k)]
    return "size n\ninput x : f32 ⟨n⟩\nc = " + " + ".join(terms) + "\noutput c\n"


# four or more reads that differ on one axis only: they counted as the largest alone (the six
# taps at n = 10: 40 bytes for 60); now one sweep over their intervals in order
SWEPT = [
    (_taps(4), lambda rng: {"n": rng.randint(3, 30)},
     lambda n: (n - 3) + _union(*(range(j, j + n - 3) for j in range(4)))),
    (_taps(6), lambda rng: {"n": rng.randint(5, 30)},
     lambda n: (n - 5) + _union(*(range(j, j + n - 5) for j in range(6)))),
    (_taps(4).replace("size n", "size n, m").replace("⟨n⟩", "⟨n m⟩"),
     lambda rng: {"n": rng.randint(3, 20), "m": rng.randint(0, 5)},
     lambda n, m: m * ((n - 3) + _union(*(range(j, j + n - 3) for j in range(4))))),
    ("size n, m, k, l, N\ninput x : f32 ⟨N⟩\nc = (n △ x) # (m △ x) # (k △ x) # ((−l) △ x)\noutput c\n",
     lambda rng: (lambda v: {**dict(zip("nmkl", v)), "N": max(v) + rng.randint(0, 4)})(
         [rng.randint(0, 9) for _ in range(4)]),
     lambda n, m, k, l, N: n + m + k + l + _union(range(n), range(m), range(k), range(N - l, N))),
]


def _cols(w, *cols):
    """Columns of x seen as rows of w: x[w·j + c] for j < m, added up."""
    terms = " + ".join(f"(⟨{c}⟩ψ⍉(⟨m {w}⟩ρx))" for c in cols)
    return f"size m\ninput x : f32 ⟨({w} × m)⟩\nc = {terms}\noutput c\n"


# reads with a stride counted the whole axis (one column of two: 12·m bytes for 8·m)
STRIDED = [
    (_cols(2, 1), lambda rng: {"m": rng.randint(0, 30)}, lambda m: 2 * m),
    (_cols(2, 0, 1), lambda rng: {"m": rng.randint(0, 30)}, lambda m: 3 * m),
    (_cols(3, 0, 2), lambda rng: {"m": rng.randint(0, 30)}, lambda m: 3 * m),
    (_cols(4, 1, 1), lambda rng: {"m": rng.randint(0, 30)}, lambda m: 2 * m),
]


@pytest.mark.parametrize("case", range(len(REVIEWED) + len(SWEPT) + len(STRIDED)))
def test_overlaps_and_strides_are_exact_fixed_and_free(case):
    src, draw_sizes, truth = (REVIEWED + SWEPT + STRIDED)[case]
    prog = moac.parse(src, f"r{case}.moa")
    free = prog.onf(target="c")
    rng = random.Random(11)
    for _ in range(12):
        sizes = draw_sizes(rng)
        want = 4 * truth(**sizes)
        assert prog.onf(target="c", sizes=sizes).traffic == want, sizes
        assert at(free.traffic, sizes) == want and at(free.minimum, sizes) == want, (sizes, free.traffic)


def test_a_size_fixed_at_zero_drops_the_branch_it_empties():
    # (s △ x) # ((−w) △ x) with s fixed at 0: the guard i < 0 is sympy's false, and the read
    # behind it was counted over the whole loop (640 bytes at n = 100, w = 60; truth 480)
    prog = moac.parse("size n, s, w\ninput x : f32 ⟨n⟩\nc = (s △ x) # ((−w) △ x)\noutput c\n", "z.moa")
    assert prog.onf(target="c", sizes={"s": 0, "n": 100, "w": 60}).traffic == 480
    assert at(prog.onf(target="c", sizes={"s": 0}).traffic, {"n": 100, "w": 60}) == 480
    sinks = moac.load("examples/decode_sinks.moa").onf(target="c", sizes={"s": 0, "n": 100, "w": 60, "dk": 4, "dv": 4})
    assert sinks.minimum == 4 * (4 + 4) * 60 + 4 * 4 + 4 * 4        # the window's K and V rows, q, out


def test_a_program_condition_decides_an_overlap():
    # h ≤ n (the program requires it) makes the reads [0, n − h) and [h, n) overlap by
    # max(0, n − 2h): the count keeps that max and no other
    onf = moac.parse(OVERLAPS["drop_both_ends"][0], "d.moa").onf(target="c")
    maxes = onf.traffic.atoms(sp.Max)
    assert [str(m) for m in maxes] == ["Max(0, -2*h + n)"]


def test_a_cache_read_below_its_rows_counts_the_rows_read():
    # decode_layer with N = 40 and n free read the whole cache (40 rows) in the count,
    # 3× high at n = 10; n + 1 ≤ N (the update's condition) caps it at n rows exactly
    prog = moac.load("examples/decode_layer.moa")
    free = prog.onf(sizes={"N": 40, "dk": 16, "dm": 32})
    fixed = prog.onf(sizes={"N": 40, "dk": 16, "dm": 32, "n": 10})
    assert not free.traffic.atoms(sp.Min)
    chunk = {s: 4 for s in free.traffic.free_symbols | fixed.traffic.free_symbols if "chunk" in s.name}
    n = next(s for s in free.traffic.free_symbols if s.name == "n")
    assert sp.sympify(free.traffic).xreplace({**chunk, n: 10}) == sp.sympify(fixed.traffic).xreplace(chunk)
    assert sp.sympify(free.minimum).xreplace({n: 10}) == fixed.minimum


def test_per_token_bytes_of_a_count_with_a_min_are_its_long_sequence_limit():
    # ∂/∂n of 4·(2·m + 2·n − min(m, n)) is 8 − 4·Heaviside(m − n): printed as such, and as
    # 4 bytes at n = 3 though a token past m adds 8; the per-token line is now the limit
    from moac import cost
    prog = moac.parse(OVERLAPS["take_both"][0], "take_both.moa")
    c = cost.analyse(prog, {})
    assert c.kv_per_token == 8 and c.growing
    text = cost.report(prog, {"n": 3, "m": 50, "N": 60}, [], 0, None)
    assert "KV bytes/token 8 per layer (∂ minimum / ∂n as n grows) = 8 bytes" in text and "Heaviside" not in text
    plain = cost.analyse(moac.load("examples/decode_gqa.moa"), {"hq": 32, "hkv": 8, "dk": 128, "dv": 128})
    assert not plain.growing


def test_sixteen_taps_leave_one_min():
    # the sweep added hi − max(lo, H) per tap, a max of its own each: capping a union of 8 of
    # them took minutes; min(hi − lo, hi − H) is one atom, min(1, n − 15), for all 16
    onf = moac.parse(_taps(16), "t16.moa").onf(target="c")
    assert [str(m) for m in onf.traffic.atoms(sp.Min, sp.Max)] == ["Min(1, n - 15)"]
    assert at(onf.traffic, {"n": 40}) == 4 * ((40 - 15) + 40)


def test_a_gang_counts_its_heads_and_one_piece_of_a_catenation():
    # no gang cache: decode_gqa's gang loads the Q rows and partials of its 4 heads (they
    # counted all 32: 2048·129·n/chunk), as --no-share-kv's 32 gangs of one head do together;
    # the pieces of a catenation stand under guards of their own, and a gang's lanes read one
    gqa = {"hq": 32, "hkv": 8, "dk": 128, "dv": 128}
    prog = moac.load("examples/decode_gqa.moa")
    shared, apart = (prog.onf(sizes=gqa, share_kv=s).counts.gang_traffic for s in (True, False))
    n, chunk = (next(s for s in shared.free_symbols if s.name == name) for name in ("n", "chunk"))
    per_head = lambda e: sp.expand(e * chunk).coeff(n).subs(chunk, 0)       # noqa: E731  (the 129·n term)
    assert per_head(shared) == per_head(apart) == 256 * 129
    cat = moac.parse("size n\ninput x : f32 ⟨(2 × n)⟩\nc = (n ▽ x) # (n △ x)\noutput c\n", "c.moa")
    assert cat.onf(target="c", sizes={"n": 64}).counts.gang_traffic == 1024


@pytest.mark.parametrize("length", [7, 8, 9, 40, 100])
def test_a_gang_share_of_fixed_sizes_counts_whole_gangs(length):
    # one gang of 32 lanes over 6 elements read 4 + 2 elements of x and wrote 6 of y, but its
    # share, capped by x, was scaled by the trip 6/32: 39/4 bytes, below the DRAM traffic.
    # Each gang's lanes read x[i] or x[i + 1] (the catenation's pieces) and write y[i]: with
    # length − 1 outputs over ⌈(length − 1)/32⌉ gangs every gang touches as many elements of x
    # as it writes of y, counted here gang by gang
    src = f"input x : f32 ⟨{length}⟩\ny = (4 △ x) # ({length - 5} △ 5 ▽ x)\noutput y\n"
    counts = moac.parse(src, "g.moa").onf(target="openacc").counts
    outputs = length - 1
    per_gang = [min(32, outputs - g) for g in range(0, outputs, 32)]
    assert counts.gang_traffic == sum(4 * (e + e) for e in per_gang) == counts.traffic


def test_each_kernel_counts_the_gangs_of_its_own_liftings():
    # every kernel that lifts axis i names its gang loop i_g: a kernel took the liftings of
    # all of them, and counted its gangs once per kernel (y and z over ⟨40⟩: 640 bytes each
    # for 320), or another kernel's length (z over 100 counted in y's kernel)
    for src, want in (("input x : f32 ⟨40⟩\ny = x + x\nz = x × 2\noutput y, z\n", [320, 320]),
                      ("input x : f32 ⟨40⟩\ninput w : f32 ⟨100⟩\ny = x + x\nz = w × 2\noutput y, z\n", [320, 800])):
        kernels = moac.parse(src, "two.moa").onf(target="openacc").counts.kernels
        assert [k.gang_traffic for k in kernels] == [k.traffic for k in kernels] == want


@pytest.mark.parametrize("src, sizes", [
    ("size n, d\ninput K : f32 ⟨n d⟩\ninput k : f32 ⟨d⟩\nK2 = K # k\noutput K2\n", {"n": 40, "d": 40}),
    ("size n, d\ninput K : f32 ⟨n d⟩\ninput k : f32 ⟨d⟩\nK2 = K # k\noutput K2\n", {}),
    ("size n, m, d\ninput A : f32 ⟨n d⟩\ninput B : f32 ⟨m d⟩\ninput C : f32 ⟨m d⟩\nr = (A # B) # C\noutput r\n",
     {"n": 7, "m": 5, "d": 40}),
    # i < 40 and i + 2 < 42 (the catenation under 2 ▽) are one choice of a gang, not two
    ("size n, m, d\ninput A : f32 ⟨n d⟩\ninput B1 : f32 ⟨m d⟩\ninput B2 : f32 ⟨m d⟩\ninput X1 : f32 ⟨(n + 2) d⟩\n"
     "input X2 : f32 ⟨(n + 2) d⟩\ninput Y : f32 ⟨m d⟩\nr = (A # (B1 × B2)) + (2 ▽ ((X1 × X2) # Y))\noutput r\n",
     {"n": 40, "m": 40, "d": 40}),
])
def test_a_gang_reads_the_piece_of_a_catenation_its_rows_are_in(src, sizes):
    # a gang whose row is a row of K reads no k: the gang figure added the pieces of different
    # arrays, 19680 bytes for K # k at n = d = 40 where the gangs move 13120 in all
    counts = moac.parse(src, "c.moa").onf(target="openacc", sizes=sizes).counts
    assert sp.expand(counts.gang_traffic - counts.traffic) == 0


def test_a_gang_share_is_never_below_what_the_gangs_move():
    # found by review of the first form, which chose the largest branch for guards on lifted
    # axes too and compared symbolic branches at sizes of 64:
    # - x # w in gangs of 32 at n = m = 8: the one gang reads both pieces (128 bytes), was 96
    # - (A +.× u) # (B +.× w) with no size fixed: the formula lost m (880 bytes against a
    #   traffic of 33016 at n = 4, p = 40, q = 2, m = 200)
    lifted = "size n, m\ninput x : f32 ⟨n⟩\ninput w : f32 ⟨m⟩\ny = x # w\noutput y\n"
    for sizes, truth in (({"n": 8, "m": 8}, 128), ({"n": 20, "m": 20}, 320), ({"n": 3, "m": 2}, 40)):
        counts = moac.parse(lifted, "x.moa").onf(target="openacc", sizes=sizes).counts
        assert counts.gang_traffic >= truth == counts.traffic
    src = ("size n, p, q, m\ninput A : f32 ⟨n q⟩\ninput u : f32 ⟨q⟩\ninput B : f32 ⟨p m⟩\ninput w : f32 ⟨m⟩\n"
           "r = (A +.× u) # (B +.× w)\noutput r\n")
    counts = moac.parse(src, "mv.moa").onf(target="openacc").counts
    rng = random.Random(7)
    for sizes in [{"n": 4, "p": 40, "q": 2, "m": 200}] + [{s: rng.randint(1, 300) for s in "npqm"} for _ in range(20)]:
        assert at(counts.gang_traffic, sizes) >= at(counts.traffic, sizes)


def test_a_gang_that_runs_both_pieces_counts_both():
    # the pieces of a catenation reduced in one gang loop are both read by that gang: the
    # choice of one piece a gang applies to guards on gang variables and lifted axes alone
    src = "input x : f32 ⟨80⟩\ninput w : f32 ⟨40⟩\ns = + red (x # w)\noutput s\n"
    counts = moac.parse(src, "s.moa").onf(target="openacc").counts
    assert counts.gang_traffic >= counts.traffic == 4 * (80 + 40 + 1)


@pytest.mark.parametrize("src, sizes", [
    ("size n, d\ninput A : f32 ⟨n d⟩\nr = + red ((2 ▽ A) # (2 △ A))\noutput r\n", {"n": 5, "d": 6}),
    ("size n, d\ninput A : f32 ⟨n d⟩\nr = + red ((2 ▽ A) # (2 △ A))\noutput r\n", {}),
    ("size n\ninput x : f32 ⟨n⟩\nr = + red ((2 ▽ x) # (2 △ x))\noutput r\n", {"n": 5}),
])
def test_a_gang_that_runs_every_piece_of_one_array_counts_their_union(src, sizes):
    # found by a second review: a gang reducing over the rows of (2 ▽ A) # (2 △ A) reads all of A,
    # the last rows in one branch and the first two in the other; its share counted the larger
    # piece alone (96 bytes at n = 5, d = 6 for 144; 4·d·n − 4·d with the sizes free)
    counts = moac.parse(src, "r.moa").onf(target="openacc", sizes=sizes).counts
    assert sp.expand(counts.gang_traffic - counts.traffic) == 0


def _at_data(expr, sizes: dict, lens: list):
    """expr at these sizes with lens(b) = lens[b] (the Sums over b done)."""
    from sympy.core.function import AppliedUndef
    e = sp.sympify(expr).xreplace({s: sizes[s.name] for s in sp.sympify(expr).free_symbols if s.name in sizes})
    e = e.replace(lambda x: isinstance(x, sp.Sum), lambda x: x.doit())
    return e.xreplace({r: lens[int(r.args[0])] for r in e.atoms(AppliedUndef) if r.func.__name__ == "lens"})


@pytest.mark.parametrize("example", ["decode_ragged", "decode_paged", "decode_paged_step"])
@pytest.mark.parametrize("target", ["openacc", "openmp"])
def test_a_gang_share_of_a_length_read_from_data_is_its_chunk(example, target):
    # found by review: the tokens' lifting over the gangs (lens(b) tokens, lens(b) ≤ N, in
    # N ÷ chunk gangs) was not recognised as the kernel's, so each gang counted the whole
    # sequence at b = 0, Sum(lens(b), (b, 0, 0)), times the B gangs: below the traffic
    # (decode_paged at B = 2, lens = [1, 30], chunk = 8: 6528 bytes against 10780)
    prog = moac.parse((Path(__file__).resolve().parents[1] / "examples" / f"{example}.moa").read_text(), f"{example}.moa")
    counts = prog.onf(target=target).counts
    assert "(b, 0, 0)" not in str(counts.gang_traffic)
    sizes = dict(B=2, N=30, hkv=2, g=2, dk=16, dv=16, d=16, page=16, maxp=2, P=4, chunk=8)
    assert _at_data(counts.gang_traffic, sizes, [1, 30]) >= _at_data(counts.traffic, sizes, [1, 30])
