#!/usr/bin/env python3
"""Run moac GPU bundles of the decode family on an NVIDIA GPU, check them against a
float64 reference and PyTorch SDPA, and time them next to SDPA in the same process.

A bundle is what `moac compile --target openacc --offload nvptx -o DIR/NAME.c` writes:
NAME.c, NAME.so (host + PTX), NAME.json (the signature) and DIR/lib/ (the libgomp runtime
the library was built against).  This script needs only numpy and torch and this
repository's tree: the bundles are loaded and called through moac.gpu (DeviceKernel on
torch CUDA tensors, moac/gpu/run.py), which imports no compiler dependency.

    ACC_DEVICE_TYPE=nvidia python3 bench/gpu_run.py DIR/decode.json -D n=4096 ...

The inputs are named q/Q (query), K and V; every leading axis is a batch axis, except
that fewer K/V heads than query heads means GQA (query head h reads KV head h ÷ g).
Beside `python -m moac.gpu` it runs case lists (--cases) and measures the device's copy
bandwidth, the ceiling the KV bandwidth is compared with.  --cold also times every
kernel and SDPA with the L2 cache evicted before each call (moac.gpu.run.l2_flush), as a
serving loop meets a layer's K and V.
"""
from __future__ import annotations

import ctypes
import json
import os
import sys
from pathlib import Path

from gpu_runtime import bundle_runtime  # noqa: E402  (puts the repository's moac on sys.path)

from moac.gpu import load_bundle  # noqa: E402
from moac.gpu.run import l2_flush, parser, run_one, sizes_of  # noqa: E402


def copy_ceiling(torch, nbytes: int = 1 << 30, reps: int = 20) -> float:
    """Device-to-device copy bandwidth (bytes read + written per second), CUDA events."""
    src = torch.empty(nbytes // 4, dtype=torch.float32, device="cuda").normal_()
    dst = torch.empty_like(src)
    for _ in range(3):
        dst.copy_(src)
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        dst.copy_(src)
        b.record()
        b.synchronize()
        best = min(best, a.elapsed_time(b) / 1e3)
    del src, dst
    return 2 * nbytes / best


def main() -> int:
    ap = parser("bench/gpu_run.py", " ".join(__doc__.split("\n\n")[0].split()), bundles="*")
    ap.add_argument("--cases", type=Path, help="a cases.json of bench/gpu_cases.py (bundles with their sizes)")
    a = ap.parse_args()
    sizes = sizes_of(a.defs, ap)
    runs = [(b, dict(sizes), b.stem) for b in a.bundles]
    if a.cases:
        for c in json.loads(a.cases.read_text()):
            runs.append((a.cases.parent / c["manifest"], {**sizes, **c["sizes"]}, c["name"]))
    if not runs:
        ap.error("no bundles")
    gomp = bundle_runtime(runs[0][0].parent / "lib")     # before torch: see gpu_runtime.py
    import torch
    if not torch.cuda.is_available():
        print("torch sees no CUDA device: the bundles run on an NVIDIA GPU", file=sys.stderr)
        return 1
    torch.cuda.init()
    torch.empty(1, device="cuda")          # make torch's context current before libgomp starts
    ndev = -1
    if gomp is not None:
        gomp.acc_get_num_devices.restype = ctypes.c_int
        ndev = gomp.acc_get_num_devices(5)     # acc_device_nvidia
    print(f"GPU: {torch.cuda.get_device_name(0)}; OpenACC nvidia devices: {ndev}; torch {torch.__version__}; "
          f"ACC_DEVICE_TYPE={os.environ.get('ACC_DEVICE_TYPE')}")
    if gomp is not None and ndev < 1:
        print("no OpenACC NVIDIA device visible", file=sys.stderr)
        return 1
    copy_bw = copy_ceiling(torch)
    print(f"device copy ceiling: {copy_bw / 1e12:.2f} TB/s (read + write)")
    flush = l2_flush(torch) if a.cold else None
    results = []
    ok = True
    for b, sz, name in runs:
        try:
            r = run_one(load_bundle(b), sz, a.reps, torch, a.seed, flush, a.rounds)
        except Exception as e:                 # record it and go on with the next bundle
            print(f"  {name}: FAILED: {type(e).__name__}: {e}", flush=True)
            results.append(dict(name=name, ok=False, error=f"{type(e).__name__}: {e}"))
            ok = False
            continue
        r["name"] = name
        if r["err"] is None:                   # no float64 reference: not of the decode family
            print(f"  {name}: not of the decode family (inputs q/Q, K, V), run with python -m moac.gpu instead")
            r.update(ok=False, error="not of the decode family")
            results.append(r)
            ok = False
            continue
        r["copy_bw"] = copy_bw
        r["kv_bw"] = r["kv_bytes"] / r["moac_kernel"] if r["moac_kernel"] else 0.0
        r["share_of_copy"] = r["kv_bw"] / copy_bw
        r["vs_sdpa16_kernel"] = r["moac_kernel"] / r["sdpa16_kernel"] if r["sdpa16_kernel"] else None
        r["vs_sdpa16_wall"] = r["moac_wall"] / r["sdpa16_wall"] if r["sdpa16_wall"] else None
        if r.get("sdpa16_kernel_cold"):
            r["vs_sdpa16_kernel_cold"] = r["moac_kernel_cold"] / r["sdpa16_kernel_cold"]
        results.append(r)
        ok &= r["ok"]                          # written, float64 and host-entry errors, graph replay
        if r.get("graph"):
            print(f"  {name}: CUDA graph replay max err {r['graph']['err']:.1e}, wall {r['graph']['wall'] * 1e6:.1f} µs")
        print(f"  {name}: kernel {r['moac_kernel'] * 1e6:.1f} µs, wall {r['moac_wall'] * 1e6:.1f} µs, "
              f"KV {r['kv_bw'] / 1e12:.2f} TB/s = {r['share_of_copy']:.0%} of copy, SDPA bf16 "
              f"{r['sdpa16_kernel'] * 1e6:.1f} µs, err {r['err']:.1e}"
              + (f"; cold L2 {r['moac_kernel_cold'] * 1e6:.1f} µs against SDPA's {r['sdpa16_kernel_cold'] * 1e6:.1f}"
                 if "vs_sdpa16_kernel_cold" in r else ""), flush=True)
    print()
    print(f"{'bundle':22} {'sizes':34} {'max err':>9} {'SDPA err':>9} {'moac kern µs':>12} {'moac wall µs':>12} "
          f"{'KV GB/s':>8} {'SDPA32 µs':>9} {'SDPA16 µs':>9}")
    for r in results:
        if "error" in r:
            continue
        sz = " ".join(f"{k}={v}" for k, v in r["sizes"].items())
        gbs = r["min_bytes"] / r["moac_kernel"] / 1e9 if r["moac_kernel"] else float("nan")
        print(f"{r['name']:22} {sz:34} {r['err']:9.2e} {r['sdpa_err']:9.2e} {r['moac_kernel'] * 1e6:12.1f} "
              f"{r['moac_wall'] * 1e6:12.1f} {gbs:8.0f} {r['sdpa32_kernel'] * 1e6:9.1f} {r['sdpa16_kernel'] * 1e6:9.1f}")
    for r in results:
        if "error" in r:
            continue
        print(f"  {r['name']} host entry (host arrays, host_data): max err {r['host_err']:.2e}")
        print(f"  {r['name']} kernels: " + ", ".join(f"{k} {v:.1f} µs" for k, v in r["moac_kernels_us"].items()))
    if a.json:
        a.json.write_text(json.dumps(results, indent=2, default=str) + "\n")
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
