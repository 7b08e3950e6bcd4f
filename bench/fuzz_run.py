#!/usr/bin/env python3
"""The fuzzing campaign on purpose: many mutated inputs through parse -> DNF -> ONF -> C
(tests/fuzz.py), each with a time limit; writes a JSON summary with every failure.

    python3 bench/fuzz_run.py --count 100000 --seed 7 --json bench/results/DATE/fuzz.json

The test suite runs a seeded slice of the same generator (tests/test_fuzz.py).
"""
from __future__ import annotations

import argparse
import collections
import json
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))

from fuzz import LIMIT, inputs, run_one  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=100000)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--json", required=True)
    args = ap.parse_args()
    t0 = time.time()
    kinds: collections.Counter = collections.Counter()
    failures, slowest = [], (0.0, "")
    for k, (label, data) in enumerate(inputs(args.seed, args.count)):
        for step in label.split(":")[2].split("+"):
            kinds[step] += 1
        t = time.perf_counter()
        verdict = run_one(data)
        dt = time.perf_counter() - t
        if dt > slowest[0]:
            slowest = (dt, label)
        if verdict:
            failures.append({"label": label, "verdict": verdict, "input": data.decode("utf-8", "replace")[:2000]})
        if (k + 1) % 10000 == 0:
            print(f"{k + 1} inputs, {len(failures)} failures, {time.time() - t0:.0f} s", flush=True)
    out = {"date": time.strftime("%Y-%m-%d"), "count": args.count, "seed": args.seed, "limit_s": LIMIT,
           "seconds": round(time.time() - t0, 1), "python": platform.python_version(),
           "mutations": dict(kinds), "slowest_s": round(slowest[0], 3), "slowest": slowest[1],
           "failures": failures}
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(out, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"{args.count} inputs in {out['seconds']} s: {len(failures)} failures; slowest {slowest[0]:.2f} s ({slowest[1]})")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
