#!/usr/bin/env python3
"""Probe only: builds the CUDA bundles of the tile kernels' cases from several revisions of
this repository and the bench/gpu_ab.py spec that times them side by side on the H200.

    python3 bench/probes/cuda_rev_ab_build.py OUT REV [REV ...]     # here (nvcc)
    # on the GPU machine, OUT carried:
    cd bench && python3 gpu_ab.py ../OUT/spec.json $OUT/rev_ab.json 15 30

Each REV (a commit, or HEAD) is checked out in a detached worktree and compiles the same
sources (bench/gpu_cases.py's bf16 and fp8 examples); the variants are named by REV, the
first one's outputs the reference of max|Δ|."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cuda_ab_bundles import BUNDLES, ROOT, compile_bundles, sources, worktree, write_spec  # noqa: E402

# case: bundle, run-time sizes, SDPA shape [B, hq, hkv, n, d]
CASES = [("gqab_bf16_B32", "gqab_bf16", {"B": 32, "n": 4096}, [32, 32, 8, 4096, 128]),
         ("mha_bf16_B8", "mha_bf16", {"B": 8, "h": 32, "n": 4096}, [8, 32, 32, 4096, 128]),
         ("gqa_bf16_n32k", "gqa_bf16", {"n": 32768}, [1, 32, 8, 32768, 128]),
         ("gqab_fp8_B32", "gqab_fp8", {"B": 32, "n": 4096}, [32, 32, 8, 4096, 128]),
         ("gqab_bf16_n128k", "gqab_bf16", {"B": 1, "n": 131072}, [1, 32, 8, 131072, 128]),
         ("gqab_bf16_B32_n16k", "gqab_bf16", {"B": 32, "n": 16384}, [32, 32, 8, 16384, 128]),
         ("mha_bf16_B8_n16k", "mha_bf16", {"B": 8, "h": 32, "n": 16384}, [8, 32, 32, 16384, 128]),
         ("gqa_bf16_n4k", "gqa_bf16", {"n": 4096}, [1, 32, 8, 4096, 128]),
         ("gqab_bf16_B4_n2k", "gqab_bf16", {"B": 4, "n": 2048}, [4, 32, 8, 2048, 128]),
         ("mha_bf16_B1_n2k", "mha_bf16", {"B": 1, "h": 32, "n": 2048}, [1, 32, 32, 2048, 128])]


def main() -> int:
    out, revs = Path(sys.argv[1]).resolve(), sys.argv[2:]
    if not revs:
        print(__doc__, file=sys.stderr)
        return 2
    out.mkdir(parents=True, exist_ok=True)
    srcs = sources(BUNDLES, out)
    labels = []
    for rev in revs:
        label = subprocess.run(["git", "rev-parse", "--short", rev], cwd=ROOT, check=True,
                               capture_output=True, text=True).stdout.strip()
        labels.append(label)
        with worktree(rev, label) as tree:
            compile_bundles(BUNDLES, srcs, out, label, tree)
    write_spec(out, CASES, labels)
    print(f"{len(labels) * len(BUNDLES)} bundles and spec.json in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
