#!/usr/bin/env python3
"""Ragged and paged decode against the dense batched kernel on an NVIDIA GPU: the
acceptance of the serving-decode issue (B = 32 sequences, 32 query heads on 8 KV heads,
d = 128, bf16 K/V, lengths mixed around a mean of 4096).

    python3 bench/gpu_ragged.py build OUTDIR          # here: moac and gcc-12-offload-nvptx / nvcc
    ACC_DEVICE_TYPE=nvidia python3 bench/gpu_ragged.py run OUTDIR --json results.json   # on the GPU

`build` compiles, for openacc and cuda, examples/decode_gqa_batched.moa (dense, every
sequence n = 4096 tokens), examples/decode_ragged.moa (capacity N = 8192 per sequence,
`lens` tokens valid) and examples/decode_paged.moa (pages of 16 tokens from one pool, a
page table), each with K and V declared bf16.  `run` gives the ragged and paged kernels
the same 32 lengths — 1024 … 7168 in even steps, shuffled, mean 4096 — and the dense
kernel n = 4096, times each (kernel time from the profiler, median of --reps) with the KV
bytes it must read (Σ lens · hkv · d · 2 · 2 bytes), checks each sequence against PyTorch
SDPA in float32 on that sequence's rows, and reports each kernel's KV bandwidth as a share
of the dense kernel's on the same target.  `--targets cuda` (both commands) builds or runs
one target only.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIXED = {"hq": 32, "hkv": 8}
B, HQ, HKV, D, N, PAGE, NDENSE = 32, 32, 8, 128, 8192, 16, 4096
CASES = [("dense", "decode_gqa_batched", {**FIXED, "dk": D, "dv": D}),
         ("ragged", "decode_ragged", {**FIXED, "dk": D, "dv": D}),
         ("paged", "decode_paged", {**FIXED, "d": D, "page": PAGE})]
TARGETS = ("openacc", "cuda")


def build(out: Path, paged_flags: list | None = None, targets: tuple = TARGETS) -> int:
    out.mkdir(parents=True, exist_ok=True)
    for name, example, fixed in CASES:
        text = (ROOT / "examples" / f"{example}.moa").read_text(encoding="utf-8")
        for a in ("K", "V", "Kp", "Vp"):
            text = text.replace(f"input {a} : f32", f"input {a} : bf16")
        src = out / f"{name}.moa"
        src.write_text(text, encoding="utf-8")
        for target in targets:
            bundle = out / f"{name}-{target}{'.cu' if target == 'cuda' else '.c'}"
            subprocess.run([sys.executable, "-m", "moac", "compile", str(src), "--target", target, "--offload",
                            "nvptx", "-o", str(bundle)] + [f"-D{k}={v}" for k, v in fixed.items()]
                           + (paged_flags or [] if name == "paged" and target == "cuda" else []),
                           check=True, cwd=ROOT)
    print(f"{len(CASES) * len(targets)} bundles in {out}")
    return 0


def lengths(torch):
    g = torch.Generator().manual_seed(0)
    steps = torch.linspace(1024, 7168, B).round().to(torch.int32)
    return steps[torch.randperm(B, generator=g)]


def run(out: Path, reps: int, json_path: Path | None, probe_dir: Path | None = None,
        targets: tuple = TARGETS) -> int:
    sys.path.insert(0, str(ROOT / "bench"))
    from gpu_runtime import bundle_runtime
    gomp = bundle_runtime(out / "lib")
    import torch
    from moac.gpu import load_bundle
    from moac.gpu.run import kernel_time
    torch.cuda.init()
    torch.empty(1, device="cuda")
    dev = "cuda"
    print(f"GPU: {torch.cuda.get_device_name(0)}; torch {torch.__version__}; OpenACC runtime "
          f"{'loaded' if gomp is not None else 'absent'}")
    gen = torch.Generator(device=dev).manual_seed(1)
    lens = lengths(torch)
    total = int(lens.sum())
    print(f"lengths: mean {total / B:.0f}, min {int(lens.min())}, max {int(lens.max())}")
    Q = torch.randn(B, HQ, D, device=dev, generator=gen)
    Kd = torch.randn(B, HKV, NDENSE, D, device=dev, generator=gen).bfloat16()
    Vd = torch.randn(B, HKV, NDENSE, D, device=dev, generator=gen).bfloat16()
    K = torch.randn(B, HKV, N, D, device=dev, generator=gen).bfloat16()
    V = torch.randn(B, HKV, N, D, device=dev, generator=gen).bfloat16()
    maxp = N // PAGE
    P = B * maxp
    table = torch.randperm(P, device=dev, generator=gen).reshape(B, maxp).to(torch.int32)
    Kp = torch.empty(P, PAGE, HKV, D, device=dev, dtype=torch.bfloat16)
    Vp = torch.empty_like(Kp)
    for b in range(B):               # the paged pool holds the ragged cache's tokens, page by page
        Kp[table[b].long()] = K[b].permute(1, 0, 2).reshape(maxp, PAGE, HKV, D)
        Vp[table[b].long()] = V[b].permute(1, 0, 2).reshape(maxp, PAGE, HKV, D)
    lens_d = lens.to(dev)
    inputs = {"dense": dict(Q=Q, K=Kd, V=Vd), "ragged": dict(Q=Q, K=K, V=V, lens=lens_d),
              "paged": dict(Q=Q, Kp=Kp, Vp=Vp, table=table, lens=lens_d)}
    def kv(tokens: int) -> int:                      # bf16 K and V rows of these tokens, every KV head
        return tokens * HKV * D * 2 * 2
    kv_bytes = {"dense": kv(B * NDENSE), "ragged": kv(total), "paged": kv(total)}

    def timed(kern, launch, nbytes: int) -> tuple:
        """(kernel seconds, bytes per second, µs per kernel, the kernels as text)."""
        parts: dict = {}
        t = kernel_time(launch, lambda k, f=kern.manifest.function: f in k, torch, reps, parts)
        return t, nbytes / t, parts, ", ".join(f"{k.split('_', 2)[-1]} {v:.0f}" for k, v in parts.items())

    def reference(name, ln=lens):
        sdpa = torch.nn.functional.scaled_dot_product_attention
        ref = torch.zeros(B, HQ, D, device=dev)            # an empty sequence's result is 0
        for b in range(B):
            n = NDENSE if name == "dense" else int(ln[b])
            if n == 0:
                continue
            k = (Kd if name == "dense" else K)[b, :, :n].float()
            v = (Vd if name == "dense" else V)[b, :, :n].float()
            ref[b] = sdpa(Q[b][:, None, :], k, v, enable_gqa=True)[:, 0, :]
        return ref
    results, ok = [], True
    for target in targets:
        base = None
        for name, _, _ in CASES:
            kern = load_bundle(out / f"{name}-{target}.json")
            launch = kern.prepare(**inputs[name])           # checks the data (lens ≤ N, pages < P) once
            got = launch()[("out")]
            torch.cuda.synchronize()
            err = (got.float() - reference(name)).abs().max().item()
            t, bw, parts, shown = timed(kern, launch, kv_bytes[name])
            base = bw if name == "dense" else base
            r = dict(name=name, target=target, kernel_s=t, kv_bytes=kv_bytes[name], kv_bw=bw, err=err,
                     share_of_dense=bw / base, mean_len=total / B, sizes=dict(B=B, hq=HQ, hkv=HKV, d=D),
                     kernels_us=parts)
            r["ok"] = bool(err < 2e-2)
            ok &= r["ok"]
            results.append(r)
            print(f"  {target:8} {name:7} kernel {t * 1e6:8.1f} µs  KV {bw / 1e12:5.2f} TB/s  "
                  f"{r['share_of_dense']:6.1%} of dense  max err vs SDPA f32 {err:.1e}  {shown}", flush=True)
        # the edge lengths (0, 1, the capacity) into an output filled with NaN: every sequence
        # written, the empty ones 0 (on cuda the partials kernel's last gangs fold the frames, and
        # the output is zero-filled first for those no gang folds)
        edge = lens.clone()
        edge[0], edge[1], edge[2], edge[B // 2] = 0, 1, N, 0
        for name in ("ragged", "paged"):
            kern = load_bundle(out / f"{name}-{target}.json")
            o = {"out": torch.full((B, HQ, D), float("nan"), device=dev)}
            kern.prepare(out=o, **{**inputs[name], "lens": edge.to(dev)})()
            torch.cuda.synchronize()
            err = (o["out"].float() - reference(name, edge)).abs().max().item()
            good = err < 2e-2          # a NaN left in the output fails too
            ok &= good
            results.append(dict(name=f"{name}, lengths 0, 1 and {N}", target=target, err=err, ok=good))
            print(f"  {target:8} {name}, lengths 0, 1 and {N}: max err vs SDPA f32 {err:.1e} "
                  f"{'ok' if good else 'WRONG'}", flush=True)
        # the ragged kernel on the dense case's data (capacity and every length 4096), and
        # on a half-full cache of twice that capacity: what the data extent and the grid cost
        kern = load_bundle((probe_dir or out) / f"ragged-{target}.json")
        full = torch.full((B,), NDENSE, dtype=torch.int32, device=dev)
        gq = torch.Generator().manual_seed(2)
        probes = (("ragged, all 4096 of 4096", Kd, Vd, full), ("ragged, all 4096 of 8192", K, V, full),
                  ("ragged, 4096 ± 40 of 8192", K, V,
                   (NDENSE + torch.randint(-40, 41, (B,), generator=gq)).to(torch.int32).to(dev)),
                  ("ragged, half 2048 half 6144", K, V,
                   torch.tensor([2048, 6144] * (B // 2), dtype=torch.int32, device=dev)),
                  ("ragged, the lengths sorted", K, V, lens.sort().values.to(dev)))
        for label, kk, vv, ln in probes:
            launch = kern.prepare(Q=Q, K=kk, V=vv, lens=ln)
            t, bw, parts, shown = timed(kern, launch, kv(int(ln.sum())))
            results.append(dict(name=label, target=target, kernel_s=t, kv_bw=bw, share_of_dense=bw / base,
                                kernels_us=parts, ok=True))
            print(f"  {target:8} {label}: kernel {t * 1e6:8.1f} µs  KV {bw / 1e12:5.2f} TB/s  {bw / base:6.1%} of "
                  f"dense  {shown}", flush=True)
    if json_path:
        json_path.write_text(json.dumps(results, indent=2) + "\n")
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


def main() -> int:
    a = sys.argv[1:]
    targets = tuple(a[a.index("--targets") + 1].split(",")) if "--targets" in a else TARGETS
    if len(a) >= 2 and a[0] == "build":
        return build(Path(a[1]).resolve(), a[a.index("--paged-flags") + 1].split() if "--paged-flags" in a else None,
                     targets)
    if len(a) >= 2 and a[0] == "run":
        reps = int(a[a.index("--reps") + 1]) if "--reps" in a else 50
        js = Path(a[a.index("--json") + 1]) if "--json" in a else None
        probe = Path(a[a.index("--probe-dir") + 1]).resolve() if "--probe-dir" in a else None
        return run(Path(a[1]).resolve(), reps, js, probe, targets)
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
