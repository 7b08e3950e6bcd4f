#!/usr/bin/env python3
"""Probe only: the tile kernels' cp.async copies with L2 hints, built from this tree's main
and timed side by side with bench/gpu_ab.py on the H200.

    python3 bench/probes/cuda_l2_hint_build.py OUT      # here (nvcc), about a minute
    # on the GPU machine, OUT carried:
    cd bench && python3 gpu_ab.py ../OUT/spec.json $OUT/l2_hint.json 15 30

Variants of moac_cp16 (the 16-byte copy of a K or V granule into a warp's stage), each
main's source edited and built with the manifest's flags:
  l2_256   .L2::256B: the L2 fetches the 256-byte block around each request from HBM
  evict    .L2::cache_hint with an evict-first policy (K and V are read once)
  both     the two together
Both kernels of #14's comparison stream at about 97 % of the H200's HBM peak; these ask
whether the L2's fetch granule or its replacement changes that."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cuda_ab_bundles import BUNDLES as ALL, compile_bundles, sources, write_spec  # noqa: E402

BUNDLES = {b: ALL[b] for b in ("gqab_bf16", "mha_bf16", "gqab_fp8")}
CASES = [("gqab_bf16_B32", "gqab_bf16", {"B": 32, "n": 4096}, [32, 32, 8, 4096, 128]),
         ("mha_bf16_B8", "mha_bf16", {"B": 8, "h": 32, "n": 4096}, [8, 32, 32, 4096, 128]),
         ("gqab_fp8_B32", "gqab_fp8", {"B": 32, "n": 4096}, [32, 32, 8, 4096, 128]),
         ("gqab_bf16_n128k", "gqab_bf16", {"B": 1, "n": 131072}, [1, 32, 8, 131072, 128]),
         ("gqab_bf16_B32_n16k", "gqab_bf16", {"B": 32, "n": 16384}, [32, 32, 8, 16384, 128]),
         ("gqab_bf16_B4_n2k", "gqab_bf16", {"B": 4, "n": 2048}, [4, 32, 8, 2048, 128])]
OLD = 'asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" :: "r"((unsigned)__cvta_generic_to_shared(dst)), "l"(src) : "memory");'
POLICY = 'uint64_t pol; asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(pol));\n    '
NEW = {
    "l2_256": 'asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16;" :: "r"((unsigned)__cvta_generic_to_shared(dst)), "l"(src) : "memory");',
    "evict": POLICY + 'asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2;" :: '
                      '"r"((unsigned)__cvta_generic_to_shared(dst)), "l"(src), "l"(pol) : "memory");',
    "both": POLICY + 'asm volatile("cp.async.cg.shared.global.L2::cache_hint.L2::256B [%0], [%1], 16, %2;" :: '
                     '"r"((unsigned)__cvta_generic_to_shared(dst)), "l"(src), "l"(pol) : "memory");',
}


def main() -> int:
    out = Path(sys.argv[1]).resolve()
    out.mkdir(parents=True, exist_ok=True)
    srcs = sources(BUNDLES, out)
    compile_bundles(BUNDLES, srcs, out, "main")
    for b in BUNDLES:
        main_ = out / f"{b}_main"
        text = main_.with_suffix(".cu").read_text()
        assert text.count(OLD) == 1, "moac_cp16 is not as this probe expects"
        man = json.loads(main_.with_suffix(".json").read_text())
        for label, new in NEW.items():
            (out / f"{b}_{label}.cu").write_text(text.replace(OLD, new))
            subprocess.run(["nvcc", *man["flags"], str(out / f"{b}_{label}.cu"), "-o", str(out / f"{b}_{label}.so")], check=True)
            (out / f"{b}_{label}.json").write_text(json.dumps(man, indent=2) + "\n")
    labels = ["main", *NEW]
    write_spec(out, CASES, labels)
    print(f"{len(labels) * len(BUNDLES)} bundles and spec.json in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
