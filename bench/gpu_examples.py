#!/usr/bin/env python3
"""Build every example as a GPU bundle for each GPU target (openacc, cuda) with seeded
inputs and the interpreter's float64 results beside it, so that a GPU machine without
moac can check them (bench/gpu_check.py).

    python3 bench/gpu_examples.py OUTDIR [--targets openacc,cuda] [--only NAME,...]   # here, then on the GPU:
    python3 bench/gpu_check.py OUTDIR/examples.json --json results.json
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import moac  # noqa: E402
from moac import commands  # noqa: E402

# run-time sizes per example: extents the vector length (32) and the chunks do not divide
SIZES = {
    "catenate": dict(n=33, m=31, d=129), "decode": dict(n=4099, dk=128, dv=128),
    "decode_mha": dict(B=2, h=3, n=130, dk=33, dv=40), "matmul": dict(n=33, m=129, p=31),
    "omega": dict(n=33, w=129, dk=65), "outer": dict(n=33, m=31), "reshape": dict(n=33, m=31),
    "take_reverse": dict(n=33, m=129), "transpose": dict(n=33, m=5, p=31),
    "attention_forward": dict(m=3, n=130, dk=33, dv=40), "decode_window": dict(n=300, w=129, dk=33, dv=65),
    "decode_gqa": dict(hkv=2, g=3, n=130, dk=33, dv=40), "decode_step": dict(N=300, n=129, dk=33, dv=65),
    "decode_layer": dict(N=300, n=129, dm=257, dk=128),
    "decode_gqa_batched": dict(B=2, hkv=2, g=3, n=1000, dk=128, dv=128),
    "decode_gqa_fp8": dict(B=2, hkv=2, g=3, n=1000, dk=128, dv=128),
    "decode_gqa_fp8_head": dict(B=2, hkv=2, g=3, n=1000, dk=128, dv=128),
    "decode_ragged": dict(B=3, hkv=2, g=3, N=300, dk=33, dv=65),
    "decode_paged": dict(B=3, hkv=2, g=3, P=20, page=7, maxp=5, d=33),
    "decode_paged_step": dict(B=3, hkv=2, g=3, P=20, page=7, maxp=5, d=33),
}

# K/V-dtype variants with the sizes a tensor-core tile needs fixed at compile time (g, dk, dv:
# moac.schedule.plans.tiles), run at sizes the tile's 16-token steps do not divide:
# (name, example, K/V dtype, compile-time sizes, run-time sizes)
TILED = [
    ("decode_gqa_batched_bf16_g8", "decode_gqa_batched", "bf16", dict(hq=16, hkv=2, dk=64, dv=64), dict(B=3, n=37)),
    ("decode_gqa_batched_bf16_g3", "decode_gqa_batched", "bf16", dict(hq=12, hkv=4, dk=128, dv=128), dict(B=2, n=1)),
    ("decode_gqa_batched_bf16_g4", "decode_gqa_batched", "bf16", dict(hq=32, hkv=8, dk=128, dv=128), dict(B=2, n=1027)),
    ("decode_gqa_batched_f16_g4", "decode_gqa_batched", "f16", dict(hq=16, hkv=4, dk=64, dv=64), dict(B=2, n=77)),
    ("decode_gqa_batched_bf16_d256", "decode_gqa_batched", "bf16", dict(hq=8, hkv=2, dk=256, dv=256), dict(B=2, n=300)),
    ("decode_gqa_bf16", "decode_gqa", "bf16", dict(hkv=2, g=4, dk=128, dv=128), dict(n=300)),
    ("decode_ragged_bf16", "decode_ragged", "bf16", dict(hkv=2, g=4, dk=128, dv=128), dict(B=3, N=300)),
    ("decode_paged_bf16", "decode_paged", "bf16", dict(hq=8, hkv=2, d=128), dict(B=3, P=20, page=7, maxp=5)),
    ("decode_gqa_fp8_g4", "decode_gqa_fp8", "f8e4m3", dict(hq=8, hkv=2, dk=128, dv=128), dict(B=2, n=1000)),
    # at least 32 frames and at most 32 partials a frame: on cuda the partials kernel's last gangs fold
    ("decode_gqa_batched_bf16_g4_fold", "decode_gqa_batched", "bf16", dict(hq=16, hkv=4, dk=64, dv=64), dict(B=8, n=77)),
    ("decode_gqa_batched_bf16_g3_fold", "decode_gqa_batched", "bf16", dict(hq=12, hkv=4, dk=128, dv=128), dict(B=8, n=1)),
    ("decode_gqa_fp8_g4_fold", "decode_gqa_fp8", "f8e4m3", dict(hq=8, hkv=2, dk=128, dv=128), dict(B=16, n=300)),
    ("decode_mha_f32_fold", "decode_mha", "f32", dict(dk=64, dv=64), dict(B=8, h=4, n=100)),
    # one head a gang: a tile of one row
    ("decode_mha_bf16_fold", "decode_mha", "bf16", dict(dk=64, dv=64), dict(B=8, h=4, n=100)),
    ("decode_mha_bf16", "decode_mha", "bf16", dict(dk=128, dv=128), dict(B=1, h=2, n=1000)),
    ("decode_bf16", "decode", "bf16", dict(dk=128, dv=128), dict(n=777)),
    # f32 K and V, sizes fixed: no tile on any target, the score partials pass everywhere
    ("decode_gqa_batched_f32_g4", "decode_gqa_batched", "f32", dict(hq=16, hkv=4, dk=128, dv=128), dict(B=2, n=77)),
]


def kv_variant(example: str, kv: str, name: str, out: Path) -> Path:
    """The example with K and V (or the pools Kp, Vp) declared `kv` (the fp8 examples declare theirs)."""
    text = (ROOT / "examples" / f"{example}.moa").read_text(encoding="utf-8")
    for k in ("K", "V", "Kp", "Vp"):
        text = text.replace(f"input {k} : f32", f"input {k} : {kv}")
    path = out / f"{name}.moa"
    path.write_text(text, encoding="utf-8")
    return path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--targets", default="openacc,cuda")
    ap.add_argument("--only", help="these examples only (comma-separated names)")
    a = ap.parse_args()
    out = a.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    cases = []
    runs = [(p, p.stem, {}, SIZES.get(p.stem, {})) for p in sorted((ROOT / "examples").glob("*.moa"))]
    runs += [(kv_variant(ex, kv, name, out), name, fixed, run) for name, ex, kv, fixed, run in TILED]
    for path, name, fixed, run in runs:
        if a.only and name not in a.only.split(","):
            continue
        prog = moac.load(path)
        arrays, sizes = commands.random_inputs(prog, {**fixed, **run}, seed=0)
        ref = prog.evaluate(sizes=sizes, **{k: v.copy() for k, v in arrays.items()})
        np.savez(out / f"{name}_data.npz", **{f"in_{k}": v for k, v in arrays.items()},
                 **{f"ref_{k}": np.asarray(v, dtype=np.float64) for k, v in ref.items()})
        for target in a.targets.split(","):
            art = prog.lower(moac.options.Options.make(target=target, sizes=fixed))
            # moac check's bound, with one rounding allowed where no reduction feeds an output
            tol = commands.tolerance(art.signature.ctype, max(commands.reduction_length(art.onf, sizes), 1))
            suffix = moac.targets.get_target(target).suffix
            bundle = out / f"{name}-{target}{suffix}"
            subprocess.run([sys.executable, "-m", "moac", "compile", str(path), "--target", target,
                            "--offload", "nvptx", "-o", str(bundle)] + [f"-D{k}={v}" for k, v in fixed.items()],
                           check=True, cwd=ROOT)
            cases.append(dict(name=f"{name}-{target}", manifest=bundle.with_suffix(".json").name,
                              data=f"{name}_data.npz", sizes=sizes, tol=tol))
    (out / "examples.json").write_text(json.dumps(cases, indent=2) + "\n", encoding="utf-8")
    print(f"{len(cases)} bundles in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
