"""Probe: where the host-side cost of one OpenACC call goes (wall time minus kernel time).

    ACC_DEVICE_TYPE=nvidia python3 bench/probes/acc_call_cost.py OUT.json MANIFEST.json:k=v,k=v …

For each bundle (sizes after the colon), medians of REPS calls, each followed by a device
synchronisation (all the wall times before any profiling: once the profiler has run in a
process, every libgomp launch in it is slower; a first version of this probe measured
raw calls 4-5x slower so):
  kernel_us  the PyTorch profiler's time of all the bundle's kernels per call
  raw_us     the device entry called through ctypes with inputs, outputs and workspace
             allocated once (libgomp's launches and waits, nothing of moac.gpu)
  launch_us  a prepared moac.gpu Launch (adds the workspace from torch's allocator, the
             stream synchronisation before libgomp's queue, the return-code check)
  call_us    kernel(**inputs, out=…) (adds the argument checks and the size binding)
  regions    the number of parallel regions libgomp launched per call (from the profiler)
With MOAC_PROBE_HEAT=N, N matrix products of 4096² floats keep the GPU busy before each
measurement (its clocks up: an idle H200 sat at 345 MHz between calls).
"""
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import gpu_runtime  # noqa: F401,E402
from moac.gpu import load_bundle  # noqa: E402
from moac.gpu.run import kernel_time, random_inputs  # noqa: E402

REPS = 50
HEAT = int(__import__("os").environ.get("MOAC_PROBE_HEAT", "0"))   # matmuls before each measurement
out_path = Path(sys.argv[1])
specs = []
for arg in sys.argv[2:]:
    man, _, sz = arg.partition(":")
    sizes = {k: int(v) for k, v in (p.split("=") for p in sz.split(",") if p)}
    specs.append((load_bundle(Path(man)), sizes, Path(man).stem))     # libgomp before torch
import torch  # noqa: E402


def med(f) -> float:
    if HEAT:                     # the GPU busy for a while first (clocks up), as in a benchmark's run
        a = torch.randn(4096, 4096, device="cuda")
        for _ in range(HEAT):
            a = a @ a
            a /= a.norm()
    for _ in range(5):
        f()
    torch.cuda.synchronize()
    ts = []
    for _ in range(REPS):
        t0 = time.perf_counter()
        f()
        torch.cuda.synchronize()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts) * 1e6


results, launches = [], []
for k, sizes, name in specs:
    sizes = {s: v for s, v in sizes.items() if s in k.manifest.size_params}
    inputs, outs = random_inputs(k, sizes, torch, 0)
    launch = k.prepare(out=outs, **inputs, **sizes)
    launch()
    ws = k._workspace(torch, launch.device, launch.ws_bytes)
    wsp = None if ws is None else ws.data_ptr()
    raw = lambda: k._fn(*launch.args, wsp)             # noqa: E731
    r = {"bundle": name, "sizes": sizes,
         "raw_us": med(raw), "launch_us": med(launch), "call_us": med(lambda: k(out=outs, **inputs, **sizes))}
    results.append(r)
    launches.append(launch)
for (k, _, _), r, launch in zip(specs, results, launches):     # the profiler last: once it has run, every launch is slower
    parts: dict = {}
    r["kernel_us"] = kernel_time(launch, lambda n: k.manifest.function in n, torch, REPS, parts) * 1e6
    r["kernels"], r["regions"] = parts, len(parts)
for r in results:
    print(json.dumps(r), flush=True)
out_path.write_text(json.dumps(results, indent=1) + "\n")
