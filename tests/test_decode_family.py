"""Bad input to the decode family gives a clear error and leaves the caller's buffers alone."""
import numpy as np
import pytest

import moac


@pytest.fixture(scope="module")
def gqa():
    prog = moac.load("examples/decode_gqa.moa")
    return prog, prog.compile(target="c")


def test_hq_not_a_multiple_of_hkv_at_run_time(gqa):
    prog, kern = gqa
    Q = np.ones((30, 16), np.float32)
    K = np.ones((8, 5, 16), np.float32)
    V = np.ones((8, 5, 16), np.float32)
    with pytest.raises(moac.ArgumentError, match=r"input 'Q' axis 0 has length 30, but its length must be g·hkv "
                                                 r"= hq with hkv = 8"):
        kern(Q=Q, K=K, V=V)
    with pytest.raises(moac.ArgumentError, match="30"):
        prog.evaluate(Q=Q, K=K, V=V)


def test_hq_not_a_multiple_of_hkv_at_compile_time():
    prog = moac.load("examples/decode_gqa.moa")
    with pytest.raises(moac.ArgumentError) as e:
        prog.onf(sizes={"hq": 30, "hkv": 8})
    assert "size hq = 30 is impossible" in str(e.value) and "decode_gqa.moa:7:1" in str(e.value)


def test_specialised_and_generic_kernels_agree(gqa):
    prog, generic = gqa
    special = prog.compile(target="c", sizes={"hq": 8, "hkv": 2, "dk": 16, "dv": 16})
    assert "16" in special.c_source and "dk_" not in special.c_source.split("int moac_decode_gqa(")[1].split(")")[0]
    rng = np.random.default_rng(0)
    arrays = dict(Q=rng.standard_normal((8, 16)).astype(np.float32),
                  K=rng.standard_normal((2, 33, 16)).astype(np.float32),
                  V=rng.standard_normal((2, 33, 16)).astype(np.float32))
    a, b = special(**arrays)["out"], generic(**arrays)["out"]
    ref = prog.evaluate(**arrays)["out"]
    np.testing.assert_allclose(a, ref, atol=1e-6)
    np.testing.assert_allclose(b, ref, atol=1e-6)
    with pytest.raises(moac.ArgumentError, match=r"axis 2 must have length dk = 16"):
        special(Q=arrays["Q"], K=np.ones((2, 33, 8), np.float32), V=arrays["V"])


def test_wrong_dtype_leaves_nothing_written():
    prog = moac.load("examples/decode_step.moa")
    kern = prog.compile(target="c")
    Kc = np.zeros((8, 4), np.float64)                         # f64 where f32 is declared
    with pytest.raises(moac.ArgumentError, match=r"input 'Kc' must have dtype float32 \(declared f32\), got float64"):
        kern(Kc=Kc, Vc=np.zeros((8, 4), np.float32), q=np.ones(4, np.float32), k=np.ones(4, np.float32),
             v=np.ones(4, np.float32), n=2)
    assert (Kc == 0).all()


def test_window_larger_than_the_cache_attends_to_the_whole_cache():
    """w > n: the window is the w ⌊ n = n tokens there are (no padded rows), so the result is
    plain decode over the cache, as examples/decode.moa computes it."""
    window = moac.load("examples/decode_window.moa").compile(target="c", sizes={"w": 64})
    whole = moac.load("examples/decode.moa").compile(target="c")
    rng = np.random.default_rng(7)
    for n in (1, 10, 63, 64):
        arrays = dict(q=rng.standard_normal(4).astype(np.float32), K=rng.standard_normal((n, 4)).astype(np.float32),
                      V=rng.standard_normal((n, 4)).astype(np.float32))
        np.testing.assert_allclose(window(**arrays)["out"], whole(**arrays)["out"], rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("target", ["c", "openacc"])
@pytest.mark.parametrize("hq,hkv,dk,n", [(8, 2, 64, 77), (6, 2, 32, 5), (4, 1, 16, 130)])
def test_shared_kv_gangs_agree_with_the_reference(target, hq, hkv, dk, n):
    prog = moac.load("examples/decode_gqa.moa")
    kern = prog.compile(target=target, sizes={"hq": hq, "hkv": hkv, "dk": dk, "dv": dk}, share_kv=True,
                        werror=True)
    assert "heads per gang" in kern.c_source
    rng = np.random.default_rng(hq + n)
    arrays = dict(Q=rng.standard_normal((hq, dk)).astype(np.float32),
                  K=rng.standard_normal((hkv, n, dk)).astype(np.float32),
                  V=rng.standard_normal((hkv, n, dk)).astype(np.float32))
    ref = prog.evaluate(**arrays)["out"]
    np.testing.assert_allclose(kern(**arrays)["out"], ref, rtol=0, atol=2e-6 * np.abs(ref).max())
