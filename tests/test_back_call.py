"""A compiled kernel's call binds its sizes without sympy (moac/jit/binding.py), with the
messages of front.sizes.bind.

Every call into a module named sympy* during `kern(...)` is recorded with sys.setprofile;
the frozen binding is also compared with front.sizes.bind on random shapes and sizes for
the examples and for programs with derived sizes, aliases and polynomial extents."""
from __future__ import annotations

import random
import sys
from contextlib import contextmanager

import numpy as np
import pytest
import sympy as sp

import moac
from moac.jit.binding import freeze_binding
from moac.front.sizes import bind as sympy_bind

from test_back_common import EXAMPLE_NAMES, example, fixed_key, inputs, kernel


@contextmanager
def no_sympy():
    """Fails if any Python function of a sympy module runs inside the block."""
    seen: list = []

    def prof(frame, event, arg):
        if event == "call" and str(frame.f_globals.get("__name__", "")).startswith("sympy"):
            seen.append(f"{frame.f_globals['__name__']}.{frame.f_code.co_name}")
        elif event == "c_call" and str(getattr(arg, "__module__", "") or "").startswith("sympy"):
            seen.append(repr(arg))
    old = sys.getprofile()
    sys.setprofile(prof)
    try:
        yield seen
    finally:
        sys.setprofile(old)
    assert not seen, f"sympy ran during the call: {sorted(set(seen))[:10]}"


def test_the_recorder_sees_sympy():
    with pytest.raises(AssertionError, match="sympy ran"):
        with no_sympy():
            sp.sympify("n + 1").xreplace({sp.Symbol("n"): 2})


def old_error(kern, shapes: dict, given: dict) -> str:
    """The message front.sizes.bind gives for these shapes and sizes (or '' if none)."""
    try:
        sympy_bind(kern.onf.dnf.program, shapes, {**given, **kern.onf.fixed})
    except moac.ArgumentError as e:
        return str(e)
    return ""


def rng_arrays(shapes: dict, dtype=np.float32) -> dict:
    rng = np.random.default_rng(0)
    return {k: rng.standard_normal(s).astype(dtype) for k, s in shapes.items()}


CALLS = [   # example, compile-time sizes, sizes of the call, sizes passed by name
    ("decode", {"dk": 16, "dv": 16}, {"n": 16}, ()),
    ("decode", {}, {"n": 5, "dk": 3, "dv": 2}, ()),
    ("decode_gqa", {}, {"hkv": 2, "g": 3, "n": 7, "dk": 4, "dv": 5}, ()),
    ("decode_gqa", {}, {"hkv": 2, "g": 3, "n": 7, "dk": 4, "dv": 5}, ("hq", "hkv")),
    ("decode_gqa", {"hkv": 2, "g": 3, "dk": 33, "dv": 40}, {"n": 9}, ()),
    ("decode_window", {}, {"n": 20, "w": 6, "dk": 4, "dv": 3}, ("w",)),
    ("decode_window", {}, {"n": 10, "w": 64, "dk": 4, "dv": 3}, ("w",)),          # a window longer than the cache
    ("decode_window", {"w": 11, "dk": 33, "dv": 65}, {"n": 30}, ()),
    ("decode_step", {}, {"N": 20, "n": 13, "dk": 4, "dv": 3}, ("n",)),
    ("take_reverse", {}, {"n": 5, "m": 4}, ()),
    ("catenate", {}, {"n": 3, "m": 2, "d": 4}, ()),
    ("reshape", {}, {"n": 3, "m": 2}, ()),
]


@pytest.mark.parametrize("name,fixed,sizes,by_name", CALLS)
def test_a_call_runs_no_sympy(name, fixed, sizes, by_name):
    prog = example(name)
    kern = kernel(name, "c", fixed_key(fixed))
    arrays, all_sizes = inputs(prog, kern, {**sizes, **fixed})
    given = {k: all_sizes[k] if k in all_sizes else all_sizes["g"] * all_sizes["hkv"] for k in by_name}   # hq = g·hkv
    ref = prog.evaluate(sizes=all_sizes, **{k: v.copy() for k, v in arrays.items()})
    with no_sympy():
        got = kern(**arrays, **given)
    for k in ref:
        np.testing.assert_allclose(got[k], ref[k], rtol=1e-4, atol=1e-5)


BAD = [   # example, compile-time sizes, shapes of the inputs, sizes passed by name
    ("decode", {"dk": 16, "dv": 16}, {"q": (16,), "K": (8, 15), "V": (8, 16)}, {}),
    ("decode", {}, {"q": (4,), "K": (8, 4), "V": (7, 4)}, {}),
    ("decode", {}, {"q": (4,), "K": (32,), "V": (8, 4)}, {}),
    ("decode_gqa", {}, {"Q": (30, 16), "K": (8, 5, 16), "V": (8, 5, 16)}, {}),
    ("decode_gqa", {}, {"Q": (24, 16), "K": (8, 5, 16), "V": (8, 5, 16)}, {"hq": 30}),
    ("decode_gqa", {}, {"Q": (0, 4), "K": (0, 5, 4), "V": (0, 5, 4)}, {}),    # hkv = 0: g undetermined
    ("decode_gqa", {"hkv": 2, "g": 3, "dk": 33, "dv": 40}, {"Q": (8, 33), "K": (2, 5, 33), "V": (2, 5, 40)}, {}),
    ("decode_window", {}, {"q": (4,), "K": (10, 4), "V": (10, 4)}, {}),        # w not given
    ("decode_step", {}, {"Kc": (8, 4), "Vc": (8, 4), "q": (4,), "k": (4,), "v": (4,)}, {"n": 8}),
    ("take_reverse", {}, {"A": (2, 4)}, {}),
    ("catenate", {}, {"K": (3, 4), "k": (5,), "A": (3, 4), "B": (2, 4)}, {}),
]


@pytest.mark.parametrize("name,fixed,shapes,given", BAD)
def test_a_refused_call_runs_no_sympy_and_says_what_it_said(name, fixed, shapes, given):
    kern = kernel(name, "c", fixed_key(fixed))
    arrays = rng_arrays(shapes)
    want = old_error(kern, shapes, given)
    assert want
    with no_sympy():
        with pytest.raises(moac.ArgumentError) as info:
            kern(**arrays, **given)
    assert str(info.value) == want


def test_binding_is_frozen_for_every_example():
    for name in EXAMPLE_NAMES:
        kern = kernel(name, "c")
        assert kern._binding.reason is None, (name, kern._binding.reason)


# --------------------------------------------------------------------------- against sizes.bind

PROGRAMS = {
    "square": "size n, m\ninput A : f32 ⟨(n × n) m⟩\nB = A + 1\noutput B\n",
    "sum": "size n, m\ninput A : f32 ⟨(n + m)⟩\ninput x : f32 ⟨m⟩\nB = A + 1\noutput B\n",
    "stuck": "size n, m\ninput A : f32 ⟨(n + m)⟩\nB = A + 1\noutput B\n",
    "cubic": "size n, m\ninput A : f32 ⟨(n × n × m + 2 × n)⟩\ninput x : f32 ⟨m⟩\nB = A + 1\noutput B\n",
    "gqa": "size hq, hkv, d\nsize g = hq ÷ hkv\ninput Q : f32 ⟨hq d⟩\ninput K : f32 ⟨hkv d⟩\nB = Q + 1\noutput B\n",
    "gqa_minus": "size hq, hkv, d\nsize g = hq ÷ (hkv − 1)\ninput Q : f32 ⟨hq d⟩\ninput K : f32 ⟨hkv d⟩\n"
                 "B = Q + 1\noutput B\n",
    "guard": "size n, m, p\ninput x : f32 ⟨n⟩\ninput A : f32 ⟨((n × m) + p)⟩\ninput y : f32 ⟨p⟩\nB = A + 1\noutput B\n",
    "guard2": "size n, m, p\ninput x : f32 ⟨n⟩\ninput A : f32 ⟨((n × m) + p)⟩\ninput z : f32 ⟨m⟩\ninput y : f32 ⟨p⟩\n"
              "B = A + 1\noutput B\n",      # n = 0: A binds p before z and y are seen
    "alias": "size n\nsize t = n + 1\ninput A : f32 ⟨t⟩\nB = A + 1\noutput B\n",
    "psi": "size n, m, i\ninput A : f32 ⟨n m⟩\nr = ⟨i⟩ ψ A\noutput r\n",
    "max": "size n, m\ninput A : f32 ⟨(n ⌈ m)⟩\ninput x : f32 ⟨m⟩\nB = A + 1\noutput B\n",
}


def outcome(f):
    try:
        return "ok", f()
    except Exception as e:       # sizes.bind lets sympy's NotImplementedError out for ⟨(n ⌈ m)⟩
        return type(e).__name__, str(e)


def random_case(core, rnd: random.Random) -> tuple[dict, dict]:
    """Shapes from random sizes, now and then off by one or of the wrong rank, and some
    sizes (independent or derived) given by name, right or wrong."""
    env = {s: rnd.choice([0, 1, 2, 3, 5]) for s in core.sizes}
    shapes = {}
    for i in core.inputs:
        shape = [int(sp.sympify(e).xreplace(env)) for e in i.shape]
        if rnd.random() < 0.2:
            k = rnd.randrange(len(shape))
            shape[k] = max(0, shape[k] + rnd.choice([-1, 1, 7]))
        if rnd.random() < 0.05:
            shape = shape[1:]
        shapes[i.name] = tuple(shape)
    given = {}
    names = [s.name for s in core.sizes] + [n for n, _ in core.derived]
    for n in rnd.sample(names, rnd.randint(0, len(names))):
        true = {s.name: v for s, v in env.items()}.get(n)
        if true is None:
            true = int(dict(core.derived)[n].xreplace(env))
        given[n] = true if rnd.random() < 0.7 else rnd.choice([0, 1, 4, 30])
    return shapes, given


def sympy_sizes(core, shapes, given, fixed) -> dict:
    env = sympy_bind(core, shapes, {**given, **fixed})
    out = {s.name: int(v) for s, v in env.items()}
    out.update({n: int(e.xreplace(env)) for n, e in core.derived})
    return out


CORES = {**{f"examples/{n}": lambda n=n: example(n).core for n in EXAMPLE_NAMES},
         **{k: lambda k=k, v=v: moac.parse(v, f"{k}.moa").core for k, v in PROGRAMS.items()}}


@pytest.mark.parametrize("name", sorted(CORES))
def test_frozen_binding_agrees_with_sizes_bind(name):
    core = CORES[name]()
    rnd = random.Random(name)
    for fixed_sizes in ({}, {core.sizes[-1].name: 2}):
        b = freeze_binding(core, fixed_sizes, {})
        assert (b.reason is not None) == (name == "max"), b.reason
        for _ in range(20 if b.reason else 150):         # sympy's failing solve is slow
            shapes, given = random_case(core, rnd)
            given = {k: v for k, v in given.items() if k not in fixed_sizes}
            with no_sympy() if b.reason is None else _nothing():
                new = outcome(lambda: b.bind(shapes, given))
            old = outcome(lambda: sympy_sizes(core, shapes, given, fixed_sizes))
            assert new == old, (shapes, given)
            if new[0] == "ok":
                assert list(new[1]) == list(old[1])      # the same binding order too


@contextmanager
def _nothing():
    yield []


def test_output_shapes_without_sympy():
    kern = kernel("catenate", "c")
    env = kern._binding.bind({"K": (3, 4), "k": (4,), "A": (3, 4), "B": (2, 4)}, {})
    with no_sympy():
        shapes = {n: kern._binding.output_shape(n, env) for n in ("K2", "AB", "v")}
    assert shapes == {"K2": (4, 4), "AB": (5, 4), "v": (5,)}
