"""A GPU bundle, loaded: its manifest read, its library opened, its device entry called on
torch CUDA tensors.  Imports ctypes and moac.errors only; torch at the first call."""
from __future__ import annotations

import ctypes
import json
from pathlib import Path

from ..errors import ArgumentError, DeviceError, MoacError, return_code_error
from .runtime import ACC_DEVICE_NVIDIA, load_runtime
from .shapes import Binder, Expr

DTYPES = {"f32": "float32", "f64": "float64", "f16": "float16", "bf16": "bfloat16",
          "f8e4m3": "float8_e4m3fn", "f8e5m2": "float8_e5m2", "i8": "int8", "i32": "int32", "i64": "int64"}
INTEGER = ("i32", "i64")           # integer inputs: sizes and indices (lens, a page table)
ARRAY_KINDS = ("input", "inout", "output")


class Manifest:
    """A bundle's NAME.json: the entry points' parameters (arrays with their shapes and
    dtypes, sizes), the sizes fixed at build time, derived sizes, run-time conditions."""

    def __init__(self, data: dict, path: Path | None = None):
        self.path = path
        where = f"{path}: " if path else ""
        try:
            self.function = str(data["function"])
            self.target = str(data.get("target", ""))
            self.stream = bool(data.get("stream", False))
            self.fixed = {str(k): int(v) for k, v in data.get("fixed", {}).items()}
            self.params = [dict(name=str(p["name"]), kind=str(p["kind"]), dtype=str(p.get("dtype", "f32")),
                                shape=[Expr(s) for s in p.get("shape", [])]) for p in data["params"]]
            derived = {str(k): Expr(v) for k, v in data.get("derived", {}).items()}
            constraints = [(Expr(c["cond"]), str(c["message"])) for c in data.get("constraints", [])]
            from ..datacheck import make_check
            self.data_bounds = {str(k): Expr(v) for k, v in data.get("data_bounds", {}).items()}
            self.data_checks = [(make_check(str(c["extents"]), str(c["test"])), f"{c['where']}: {c['message']}")
                                for c in data.get("data_conditions", [])]
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise MoacError(f"{where}not a moac bundle manifest ({type(e).__name__}: {e})") from None
        self.data = data
        for p in self.params:
            if p["kind"] in ARRAY_KINDS and p["dtype"] not in DTYPES:
                raise MoacError(f"{where}array '{p['name']}' has dtype {p['dtype']}, which moac.gpu does not know")
        self.inputs = [p["name"] for p in self.params if p["kind"] in ("input", "inout")]
        self.updated = [p["name"] for p in self.params if p["kind"] == "inout"]
        self.outputs = [p["name"] for p in self.params if p["kind"] == "output"]
        self.size_params = [p["name"] for p in self.params if p["kind"] == "size"]
        self.array = {p["name"]: p for p in self.params if p["kind"] in ARRAY_KINDS}
        self.integers = [p["name"] for p in self.params if p["kind"] == "input" and p["dtype"] in INTEGER]
        self.binder = Binder([(p["name"], p["shape"]) for p in self.params if p["kind"] in ("input", "inout")],
                             self.size_params, self.fixed, derived, constraints)

    @classmethod
    def read(cls, path) -> "Manifest":
        path = Path(path)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except OSError as e:
            raise MoacError(f"cannot read {path}: {e.strerror or e}") from None
        except ValueError as e:
            raise MoacError(f"{path}: not a moac bundle manifest (not JSON: {e})") from None
        if not isinstance(data, dict):
            raise MoacError(f"{path}: not a moac bundle manifest (not a JSON object)")
        return cls(data, path)

    def sizes(self, given: dict, hint: str = "") -> dict:
        """Every size from sizes given by name (no shapes); `hint` ends the message that
        names the sizes missing."""
        return self.binder.solve(given, hint)

    def shapes(self, env: dict, kinds=ARRAY_KINDS) -> dict:
        """name -> shape of the arrays of these kinds at the sizes `env`."""
        return {p["name"]: self.binder.shape(p["shape"], env) for p in self.params if p["kind"] in kinds}


def load_bundle(manifest_path) -> "DeviceKernel":
    """The bundle whose manifest is `manifest_path` (DIR/NAME.json; NAME.so beside it),
    loaded.  An OpenACC bundle first makes DIR/lib/'s libgomp the process's: load it
    before `import torch` (moac.gpu.runtime says why)."""
    path = Path(manifest_path)
    if path.suffix != ".json":
        path = path.with_suffix(".json")
    man = Manifest.read(path)
    so = path.with_suffix(".so")
    if not so.is_file():
        raise MoacError(f"{so} is missing: a bundle is NAME.json with NAME.so beside it "
                        "(`moac compile ... --offload nvptx -o DIR/NAME.c` writes both)")
    runtime = None
    if man.target == "openacc":
        runtime = load_runtime(path.parent / "lib")
        if runtime is None:
            raise MoacError(f"{path.parent / 'lib'}/ (the bundle's libgomp and its nvptx plugin) is missing")
    return DeviceKernel(man, so.resolve(), runtime)


def _torch():
    try:
        import torch
    except ImportError:
        raise MoacError("moac.gpu calls bundles on torch CUDA tensors, and torch is not installed") from None
    return torch


def _span(t) -> tuple[int, int]:
    start = t.data_ptr()
    return start, start + t.numel() * t.element_size()


def _overlap(a, b) -> bool:
    (a0, a1), (b0, b1) = _span(a), _span(b)
    return a0 < b1 and b0 < a1 and a1 > a0 and b1 > b0


class DeviceKernel:
    """A bundle's device entry, called on torch CUDA tensors: `kernel(**tensors)` returns
    {output name: tensor}.  Nothing is copied: the entry gets the tensors' data_ptr()s.

    Streams.  A CUDA bundle (manifest "stream": true) launches its kernels on the current
    torch stream of the tensors' device and returns without waiting, like a torch
    operation: the outputs are ready for later work on that stream, and a call can be
    captured in a CUDA graph.  An OpenACC bundle's entry runs on libgomp's own queue and
    waits for its kernels: the call first waits for the current stream (so that the
    inputs are written), and the outputs are complete when it returns; it cannot be
    captured in a CUDA graph (refused while the current stream is capturing)."""

    def __init__(self, manifest: Manifest, library: Path, runtime: ctypes.CDLL | None = None):
        self.manifest, self.library, self.runtime = manifest, Path(library), runtime
        m = manifest
        try:
            self._lib = ctypes.CDLL(str(self.library))
        except OSError as e:
            raise MoacError(f"cannot load {self.library}: {e}") from None
        try:
            fn = getattr(self._lib, f"{m.function}_device")
        except AttributeError:
            raise MoacError(f"{self.library} exports no {m.function}_device: not a GPU bundle of moac compile "
                            "--offload nvptx") from None
        fn.restype = ctypes.c_int
        fn.argtypes = ([ctypes.c_int64 if p["kind"] == "size" else ctypes.c_void_p for p in m.params]
                       + [ctypes.c_void_p] * (2 if m.stream else 1))
        self._fn = fn
        self._plans: dict = {}         # (input shapes, sizes by name) -> (sizes, output shapes, scratch bytes)
        self._fast_plans: dict = {}    # (input shapes, device index) -> what a plain call needs (_fast_call)
        self._torch, self._in_dtypes = None, None
        self._ws_fn = getattr(self._lib, f"{m.function}_workspace_bytes", None)
        if self._ws_fn is not None:
            self._ws_fn.restype = ctypes.c_size_t
            self._ws_fn.argtypes = [ctypes.c_int64] * len(m.size_params)
        self._acc_device = None        # OpenACC: the device libgomp was pointed at

    def __repr__(self) -> str:
        m = self.manifest
        fixed = " ".join(f"{k}={v}" for k, v in m.fixed.items())
        return (f"<moac.gpu.DeviceKernel {m.function} target {m.target}" + (f", fixed {fixed}" if fixed else "")
                + f": inputs {', '.join(m.inputs)}; outputs {', '.join(m.outputs + m.updated)}; {self.library.name}>")

    @property
    def stream(self) -> bool:
        """Whether the device entry takes a stream (CUDA bundles)."""
        return self.manifest.stream

    def __call__(self, out: dict | None = None, **tensors) -> dict:
        """Run the device entry: inputs by name as C-contiguous CUDA tensors of their
        declared dtypes on one device; a size no input's shape fixes by name as an int.
        Outputs are allocated with torch.empty on that device, or taken from `out`
        (name -> tensor of the output's dtype and shape, written and returned); inputs
        updated in place come back too.  Returns {name: tensor}."""
        if out is None and not self.manifest.updated:
            result = self._fast_call(tensors)
            if result is not None:
                return result
        return self.prepare(out, **tensors)()

    def _fast_call(self, tensors: dict):
        """A call whose inputs are contiguous CUDA tensors of the declared dtypes on one
        device, passed by name with nothing else, or None when this call is not one (then
        `prepare` checks it and says what is wrong).  The sizes, output shapes and scratch
        bytes of a set of input shapes and a device come from `prepare` the first time."""
        m = self.manifest
        if len(tensors) != len(m.inputs):
            return None
        torch = self._torch or _torch()
        self._torch = torch
        if self._in_dtypes is None:
            self._in_dtypes = tuple((n, getattr(torch, DTYPES[m.array[n]["dtype"]])) for n in m.inputs)
        shapes, dev = [], None
        for name, want in self._in_dtypes:
            t = tensors.get(name)
            if not isinstance(t, torch.Tensor) or t.dtype != want or not t.is_cuda or not t.is_contiguous():
                return None
            d = t.get_device()
            if dev is None:
                dev = d
            elif d != dev:
                return None
            shapes.append(t.shape)
        key = (tuple(shapes), dev)
        plan = self._fast_plans.get(key)
        if plan is None:
            launch = self.prepare(None, **tensors)          # the full checks, once per shapes and device
            outs = tuple((n, tuple(t.shape), t.dtype) for n, t in launch.results.items() if n in m.outputs)
            if len(self._fast_plans) >= 256:
                self._fast_plans.clear()
            self._fast_plans[key] = (launch.sizes, outs, launch.ws_bytes, launch.device)
            return launch()
        sizes, outs, ws_bytes, device = plan
        results = {n: torch.empty(shape, dtype=dt, device=device) for n, shape, dt in outs}
        args = [sizes[p["name"]] if p["kind"] == "size" else
                (tensors[p["name"]] if p["kind"] != "output" else results[p["name"]]).data_ptr() for p in m.params]
        misaligned = tuple(n for n in m.inputs if tensors[n].data_ptr() % 8)
        if misaligned:
            return None                                      # prepare's Launch reports it
        if m.data_checks:
            self.check_data(tensors, sizes)
        return Launch(self, torch, device, args, ws_bytes, results, (), sizes, tensors)()

    def prepare(self, out: dict | None = None, **tensors) -> "Launch":
        """Check the arguments, bind the sizes and allocate the outputs once; the Launch
        returned runs the entry on these tensors each time it is called (no checks)."""
        torch = _torch()
        m = self.manifest
        if out is not None and "out" in m.inputs:          # the program has an input named out
            tensors["out"], out = out, None
        accepted = set(m.inputs) | set(m.binder.names)
        extra = sorted(set(tensors) - accepted)
        if extra:
            raise ArgumentError(f"unexpected argument(s) {', '.join(extra)}; the kernel takes "
                                f"{', '.join(m.inputs)} (and sizes by name: {', '.join(m.binder.names) or 'none'})")
        missing = [n for n in m.inputs if n not in tensors]
        if missing:
            raise ArgumentError(f"missing input{'s' if len(missing) > 1 else ''} "
                                f"{', '.join(repr(n) for n in missing)}")
        device, first, arrays = None, None, {}
        for name in m.inputs:
            t = tensors[name]
            self._check(f"input '{name}'", t, m.array[name]["dtype"], torch)
            if device is None:
                device, first = t.device, name
            elif t.device != device:
                raise ArgumentError(f"input '{name}' is on {t.device} and input '{first}' on {device}: the tensors "
                                    "of one call must be on one device")
            arrays[name] = t
        given = {k: v for k, v in tensors.items() if k not in arrays}
        key = (tuple(tuple(t.shape) for t in arrays.values()), tuple(sorted(given.items())))
        plan = self._plans.get(key)
        if plan is None:                 # the binding of these shapes, worked out once
            sizes = m.binder.bind({n: tuple(t.shape) for n, t in arrays.items()}, given)
            shapes = {name: m.binder.shape(m.array[name]["shape"], sizes) for name in m.outputs}
            ws = int(self._ws_fn(*(sizes[n] for n in m.size_params))) if self._ws_fn is not None else 0
            if len(self._plans) >= 256:
                self._plans.clear()
            plan = self._plans[key] = (sizes, shapes, ws)
        sizes, shapes, ws_bytes = plan
        if m.data_checks:
            self.check_data(arrays, sizes)
        for u in m.updated:
            for name, t in arrays.items():
                if name != u and _overlap(arrays[u], t):
                    raise ArgumentError(f"input '{u}' is updated in place and shares memory with input '{name}' "
                                        "(pass a copy)")
        out = dict(out or {})
        extra = sorted(set(out) - set(m.outputs))
        if extra:
            raise ArgumentError(f"out= names {', '.join(extra)}, which the kernel does not output "
                                f"(outputs: {', '.join(m.outputs)})")
        outs = {}
        for name in m.outputs:
            p = m.array[name]
            shape = shapes[name]
            dtype = getattr(torch, DTYPES[p["dtype"]])
            if name in out:
                t = out[name]
                what = f"out['{name}']"
                self._check(what, t, p["dtype"], torch)
                if t.device != device:
                    raise ArgumentError(f"{what} is on {t.device} and the inputs on {device}")
                if tuple(t.shape) != shape:
                    raise ArgumentError(f"{what} must have shape {shape}, got {tuple(t.shape)}")
                for i, a in list(arrays.items()) + list(outs.items()):
                    if _overlap(t, a):
                        raise ArgumentError(f"{what} shares memory with {'input' if i in arrays else 'output'} "
                                            f"'{i}' (pass another tensor)")
            else:
                t = torch.empty(shape, dtype=dtype, device=device)
            outs[name] = t
        bound = {**arrays, **outs}
        args = [sizes[p["name"]] if p["kind"] == "size" else bound[p["name"]].data_ptr() for p in m.params]
        results = {**outs, **{u: arrays[u] for u in m.updated}}
        misaligned = tuple(n for n, t in arrays.items() if t.data_ptr() % 8)
        return Launch(self, torch, device, args, ws_bytes, results, misaligned, sizes, arrays)

    def check_data(self, tensors: dict, sizes: dict) -> None:
        """The program's conditions on its integer inputs (every lens[b] ≤ N, every page
        number < P): they are copied to the host (a few bytes, one synchronisation) and
        checked, an ArgumentError naming the condition if one fails.  A Launch made by
        `prepare` checks them once, when it is made, not at each run; a call captured into a
        CUDA graph checks nothing (no host copy is allowed then), nor do its replays: check
        the data with a plain call."""
        torch = self._torch or _torch()
        if torch.cuda.is_current_stream_capturing():
            return              # no copy to the host while a CUDA graph is captured: replays check nothing
        ints = {n: tensors[n].cpu().numpy() for n in self.manifest.integers}
        sizes = {**self.manifest.fixed, **sizes}
        for ok, message in self.manifest.data_checks:
            if not ok(ints, sizes):
                raise ArgumentError(f"{message}, for these inputs")

    @staticmethod
    def _check(what: str, t, dtype: str, torch) -> None:
        if not isinstance(t, torch.Tensor):
            if type(t).__module__ == "numpy":
                raise ArgumentError(f"{what} is a numpy array: a bundle's device entry takes torch CUDA tensors "
                                    "(host arrays go to the host Kernel, moac.load(FILE).compile(...))")
            raise ArgumentError(f"{what} must be a torch CUDA tensor, got {type(t).__name__}")
        want = getattr(torch, DTYPES[dtype])
        if t.dtype != want:
            raise ArgumentError(f"{what} must have dtype {want} (declared {dtype}), got {t.dtype}")
        if not t.is_contiguous():
            raise ArgumentError(f"{what} must be C-contiguous (use .contiguous())")
        if t.device.type != "cuda":
            raise ArgumentError(f"{what} is a {t.device.type} tensor: a bundle's device entry takes CUDA tensors "
                                "(move it with .cuda(), or call the host Kernel, moac.load(FILE).compile(...), "
                                "which takes CPU tensors)")

    @staticmethod
    def _workspace(torch, device, nbytes: int):
        """This call's scratch: a tensor from torch's caching allocator (a few µs), kept alive by
        the caller until the launch is queued; its memory goes back to the allocator in stream
        order, so a later allocation on the same stream never overlaps a running kernel.  Never
        cached between calls: inside a CUDA-graph capture (torch.compile's mode="reduce-
        overhead" included) nothing may outlive the recording but the outputs."""
        return torch.empty(nbytes, dtype=torch.uint8, device=device) if nbytes else None

    def _acc_ready(self, torch, device) -> None:
        """Point libgomp at the tensors' GPU, in torch's CUDA context, once per device."""
        if self._acc_device == device.index:
            return
        gomp = self.runtime
        torch.cuda.synchronize(device)       # torch's context current on this thread before libgomp opens it
        n = gomp.acc_get_num_devices(ACC_DEVICE_NVIDIA)
        if n < 1:
            raise DeviceError(f"{self.manifest.function}: the bundle's OpenACC runtime sees no NVIDIA GPU "
                              "(acc_get_num_devices; the nvptx plugin or the CUDA driver did not load), though "
                              f"torch has {device}")
        if device.index >= n:
            raise DeviceError(f"{self.manifest.function}: the OpenACC runtime sees {n} NVIDIA GPU(s), the tensors "
                              f"are on {device}")
        gomp.acc_set_device_num(device.index, ACC_DEVICE_NVIDIA)
        ours, torchs = gomp.acc_get_current_cuda_context(), primary_cuda_context(device.index)
        if torchs is not None and ours != torchs:
            raise DeviceError(f"{self.manifest.function}: libgomp runs in a CUDA context of its own, not in torch's, "
                              "so it cannot address the tensors (libgomp was started on this thread before torch "
                              "used the GPU here)")
        self._acc_device = device.index


def primary_cuda_context(ordinal: int) -> int | None:
    """The primary CUDA context of a device, the one torch runs in (the driver's
    cuDevicePrimaryCtxRetain); None where the driver cannot be asked."""
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None
    dev, ctx = ctypes.c_int(), ctypes.c_void_p()
    if cuda.cuDeviceGet(ctypes.byref(dev), ctypes.c_int(ordinal)) != 0:
        return None
    if cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev) != 0:
        return None
    release = getattr(cuda, "cuDevicePrimaryCtxRelease_v2", None) or cuda.cuDevicePrimaryCtxRelease
    release(dev)
    return ctx.value


class Launch:
    """A prepared call of a DeviceKernel: calling it runs the device entry on the tensors
    it was prepared with and returns the outputs (the same tensors each time).  It holds
    those tensors, inputs and outputs, so that the addresses it passes stay theirs for as
    long as it lives, whatever the caller keeps."""

    __slots__ = ("kernel", "torch", "device", "args", "ws_bytes", "results", "misaligned", "sizes", "inputs")

    def __init__(self, kernel, torch, device, args, ws_bytes, results, misaligned, sizes, inputs):
        self.kernel, self.torch, self.device, self.args = kernel, torch, device, args
        self.ws_bytes, self.results, self.misaligned, self.sizes = ws_bytes, results, misaligned, sizes
        self.inputs = inputs

    def __call__(self) -> dict:
        k, torch, dev = self.kernel, self.torch, self.device
        with torch.cuda.device(dev):
            stream = torch.cuda.current_stream(dev)
            if k.manifest.stream:
                handle = stream.cuda_stream
                ws = k._workspace(torch, dev, self.ws_bytes)
                rc = k._fn(*self.args, None if ws is None else ws.data_ptr(), handle)
            else:
                if torch.cuda.is_current_stream_capturing():
                    raise ArgumentError(f"{k.manifest.function}: an OpenACC bundle cannot be captured in a CUDA graph "
                                        "(libgomp launches on its own queue and waits for it); build the program "
                                        "with --target cuda for graphs")
                k._acc_ready(torch, dev)
                ws = k._workspace(torch, dev, self.ws_bytes)
                stream.synchronize()             # the inputs are written before libgomp's queue reads them
                rc = k._fn(*self.args, None if ws is None else ws.data_ptr())
        if rc != 0:
            raise return_code_error(f"{k.manifest.function}_device", rc, self.misaligned)
        return dict(self.results)
