"""KV-cache append (examples/decode_step.moa): the caller's cache grows in place by one
row per step, and T steps from an empty cache equal attention over the whole sequence."""
import numpy as np
import pytest
import sympy as sp

import moac

N, DK, DV, T = 40, 16, 8, 25
SENTINEL = 1234.5


@pytest.fixture(scope="module")
def prog():
    return moac.load("examples/decode_step.moa")


def attention(q, K, V):
    s = K.astype(np.float64) @ q.astype(np.float64) / np.sqrt(q.shape[0])
    a = np.exp(s - s.max())
    return (a / a.sum()) @ V.astype(np.float64)


@pytest.mark.parametrize("target", ["c", "openacc", "openmp"])
def test_t_steps_from_an_empty_cache(prog, target):
    kern = prog.compile(target=target, sizes={"dk": DK, "dv": DV}, werror=True)
    rng = np.random.default_rng(7)
    Kc = np.full((N, DK), SENTINEL, np.float32)
    Vc = np.full((N, DV), SENTINEL, np.float32)
    ks = rng.standard_normal((T, DK)).astype(np.float32)
    vs = rng.standard_normal((T, DV)).astype(np.float32)
    for t in range(T):
        q = rng.standard_normal(DK).astype(np.float32)
        res = kern(Kc=Kc, Vc=Vc, q=q, k=ks[t], v=vs[t], n=t)
        assert res["Kc"] is Kc and res["Vc"] is Vc             # updated in place
        want = attention(q, ks[:t + 1], vs[:t + 1])
        np.testing.assert_allclose(res["out"], want, rtol=0, atol=1e-6 * max(1.0, np.abs(want).max()))
    assert np.array_equal(Kc[:T], ks) and np.array_equal(Vc[:T], vs)   # exactly the appended rows
    assert (Kc[T:] == SENTINEL).all() and (Vc[T:] == SENTINEL).all()   # the rest untouched


def test_reference_interpreter_agrees_and_does_not_mutate(prog):
    rng = np.random.default_rng(1)
    Kc = rng.standard_normal((N, DK)).astype(np.float32)
    Vc = rng.standard_normal((N, DV)).astype(np.float32)
    before = Kc.copy()
    q, k, v = (rng.standard_normal(d).astype(np.float32) for d in (DK, DK, DV))
    ref = prog.evaluate(sizes={"n": 9}, Kc=Kc, Vc=Vc, q=q, k=k, v=v)
    assert np.array_equal(Kc, before)
    assert np.array_equal(ref["Kc"][9], k.astype(np.float64)) and np.array_equal(ref["Kc"][:9], before[:9])
    kern = prog.compile(target="c")
    got = kern(Kc=Kc, Vc=Vc, q=q, k=k, v=v, n=9)
    np.testing.assert_allclose(got["out"], ref["out"], rtol=1e-6)
    np.testing.assert_array_equal(got["Kc"], ref["Kc"])


def test_a_full_cache_is_refused_and_nothing_changes(prog):
    kern = prog.compile(target="c")
    Kc = np.ones((N, DK), np.float32)
    Vc = np.ones((N, DV), np.float32)
    q = np.ones(DK, np.float32)
    with pytest.raises(moac.ArgumentError, match=r"'Kc' is full: the update needs n \+ 1 rows, it holds N, "
                                                 r"but N = 40, n = 40") as e:
        kern(Kc=Kc, Vc=Vc, q=q, k=np.zeros(DK, np.float32), v=np.zeros(DV, np.float32), n=N)
    assert "decode_step.moa:" in str(e.value)                        # positioned at the update
    assert (Kc == 1).all() and (Vc == 1).all()


def test_read_only_cache_is_refused(prog):
    kern = prog.compile(target="c")
    Kc = np.ones((N, DK), np.float32)
    Kc.flags.writeable = False
    with pytest.raises(moac.ArgumentError, match="updated in place and must be writeable"):
        kern(Kc=Kc, Vc=np.ones((N, DV), np.float32), q=np.ones(DK, np.float32), k=np.ones(DK, np.float32),
             v=np.ones(DV, np.float32), n=3)


def test_append_is_one_row_write_at_n_dk(prog):
    onf = prog.onf(sizes={"dk": 128, "dv": 128})
    upd = [k for k in onf.kernels if k.name.endswith("_Kc")][0]
    assert upd.traffic == 4 * (128 + 128)                 # read k, write one row: O(dk)
    (write,) = {a.offset for a in upd.accesses if a.write}
    i, j, n = (sp.Symbol(x, integer=True, nonnegative=True) for x in "ijn")
    assert write == 128 * i + j
    # the row loop starts at n, so the first element written is γ(⟨n 0⟩; ⟨N 128⟩) = n·128
    assert write.subs({i: n, j: 0}) == 128 * n
    assert "for (int64_t i_ = n_; i_ < n_ + 1; ++i_)" in prog.c_source(sizes={"dk": 128, "dv": 128})


def test_an_updated_cache_may_not_alias_another_argument():
    """Passing the key cache as the value cache (or a row of it as the query) would let the
    in-place update change an input under the kernel: refused, nothing written."""
    import moac
    import numpy as np
    from moac.errors import ArgumentError
    prog = moac.load("examples/decode_step.moa")
    kern = prog.compile(target="c")
    rng = np.random.default_rng(0)
    Kc = rng.standard_normal((20, 13)).astype(np.float32)
    before = Kc.copy()
    q = rng.standard_normal(13).astype(np.float32)
    with pytest.raises(ArgumentError, match="shares memory with input 'Vc'"):
        kern(Kc=Kc, Vc=Kc, q=q, k=q.copy(), v=q.copy(), n=13)
    with pytest.raises(ArgumentError, match="shares memory with input 'q'"):
        kern(Kc=Kc, Vc=Kc.copy(), q=Kc[3], k=q.copy(), v=q.copy(), n=13)
    assert np.array_equal(Kc, before)


def test_check_picks_default_sizes_that_keep_the_conditions(prog):
    """Sizes not given take 13 where the program's conditions allow, else the next candidate:
    a cache update (n + 1 ≤ N) checks with its defaults instead of failing on a full cache."""
    from moac.commands import default_sizes, random_inputs
    syms = {s.name: s for s in prog.core.sizes}
    assert {k.name: int(v) for k, v in default_sizes(prog.core, {}).items()} == {"N": 13, "n": 11, "dk": 13, "dv": 13}
    given = default_sizes(prog.core, {syms["n"]: 13})
    assert int(given[syms["N"]]) == 17 and int(given[syms["n"]]) == 13
    arrays, sizes = random_inputs(prog, {"n": 13})
    assert sizes["N"] == 17
    prog.evaluate(sizes=sizes, **arrays)
    arrays, sizes = random_inputs(prog, {"n": 13, "N": 13})        # both given, in conflict: kept, and refused
    with pytest.raises(moac.ArgumentError, match="'Kc' is full"):
        prog.evaluate(sizes=sizes, **arrays)
