#!/usr/bin/env python3
"""Build the GPU bundles of the decode benchmark (on a machine with moac and
gcc-12-offload-nvptx) and the case list the GPU runner reads.

    python3 bench/gpu_cases.py OUTDIR [--sweep | --fp8] [-- FLAGS]   # then, on the GPU machine:
    python3 bench/gpu_run.py --cases OUTDIR/cases.json --json results.json

Every case of the issue's table (d = 128), each built for openacc and cuda with the
default options and with 64-bit indices, GQA also with `--no-share-kv`, and a long-context
batched case (B = 32, n = 16384) with the default options only; `--sweep` builds
the tokens-in-flight variants instead.  A bf16 case is the example with K and V
declared bf16; the fp8 case is examples/decode_gqa_fp8.moa (K and V f8e4m3 with f32
scales per token and head).  `--fp8` builds only the 8-bit comparison: the batched GQA
step at B = 32, hq = 32, hkv = 8, n = 4096, d = 128 with a bf16 cache and with an f8e4m3
one, each for openacc and cuda with the default options.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
D = {"dk": 128, "dv": 128}
GQA = {**D, "hq": 32, "hkv": 8}

# name, example, K/V dtype, compile-time sizes, run-time sizes
CASES = [
    ("mha_f32", "decode_mha", "f32", D, {"B": 8, "h": 32, "n": 4096}),
    ("mha_bf16", "decode_mha", "bf16", D, {"B": 8, "h": 32, "n": 4096}),
    ("gqa_bf16_n32k", "decode_gqa", "bf16", GQA, {"n": 32768}),
    ("gqab_bf16_B32", "decode_gqa_batched", "bf16", GQA, {"B": 32, "n": 4096}),
    ("gqab_bf16_n128k", "decode_gqa_batched", "bf16", GQA, {"B": 1, "n": 131072}),
    ("gqab_fp8_B32", "decode_gqa_fp8", "f8e4m3", GQA, {"B": 32, "n": 4096}),
    ("decode_f32_n256k", "decode", "f32", D, {"n": 262144}),
    ("gqab_bf16_B32_n16k", "decode_gqa_batched", "bf16", GQA, {"B": 32, "n": 16384}),
]
# cases beyond the issues' table, built with the default options only: long context at a
# batch whose frames alone fill the GPU (the tile kernels' chunk ceiling, 2026-12-05)
DEFAULTS_ONLY = {"gqab_bf16_B32_n16k"}
# suffix, target, flags: the defaults (32-bit kernels where the buffers fit, GQA heads of a
# KV head in one gang) and, beside them, the 64-bit kernels and the per-query-head mapping
DEFAULT_VARIANTS = [("", "openacc", []), ("-cuda", "cuda", [])]     # the default options only, both targets
VARIANTS = [("", "openacc", []), ("-acc64", "openacc", ["--index-bits", "64"]),
            ("-cuda", "cuda", []), ("-cuda64", "cuda", ["--index-bits", "64"])]
GQA_VARIANTS = [("-noshare", "openacc", ["--no-share-kv"]), ("-cuda-noshare", "cuda", ["--no-share-kv"])]

# --sweep: tokens in flight per warp (score pass --unroll U, weighted sum --unroll-wsum T)
FP8 = ("gqab_bf16_B32", "gqab_fp8_B32")         # --fp8: the cases it builds, with these variants
FP8_VARIANTS = DEFAULT_VARIANTS
SWEEP = {
    "mha_bf16": [(f"-cuda-u{u}t{t}", "cuda", ["--unroll", str(u), "--unroll-wsum", str(t)])
                 for u in (4, 8, 16) for t in (1, 2)],
    "gqa_bf16_n32k": [(f"-cuda-u{u}t{t}", "cuda", ["--unroll", str(u), "--unroll-wsum", str(t)])
                      for u in (2, 4, 8) for t in (1, 2)],
    "gqab_bf16_B32": [(f"-cuda-u{u}t{t}", "cuda", ["--unroll", str(u), "--unroll-wsum", str(t)])
                      for u in (2, 4, 8) for t in (1, 2)],
    "decode_f32_n256k": [(f"-cuda-u{u}t{t}", "cuda", ["--unroll", str(u), "--unroll-wsum", str(t)])
                         for u in (4, 8) for t in (1, 2)],
}


def source(example: str, kv: str, out: Path) -> Path:
    text = (ROOT / "examples" / f"{example}.moa").read_text(encoding="utf-8")
    if kv not in ("f32", "f8e4m3"):             # decode_gqa_fp8 declares its 8-bit K and V itself
        text = text.replace("input K : f32", f"input K : {kv}").replace("input V : f32", f"input V : {kv}")
    path = out / f"{example}_{kv}.moa"
    path.write_text(text, encoding="utf-8")
    return path


def main() -> int:
    argv = sys.argv[1:]
    extra = []
    if "--" in argv:                          # flags after -- go to every bundle (e.g. --index-bits 32)
        argv, extra = argv[:argv.index("--")], argv[argv.index("--") + 1:]
    args = [a for a in argv if a not in ("--sweep", "--fp8")]
    sweep, fp8 = "--sweep" in argv, "--fp8" in argv
    if sweep and fp8:
        print("gpu_cases.py: --sweep and --fp8 are alternatives", file=sys.stderr)
        return 2
    out = Path(args[0] if args else "gpu").resolve()
    out.mkdir(parents=True, exist_ok=True)
    cases = []
    for name, example, kv, fixed, run in CASES:
        if fp8 and name not in FP8:
            continue
        src = source(example, kv, out)
        variants = FP8_VARIANTS if fp8 else SWEEP.get(name, []) if sweep else \
            DEFAULT_VARIANTS if name in DEFAULTS_ONLY else VARIANTS + (GQA_VARIANTS if "hq" in fixed else [])
        for suffix, target, flags in variants:
            bundle = out / f"{name}{suffix}{'.cu' if target == 'cuda' else '.c'}"
            argv = [sys.executable, "-m", "moac", "compile", str(src), "--target", target, "--offload", "nvptx",
                    "-o", str(bundle)] + [f"-D{k}={v}" for k, v in fixed.items()] + flags + extra
            subprocess.run(argv, check=True, cwd=ROOT)
            cases.append({"name": f"{name}{suffix}", "manifest": bundle.with_suffix(".json").name, "sizes": run,
                          "target": target, "flags": flags + extra})
    (out / "cases.json").write_text(json.dumps(cases, indent=2) + "\n", encoding="utf-8")
    print(f"{len(cases)} bundles in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
