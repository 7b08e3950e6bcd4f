#!/usr/bin/env python3
"""The speed of the tool itself: `import moac`, `moac compile examples/decode.moa -o out.c`,
and the Python overhead of one compiled-kernel call.

    python3 bench/tool_speed.py [--json OUT.json] [--runs N]

- import: `python -c "import moac"` and `python -c "import moac.program"` (the compiler's
  stages, sympy and lark with them) in fresh processes, wall time, against `python -c pass`.
- compile, wall time of the whole command in a fresh process, three ways: warm (the same
  source and options compiled before: the output cache answers), a miss (the output cache
  holds nothing for this source: every stage runs, the parser tables come from the cache)
  and cold (an empty cache directory: the parser tables are built too).
- call: `kern(**arrays)` against the bare C call with the same arguments through cffi, on
  tiny programs (target c, n = 16, d = 16), best of rounds of calls.
Best and median of N runs each; the machine is shared, so best is the figure to compare.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def wall(argv: list, env: dict, runs: int, before=None) -> dict:
    times = []
    for _ in range(runs):
        if before:
            before()
        t0 = time.perf_counter()
        subprocess.run(argv, env=env, check=True, stdout=subprocess.DEVNULL)
        times.append(time.perf_counter() - t0)
    return {"best_s": min(times), "median_s": statistics.median(times), "runs": runs}


def best_per_call(f, calls: int = 500, rounds: int = 20) -> float:
    best = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(calls):
            f()
        best = min(best, (time.perf_counter() - t0) / calls)
    return best


def call_overhead() -> dict:
    import numpy as np

    import moac
    from moac.commands import random_inputs
    out = {}
    for name, sizes, fixed in (("decode", {"n": 16, "dk": 16, "dv": 16}, {"dk": 16, "dv": 16}),
                               ("decode_gqa", {"n": 16, "dk": 16, "dv": 16, "hq": 8, "hkv": 2}, {})):
        prog = moac.load(ROOT / "examples" / f"{name}.moa")
        kern = prog.compile(target="c", sizes=fixed)
        arrays, _ = random_inputs(prog, sizes, 0)
        call = lambda: kern(**arrays)                                   # noqa: E731
        got = call()
        # the bare C call with the same arguments, made by hand
        ffi, fn = kern._ffi, kern._fn
        env = kern._bind(arrays)
        outs = {k: np.empty_like(v) for k, v in got.items()}
        args = []
        for p in kern.signature.params:
            if p.kind in ("input", "inout"):
                args.append(ffi.cast(f"{p.ctype} *", arrays[p.name].ctypes.data))
            elif p.kind == "output":
                args.append(ffi.cast(f"{p.ctype} *", outs[p.name].ctypes.data))
            else:
                args.append(env[p.name])
        if kern.signature.workspace:
            ws = np.empty(int(kern._ws_bytes(*[env[p.name] for p in kern.signature.params if p.kind == "size"]))
                          + 64, np.uint8)
            args.append(ffi.cast("void *", ws.ctypes.data + (-ws.ctypes.data) % 64))
        assert fn(*args) == 0
        for k in got:                   # the bare call computes what the kernel call returned
            assert np.array_equal(outs[k], got[k], equal_nan=True), k
        bare = best_per_call(lambda: fn(*args))
        full = best_per_call(call)
        out[name] = {"kern_call_us": full * 1e6, "bare_c_us": bare * 1e6, "overhead_us": (full - bare) * 1e6}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", help="write the results here too")
    ap.add_argument("--runs", type=int, default=15)
    a = ap.parse_args()
    py = sys.executable
    src = ROOT / "examples" / "decode.moa"
    res: dict = {"python": sys.version.split()[0], "date": time.strftime("%Y-%m-%d"), "runs": a.runs}
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "MOAC_CACHE_DIR": str(Path(tmp) / "cache"), "PYTHONPATH": str(ROOT)}
        res["python_start"] = wall([py, "-c", "pass"], env, a.runs)
        res["import_moac"] = wall([py, "-c", "import moac"], env, a.runs)
        res["import_compiler"] = wall([py, "-c", "import moac.program"], env, a.runs)
        out_c = str(Path(tmp) / "out.c")
        cmd = [py, "-m", "moac", "compile", str(src), "-o", out_c]
        subprocess.run(cmd, env=env, check=True)                        # fills the caches
        res["compile_warm"] = wall(cmd, env, a.runs)
        res["compile_miss"] = wall(cmd, {**env, "MOAC_NO_CACHE": "1"}, a.runs)

        def empty_cache():
            for p in (Path(tmp) / "cache").glob("*"):
                p.unlink()
        res["compile_cold"] = wall(cmd, env, a.runs, before=empty_cache)
    res["call"] = call_overhead()
    text = json.dumps(res, indent=2)
    print(text)
    if a.json:
        Path(a.json).write_text(text + "\n")


if __name__ == "__main__":
    main()
