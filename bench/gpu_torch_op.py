#!/usr/bin/env python3
"""moac.torch_op on CUDA tensors, on an NVIDIA GPU: the custom op of a host Kernel with a
GPU bundle's DeviceKernel for CUDA tensors.  Every probe's answer or error goes into JSON.

    python3 bench/gpu_torch_op.py out/tensors/gqa_bf16-cuda.json --json op.json

Needs the compiler's dependencies (the op's fake implementation uses the host Kernel's
frozen binding, so the program is compiled here for target c) and a CUDA bundle of the
same program (`bench/gpu_tensor_cases.py` writes one: gqa_bf16-cuda).  Probes:
  eager     op(Q, K, V) on CUDA tensors against the DeviceKernel called directly: bit for bit
  compile   torch.compile(fullgraph=True) of a function around the op, on CUDA tensors,
            against the same function eager (allclose: inductor may reorder the sum)
  graph     torch.cuda.CUDAGraph capture of the op call on a side stream, replayed after
            new values are written into Q: equal to an eager call on the new values
  reduce_overhead  torch.compile(mode="reduce-overhead") (CUDA graphs through inductor)
"""
from __future__ import annotations

import argparse
import json
import sys
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def probe(results: dict, name: str, fn) -> None:
    try:
        results[name] = {"ok": True, **(fn() or {})}
    except Exception as e:          # recorded, the next probe still runs
        results[name] = {"ok": False, "error": f"{type(e).__name__}: {e}",
                         "traceback": traceback.format_exc()[-2000:]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("manifest")
    ap.add_argument("--json")
    a = ap.parse_args()
    man_path = Path(a.manifest)
    man = json.loads(man_path.read_text())
    res: dict = {"manifest": man_path.name}
    import moac.gpu
    dk = moac.gpu.load_bundle(man_path)
    import torch
    import moac
    from moac.torch_op import as_custom_op
    src = man_path.parent / Path(man["source"]).name           # the program the bundle was built from
    kern = moac.load(src).compile(target="c", sizes=man["fixed"])
    op = as_custom_op(kern, device_kernel=dk)
    res["torch"] = torch.__version__
    res["device"] = torch.cuda.get_device_name(0)
    n = 4096
    g = torch.Generator(device="cuda").manual_seed(0)
    shapes = {p["name"]: [int(eval(s, {"__builtins__": {}}, {"n": n})) for s in p["shape"]]
              for p in man["params"] if p["kind"] == "input"}
    dt = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16, "f64": torch.float64}
    kinds = {p["name"]: dt[p["dtype"]] for p in man["params"] if p["kind"] == "input"}
    x = {k: torch.randn(s, device="cuda", generator=g).to(kinds[k]) for k, s in shapes.items()}
    names = [p["name"] for p in man["params"] if p["kind"] == "input"]

    def eager():
        got = op(*[x[k] for k in names])
        want = dk(**x)["out"]
        torch.cuda.synchronize()
        return {"bitwise_equal": bool(torch.equal(got, want)), "device": str(got.device), "dtype": str(got.dtype),
                "shape": list(got.shape)}
    probe(res, "eager", eager)

    def compiled():
        def f(*t):
            return (op(t[0] * 0.5, *t[1:]) * 2).sum(-1)
        c = torch.compile(f, fullgraph=True)
        got, want = c(*[x[k] for k in names]), f(*[x[k] for k in names])
        torch.cuda.synchronize()
        return {"allclose": bool(torch.allclose(got, want, rtol=1e-5, atol=1e-5)),
                "max_abs_diff": float((got - want).abs().max())}
    probe(res, "compile", compiled)

    def graph():
        args = [x[k].clone() for k in names]
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            op(*args)                                   # warm-up outside the capture
        torch.cuda.current_stream().wait_stream(s)
        gr = torch.cuda.CUDAGraph()
        with torch.cuda.graph(gr):
            y = op(*args)
        args[0].copy_(torch.randn(args[0].shape, device="cuda", generator=g).to(args[0].dtype))
        gr.replay()
        torch.cuda.synchronize()
        want = dk(**dict(zip(names, args)))["out"]
        torch.cuda.synchronize()
        return {"replay_equals_eager_on_new_inputs": bool(torch.equal(y, want))}
    probe(res, "graph", graph)

    def reduce_overhead():
        def f(*t):
            return op(*t) + 1
        c = torch.compile(f, mode="reduce-overhead", fullgraph=True)
        for _ in range(3):
            got = c(*[x[k] for k in names])
        want = f(*[x[k] for k in names])
        torch.cuda.synchronize()
        return {"equal": bool(torch.equal(got, want))}
    probe(res, "reduce_overhead", reduce_overhead)

    text = json.dumps(res, indent=2)
    print(text)
    if a.json:
        Path(a.json).write_text(text + "\n")


if __name__ == "__main__":
    main()
