#!/usr/bin/env python3
"""Probe only: how the CPU read ceiling's time grows with the bytes read, under three ways of
making the caches cold, interleaved in one process.

    python3 bench/probes/cpu_ceiling_sizes.py [ROUNDS] [--json OUT]

Sizes: K and V of 8, 16, 32, 64, 128 MiB each (16 … 256 MiB read a call, the sizes of
bench/cpu_run.py's cases).  Cold modes before every timed call:
  read   - bench/cpu_run.py's: a buffer of twice the last-level cache read with every core;
  clflush - every line of the arrays themselves evicted (cpu_run's clflush), nothing else;
  warm   - nothing (what stays cached from the previous call stays).
Prints best and median per (mode, size), and for each mode the least-squares line
t = a + bytes / bw over the medians: a fixed cost per call a, and a streaming bandwidth bw.
A fixed cost explains why a case of half the bytes is not twice as fast."""
from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import cpu_run  # noqa: E402  (thread pools' spin set before numpy loads)
import numpy as np  # noqa: E402


def main() -> int:
    args = sys.argv[1:]
    out = None
    if "--json" in args:
        i = args.index("--json")
        out = Path(args[i + 1])
        del args[i:i + 2]
    rounds = int(args[0]) if args else 15
    ceiling = cpu_run.read_ceiling()
    flush_read = cpu_run._FLUSH

    def clf(*arrays):
        for ptr, nbytes, _ in cpu_run.buffers(*arrays):
            cpu_run._EVICT(ptr, nbytes)

    sizes_mib = [8, 16, 32, 64, 128]
    arrays = {s: (np.ones(s << 18, np.uint32), np.ones(s << 18, np.uint32)) for s in sizes_mib}
    modes = {"read": lambda a, b: flush_read(), "clflush": lambda a, b: clf(a, b), "warm": lambda a, b: None}
    times = {(m, s): [] for m in modes for s in sizes_mib}
    keys = list(times)
    for r in range(rounds):
        for m, s in keys[r % len(keys):] + keys[:r % len(keys)]:
            a, b = arrays[s]
            modes[m](a, b)
            t0 = time.perf_counter()
            ceiling(a, b)
            times[(m, s)].append(time.perf_counter() - t0)
    res = {"rounds": rounds, "date": time.strftime("%Y-%m-%d %H:%M"), "rows": [], "fits": {}}
    for m in modes:
        xs, ys = [], []
        for s in sizes_mib:
            t = times[(m, s)]
            nbytes = 2 * (s << 20)
            best, med = min(t), statistics.median(t)
            res["rows"].append({"mode": m, "mib_read": 2 * s, "best_ms": best * 1e3, "median_ms": med * 1e3,
                                "gb_s_best": nbytes / best / 1e9})
            print(f"{m:8s} {2 * s:4d} MiB  best {best * 1e3:7.3f} ms  median {med * 1e3:7.3f} ms  "
                  f"{nbytes / best / 1e9:5.1f} GB/s best", flush=True)
            xs.append(nbytes)
            ys.append(med)
        slope, icpt = np.polyfit(np.array(xs, float), np.array(ys), 1)
        res["fits"][m] = {"fixed_ms": icpt * 1e3, "gb_s": 1 / slope / 1e9}
        print(f"{m:8s} fit over medians: fixed {icpt * 1e3:.3f} ms + bytes / {1 / slope / 1e9:.1f} GB/s")
    if out:
        out.write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
