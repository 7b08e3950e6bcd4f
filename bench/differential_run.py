#!/usr/bin/env python3
"""Differential testing on purpose: random well-shaped programs (tests/progen.py: ψ with
partial indices, take/drop with negative counts, catenation, transposes, reshape, Ω,
inner and outer products, every reduction, sizes left to run time, sizes 0, 1 and
primes; a third of them scatter into an input with `update S ← e`) compiled for c, openmp and
openacc and compared with the interpreter (outputs and updated inputs); c and the
host build of openacc also bit for bit.  Writes a JSON summary with every failure.

    python3 bench/differential_run.py --programs 3400 --json bench/results/DATE/differential.json [--explore] [--fixed-sizes]
                                      [--specials P]

--specials P puts NaN, ±inf and ±0 in a share P of the float inputs' elements: random
normal data never shows how the kernels and the interpreter treat them (max and min with a
NaN differed until 2026-12-05).  Infinities must then agree exactly, NaNs in place.

The test suite runs a seeded slice (tests/test_back_props.py).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))

import moac  # noqa: E402
from moac import commands  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from progen import programs  # noqa: E402

TARGETS = ("c", "openmp", "openacc")


def with_specials(prog, arrays: dict, share: float, seed: int) -> dict:
    """The float inputs with a share of their elements NaN, +inf, −inf, +0 or −0 (f32 and f64
    inputs only: the narrow storages keep their drawn bits)."""
    rng = np.random.default_rng(seed)
    specials = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0])
    out = dict(arrays)
    for i in prog.inputs:
        a = arrays[i.name]
        if i.dtype in ("f32", "f64") and a.size:
            a = a.copy()
            pick = rng.random(a.shape) < share
            a[pick] = rng.choice(specials, size=int(pick.sum())).astype(a.dtype)
            out[i.name] = a
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--programs", type=int, default=3400)
    ap.add_argument("--json", required=True)
    ap.add_argument("--explore", action="store_true",
                    help="draw new programs (the default draws the same ones every run)")
    ap.add_argument("--fixed-sizes", action="store_true",
                    help="every size fixed at compile time (the default leaves them to run time)")
    ap.add_argument("--specials", type=float, default=0.0,
                    help="share of float input elements replaced by NaN, ±inf or ±0 (default 0)")
    args = ap.parse_args()
    warnings.simplefilter("ignore", RuntimeWarning)
    stats = {"programs": 0, "runs": 0, "refused": 0, "failures": []}
    t0 = time.time()

    @settings(max_examples=args.programs, deadline=None, database=None, derandomize=not args.explore,
              suppress_health_check=list(HealthCheck))
    @given(programs())
    def one(case):
        source, sizes = case
        stats["programs"] += 1
        try:
            prog = moac.parse(source, "generated.moa")
            arrays, all_sizes = commands.random_inputs(prog, sizes, 0)
            if args.specials:
                arrays = with_specials(prog, arrays, args.specials, stats["programs"])
            ref = prog.evaluate(sizes=all_sizes, **arrays)
        except moac.MoacError:
            stats["refused"] += 1
            return
        got_by = {}
        for target in TARGETS:
            try:
                kern = prog.compile(target=target, werror=True, native=False,
                                    **({"sizes": sizes} if args.fixed_sizes else {}))
                given = {k: v.copy() for k, v in arrays.items()}     # an update rewrites its input in place
                got = kern(**given, **{k: v for k, v in all_sizes.items() if k in kern.onf.params})
                tol = commands.tolerance(kern.signature.ctype, commands.reduction_length(kern.onf, all_sizes))
                for name in ref:                                       # outputs and updated inputs
                    r = np.asarray(ref[name], np.float64)
                    g = np.asarray(got[name], np.float64)
                    fin = np.isfinite(r)
                    inf = np.isinf(r)
                    ok = (g.shape == r.shape and np.array_equal(np.isnan(g), np.isnan(r))
                          and np.array_equal(g[inf], r[inf])
                          and np.allclose(g[fin], r[fin], rtol=0, atol=tol * max(1.0, float(np.abs(r[fin]).max(initial=0)))))
                    if not ok:
                        raise AssertionError(f"{name}: differs from the interpreter")
                got_by[target] = got
                stats["runs"] += 1
            except Exception as e:  # noqa: BLE001 - recorded, the run goes on
                stats["failures"].append({"target": target, "source": source, "sizes": sizes,
                                          "error": "".join(traceback.format_exception_only(type(e), e)).strip()[:500]})
        if "c" in got_by and "openacc" in got_by:
            for name in ref:
                if not np.array_equal(got_by["c"][name], got_by["openacc"][name], equal_nan=True):
                    stats["failures"].append({"target": "c vs openacc", "source": source, "sizes": sizes,
                                              "error": f"{name}: not bit for bit"})
        if stats["programs"] % 200 == 0:
            print(f"{stats['programs']} programs, {stats['runs']} runs, {len(stats['failures'])} failures, "
                  f"{time.time() - t0:.0f} s", flush=True)
    one()
    stats.update(date=time.strftime("%Y-%m-%d"), seconds=round(time.time() - t0, 1), targets=TARGETS,
                 explore=args.explore, fixed_sizes=args.fixed_sizes, specials=args.specials)
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(stats, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"{stats['programs']} programs, {stats['runs']} program × target runs, {stats['refused']} refused, "
          f"{len(stats['failures'])} failures in {stats['seconds']} s")
    return 1 if stats["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
