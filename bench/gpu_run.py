#!/usr/bin/env python3
"""Run moac GPU bundles of the decode family on an NVIDIA GPU, check them against a
float64 reference and PyTorch SDPA, and time them next to SDPA in the same process.

A bundle is what `moac compile --target openacc --offload nvptx -o DIR/NAME.c` writes:
NAME.c, NAME.so (host + PTX), NAME.json (the signature) and DIR/lib/ (the libgomp runtime
the library was built against).  This script needs only numpy and torch, not moac.

    ACC_DEVICE_TYPE=nvidia python3 bench/gpu_run.py DIR/decode.json -D n=4096 ...

The inputs are named q/Q (query), K and V; every leading axis is a batch axis, except
that fewer K/V heads than query heads means GQA (query head h reads KV head h ÷ g).
8-bit K and V (f8e4m3, f8e5m2, i8) may come with dequantisation scales ks and vs (per
token and head ⟨… n⟩, per head ⟨…⟩ or per tensor ⟨⟩; the real K is K × ks): the runner
makes the 8-bit values from random f32 on the GPU (torch's `.to(torch.float8_e4m3fn)`,
which saturates; int8 by rounding 32·x), the scales uniform in [0.5, 1.5], and the
references and SDPA use K and V dequantised in float64.  An output declared bf16 or f16
is compared with its rounding (half an ulp) added to the bound.
"""
from __future__ import annotations

import argparse
import ctypes
import json
import math
import os
import statistics
import sys
import time
from pathlib import Path

from gpu_runtime import bundle_runtime


def shape_of(exprs, sizes):
    return tuple(int(eval(e, {"__builtins__": {}}, dict(sizes))) for e in exprs)  # names and ints only


def run_bundle(manifest_path: Path, sizes: dict, reps: int, torch, np) -> dict:
    man = json.loads(manifest_path.read_text())
    sizes = {**sizes, **man["fixed"]}
    lib = ctypes.CDLL(str(manifest_path.with_suffix(".so").resolve()))
    fn = getattr(lib, man["function"] + "_device")
    fn.restype = ctypes.c_int
    ws_fn = getattr(lib, man["function"] + "_workspace_bytes")
    ws_fn.restype = ctypes.c_size_t
    size_params = [p for p in man["params"] if p["kind"] == "size"]
    ws_fn.argtypes = [ctypes.c_int64] * len(size_params)
    g = torch.Generator(device="cuda").manual_seed(0)
    tensors, args = {}, []
    dt = {p["name"]: p.get("dtype", "f32") for p in man["params"] if p["kind"] != "size"}
    for p in man["params"]:
        if p["kind"] == "size":
            continue
        shape = shape_of(p["shape"], sizes)
        tdtype = {"f32": torch.float32, "f64": torch.float64, "bf16": torch.bfloat16, "f16": torch.float16,
                  "f8e4m3": torch.float8_e4m3fn, "f8e5m2": torch.float8_e5m2, "i8": torch.int8}[dt[p["name"]]]
        if p["kind"] in ("input", "inout"):
            t = torch.randn(shape, device="cuda", dtype=torch.float32, generator=g)
            if p["name"] in ("ks", "vs"):                       # dequantisation scales
                t = 0.5 + torch.rand(shape, device="cuda", dtype=torch.float32, generator=g)
            t = (32 * t).round().clamp(-128, 127).to(tdtype) if tdtype == torch.int8 else t.to(tdtype)
        else:
            t = torch.full(shape, float("nan"), device="cuda", dtype=tdtype)   # poisoned
        tensors[p["name"]] = t
    size_vals = [int(sizes[p["name"]]) for p in size_params]
    ws_bytes = ws_fn(*size_vals)
    ws = torch.empty(max(ws_bytes, 1), dtype=torch.uint8, device="cuda")
    for p in man["params"]:
        if p["kind"] == "size":
            args.append(ctypes.c_int64(int(sizes[p["name"]])))
        else:
            args.append(ctypes.c_void_p(tensors[p["name"]].data_ptr()))
    args.append(ctypes.c_void_p(ws.data_ptr()))
    stream_arg = len(args)
    if man.get("stream"):                      # CUDA bundles: PyTorch's current stream
        args.append(ctypes.c_void_p(torch.cuda.current_stream().cuda_stream))

    def call():
        rc = fn(*args)
        if rc != 0:
            raise RuntimeError(f"{man['function']}_device returned {rc}")

    torch.cuda.synchronize()
    call()
    torch.cuda.synchronize()
    q = tensors.get("q", tensors.get("Q"))
    Kq, Vq = tensors["K"], tensors["V"]

    def real(x, scale):
        """K or V as float64, times its dequantisation scale where there is one."""
        x = x.to(torch.float64)
        if scale is None:
            return x
        return x * scale.to(torch.float64).reshape(tuple(scale.shape) + (1,) * (x.dim() - scale.dim()))
    K, V = real(Kq, tensors.get("ks")), real(Vq, tensors.get("vs"))
    out_name = [p["name"] for p in man["params"] if p["kind"] == "output"][0]
    out = tensors[out_name]
    rounding = {"bf16": 2.0 ** -8, "f16": 2.0 ** -11}.get(dt[out_name], 0.0)   # a 16-bit output's half ulp
    dk = q.shape[-1]
    if q.shape[:-1] != K.shape[:-2]:            # GQA: query head h reads KV head h ÷ (hq/hkv)
        grp = q.shape[-2] // K.shape[-3]
        Kf, Vf = K.repeat_interleave(grp, dim=-3), V.repeat_interleave(grp, dim=-3)
    else:
        Kf, Vf = K, V
    # float64 reference, straight from the formula
    s = torch.einsum("...j,...lj->...l", q.double(), Kf.double()) / math.sqrt(dk)
    ref = torch.einsum("...l,...ld->...d", torch.softmax(s, dim=-1), Vf.double())
    err = (out.double() - ref).abs().max().item()
    tol = 1e-4 + rounding * ref.abs().max().item()
    written = bool(torch.isfinite(out).all().item())
    # the host entry: host arrays in, one data region, the device entry through host_data
    host = getattr(lib, man["function"])
    host.restype = ctypes.c_int
    cpu = {name: t.cpu().contiguous() for name, t in tensors.items()}
    for name, t in cpu.items():
        if name == out_name:
            t.fill_(float("nan"))
    hargs = [ctypes.c_int64(int(sizes[p["name"]])) if p["kind"] == "size" else ctypes.c_void_p(cpu[p["name"]].data_ptr())
             for p in man["params"]]
    if host(*hargs) != 0:
        raise RuntimeError(f"{man['function']} returned an error")
    host_err = (cpu[out_name].double() - ref.cpu()).abs().max().item()
    # SDPA wants (batch, heads, seq, dim)
    gqa = q.shape[:-1] != K.shape[:-2]
    if gqa:                                     # SDPA layout (batch, heads, seq, dim), enable_gqa
        nb = int(np.prod(q.shape[:-2])) if q.dim() > 2 else 1
        q4 = q.reshape(nb, q.shape[-2], 1, dk)
        K4 = K.reshape(nb, K.shape[-3], K.shape[-2], dk)
        V4 = V.reshape(nb, V.shape[-3], V.shape[-2], V.shape[-1])
    else:
        lead = q.shape[:-1]
        nb = int(np.prod(lead)) if lead else 1
        q4 = q.reshape(nb, 1, 1, dk)
        K4 = K.reshape(nb, 1, K.shape[-2], dk)
        V4 = V.reshape(nb, 1, V.shape[-2], V.shape[-1])
    q4f, K4f, V4f = q4.float(), K4.float(), V4.float()

    def sdpa32():
        return torch.nn.functional.scaled_dot_product_attention(q4f, K4f, V4f, enable_gqa=gqa)
    qb, Kb, Vb = q4.bfloat16(), K4.bfloat16(), V4.bfloat16()

    def sdpa16():
        return torch.nn.functional.scaled_dot_product_attention(qb, Kb, Vb, enable_gqa=gqa)
    sdpa_err = (sdpa32().reshape(out.shape).double() - ref).abs().max().item()

    def wall(f):
        for _ in range(3):
            f()
        torch.cuda.synchronize()
        ts = []
        for _ in range(reps):
            t0 = time.perf_counter()
            f()
            torch.cuda.synchronize()
            ts.append(time.perf_counter() - t0)
        return statistics.median(ts)

    def kernel_time(f, match):
        from torch.profiler import ProfilerActivity, profile
        for _ in range(3):
            f()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(reps):
                f()
            torch.cuda.synchronize()
        total, parts = 0.0, {}
        for ev in prof.key_averages():
            if ev.device_type is not None and "CUDA" in str(ev.device_type) and match(ev.key):
                t = ev.device_time_total if hasattr(ev, "device_time_total") else ev.cuda_time_total
                total += t
                parts[ev.key] = t / reps
        kernel_parts.update(parts)
        return total / reps / 1e6

    graph = None
    if man.get("stream"):
        # CUDA-graph capture: the device entry only launches on the stream it is given
        out.fill_(float("nan"))
        g_ = torch.cuda.CUDAGraph()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            args[stream_arg] = ctypes.c_void_p(side.cuda_stream)
            call()                             # warm-up on the capture stream
            torch.cuda.synchronize()
            out.fill_(float("nan"))
            with torch.cuda.graph(g_, stream=side):
                call()
        args[stream_arg] = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
        out.fill_(float("nan"))
        g_.replay()
        torch.cuda.synchronize()
        graph = dict(err=(out.double() - ref).abs().max().item(), wall=wall(g_.replay))
    kernel_parts: dict = {}
    moac_wall = wall(call)
    moac_kern = kernel_time(call, lambda k: man["function"] in k)
    moac_parts = dict(kernel_parts)
    t32 = kernel_time(sdpa32, lambda k: "memcpy" not in k.lower())
    t16 = kernel_time(sdpa16, lambda k: "memcpy" not in k.lower())
    w32, w16 = wall(sdpa32), wall(sdpa16)
    kv_bytes = sum(t.numel() * t.element_size() for name, t in tensors.items() if name in ("K", "V", "ks", "vs"))
    min_bytes = kv_bytes + q.numel() * q.element_size() + out.numel() * out.element_size()
    return dict(name=manifest_path.stem, sizes=sizes, err=err, tol=tol, host_err=host_err, written=written,
                sdpa_err=sdpa_err, kv_dtype=dt["K"], out_dtype=dt[out_name],
                moac_wall=moac_wall, moac_kernel=moac_kern, sdpa32_kernel=t32, sdpa16_kernel=t16,
                sdpa32_wall=w32, sdpa16_wall=w16, kv_bytes=kv_bytes, min_bytes=min_bytes,
                moac_kernels_us=moac_parts, graph=graph)


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
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("bundles", nargs="*", type=Path, help="NAME.json manifests")
    ap.add_argument("--cases", type=Path, help="a cases.json of bench/gpu_cases.py (bundles with their sizes)")
    ap.add_argument("-D", dest="defs", action="append", default=[], metavar="NAME=VALUE")
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--json", type=Path, help="also write the results here")
    a = ap.parse_args()
    sizes = {}
    for d in a.defs:
        k, _, v = d.partition("=")
        sizes[k] = int(v)
    runs = [(b, dict(sizes), b.stem) for b in a.bundles]
    if a.cases:
        for c in json.loads(a.cases.read_text()):
            runs.append((a.cases.parent / c["manifest"], {**sizes, **c["sizes"]}, c["name"]))
    if not runs:
        ap.error("no bundles")
    gomp = bundle_runtime(runs[0][0].parent / "lib")     # before torch: see gpu_runtime.py
    import numpy as np
    import torch
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
    results = []
    ok = True
    for b, sz, name in runs:
        try:
            r = run_bundle(b, sz, a.reps, torch, np)
        except Exception as e:                 # record it and go on with the next bundle
            print(f"  {name}: FAILED: {type(e).__name__}: {e}", flush=True)
            results.append(dict(name=name, ok=False, error=f"{type(e).__name__}: {e}"))
            ok = False
            continue
        r["name"] = name
        r["copy_bw"] = copy_bw
        r["kv_bw"] = r["kv_bytes"] / r["moac_kernel"] if r["moac_kernel"] else 0.0
        r["share_of_copy"] = r["kv_bw"] / copy_bw
        r["vs_sdpa16_kernel"] = r["moac_kernel"] / r["sdpa16_kernel"] if r["sdpa16_kernel"] else None
        r["vs_sdpa16_wall"] = r["moac_wall"] / r["sdpa16_wall"] if r["sdpa16_wall"] else None
        r["ok"] = bool(r["written"] and r["err"] < r["tol"] and r["host_err"] < r["tol"])
        results.append(r)
        ok &= r["ok"]
        if r.get("graph"):
            r["ok"] = bool(r["ok"] and r["graph"]["err"] < r["tol"])
            print(f"  {name}: CUDA graph replay max err {r['graph']['err']:.1e}, wall {r['graph']['wall'] * 1e6:.1f} µs")
        print(f"  {name}: kernel {r['moac_kernel'] * 1e6:.1f} µs, wall {r['moac_wall'] * 1e6:.1f} µs, "
              f"KV {r['kv_bw'] / 1e12:.2f} TB/s = {r['share_of_copy']:.0%} of copy, SDPA bf16 "
              f"{r['sdpa16_kernel'] * 1e6:.1f} µs, err {r['err']:.1e}", flush=True)
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
