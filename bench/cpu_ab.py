#!/usr/bin/env python3
"""A/B of CPU kernel variants side by side in one process: moac's openmp kernel for a case
of bench/cpu_run.py, the same with its C source edited by a variant file, and the read
ceiling, interleaved rounds, best and median (the ratios, not the absolute times, are what
to compare on the shared machine).

    python3 bench/cpu_ab.py CASE[,CASE…] [VARIANT.py …] [--rounds 21] [--opt key=value …] [--n N] [--warm]

A variant file defines `edit(c_source: str) -> str` (the C to build instead) and may define
`FLAGS` (extra compiler flags), `OPTIONS` (moac compile options, a dict) and `TARGET`, a
function of the openmp Target that returns the target to lower with (e.g. one without a
field's effect, `lambda t: dataclasses.replace(t, lower=None)`).  Every variant's
output is checked against the float64 reference.
"""
from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import cpu_run  # noqa: E402  (sets the thread pools' spinning before numpy and moac load)
import numpy as np  # noqa: E402
from moac import driver, targets  # noqa: E402
from moac.jit import build  # noqa: E402
from moac.options import Options  # noqa: E402


def load_variant(path: str):
    spec = importlib.util.spec_from_file_location(Path(path).stem, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("cases")
    ap.add_argument("variants", nargs="*")
    ap.add_argument("--rounds", type=int, default=21)
    ap.add_argument("--opt", action="append", default=[])
    ap.add_argument("--numpy", action="store_true", help="time numpy's implementation too")
    ap.add_argument("--dump", default="", help="write each variant's C source into this folder")
    ap.add_argument("--n", type=int, default=0, help="the cases' token count instead of their own")
    ap.add_argument("--warm", action="store_true",
                    help="no cold-cache read before each call (K and V stay cached where they fit: the cores' time)")
    args = ap.parse_args()
    base_opts = cpu_run.compile_options(args.opt)
    variants = [("base", None)] + [(Path(p).stem, load_variant(p)) for p in args.variants]
    ceiling = cpu_run.read_ceiling()
    if args.warm:
        cpu_run._FLUSH = None
    rng = np.random.default_rng(0)
    cases = {c[0]: c for c in cpu_run.CASES}
    for name in args.cases.split(","):
        _, example, kv, fixed, run, (B, hkv, g, n) = cases[name]
        if args.n:
            run, n = {**run, "n": args.n}, args.n
        d = fixed["dk"]
        Q4, K4, V4, Kb, Vb, ref = cpu_run.case_data(rng, kv, (B, hkv, g, n), d)
        prog = cpu_run.case_program(example, kv)
        arrays = cpu_run.moac_arrays(example, Q4, Kb if kv == "bf16" else K4, Vb if kv == "bf16" else V4)
        impls = {}
        for label, mod in variants:
            opts = {**base_opts, **(getattr(mod, "OPTIONS", {}) if mod else {})}
            art = prog.lower(Options.make(target="openmp", sizes=fixed, **opts))
            if mod is not None and hasattr(mod, "TARGET"):
                saved = targets.TARGETS["openmp"]
                targets.TARGETS["openmp"] = mod.TARGET(saved)
                try:
                    art = driver.lower(prog._dnf, Options.make(target="openmp", sizes=fixed, **opts))
                finally:
                    targets.TARGETS["openmp"] = saved
            if mod is not None and hasattr(mod, "edit"):
                art = replace(art, c_source=mod.edit(art.c_source))
            if args.dump:
                Path(args.dump).mkdir(parents=True, exist_ok=True)
                (Path(args.dump) / f"{name}_{label}.c").write_text(art.c_source)
            kern = build.build(art, extra_flags=tuple(getattr(mod, "FLAGS", ()) if mod else ()))
            sizes = {k: v for k, v in run.items() if k in kern.onf.params}
            out = {prog.outputs[0]: kern(**arrays, **sizes)[prog.outputs[0]]}
            impls[label] = (lambda kern=kern, sizes=sizes, out=out: kern(**arrays, **sizes, out=out)[prog.outputs[0]])
        if args.numpy:
            wk, wv = (np.empty(x.shape, np.uint32) for x in (Kb, Vb)) if kv == "bf16" else (None, None)
            impls["numpy"] = ((lambda: cpu_run.attention(Q4, cpu_run.widen_bf16(Kb, wk), cpu_run.widen_bf16(Vb, wv)))
                              if kv == "bf16" else (lambda: cpu_run.attention(Q4, K4, V4)))
        kv_arrays = (Kb, Vb) if kv == "bf16" else (K4, V4)     # the very bytes the kernels read
        impls["ceiling"] = lambda: ceiling(*kv_arrays)
        big = cpu_run.buffers(*kv_arrays)           # evicted before each call (cpu_run.timed)
        for label, fn in impls.items():
            if label not in ("ceiling", "numpy"):
                err = float(np.max(np.abs(np.asarray(fn()).reshape(ref.shape).astype(np.float64) - ref)))
                if not err < 1e-5:
                    print(f"{name} {label}: max error {err:.2e}")
        times = {k: [] for k in impls}
        for _ in range(args.rounds):
            for label, fn in impls.items():
                times[label].append(cpu_run.timed(fn, big))
        cb, cm = min(times["ceiling"]), statistics.median(times["ceiling"])
        b0, m0 = min(times["base"]), statistics.median(times["base"])
        for label, ts in times.items():
            b, m = min(ts), statistics.median(ts)
            print(f"{name:18s} {label:16s} best {b * 1e3:7.3f} median {m * 1e3:7.3f} ms   of ceiling {cb / b:.2f} "
                  f"{cm / m:.2f}   vs base {b0 / b:.3f} {m0 / m:.3f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
