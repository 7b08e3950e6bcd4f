#!/usr/bin/env python3
"""Probe only: builds the CUDA bundles and the bench/gpu_ab.py spec for the A/B of where the
tile kernels load their query (#14), so that one device command measures main and the
patches on the large cases and on the small ones where the first patch lost on 2026-12-03.

    python3 bench/probes/cuda_q_ab_build.py OUT          # here (nvcc), about 2 minutes
    # on the GPU machine, OUT carried:
    cd bench && python3 gpu_ab.py ../OUT/spec.json $OUT/cuda_q_ab.json 15 30

Variants: main (this checkout's HEAD), after (bench/probes/cuda_q_after_copies.patch: the
query loaded and converted after the first K/V copies), ldfirst
(bench/probes/cuda_q_loads_first.patch: its loads issued before the copies, converted
after) and late (bench/probes/cuda_q_late.patch: after the first copies where the gang's
chunk holds at least 16 steps a warp, before them otherwise).  VARIANTS=main,late builds
only those.  Each is built in a detached worktree of HEAD with its patch applied."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
import gpu_cases  # noqa: E402

GQA = gpu_cases.GQA
D = gpu_cases.D
# bundle: example, K/V dtype, compile-time sizes
BUNDLES = {"gqa_bf16": ("decode_gqa", "bf16", GQA), "gqab_bf16": ("decode_gqa_batched", "bf16", GQA),
           "mha_bf16": ("decode_mha", "bf16", D), "gqab_fp8": ("decode_gqa_fp8", "f8e4m3", GQA)}
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
if os.environ.get("VARIANTS"):
    VARIANTS = [v for v in VARIANTS if v[0] in os.environ["VARIANTS"].split(",")]


def main() -> int:
    out = Path(sys.argv[1]).resolve()
    out.mkdir(parents=True, exist_ok=True)
    srcs = {b: gpu_cases.source(ex, kv, out) for b, (ex, kv, _) in BUNDLES.items()}
    for label, patch in VARIANTS:
        tree = Path(tempfile.mkdtemp(prefix=f"moac_{label}_")) / "tree"
        subprocess.run(["git", "worktree", "add", "--detach", "-q", str(tree), "HEAD"], cwd=ROOT, check=True)
        try:
            if patch:
                subprocess.run(["git", "apply", str(ROOT / "bench" / "probes" / patch)], cwd=tree, check=True)
            for b, (_, _, fixed) in BUNDLES.items():
                cu = out / f"{b}_{label}.cu"
                subprocess.run([sys.executable, "-m", "moac", "compile", str(srcs[b]), "--target", "cuda",
                                "--offload", "nvptx", "-o", str(cu)] + [f"-D{k}={v}" for k, v in fixed.items()],
                               cwd=tree, check=True, env={**os.environ, "PYTHONPATH": str(tree)})
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT, check=True)
            shutil.rmtree(tree.parent, ignore_errors=True)
    spec = [{"name": name, "sizes": sizes, "sdpa": sdpa,
             "variants": [[label, f"{b}_{label}.json"] for label, _ in VARIANTS]}
            for name, b, sizes, sdpa in CASES]
    (out / "spec.json").write_text(json.dumps(spec, indent=1) + "\n")
    print(f"{len(VARIANTS) * len(BUNDLES)} bundles and spec.json in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
