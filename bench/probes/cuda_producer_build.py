#!/usr/bin/env python3
"""Probe only: builds the batched GQA bf16 bundle (B = 32's kernel) as generated and in the
producer-warp forms of cuda_producer_edit.py, and the bench/gpu_ab.py spec that times them
beside SDPA bf16 at frames of one gang (B = 32, 33, 64 at n = 4096; B = 32 at n = 8192).

    python3 bench/probes/cuda_producer_build.py OUT [FORM ...]     # here (nvcc); forms: prod tma tma3d tma3dw
    # there, OUT carried:
    cd bench && COLD=1 python3 gpu_ab.py ../OUT/spec.json $OUT/producer_ab.json 7 30

Measured on an H100 on 2026-12-06 (docs/benchmarks.md): prod 15-17 % and tma 3-5 % slower
than main; tma3d and tma3dw built, not measured."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cuda_ab_bundles import BUNDLES, compile_bundles, sources  # noqa: E402
from cuda_producer_edit import edit, edit_tma  # noqa: E402

FORMS = {"prod": edit, "tma": edit_tma, "tma3d": lambda t: edit_tma(t, rank3=True),
         "tma3dw": lambda t: edit_tma(t, rank3=True, per_warp=True)}
NVCC = ["nvcc", "-O3", "-arch=sm_90a", "--use_fast_math", "-diag-suppress=177", "-x", "cu", "-Xcompiler", "-fPIC", "-shared"]
SHAPES = ((32, 4096), (33, 4096), (64, 4096), (32, 8192))


def main() -> int:
    if len(sys.argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    out, forms = Path(sys.argv[1]).resolve(), sys.argv[2:] or list(FORMS)
    out.mkdir(parents=True, exist_ok=True)
    bundles = {"gqab_bf16": BUNDLES["gqab_bf16"]}
    compile_bundles(bundles, sources(bundles, out), out, "main")
    main_cu = (out / "gqab_bf16_main.cu").read_text()
    nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    for f in forms:
        cu = out / f"gqab_bf16_{f}.cu"
        cu.write_text(FORMS[f](main_cu))
        subprocess.run([nvcc, *NVCC[1:], "-o", str(cu.with_suffix(".so")), str(cu)], check=True)
        shutil.copy(out / "gqab_bf16_main.json", out / f"gqab_bf16_{f}.json")
    spec = [{"name": f"gqab_bf16_B{B}_n{n}", "sizes": {"B": B, "n": n}, "sdpa": [B, 32, 8, n, 128],
             "variants": [[v, f"gqab_bf16_{v}.json"] for v in ["main", *forms]]} for B, n in SHAPES]
    (out / "spec.json").write_text(json.dumps(spec, indent=1) + "\n")
    print(f"{1 + len(forms)} bundles and spec.json in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
