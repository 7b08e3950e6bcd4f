#!/usr/bin/env python3
"""Python overhead of one compiled-kernel call: `kern(...)` against the same C function
called straight through cffi, on a tiny decode (target c, dk = dv = 16, n = 16).

    python3 bench/call_overhead.py          # prints best-of-rounds µs per call, JSON to stdout
"""
from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np

import moac

ROOT = Path(__file__).resolve().parent.parent


def best_per_call(f, calls: int = 500, rounds: int = 20) -> float:
    best = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(calls):
            f()
        best = min(best, (time.perf_counter() - t0) / calls)
    return best


def main() -> None:
    out = {}
    for name, sizes, fixed in (("decode", {"n": 16, "dk": 16, "dv": 16}, {"dk": 16, "dv": 16}),
                               ("decode_gqa", {"n": 16, "dk": 16, "dv": 16, "hq": 8, "hkv": 2}, {})):
        prog = moac.load(ROOT / "examples" / f"{name}.moa")
        kern = prog.compile(target="c", sizes=fixed)
        from moac.commands import random_inputs
        arrays, _ = random_inputs(prog, sizes, 0)
        call = lambda: kern(**arrays)                                   # noqa: E731
        call()
        # the bare C call with the same arguments
        ffi, fn = kern._ffi, kern._fn
        outs = {p.name: np.empty(tuple(int(x) for x in kern._binding.output_shape(p.name, kern._bind(arrays))),
                                 dtype=np.float32) for p in kern.signature.params if p.kind == "output"}
        env = kern._bind(arrays)
        args = []
        for p in kern.signature.params:
            if p.kind in ("input", "inout"):
                args.append(ffi.cast(f"{p.ctype} *", arrays[p.name].ctypes.data))
            elif p.kind == "output":
                args.append(ffi.cast(f"{p.ctype} *", outs[p.name].ctypes.data))
            else:
                args.append(env[p.name])
        bare = best_per_call(lambda: fn(*args))
        full = best_per_call(call)
        out[name] = {"kern_call_us": full * 1e6, "bare_c_us": bare * 1e6, "overhead_us": (full - bare) * 1e6}
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
