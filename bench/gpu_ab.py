#!/usr/bin/env python3
"""A/B timing of CUDA bundles on the GPU machine, the variants of a case alternating, so
that the drift of the machine between measurements (3–10 % from one bench/gpu_run.py run
to the next on the H200) falls on every variant alike.

    python3 bench/gpu_ab.py SPEC.json OUT.json ROUNDS REPS

SPEC.json: [{"name": ..., "sizes": {...}, "variants": [[label, manifest path relative to
SPEC.json], ...]}, ...].  Per round, each variant's kernel time (PyTorch profiler over REPS
prepared calls) and CUDA-graph replay time (CUDA events over REPS replays); printed and
written: per variant the median and the minimum over the rounds, and the largest
difference of its output from the first variant's on the same seeded inputs (float64
errors: bench/gpu_run.py).  A case may name an SDPA shape, "sdpa": [B, hq, hkv, n, d]: then
PyTorch's scaled_dot_product_attention in bf16 on that shape is timed in the same rounds
(kernel time, all its kernels) and each variant's median is also given as a ratio to it.
CUDA bundles only (an OpenACC bundle must be loaded before torch).

Two further columns, by the environment: COLD=1 times every variant and SDPA also with the
L2 cache evicted before each call (moac.gpu.run.l2_flush; `kernel_cold_*`), which is how a
serving loop meets a layer's K and V; COPY=1 times the first variant also on copies of the
inputs made after everything else of the case is allocated (variant `<first>@copy`), to
tell the kernel from where its inputs happen to lie.  SEPARATE=1 gives every variant inputs
of its own (the same values): variants that share inputs time each other's L2 leftovers
where K and V fit in L2 (a variant whose copies evict first then looks as fast as the one
before it)."""
import json, os, statistics, sys
from pathlib import Path

import gpu_runtime  # noqa: F401  (puts the repository's moac on sys.path)
from moac.gpu import load_bundle
from moac.gpu.run import random_inputs, kernel_time, l2_flush
import torch

def main():
    spec = json.loads(Path(sys.argv[1]).read_text())
    rounds, reps = int(sys.argv[3]), int(sys.argv[4])
    cold = l2_flush(torch) if os.environ.get("COLD") == "1" else None
    copy = os.environ.get("COPY") == "1"
    separate = os.environ.get("SEPARATE") == "1"
    allres = {}
    for case in spec:
        sizes = case["sizes"]
        ks = [(v, load_bundle(Path(sys.argv[1]).parent / m)) for v, m in case["variants"]]
        inputs, _ = random_inputs(ks[0][1], sizes, torch, 0)
        launches, outs, graphs = [], [], []

        def add(v, k, ins=None):
            """Variant v: bundle k prepared on the inputs ins (inputs of its own where None), run
            once, and captured in a graph."""
            own, o = random_inputs(k, sizes, torch, 0)
            L = k.prepare(out=o, **(own if ins is None else ins), **sizes)
            L(); torch.cuda.synchronize()
            outs.append(next(iter(o.values())).clone())
            g = torch.cuda.CUDAGraph(); side = torch.cuda.Stream(); side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                L(); torch.cuda.synchronize()
                with torch.cuda.graph(g, stream=side):
                    L()
            g.replay(); torch.cuda.synchronize()
            launches.append((v, k, L)); graphs.append(g)

        for v, k in ks:
            add(v, k, None if separate else inputs)
        variants = list(case["variants"])
        sdpa = None
        if case.get("sdpa"):
            B, hq, hkv, n, d = case["sdpa"]
            q = torch.randn(B, hq, 1, d, device="cuda", dtype=torch.bfloat16)
            kv = [torch.randn(B, hkv, n, d, device="cuda", dtype=torch.bfloat16) for _ in range(2)]
            sdpa = lambda: torch.nn.functional.scaled_dot_product_attention(q, *kv, enable_gqa=hq != hkv)  # noqa: E731
        if copy:             # the first variant again, on inputs allocated last
            v0, k0 = ks[0]
            add(v0 + "@copy", k0, {n: t.clone() for n, t in inputs.items()})
            variants.append([v0 + "@copy", None])
        res = {v: {"kernel_us": [], "graph_us": [], "kernel_cold_us": []} for v, _ in variants}
        if sdpa is not None:
            res["sdpa_bf16"] = {"kernel_us": [], "kernel_cold_us": []}

        def timed(x, f, match):
            """One round of f's kernel time into x, warm and, with COLD=1, cold."""
            x["kernel_us"].append(kernel_time(f, match, torch, reps) * 1e6)
            if cold is not None:
                x["kernel_cold_us"].append(kernel_time(f, match, torch, reps, flush=cold) * 1e6)

        def summary(x) -> str:
            """x's medians and minima added to it, and its line's kernel figures."""
            x.update(kernel_med=statistics.median(x["kernel_us"]), kernel_min=min(x["kernel_us"]))
            line = f"kernel median {x['kernel_med']:7.1f} µs  min {x['kernel_min']:7.1f}"
            if cold is not None:
                x.update(kernel_cold_med=statistics.median(x["kernel_cold_us"]), kernel_cold_min=min(x["kernel_cold_us"]))
            return line

        for r in range(rounds):
            if sdpa is not None:
                timed(res["sdpa_bf16"], sdpa, lambda name: True)
            for (v, k, L), g in zip(launches, graphs):
                timed(res[v], L, lambda name: k.manifest.function in name)
                e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                for _ in range(3): g.replay()
                e0.record()
                for _ in range(reps): g.replay()
                e1.record(); e1.synchronize()
                res[v]["graph_us"].append(e0.elapsed_time(e1) * 1e3 / reps)
        print(case["name"], sizes)
        if sdpa is not None:
            sdpa_line = summary(res["sdpa_bf16"])
        for i, (v, _) in enumerate(variants):
            d = (outs[i].double() - outs[0].double()).abs().max().item()
            x = res[v]
            line = summary(x)
            x.update(graph_med=statistics.median(x["graph_us"]), diff_vs_first=d)
            line += f"  graph-replay median {x['graph_med']:7.1f} µs  max|Δ| vs {variants[0][0]} {d:.1e}"
            if sdpa is not None:
                x["vs_sdpa_bf16"] = x["kernel_med"] / res["sdpa_bf16"]["kernel_med"]
                line += f"  / SDPA bf16 {x['vs_sdpa_bf16']:.3f}"
            if cold is not None:
                line += f"  cold L2 {x['kernel_cold_med']:7.1f} µs"
                if sdpa is not None:
                    x["cold_vs_sdpa_bf16"] = x["kernel_cold_med"] / res["sdpa_bf16"]["kernel_cold_med"]
                    line += f" ({x['cold_vs_sdpa_bf16']:.3f} of SDPA's)"
            print(f"  {v:12} {line}", flush=True)
        if sdpa is not None:
            x = res["sdpa_bf16"]
            print(f"  {'sdpa_bf16':12} {sdpa_line}" + (f"  cold L2 {x['kernel_cold_med']:7.1f} µs" if cold is not None else ""), flush=True)
        allres[case["name"]] = dict(sizes=sizes, results=res)
    Path(sys.argv[2]).write_text(json.dumps(allres, indent=1) + "\n")

main()
