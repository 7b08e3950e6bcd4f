#!/usr/bin/env python3
"""Probe only: builds the CUDA bundles and the bench/gpu_ab.py spec for the A/B of where the
tile kernels load their query (#14), so that one device command measures main and the
patches on the large cases and on the small ones where the first patch lost on 2026-12-03.

    python3 bench/probes/cuda_q_ab_build.py OUT          # here (nvcc), about 2 minutes
    # on the GPU machine, OUT carried:
    cd bench && python3 gpu_ab.py ../OUT/spec.json $OUT/cuda_q_ab.json 15 30

Variants: main (REV, default 05708d2, where they were measured), after
(bench/probes/cuda_q_after_copies.patch: the
query loaded and converted after the first K/V copies), ldfirst
(bench/probes/cuda_q_loads_first.patch: its loads issued before the copies, converted
after) and late (bench/probes/cuda_q_late.patch: after the first copies where the gang's
chunk holds at least 16 steps a warp, before them otherwise).  VARIANTS=main,late builds
only those.  Each is built in a detached worktree of REV with its patch applied."""
from __future__ import annotations

import os
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
         ("gqa_bf16_n4k", "gqa_bf16", {"n": 4096}, [1, 32, 8, 4096, 128]),
         ("gqab_bf16_B4_n2k", "gqab_bf16", {"B": 4, "n": 2048}, [4, 32, 8, 2048, 128]),
         ("gqab_bf16_n128k", "gqab_bf16", {"B": 1, "n": 131072}, [1, 32, 8, 131072, 128]),
         ("mha_bf16_B1_n2k", "mha_bf16", {"B": 1, "h": 32, "n": 2048}, [1, 32, 32, 2048, 128])]
VARIANTS = [("main", None), ("after", "cuda_q_after_copies.patch"), ("ldfirst", "cuda_q_loads_first.patch"),
            ("late", "cuda_q_late.patch")]
REV = os.environ.get("REV", "05708d2")
if os.environ.get("VARIANTS"):
    VARIANTS = [v for v in VARIANTS if v[0] in os.environ["VARIANTS"].split(",")]


def main() -> int:
    out = Path(sys.argv[1]).resolve()
    out.mkdir(parents=True, exist_ok=True)
    srcs = sources(BUNDLES, out)
    for label, patch in VARIANTS:
        with worktree(REV, label) as tree:
            if patch:
                subprocess.run(["git", "apply", str(ROOT / "bench" / "probes" / patch)], cwd=tree, check=True)
            compile_bundles(BUNDLES, srcs, out, label, tree)
    write_spec(out, CASES, [label for label, _ in VARIANTS])
    print(f"{len(VARIANTS) * len(BUNDLES)} bundles and spec.json in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
