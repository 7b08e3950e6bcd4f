"""`python -m moac.gpu BUNDLE.json [-D name=value ...] [--reps N] [--json OUT]` (also
`moac run ...`): run GPU bundles on seeded random CUDA tensors through DeviceKernel,
check them against a float64 reference where one is defined, and time them.

The reference is defined for the decode family (inputs q or Q, K and V, one output,
sizes among B, h, hq, hkv, g, n, dk, dv: examples/decode*.moa but decode_window and
decode_step): softmax(K·q/√dk)·V, every leading axis a batch axis, fewer K/V heads than
query heads meaning GQA (query head h reads KV head h ÷ g).  For it the run also
compares with PyTorch's scaled_dot_product_attention and times it beside moac.  Any
other bundle is run and timed, and its outputs checked to be written (they start as NaN)
and equal to its host entry's.
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

from ..errors import MoacError
from .bundle import DTYPES, INTEGER, DeviceKernel, load_bundle

DECODE_SIZES = {"B", "h", "hq", "hkv", "g", "n", "dk", "dv"}
TOL = 1e-4        # max |error| against float64 for f32 arithmetic on these sizes


def decode_family(kernel: DeviceKernel) -> bool:
    m = kernel.manifest
    names = set(m.inputs)
    return (names - {"ks", "vs"} in ({"q", "K", "V"}, {"Q", "K", "V"}) and len(m.outputs) == 1 and not m.updated
            and set(m.size_params) | set(m.fixed) <= DECODE_SIZES)


SCALES = ("ks", "vs")      # the dequantisation scales of 8-bit K and V (K_real = K × ks)
HALF_ULP = {"bf16": 2.0 ** -8, "f16": 2.0 ** -11}     # a 16-bit output's rounding, relative


def random_inputs(kernel: DeviceKernel, sizes: dict, torch, seed: int = 0) -> tuple[dict, dict]:
    """(inputs, NaN-filled outputs) for the sizes given by name: standard normal draws in
    float32 on the GPU, in parameter order, rounded to each input's declared dtype (fp8 by
    torch's saturating conversion, i8 as round(32·x) clamped; i32 and i64 uniform between 0
    and the bound the program's conditions give them); the scales ks and vs of 8-bit
    K and V uniform in [0.5, 1.5]."""
    m = kernel.manifest
    env = m.sizes(sizes, " (-D NAME=VALUE)")
    shapes = m.shapes(env)
    g = torch.Generator(device="cuda").manual_seed(seed)
    inputs, outs = {}, {}
    for p in m.params:
        if p["kind"] in ("input", "inout"):
            dtype = getattr(torch, DTYPES[p["dtype"]])
            x = torch.randn(shapes[p["name"]], device="cuda", dtype=torch.float32, generator=g)
            if p["name"] in SCALES:
                x = 0.5 + torch.rand(shapes[p["name"]], device="cuda", dtype=torch.float32, generator=g)
            if p["dtype"] in INTEGER:             # sizes and indices: uniform in [0, the bound they must keep]
                bound = m.data_bounds.get(p["name"])
                top = bound({**m.fixed, **env}) if bound is not None else 12
                inputs[p["name"]] = torch.randint(0, max(int(top), 0) + 1, shapes[p["name"]], device="cuda",
                                                  generator=g).to(dtype)
                continue
            inputs[p["name"]] = (32 * x).round().clamp(-128, 127).to(dtype) if dtype == torch.int8 else x.to(dtype)
        elif p["kind"] == "output":
            outs[p["name"]] = torch.full(shapes[p["name"]], float("nan"), device="cuda",
                                         dtype=getattr(torch, DTYPES[p["dtype"]]))
    return inputs, outs


def dequantised(x, scale, torch):
    """K or V as float64 values, times its dequantisation scale (per token and head ⟨… n⟩,
    per head ⟨…⟩ or per tensor ⟨⟩) where there is one."""
    x = x.to(torch.float64)
    if scale is None:
        return x
    return x * scale.to(torch.float64).reshape(tuple(scale.shape) + (1,) * (x.dim() - scale.dim()))


def decode_reference(q, K, V, torch):
    """softmax(K·q/√dk)·V in float64, GQA where K has fewer heads than q."""
    dk = q.shape[-1]
    if q.shape[:-1] != K.shape[:-2]:           # GQA: query head h reads KV head h ÷ (hq/hkv)
        grp = q.shape[-2] // K.shape[-3]
        K, V = K.repeat_interleave(grp, dim=-3), V.repeat_interleave(grp, dim=-3)
    s = torch.einsum("...j,...lj->...l", q.double(), K.double()) / math.sqrt(dk)
    return torch.einsum("...l,...ld->...d", torch.softmax(s, dim=-1), V.double())


def sdpa_layout(q, K, V):
    """q, K, V as (batch, heads, seq, dim) for SDPA, and whether it is GQA."""
    dk = q.shape[-1]
    gqa = q.shape[:-1] != K.shape[:-2]
    if gqa:
        nb = math.prod(q.shape[:-2])
        return (q.reshape(nb, q.shape[-2], 1, dk), K.reshape(nb, K.shape[-3], K.shape[-2], dk),
                V.reshape(nb, V.shape[-3], V.shape[-2], V.shape[-1]), True)
    nb = math.prod(q.shape[:-1])
    return (q.reshape(nb, 1, 1, dk), K.reshape(nb, 1, K.shape[-2], dk), V.reshape(nb, 1, V.shape[-2], V.shape[-1]),
            False)


def host_entry(kernel: DeviceKernel, inputs: dict, sizes: dict, torch) -> dict:
    """The bundle's host entry on host copies of the inputs (it copies them to the device
    and back itself): {output: CPU tensor}."""
    m = kernel.manifest
    host = getattr(kernel._lib, m.function)
    host.restype = ctypes.c_int
    cpu = {n: t.cpu().contiguous() for n, t in inputs.items()}
    shapes = m.shapes(sizes, ("output",))
    for n in m.outputs:
        cpu[n] = torch.full(shapes[n], float("nan"), dtype=getattr(torch, DTYPES[m.array[n]["dtype"]]))
    args = [ctypes.c_int64(sizes[p["name"]]) if p["kind"] == "size" else ctypes.c_void_p(cpu[p["name"]].data_ptr())
            for p in m.params]
    rc = host(*args)
    if rc != 0:
        raise MoacError(f"{m.function} (the host entry) returned {rc}")
    return {n: cpu[n] for n in m.outputs + m.updated}


def wall(f, torch, reps: int) -> float:
    """Median seconds of f() followed by a device synchronisation."""
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


def _device_kernels(prof) -> list:
    """The CUDA kernel events of a profile."""
    return [ev for ev in prof.key_averages() if ev.device_type is not None and "CUDA" in str(ev.device_type)]


def l2_flush(torch):
    """A callable that evicts the GPU's L2 cache by reading a buffer of twice its size (a
    read, so that no dirty lines are left for the timed call to write back), for timing
    calls on cold caches: the decode step of a serving loop reads each layer's K and V once
    between the other layers' reads, so none of them is in L2 when it comes back.  Its
    `kernels` are the names of the kernels it runs (profiled once, here), which kernel_time
    leaves out."""
    from torch.profiler import ProfilerActivity, profile
    size = 2 * max(getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 0), 64 << 20)
    buf = torch.zeros(size // 4, dtype=torch.int32, device="cuda")

    def flush():
        return buf.sum()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        flush()
        torch.cuda.synchronize()
    flush.kernels = frozenset(ev.key for ev in _device_kernels(prof))
    return flush


def kernel_time(f, match, torch, reps: int, parts: dict | None = None, flush=None) -> float:
    """Seconds of GPU kernel time per f() whose kernel names `match`, from the profiler.
    With `flush` (l2_flush), it runs before every call and its kernels are not counted: by
    name, so f must not run a kernel of the same name (the flush is an int32 sum)."""
    from torch.profiler import ProfilerActivity, profile
    skip = flush.kernels if flush is not None else frozenset()
    for _ in range(3):
        f()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            if flush is not None:
                flush()
            f()
        torch.cuda.synchronize()
    total = 0.0
    for ev in _device_kernels(prof):
        if match(ev.key) and ev.key not in skip:
            t = ev.device_time_total if hasattr(ev, "device_time_total") else ev.cuda_time_total
            total += t
            if parts is not None:
                parts[ev.key] = t / reps
    return total / reps / 1e6


def alternated(timers: dict, rounds: int) -> dict:
    """Each timer (name → a function returning seconds) called once a round, `rounds` rounds,
    the order turned by one place each round, so that the machine's drift between
    measurements falls on all of them alike: name → its times, in the order taken."""
    names = list(timers)
    out = {k: [] for k in names}
    for i in range(rounds):
        turn = i % len(names) if names else 0
        for k in names[turn:] + names[:turn]:
            out[k].append(timers[k]())
    return out


def run_one(kernel: DeviceKernel, sizes: dict, reps: int, torch, seed: int = 0, flush=None, rounds: int = 1) -> dict:
    """Run, check and time one bundle (the fields bench/gpu_run.py reports); with `flush`
    (l2_flush) the kernels are also timed with L2 evicted before every call
    (`moac_kernel_cold`, `sdpa16_kernel_cold`).  The kernel times of moac and of SDPA bf16
    are taken in `rounds` alternating rounds of `reps` calls (`alternated`): each figure
    is the median of its rounds, the rounds under `<figure>_rounds`."""
    m = kernel.manifest
    inputs, outs = random_inputs(kernel, sizes, torch, seed)
    env = m.sizes(sizes)
    launch = kernel.prepare(out=outs, **inputs, **sizes)
    torch.cuda.synchronize()
    got = launch()
    torch.cuda.synchronize()
    out_name = (m.outputs + m.updated)[0]
    out = got[out_name]
    written = all(bool(torch.isfinite(t).all().item()) for n, t in got.items() if n in m.outputs)
    r = dict(name=Path(m.path).stem if m.path else m.function, target=m.target, sizes={**sizes, **m.fixed},
             written=written, reference=None, err=None, host_err=None, sdpa_err=None)
    family = decode_family(kernel)
    if family:
        q = inputs.get("q", inputs.get("Q"))
        K, V = dequantised(inputs["K"], inputs.get("ks"), torch), dequantised(inputs["V"], inputs.get("vs"), torch)
        ref = decode_reference(q, K, V, torch)
        r["reference"] = "softmax(K·q/√dk)·V in float64" + (" (K, V dequantised)" if "ks" in inputs else "")
        r["err"] = (out.double() - ref).abs().max().item()
        tol = TOL + HALF_ULP.get(m.array[out_name]["dtype"], 0.0) * ref.abs().max().item()
    if not family:
        tol = TOL
    host = host_entry(kernel, inputs, env, torch)[out_name]
    r["host_err"] = ((host.double() - ref.cpu()) if family else (host.double() - out.double().cpu())).abs().max().item()
    parts: dict = {}
    if kernel.stream:          # CUDA-graph capture: the device entry only launches on its stream
        out.fill_(float("nan"))
        graph = torch.cuda.CUDAGraph()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            kernel(out=outs, **inputs, **sizes)          # warm-up on the capture stream (its workspace)
            torch.cuda.synchronize()
            out.fill_(float("nan"))
            with torch.cuda.graph(graph, stream=side):
                kernel(out=outs, **inputs, **sizes)
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        base = ref if family else host.to(out.device).double()
        r["graph"] = dict(err=(out.double() - base).abs().max().item(), wall=wall(graph.replay, torch, reps))
    else:
        r["graph"] = None
    r["moac_wall"] = wall(launch, torch, reps)
    r["call_wall"] = wall(lambda: kernel(out=outs, **inputs, **sizes), torch, reps)
    mine = lambda k: m.function in k       # noqa: E731  (this bundle's kernels)
    timers = {"moac_kernel": lambda: kernel_time(launch, mine, torch, reps, parts)}
    if flush is not None:
        timers["moac_kernel_cold"] = lambda: kernel_time(launch, mine, torch, reps, flush=flush)
    r["bytes"] = sum(t.numel() * t.element_size() for t in list(inputs.values()) + list(outs.values()))
    if family:
        q4, K4, V4, gqa = sdpa_layout(q, K, V)
        q4f, K4f, V4f = q4.float(), K4.float(), V4.float()
        qb, Kb, Vb = q4.bfloat16(), K4.bfloat16(), V4.bfloat16()
        sdpa = torch.nn.functional.scaled_dot_product_attention

        def sdpa32():
            return sdpa(q4f, K4f, V4f, enable_gqa=gqa)

        def sdpa16():
            return sdpa(qb, Kb, Vb, enable_gqa=gqa)
        r["sdpa_err"] = (sdpa32().reshape(out.shape).double() - ref).abs().max().item()
        other = lambda k: "memcpy" not in k.lower()       # noqa: E731
        r["sdpa32_kernel"] = kernel_time(sdpa32, other, torch, reps)
        timers["sdpa16_kernel"] = lambda: kernel_time(sdpa16, other, torch, reps)
        if flush is not None:
            timers["sdpa16_kernel_cold"] = lambda: kernel_time(sdpa16, other, torch, reps, flush=flush)
        r["sdpa32_wall"], r["sdpa16_wall"] = wall(sdpa32, torch, reps), wall(sdpa16, torch, reps)
        r["kv_bytes"] = sum(inputs[n].numel() * inputs[n].element_size() for n in ("K", "V", "ks", "vs") if n in inputs)
        r["min_bytes"] = r["kv_bytes"] + q.numel() * q.element_size() + out.numel() * out.element_size()
    for k, ts in alternated(timers, rounds).items():      # moac and SDPA in turn: the machine's drift on both
        r[k], r[k + "_rounds"] = statistics.median(ts), ts
    r["moac_kernels_us"] = parts
    ok = r["written"] and r["host_err"] < tol and (r["err"] is None or r["err"] < tol)
    r["ok"] = bool(ok and (r["graph"] is None or r["graph"]["err"] < tol))
    return r


def sizes_of(pairs: list, ap) -> dict:
    """The -D name=value pairs as sizes; a malformed one is the parser's usage error."""
    out = {}
    for d in pairs:
        k, sep, v = d.partition("=")
        if not sep or not k.isidentifier():
            ap.error(f"-D expects name=value, got {d!r}")
        try:
            out[k] = int(v)
        except ValueError:
            ap.error(f"-D {k}: {v!r} is not an integer")
        if out[k] < 0:
            ap.error(f"-D {k}: sizes are non-negative, got {v}")
    return out


def _positive(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {v}")
    return v


def parser(prog: str = "python -m moac.gpu", description: str | None = None,
           bundles: str = "+") -> argparse.ArgumentParser:
    """The options of `python -m moac.gpu`; bench/gpu_run.py adds its case lists to them
    (there the bundles may be left out, `bundles="*"`)."""
    ap = argparse.ArgumentParser(prog=prog, description=description or "Run GPU bundles on random CUDA tensors "
                                 "(moac.gpu.DeviceKernel), check them against float64 and time them.")
    ap.add_argument("bundles", nargs=bundles, type=Path, metavar="BUNDLE.json",
                    help="manifests written by moac compile --offload nvptx")
    ap.add_argument("-D", dest="defs", action="append", default=[], metavar="NAME=VALUE",
                    help="a size (repeatable); every size the bundle was not built for must be given")
    ap.add_argument("--reps", type=_positive, default=50, help="timed repetitions (default 50)")
    ap.add_argument("--rounds", type=_positive, default=5,
                    help="rounds of --reps calls, moac and SDPA bf16 in turn; each kernel figure is their "
                    "median (default 5)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the random inputs (default 0)")
    ap.add_argument("--cold", action="store_true",
                    help="also time the kernels with the L2 cache evicted before every call")
    ap.add_argument("--json", type=Path, metavar="OUT", help="also write the results here")
    return ap


def _line(r: dict) -> str:
    us = lambda s: f"{s * 1e6:.1f} µs"       # noqa: E731
    head = f"  {r['name']}: kernel {us(r['moac_kernel'])}, wall {us(r['moac_wall'])} (call {us(r['call_wall'])})"
    if r["err"] is not None:
        head += f", max err {r['err']:.1e} vs float64, SDPA bf16 kernel {us(r['sdpa16_kernel'])}"
    else:
        head += ", no reference (written: " + ("yes" if r["written"] else "NO") + ")"
    if "moac_kernel_cold" in r:
        head += f", cold L2 kernel {us(r['moac_kernel_cold'])}"
        if "sdpa16_kernel_cold" in r:
            head += f" (SDPA bf16 {us(r['sdpa16_kernel_cold'])})"
    head += f", host entry {r['host_err']:.1e}"
    if r["graph"]:
        head += f", CUDA graph replay err {r['graph']['err']:.1e}"
    return head + ("" if r["ok"] else "  FAIL")


def main(argv: list | None = None, prog: str = "python -m moac.gpu") -> int:
    ap = parser(prog)
    a = ap.parse_args(argv)
    sizes = sizes_of(a.defs, ap)
    try:
        kernels = [load_bundle(b) for b in a.bundles]      # before torch: an OpenACC bundle's libgomp
        from .bundle import _torch
        torch = _torch()
        if not torch.cuda.is_available():
            raise MoacError("torch sees no CUDA device: GPU bundles run on an NVIDIA GPU")
        print(f"GPU: {torch.cuda.get_device_name(0)}; torch {torch.__version__}", flush=True)
        results, ok = [], True
        flush = l2_flush(torch) if a.cold else None
        for b, k in zip(a.bundles, kernels):
            try:
                r = run_one(k, sizes, a.reps, torch, a.seed, flush, a.rounds)
            except Exception as e:                        # this bundle's sizes, say: report, go on
                msg = e.render() if isinstance(e, MoacError) else f"{type(e).__name__}: {e}"
                r = dict(name=b.stem, ok=False, error=msg)
                print(f"  {b.stem}: FAILED: {msg}", file=sys.stderr, flush=True)
            else:
                print(_line(r), flush=True)
            results.append(r)
            ok &= r["ok"]
        if a.json:
            a.json.write_text(json.dumps(results, indent=2, default=str) + "\n", encoding="utf-8")
        print("PASS" if ok else "FAIL")
        return 0 if ok else 1
    except MoacError as e:
        print(e.render(), file=sys.stderr)
        return 1
    except MemoryError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except Exception as e:  # a bug, not the user's input
        if os.environ.get("MOAC_TRACEBACK"):
            raise
        print(f"{prog}: internal error: {type(e).__name__}: {e}\n"
              "This is a bug in moac; set MOAC_TRACEBACK=1 for the Python traceback and report it.", file=sys.stderr)
        return 3
