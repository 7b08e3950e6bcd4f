#!/usr/bin/env python3
"""Probe only: builds the CUDA bundles and the bench/gpu_ab.py spec for the A/B of the tile
kernels' chunk ceiling (Target.tile_max_chunk, MOAC_CUDA_TILE_MAX_CHUNK) on the H200.

    python3 bench/probes/cuda_chunk_cap_build.py OUT      # here (nvcc), under a minute
    # on the GPU machine, OUT carried:
    cd bench && python3 gpu_ab.py ../OUT/spec.json $OUT/chunk_cap.json 15 30

With 8192 tokens at most a chunk, batched decode at B = 32, n = 16384 gets two chunks a
frame: 512 gangs of 4 warps where 256, one a frame, fill the H200's 264 block slots (two of
98 KB a multiprocessor) in one wave.  The variants raise the ceiling; the cases are those
it changes and those it must not.  A third variant, pmerge, is main's source edited by
bench/probes/cuda_merge_out_edit.py (a frame of one gang: its warps merge and store in
parallel) and built with the manifest's flags.  Every variant is built from a worktree of
05708d2, the main they were measured on (since 5e9362f main has both changes)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import cuda_merge_out_edit  # noqa: E402
from cuda_ab_bundles import compile_bundles, sources, worktree, write_spec  # noqa: E402
from cuda_ab_bundles import BUNDLES as ALL  # noqa: E402

BUNDLES = {b: ALL[b] for b in ("gqab_bf16", "mha_bf16", "gqab_fp8")}
REV = "05708d2"
CASES = [("gqab_bf16_B32_n16k", "gqab_bf16", {"B": 32, "n": 16384}, [32, 32, 8, 16384, 128]),
         ("gqab_bf16_B16_n32k", "gqab_bf16", {"B": 16, "n": 32768}, [16, 32, 8, 32768, 128]),
         ("mha_bf16_B8_n16k", "mha_bf16", {"B": 8, "h": 32, "n": 16384}, [8, 32, 32, 16384, 128]),
         ("gqab_fp8_B32_n16k", "gqab_fp8", {"B": 32, "n": 16384}, [32, 32, 8, 16384, 128]),
         ("gqab_bf16_B32", "gqab_bf16", {"B": 32, "n": 4096}, [32, 32, 8, 4096, 128]),
         ("mha_bf16_B8", "mha_bf16", {"B": 8, "h": 32, "n": 4096}, [8, 32, 32, 4096, 128]),
         ("gqab_bf16_n128k", "gqab_bf16", {"B": 1, "n": 131072}, [1, 32, 8, 131072, 128]),
         ("gqab_bf16_n512k", "gqab_bf16", {"B": 1, "n": 524288}, [1, 32, 8, 524288, 128]),
         ("gqab_bf16_B4_n32k", "gqab_bf16", {"B": 4, "n": 32768}, [4, 32, 8, 32768, 128])]
VARIANTS = [("main", {}), ("cap64k", {"MOAC_CUDA_TILE_MAX_CHUNK": "65536"})]


def main() -> int:
    out = Path(sys.argv[1]).resolve()
    out.mkdir(parents=True, exist_ok=True)
    srcs = sources(BUNDLES, out)
    with worktree(REV, "cap") as tree:
        for label, env in VARIANTS:
            compile_bundles(BUNDLES, srcs, out, label, tree, env)
    for b in BUNDLES:        # pmerge: main's source edited, built as moac built main's
        main = out / f"{b}_main"
        (out / f"{b}_pmerge.cu").write_text(cuda_merge_out_edit.edit(main.with_suffix(".cu").read_text()))
        man = json.loads(main.with_suffix(".json").read_text())
        subprocess.run(["nvcc", *man["flags"], str(out / f"{b}_pmerge.cu"), "-o", str(out / f"{b}_pmerge.so")], check=True)
        (out / f"{b}_pmerge.json").write_text(json.dumps(man, indent=2) + "\n")
    labels = [label for label, _ in VARIANTS] + ["pmerge"]
    write_spec(out, CASES, labels)
    print(f"{len(labels) * len(BUNDLES)} bundles and spec.json in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
