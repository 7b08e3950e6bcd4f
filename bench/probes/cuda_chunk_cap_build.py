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
parallel) and built with the manifest's flags."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
import gpu_cases  # noqa: E402
sys.path.insert(0, str(ROOT / "bench" / "probes"))
import cuda_merge_out_edit  # noqa: E402

GQA, D = gpu_cases.GQA, gpu_cases.D
BUNDLES = {"gqab_bf16": ("decode_gqa_batched", "bf16", GQA), "mha_bf16": ("decode_mha", "bf16", D),
           "gqab_fp8": ("decode_gqa_fp8", "f8e4m3", GQA)}
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
    srcs = {b: gpu_cases.source(ex, kv, out) for b, (ex, kv, _) in BUNDLES.items()}
    for label, env in VARIANTS:
        for b, (_, _, fixed) in BUNDLES.items():
            subprocess.run([sys.executable, "-m", "moac", "compile", str(srcs[b]), "--target", "cuda",
                            "--offload", "nvptx", "-o", str(out / f"{b}_{label}.cu")]
                           + [f"-D{k}={v}" for k, v in fixed.items()],
                           cwd=ROOT, check=True, env={**os.environ, **env})
    for b in BUNDLES:        # pmerge: main's source edited, built as moac built main's
        main = out / f"{b}_main"
        (out / f"{b}_pmerge.cu").write_text(cuda_merge_out_edit.edit(main.with_suffix(".cu").read_text()))
        man = json.loads(main.with_suffix(".json").read_text())
        subprocess.run(["nvcc", *man["flags"], str(out / f"{b}_pmerge.cu"), "-o", str(out / f"{b}_pmerge.so")], check=True)
        (out / f"{b}_pmerge.json").write_text(json.dumps(man, indent=2) + "\n")
    labels = [label for label, _ in VARIANTS] + ["pmerge"]
    spec = [{"name": name, "sizes": sizes, "sdpa": sdpa,
             "variants": [[label, f"{b}_{label}.json"] for label in labels]}
            for name, b, sizes, sdpa in CASES]
    (out / "spec.json").write_text(json.dumps(spec, indent=1) + "\n")
    print(f"{len(labels) * len(BUNDLES)} bundles and spec.json in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
