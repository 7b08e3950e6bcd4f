#!/usr/bin/env python3
"""Build the bundles bench/gpu_tensors.py checks moac.gpu's tensor path on (on a machine
with moac, gcc-12-offload-nvptx and nvcc), and their case list.

    python3 bench/gpu_tensor_cases.py out/tensors               # here, then on the GPU machine:
    python3 bench/gpu_tensors.py out/tensors --json tensors.json

decode and decode_gqa, with K and V in f32 and in bf16, each for openacc and cuda, d = 128
fixed at build time; and decode_gqa with every size left to run time, so that the call
binds hkv, n, dk, dv from the shapes and solves g from Q's g·hkv rows.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from gpu_cases import D, GQA, ROOT, source

# name, example, K/V dtype, compile-time sizes, run-time sizes (what -D would give)
CASES = [
    ("decode_f32", "decode", "f32", D, {"n": 4096}),
    ("decode_bf16", "decode", "bf16", D, {"n": 4096}),
    ("gqa_f32", "decode_gqa", "f32", GQA, {"n": 4096}),
    ("gqa_bf16", "decode_gqa", "bf16", GQA, {"n": 4096}),
    ("gqa_f32_free", "decode_gqa", "f32", {}, {"hq": 32, "hkv": 8, "n": 1000, "dk": 128, "dv": 128}),
]
TARGETS = [("-acc", "openacc", ".c"), ("-cuda", "cuda", ".cu")]


def main() -> int:
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "out/tensors").resolve()
    out.mkdir(parents=True, exist_ok=True)
    cases = []
    for name, example, kv, fixed, run in CASES:
        src = source(example, kv, out)
        for suffix, target, ext in TARGETS:
            bundle = out / f"{name}{suffix}{ext}"
            subprocess.run([sys.executable, "-m", "moac", "compile", str(src), "--target", target, "--offload",
                            "nvptx", "-o", str(bundle)] + [f"-D{k}={v}" for k, v in fixed.items()],
                           check=True, cwd=ROOT)
            cases.append({"name": f"{name}{suffix}", "manifest": bundle.with_suffix(".json").name, "sizes": run,
                          "target": target, "flags": []})
    (out / "cases.json").write_text(json.dumps(cases, indent=2) + "\n", encoding="utf-8")
    print(f"{len(cases)} bundles in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
