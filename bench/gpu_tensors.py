#!/usr/bin/env python3
"""Check moac.gpu's tensor path on an NVIDIA GPU in one run: every answer goes into one
JSON file, each probe's failure is recorded there instead of stopping the run.

    python3 bench/gpu_tensor_cases.py out/tensors               # the bundles, on a machine with moac
    python3 bench/gpu_tensors.py out/tensors --json tensors.json   # the GPU machine: numpy and torch

Each case of DIR/cases.json runs in a process of its own (a crash, or libgomp aborting
the process, costs that case only), with the probes

  load       load_bundle before `import torch`: an OpenACC bundle's libgomp becomes the
             process's without LD_LIBRARY_PATH (which libgomp files are mapped after
             `import torch` too)
  call       kernel(**inputs), no sizes by name: outputs are CUDA tensors of the declared
             dtype and shape on the inputs' device; the sizes bound from the shapes
  reference  max |error| against float64 (the decode family's softmax(K·q/√dk)·V)
  raw        the device entry called with ctypes on the same tensors, as bench/gpu_run.py
             did before moac.gpu existed (independent of moac.gpu): bit-for-bit equal?
  out        out= tensors: the very tensors come back (data_ptr), bit-for-bit equal
  copies     the PyTorch profiler (CUDA activity) over calls with out=: the memcpy and
             memset events inside the window with their bytes (expected: none the size of
             a tensor; none at all for CUDA bundles); a control copy shows the profiler
             sees copies; torch allocations during the window (memory_stats)
  stream     a call on a side stream behind a GPU sleep and a write of new values into q:
             the result is that of the new q (ordered after the write), and the call
             returns before the sleep ends (CUDA: asynchronous) or after it (OpenACC)
  graph      torch.cuda.CUDAGraph capture of a kernel call on a side stream, replays
             against the raw result and after new values are written into q (OpenACC:
             moac.gpu refuses to be captured; see raw_graph)
  errors     the messages for a wrong dtype, a non-contiguous view, a CPU tensor beside
             CUDA ones, out= of the wrong shape, tensors on two GPUs (where there are two)
  overhead   median µs of kernel(...), of a prepared Launch and of the raw ctypes call
  context    OpenACC: libgomp's CUDA context is torch's (the device's primary context)

and, for OpenACC cases, `raw_graph` in a further process: the raw device entry inside a
CUDA-graph capture (libgomp may abort: its exit status and output are recorded).  If an
OpenACC case's call fails, it runs once more with LD_LIBRARY_PATH=DIR/lib.  Finally the
command lines: `python -m moac.gpu`, `moac run` and bench/gpu_run.py on the first OpenACC
and the first CUDA case.
"""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

TOL = 1e-4
INT_VIEW = {2: "int16", 4: "int32", 8: "int64"}


# ---------------------------------------------------------------- helpers (child side)
def _write(path: Path, res: dict) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(res, indent=2, default=str) + "\n", encoding="utf-8")
    tmp.replace(path)


def probe(res: dict, name: str, part: Path, f) -> dict | None:
    """Run one probe: its dict (with ok = it ran) or the error; written out at once."""
    t0 = time.perf_counter()
    try:
        v = f() or {}
        res[name] = {"ok": True, **v}
    except Exception as e:
        res[name] = {"ok": False, "error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()[-3000:]}
    res[name]["seconds"] = round(time.perf_counter() - t0, 3)
    _write(part, res)
    return res[name] if res[name]["ok"] else None


def gomp_maps() -> list:
    """The libgomp files mapped into this process."""
    out = set()
    with open("/proc/self/maps") as f:
        for line in f:
            p = line.split()[-1]
            if "libgomp" in p:
                out.add(p)
    return sorted(out)


def bits_equal(a, b, torch) -> bool:
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    iv = getattr(torch, INT_VIEW[a.element_size()])
    return bool(torch.equal(a.contiguous().view(iv), b.contiguous().view(iv)))


class Raw:
    """The device entry through ctypes straight from the manifest: what bench/gpu_run.py
    did before moac.gpu (its own workspace, PyTorch's current stream)."""

    def __init__(self, manifest_path: Path, torch):
        self.man = json.loads(manifest_path.read_text())
        self.torch = torch
        lib = ctypes.CDLL(str(manifest_path.with_suffix(".so").resolve()))
        self.fn = getattr(lib, self.man["function"] + "_device")
        self.fn.restype = ctypes.c_int
        self.ws_fn = getattr(lib, self.man["function"] + "_workspace_bytes")
        self.ws_fn.restype = ctypes.c_size_t
        self.size_params = [p["name"] for p in self.man["params"] if p["kind"] == "size"]
        self.ws_fn.argtypes = [ctypes.c_int64] * len(self.size_params)

    def args(self, tensors: dict, sizes: dict, stream=None) -> list:
        torch = self.torch
        nbytes = self.ws_fn(*[int(sizes[n]) for n in self.size_params])
        self.ws = torch.empty(max(nbytes, 1), dtype=torch.uint8, device="cuda")
        args = [ctypes.c_int64(int(sizes[p["name"]])) if p["kind"] == "size" else
                ctypes.c_void_p(tensors[p["name"]].data_ptr()) for p in self.man["params"]]
        args.append(ctypes.c_void_p(self.ws.data_ptr()))
        if self.man.get("stream"):
            args.append(ctypes.c_void_p(stream if stream is not None else torch.cuda.current_stream().cuda_stream))
        return args

    def __call__(self, args: list) -> None:
        rc = self.fn(*args)
        if rc != 0:
            raise RuntimeError(f"{self.man['function']}_device returned {rc}")


def memcpy_events(prof, tmpdir: str) -> list:
    """(name, bytes) of the memcpy and memset activities of a profile (its Chrome trace)."""
    path = os.path.join(tmpdir, f"trace{time.monotonic_ns()}.json")
    prof.export_chrome_trace(path)
    with open(path, encoding="utf-8") as f:
        tr = json.load(f)
    os.unlink(path)
    evs = tr["traceEvents"] if isinstance(tr, dict) else tr
    out = []
    for e in evs:
        name, cat = str(e.get("name", "")), str(e.get("cat", ""))
        if cat in ("gpu_memcpy", "gpu_memset") or (cat not in ("cuda_runtime", "cuda_driver", "cpu_op")
                                                     and ("Memcpy" in name or "Memset" in name)):
            out.append((name, int((e.get("args") or {}).get("bytes", -1))))
    return out


def summarise(evs: list) -> dict:
    kinds: dict = {}
    for name, nbytes in evs:
        k = kinds.setdefault(name, {"count": 0, "bytes": 0, "max_bytes": 0})
        k["count"] += 1
        k["bytes"] += max(nbytes, 0)
        k["max_bytes"] = max(k["max_bytes"], nbytes)
    return kinds


# ---------------------------------------------------------------- one case (child)
def child(root: Path, index: int, part: Path, reps: int) -> int:
    case = json.loads((root / "cases.json").read_text())[index]
    mpath = root / case["manifest"]
    res: dict = {"case": case, "env": {k: os.environ.get(k) for k in ("LD_LIBRARY_PATH", "ACC_DEVICE_TYPE",
                                                                       "CUDA_VISIBLE_DEVICES")}}
    _write(part, res)
    from moac.gpu import load_bundle
    from moac.gpu.run import decode_family, decode_reference, random_inputs
    st: dict = {}

    def load():
        st["k"] = load_bundle(mpath)                   # before torch
        return {"repr": repr(st["k"]), "libgomp_mapped": gomp_maps()}
    if not probe(res, "load", part, load):
        return 1
    k = st["k"]
    m = k.manifest
    import torch
    res["env"].update(torch=torch.__version__, cuda=torch.version.cuda, gpus=torch.cuda.device_count(),
                      gpu=torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
                      libgomp_mapped_after_torch=gomp_maps())
    _write(part, res)
    if not torch.cuda.is_available():
        res["error"] = "torch sees no CUDA device"
        _write(part, res)
        return 1
    family = decode_family(k)
    tmpdir = tempfile.mkdtemp()

    def call():
        inputs, poison = random_inputs(k, case["sizes"], torch)
        st["inputs"], st["poison"] = inputs, poison
        got = k(**inputs)                              # no sizes by name: all from the shapes
        torch.cuda.synchronize()
        st["got"] = got
        want = m.shapes(m.sizes(case["sizes"]), ("output",))
        dev = next(iter(inputs.values())).device
        checks = {n: dict(device=str(t.device), dtype=str(t.dtype), shape=list(t.shape), want_shape=list(want[n]),
                          written=bool(torch.isfinite(t).all().item())) for n, t in got.items()}
        bound = k.prepare(**inputs).sizes
        expect = m.sizes(case["sizes"])
        good = all(c["device"] == str(dev) and c["shape"] == c["want_shape"] and c["written"] for c in checks.values())
        return {"outputs": checks, "bound_sizes": bound, "expected_sizes": expect,
                "pass": bool(good and all(bound[s] == expect[s] for s in expect))}
    if not probe(res, "call", part, call):
        return 1
    inputs, got = st["inputs"], st["got"]
    out_name = m.outputs[0]
    qn = "q" if "q" in inputs else "Q"

    if family:
        def reference():
            ref = decode_reference(inputs[qn], inputs["K"], inputs["V"], torch)
            err = (got[out_name].double() - ref).abs().max().item()
            return {"max_abs_err": err, "tol": TOL, "pass": err < TOL}
        probe(res, "reference", part, reference)

    raw = Raw(mpath, torch)

    def raw_probe():
        outs = {n: t.clone() for n, t in st["poison"].items()}
        raw(raw.args({**inputs, **outs}, k.prepare(**inputs).sizes))
        torch.cuda.synchronize()
        st["raw"] = outs
        same = {n: bits_equal(got[n], outs[n], torch) for n in m.outputs}
        diff = {n: (got[n].double() - outs[n].double()).abs().max().item() for n in m.outputs}
        return {"bit_equal": same, "max_abs_diff": diff, "pass": all(same.values())}
    probe(res, "raw", part, raw_probe)

    def out_probe():
        outs = {n: t.clone() for n, t in st["poison"].items()}
        ptrs = {n: t.data_ptr() for n, t in outs.items()}
        r = k(out=outs, **inputs)
        torch.cuda.synchronize()
        same_ptr = {n: r[n].data_ptr() == ptrs[n] and r[n] is outs[n] for n in outs}
        base = st.get("raw", got)
        same_bits = {n: bits_equal(r[n], base[n], torch) for n in outs}
        return {"same_tensor": same_ptr, "bit_equal": same_bits,
                "pass": all(same_ptr.values()) and all(same_bits.values())}
    probe(res, "out", part, out_probe)

    def copies():
        from torch.profiler import ProfilerActivity, profile
        outs = {n: t.clone() for n, t in st["poison"].items()}
        for _ in range(3):
            k(out=outs, **inputs)
        torch.cuda.synchronize()
        a0 = torch.cuda.memory_stats().get("allocation.all.allocated", 0)
        calls = max(reps // 2, 5)
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(calls):
                k(out=outs, **inputs)
            torch.cuda.synchronize()
        a1 = torch.cuda.memory_stats().get("allocation.all.allocated", 0)
        evs = memcpy_events(prof, tmpdir)
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as ctl:
            inputs[qn].cpu()                          # the control: one device-to-host copy
            torch.cuda.synchronize()
        control = memcpy_events(ctl, tmpdir)
        smallest = min(t.numel() * t.element_size() for t in list(inputs.values()) + list(outs.values()))
        tensor_sized = [e for e in evs if e[1] >= smallest or e[1] < 0]
        htod_dtoh = [e for e in evs if "HtoD" in e[0] or "DtoH" in e[0]]
        verdict = not tensor_sized and (m.target != "cuda" or not evs)
        return {"calls": calls, "memcpy_memset": summarise(evs), "count": len(evs), "htod_dtoh": len(htod_dtoh),
                "tensor_sized": len(tensor_sized), "smallest_tensor_bytes": smallest,
                "control_seen": summarise(control), "profiler_sees_copies": bool(control),
                # each call takes its scratch from torch's caching allocator (moac.gpu never keeps
                # one between calls: CUDA-graph trees refuse that), so at most one per call
                "torch_allocations_in_window": a1 - a0,
                "pass": bool(verdict and control and a1 - a0 <= calls)}
    probe(res, "copies", part, copies)

    def stream_probe():
        q = inputs[qn]
        old = q.clone()
        new = torch.randn(q.shape, device=q.device, dtype=torch.float32).to(q.dtype)
        outs = {n: t.clone() for n, t in st["poison"].items()}
        side = torch.cuda.Stream()
        torch.cuda.synchronize()
        cycles = 200_000_000
        t0 = time.perf_counter()
        with torch.cuda.stream(side):
            torch.cuda._sleep(cycles)
        side.synchronize()
        sleep_s = time.perf_counter() - t0
        with torch.cuda.stream(side):
            k(out=outs, **inputs)                      # warm-up: this stream's workspace
        side.synchronize()
        for t in outs.values():
            t.fill_(float("nan"))
        torch.cuda.synchronize()
        with torch.cuda.stream(side):
            t0 = time.perf_counter()
            torch.cuda._sleep(cycles)
            q.copy_(new)
            k(out=outs, **inputs)
            returned = time.perf_counter() - t0
        side.synchronize()
        done = time.perf_counter() - t0
        r = {"sleep_s": sleep_s, "call_returned_after_s": returned, "done_after_s": done,
             "returned_before_kernels_done": returned < 0.5 * sleep_s}
        if family:
            ref_new = decode_reference(q, inputs["K"], inputs["V"], torch)
            ref_old = decode_reference(old, inputs["K"], inputs["V"], torch)
            r["err_vs_new_q"] = (outs[out_name].double() - ref_new).abs().max().item()
            r["err_vs_old_q"] = (outs[out_name].double() - ref_old).abs().max().item()
            r["ordered_after_write"] = r["err_vs_new_q"] < TOL
        q.copy_(old)
        torch.cuda.synchronize()
        expect_async = m.target == "cuda"
        r["pass"] = bool(r.get("ordered_after_write", True) and r["returned_before_kernels_done"] == expect_async)
        return r
    probe(res, "stream", part, stream_probe)

    def graph_probe():
        outs = {n: t.clone() for n, t in st["poison"].items()}
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            k(out=outs, **inputs)                      # warm-up on the capture stream
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.stream(side):
                with torch.cuda.graph(g, stream=side):
                    k(out=outs, **inputs)
        except Exception as e:
            torch.cuda.synchronize()
            return {"captured": False, "capture_error": f"{type(e).__name__}: {e}",
                    "pass": m.target != "cuda"}       # OpenACC: refused, as documented
        for t in outs.values():
            t.fill_(float("nan"))
        g.replay()
        torch.cuda.synchronize()
        base = st.get("raw", got)
        r = {"captured": True, "replay_bit_equal": {n: bits_equal(outs[n], base[n], torch) for n in outs}}
        if family:
            q = inputs[qn]
            old = q.clone()
            q.copy_(torch.randn(q.shape, device=q.device, dtype=torch.float32).to(q.dtype))
            g.replay()
            torch.cuda.synchronize()
            r["replay_err_after_new_q"] = (outs[out_name].double()
                                           - decode_reference(q, inputs["K"], inputs["V"], torch)).abs().max().item()
            q.copy_(old)
            torch.cuda.synchronize()
        r["pass"] = all(r["replay_bit_equal"].values()) and r.get("replay_err_after_new_q", 0.0) < TOL
        return r
    probe(res, "graph", part, graph_probe)

    def errors():
        from moac.errors import ArgumentError
        out = {}

        def expect(label, **kw):
            try:
                k(**kw)
                out[label] = "NO ERROR"
            except ArgumentError as e:
                out[label] = e.message
            except Exception as e:
                out[label] = f"NOT an ArgumentError: {type(e).__name__}: {e}"
        name0 = m.inputs[0]
        t0 = inputs[name0]
        expect("wrong_dtype", **{**inputs, name0: t0.to(torch.float64 if t0.dtype != torch.float64 else torch.float32)})
        big = torch.empty(t0.shape + (2,), device=t0.device, dtype=t0.dtype)[..., 0]
        expect("non_contiguous", **{**inputs, name0: big})
        expect("cpu_beside_cuda", **{**inputs, "K": inputs["K"].cpu()})
        bad = {out_name: torch.empty((1,), device=t0.device, dtype=got[out_name].dtype)}
        expect("out_wrong_shape", out=bad, **inputs)
        if torch.cuda.device_count() > 1:
            expect("two_gpus", **{**inputs, "K": inputs["K"].to("cuda:1")})
        ok = all(v != "NO ERROR" and not v.startswith("NOT an") for v in out.values())
        return {"messages": out, "pass": ok}
    probe(res, "errors", part, errors)

    def overhead():
        outs = {n: t.clone() for n, t in st["poison"].items()}
        launch = k.prepare(out=outs, **inputs)
        rargs = raw.args({**inputs, **outs}, launch.sizes)

        def med(f):
            for _ in range(3):
                f()
            torch.cuda.synchronize()
            ts = []
            for _ in range(reps):
                t0 = time.perf_counter()
                f()
                torch.cuda.synchronize()
                ts.append(time.perf_counter() - t0)
            return statistics.median(ts) * 1e6
        return {"call_us": med(lambda: k(out=outs, **inputs)), "launch_us": med(launch),
                "raw_us": med(lambda: raw(rargs)), "reps": reps}
    probe(res, "overhead", part, overhead)

    if m.target == "openacc":
        def context():
            from moac.gpu.bundle import primary_cuda_context
            ours = k.runtime.acc_get_current_cuda_context()
            theirs = primary_cuda_context(torch.cuda.current_device())
            return {"libgomp": hex(ours or 0), "torch_primary": hex(theirs or 0), "pass": ours == theirs}
        probe(res, "context", part, context)
    res["done"] = True
    _write(part, res)
    return 0


def child_raw_graph(root: Path, index: int, part: Path) -> int:
    """The raw device entry of an OpenACC bundle captured in a CUDA graph (may abort)."""
    case = json.loads((root / "cases.json").read_text())[index]
    mpath = root / case["manifest"]
    res: dict = {"case": case["name"]}
    try:
        from moac.gpu import load_bundle
        from moac.gpu.run import random_inputs
        k = load_bundle(mpath)
        import torch
        inputs, poison = random_inputs(k, case["sizes"], torch)
        raw = Raw(mpath, torch)
        args = raw.args({**inputs, **poison}, k.prepare(**inputs).sizes)
        raw(args)                                      # warm-up (libgomp's start-up)
        torch.cuda.synchronize()
    except Exception as e:
        res["warmup"] = f"{type(e).__name__}: {e}"
        _write(part, res)
        return 1
    res["warmup"] = "ok"
    _write(part, res)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    g = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.stream(side):
            with torch.cuda.graph(g, stream=side):
                raw(args)
        res["captured"] = True
        g.replay()
        torch.cuda.synchronize()
        res["replayed"] = True
    except Exception as e:
        res["captured"] = res.get("captured", False)
        res["error"] = f"{type(e).__name__}: {e}"
    _write(part, res)
    return 0


# ---------------------------------------------------------------- the parent
def _run(argv: list, env: dict, timeout: int, cwd: Path = ROOT) -> dict:
    t0 = time.perf_counter()
    try:
        r = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)
        out = {"rc": r.returncode, "stdout_tail": r.stdout[-4000:], "stderr_tail": r.stderr[-4000:]}
    except subprocess.TimeoutExpired as e:
        out = {"rc": None, "timeout": timeout, "stdout_tail": str(e.stdout or "")[-4000:],
               "stderr_tail": str(e.stderr or "")[-4000:]}
    out["seconds"] = round(time.perf_counter() - t0, 2)
    return out


def _part(argv: list, env: dict, timeout: int) -> dict:
    with tempfile.TemporaryDirectory() as d:
        part = Path(d) / "part.json"
        proc = _run(argv + [str(part)], env, timeout)
        res = json.loads(part.read_text()) if part.exists() else {}
    res["process"] = proc
    return res


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir", type=Path, help="a directory with cases.json (bench/gpu_tensor_cases.py writes one)")
    ap.add_argument("--json", type=Path, help="write every answer here")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--only", action="append", default=[], metavar="NAME", help="only these cases (repeatable)")
    ap.add_argument("--timeout", type=int, default=300, help="seconds per process (default 300)")
    ap.add_argument("--child", nargs=2, metavar=("INDEX", "PART"), help=argparse.SUPPRESS)
    ap.add_argument("--child-raw-graph", nargs=2, metavar=("INDEX", "PART"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    root = a.dir.resolve()
    if a.child:
        return child(root, int(a.child[0]), Path(a.child[1]), a.reps)
    if a.child_raw_graph:
        return child_raw_graph(root, int(a.child_raw_graph[0]), Path(a.child_raw_graph[1]))
    try:
        cases = json.loads((root / "cases.json").read_text())
    except (OSError, ValueError) as e:
        print(f"error: cannot read {root / 'cases.json'}: {e}", file=sys.stderr)
        return 2
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    me = [sys.executable, str(Path(__file__).resolve()), str(root), "--reps", str(a.reps)]
    report: dict = {"dir": str(root), "python": sys.version, "cases": {}, "commands": {}}
    try:
        report["nvidia_smi"] = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total",
                                               "--format=csv,noheader"], capture_output=True, text=True,
                                              timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError) as e:
        report["nvidia_smi"] = f"unavailable: {e}"

    def save():
        if a.json:
            a.json.write_text(json.dumps(report, indent=2, default=str) + "\n", encoding="utf-8")
    for i, case in enumerate(cases):
        if a.only and case["name"] not in a.only:
            continue
        r = _part(me + ["--child", str(i)], env, a.timeout)
        if case.get("target") == "openacc" and not (r.get("call") or {}).get("ok"):
            lib = str(root / "lib")
            r["retry_with_LD_LIBRARY_PATH"] = _part(
                me + ["--child", str(i)], dict(env, LD_LIBRARY_PATH=f"{lib}:{env.get('LD_LIBRARY_PATH', '')}"),
                a.timeout)
        if case.get("target") == "openacc":
            r["raw_graph"] = _part(me + ["--child-raw-graph", str(i)], env, a.timeout)
        report["cases"][case["name"]] = r
        verdicts = {p: v.get("pass") for p, v in r.items() if isinstance(v, dict) and "pass" in v}
        failed = [p for p, v in r.items() if isinstance(v, dict) and v.get("ok") is False]
        print(f"{case['name']:20} " + " ".join(f"{p}={'ok' if v else 'NO'}" for p, v in verdicts.items())
              + (f"  probe errors: {', '.join(failed)}" if failed else "")
              + ("" if r.get("done") else f"  (process rc {r['process']['rc']})"), flush=True)
        save()
    firsts = {}
    for c in cases:
        if (not a.only or c["name"] in a.only) and c.get("target") in ("openacc", "cuda"):
            firsts.setdefault(c["target"], c)
    for target, c in firsts.items():
        defs = [f"-D{n}={v}" for n, v in c["sizes"].items()]
        man = str(root / c["manifest"])
        with tempfile.TemporaryDirectory() as d:
            cmds = {"python -m moac.gpu": [sys.executable, "-m", "moac.gpu", man, *defs, "--reps", "5",
                                           "--json", f"{d}/r.json"],
                    "moac run": [sys.executable, "-m", "moac", "run", man, *defs, "--reps", "5"],
                    "bench/gpu_run.py": [sys.executable, str(ROOT / "bench" / "gpu_run.py"), man, *defs,
                                         "--reps", "5"]}
            for label, argv in cmds.items():
                r = _run(argv, env, a.timeout)
                if label == "python -m moac.gpu" and Path(f"{d}/r.json").exists():
                    r["json"] = json.loads(Path(f"{d}/r.json").read_text())
                report["commands"][f"{label} {c['name']}"] = r
                print(f"{label} {c['name']}: rc {r['rc']}", flush=True)
                save()
    save()
    return 0


if __name__ == "__main__":
    sys.exit(main())
