#!/usr/bin/env python3
"""Probe only: builds the CUDA bundles of the tile kernels' cases from this tree once per
variant of moac's experiment knobs (environment variables such as MOAC_CUDA_TILE_STAGES,
MOAC_TILE_WARPS) and the bench/gpu_ab.py spec that times them side by side.

    python3 bench/probes/cuda_env_ab_build.py OUT [--bundles B,...] LABEL[:VAR=VALUE,...] ...   # here (nvcc)
    # on the GPU machine, OUT carried:
    cd bench && python3 gpu_ab.py ../OUT/spec.json $OUT/env_ab.json 15 30

A label with no settings is the tree as it is; the first variant is the reference of max|Δ|.
The cases are cuda_rev_ab_build.py's, those of the bundles named (all of cuda_ab_bundles' by
default)."""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cuda_ab_bundles import BUNDLES, compile_bundles, sources, write_spec  # noqa: E402
from cuda_rev_ab_build import CASES  # noqa: E402


def main() -> int:
    out, specs = Path(sys.argv[1]).resolve(), sys.argv[2:]
    bundles, cases = BUNDLES, CASES
    if specs[:1] == ["--bundles"]:
        names, specs = specs[1].split(","), specs[2:]
        bundles = {b: BUNDLES[b] for b in names}
        cases = [c for c in CASES if c[1] in bundles]
    if not specs:
        print(__doc__, file=sys.stderr)
        return 2
    out.mkdir(parents=True, exist_ok=True)
    srcs = sources(bundles, out)
    labels = []
    for spec in specs:
        label, _, sets = spec.partition(":")
        env = dict(kv.split("=", 1) for kv in sets.split(",") if kv)
        compile_bundles(bundles, srcs, out, label, env=env)
        labels.append(label)
    write_spec(out, cases, labels)
    print(f"{len(labels) * len(bundles)} bundles and spec.json in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
