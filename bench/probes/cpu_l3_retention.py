#!/usr/bin/env python3
"""Probe only: does reading a buffer of twice the last-level cache (bench/cpu_run.py's cold
start until 2026-12-05) evict K and V?  GQA f32 n = 32768's K and V (256 MiB) are read by
the read loop after four predecessors, with and without every line of K and V evicted
first (clflush), the large read in between every time.

    python3 bench/probes/cpu_l3_retention.py [ROUNDS]

Measured 2026-12-05 on the 2-core machine (L3 260 MB, 10 rounds): after torch SDPA on the
same K and V, 6.23 / 6.43 ms (best / median); after the read loop itself 7.44 / 7.82 ms;
with K and V evicted, after either, 7.91-7.95 / 8.08-8.11 ms.  So part of K and V survived
the large read wherever they had been read repeatedly, and the call after was faster."""
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import cpu_run  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402


def main() -> int:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 10
    torch.set_num_threads(2)
    ceiling = cpu_run.read_ceiling()
    rng = np.random.default_rng(0)
    K, V = (rng.standard_normal((1, 8, 32768, 128), dtype=np.float32) for _ in range(2))
    q = torch.randn(1, 32, 1, 128)
    tk, tv = torch.from_numpy(K), torch.from_numpy(V)

    def sdpa():
        return torch.nn.functional.scaled_dot_product_attention(q, tk, tv, enable_gqa=True)
    big = cpu_run.buffers(K, V)
    seqs = {"after the read loop": (lambda: ceiling(K, V), False), "after SDPA": (sdpa, False),
            "after SDPA, K and V evicted": (sdpa, True), "after the read loop, K and V evicted": (lambda: ceiling(K, V), True)}
    times = {s: [] for s in seqs}
    for _ in range(rounds):
        for s, (before, evict) in seqs.items():
            before()
            times[s].append(cpu_run.timed(lambda: ceiling(K, V), big if evict else ()))
    for s, t in times.items():
        print(f"{s:40s} best {min(t) * 1e3:.2f} ms, median {statistics.median(t) * 1e3:.2f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
