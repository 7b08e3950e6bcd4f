#!/usr/bin/env python3
"""Probe only: does a bundle's kernel time depend on what the process did just before it?
bench/gpu_run.py times a kernel after its float64 reference and host entry, and there the
fp8 B = 32 kernel took 76 µs where bench/gpu_ab.py's interleaved rounds give 68 µs.

    python3 bench/probes/gpu_state_probe.py OUT.json MANIFEST.json NAME=VALUE ...   # GPU machine

Times the bundle's kernel (profiler, 30 calls, as gpu_run does) and SDPA bf16 on the same
shape: fresh; right after run_one's float64 reference and host entry; then after 1, 3 and
10 s idle; each with the SM clock, power and temperature nvidia-smi reports just before.
Run on 2026-12-05 (docs/benchmarks.md): the same time in every state, clocks unchanged."""
import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import gpu_runtime  # noqa: E402,F401  (puts the repository's moac on sys.path)
from moac.gpu import load_bundle  # noqa: E402
from moac.gpu.run import (decode_reference, dequantised, host_entry, kernel_time, random_inputs,  # noqa: E402
                          sdpa_layout)
import torch  # noqa: E402


def smi() -> str:
    return subprocess.run(["nvidia-smi", "--query-gpu=clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active",
                           "--format=csv,noheader"], capture_output=True, text=True).stdout.strip()


def main() -> int:
    out, man = Path(sys.argv[1]), Path(sys.argv[2])
    sizes = {k: int(v) for k, v in (a.split("=") for a in sys.argv[3:])}
    k = load_bundle(man)
    inputs, outs = random_inputs(k, sizes, torch, 0)
    launch = k.prepare(out=outs, **inputs, **sizes)
    launch()
    torch.cuda.synchronize()
    q = inputs.get("q", inputs.get("Q"))
    K, V = dequantised(inputs["K"], inputs.get("ks"), torch), dequantised(inputs["V"], inputs.get("vs"), torch)
    q4, K4, V4, gqa = sdpa_layout(q, K, V)
    qb, Kb, Vb = q4.bfloat16(), K4.bfloat16(), V4.bfloat16()
    del K, V, K4, V4

    def sdpa():
        return torch.nn.functional.scaled_dot_product_attention(qb, Kb, Vb, enable_gqa=gqa)

    rows = []

    def timed(label):
        s = smi()
        mo = kernel_time(launch, lambda n: k.manifest.function in n, torch, 30) * 1e6
        sd = kernel_time(sdpa, lambda n: "memcpy" not in n.lower(), torch, 30) * 1e6
        rows.append(dict(when=label, smi=s, moac_us=mo, sdpa_us=sd))
        print(f"{label:28} moac {mo:7.1f} µs  sdpa {sd:7.1f} µs  [{s}]", flush=True)

    timed("fresh")
    timed("fresh again")
    K, V = dequantised(inputs["K"], inputs.get("ks"), torch), dequantised(inputs["V"], inputs.get("vs"), torch)
    ref = decode_reference(q, K, V, torch)
    host_entry(k, inputs, k.manifest.sizes(sizes), torch)
    torch.cuda.synchronize()
    del K, V, ref
    timed("after reference + host entry")
    for pause in (1, 3, 10):
        time.sleep(pause)
        timed(f"after {pause} s idle")
    out.write_text(json.dumps(dict(manifest=man.name, sizes=sizes, rows=rows), indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
