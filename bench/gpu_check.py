#!/usr/bin/env python3
"""Check the bundles of bench/gpu_examples.py on a GPU machine: call each one's host
entry on the seeded inputs and compare every result with the interpreter's float64
values (max |error| ≤ tol · max |reference|, NaNs and infinities in the same places).
Needs numpy only (and the bundles' lib/ for the OpenACC ones).

    ACC_DEVICE_TYPE=nvidia python3 bench/gpu_check.py OUTDIR/examples.json --json results.json
"""
from __future__ import annotations

import argparse
import ctypes
import json
import sys
from pathlib import Path

import numpy as np

from gpu_runtime import bundle_runtime

CT = {"f32": np.float32, "f64": np.float64, "bf16": np.uint16, "f16": np.float16}
ROUNDING = {"bf16": 2.0 ** -8, "f16": 2.0 ** -11}    # a 16-bit output's half ulp, added to the bound


def widened(a: np.ndarray, dtype: str) -> np.ndarray:
    """An output as float64: bf16 bit patterns widened exactly (the high half of an f32)."""
    if dtype == "bf16":
        return (a.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    return a.astype(np.float64)


def run(case: dict, root: Path) -> dict:
    man = json.loads((root / case["manifest"]).read_text())
    data = np.load(root / case["data"])
    lib = ctypes.CDLL(str((root / case["manifest"]).with_suffix(".so")))
    fn = getattr(lib, man["function"])
    fn.restype = ctypes.c_int
    sizes = {**case["sizes"], **man["fixed"]}
    args, outs, keep = [], {}, []
    for p in man["params"]:
        if p["kind"] == "size":
            args.append(ctypes.c_int64(int(sizes[p["name"]])))
            continue
        if p["kind"] in ("input", "inout"):
            a = np.ascontiguousarray(data[f"in_{p['name']}"]).copy()
        else:
            shape = tuple(int(eval(e, {"__builtins__": {}}, dict(sizes))) for e in p["shape"])
            a = np.full(shape, np.nan, dtype=CT[p["dtype"]])
        if p["kind"] != "input":
            outs[p["name"]] = a
        keep.append(a)                         # the arrays must outlive the call
        args.append(ctypes.c_void_p(a.ctypes.data))
    rc = fn(*args)
    res = dict(name=case["name"], rc=rc, ok=rc == 0, errors={})
    dtype = {p["name"]: p["dtype"] for p in man["params"]}
    for name, got in outs.items():
        ref = data[f"ref_{name}"]
        g = widened(got, dtype[name])
        fin = np.isfinite(ref)
        same = np.array_equal(np.isnan(g), np.isnan(ref)) and np.array_equal(g[np.isinf(ref)], ref[np.isinf(ref)])
        scale = float(np.max(np.abs(ref[fin]))) if fin.any() else 1.0
        err = float(np.max(np.abs(g[fin] - ref[fin]))) / scale if fin.any() else 0.0
        res["errors"][name] = err
        res["ok"] = bool(res["ok"] and same and err <= case["tol"] + ROUNDING.get(dtype[name], 0.0))
    return res


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("examples", type=Path)
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    root = a.examples.parent.resolve()
    bundle_runtime(root / "lib")                         # OpenACC bundles: their libgomp
    results = []
    for case in json.loads(a.examples.read_text()):
        r = run(case, root)
        results.append(r)
        errs = ", ".join(f"{k} {v:.1e}" for k, v in r["errors"].items())
        print(f"{'ok  ' if r['ok'] else 'FAIL'} {r['name']:32} rc={r['rc']} rel. err {errs} (tol {case['tol']:.1e})",
              flush=True)
    if a.json:
        a.json.write_text(json.dumps(results, indent=2) + "\n")
    bad = [r["name"] for r in results if not r["ok"]]
    print("PASS" if not bad else f"FAIL: {', '.join(bad)}")
    return 0 if not bad else 1


if __name__ == "__main__":
    sys.exit(main())
