"""A built library, loaded: the Kernel a user calls.

cffi loads the library in ABI mode from the same Signature that printed the C prototype;
a call checks dtype, layout and shapes (moac.jit.binding, no sympy) before any C runs.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .. import dtypes
from ..emit.codegen import Signature
from ..errors import ArgumentError, return_code_error
from .binding import freeze_binding

NP_DTYPE = {"float": np.float32, "double": np.float64}


def _is_torch(x) -> bool:
    return type(x).__module__.startswith("torch") and type(x).__name__ in ("Tensor", "Parameter")


def as_array(name: str, x):
    """A numpy view of an argument, no copy: numpy arrays as they are, CPU torch tensors
    (bf16 as its bit patterns), anything else with __dlpack__ through numpy.  (array,
    is_torch)."""
    if isinstance(x, np.ndarray):
        return x, False
    if _is_torch(x):
        import torch
        if x.device.type != "cpu":
            raise ArgumentError(f"input '{name}' is a {x.device.type} tensor: a host kernel takes CPU tensors "
                                "(GPU tensors go through the device entry of a GPU bundle, docs/gpu.md)")
        t = x.detach()
        if t.dtype == torch.bfloat16:
            return t.view(torch.int16).numpy().view(np.uint16), True
        try:
            return t.numpy(), True
        except TypeError as e:
            raise ArgumentError(f"input '{name}': {e}") from None
    if hasattr(x, "__dlpack__"):
        try:
            return np.from_dlpack(x), False
        except (TypeError, RuntimeError, BufferError) as e:
            raise ArgumentError(f"input '{name}': cannot be read through DLPack ({e})") from None
    return x, False


_LOADED: dict = {}   # library path -> (ffi, lib); never unloaded (see _load)


def _load(library: Path, cdef: str):
    """dlopen a built library once per process and keep it loaded.  Unloading is unsafe:
    an OpenMP library's libgomp would be unmapped while its worker threads still run
    (the next wake-up is a SIGSEGV).  Library names are content hashes, so a reused path
    always holds the same code."""
    key = str(library)
    if key not in _LOADED:
        import cffi
        ffi = cffi.FFI()
        ffi.cdef(cdef)
        _LOADED[key] = (ffi, ffi.dlopen(key))
    return _LOADED[key]


@dataclass
class Kernel:
    """A compiled, loaded program: call it with numpy arrays, get a dict of outputs."""
    onf: object          # the ONF (Schedule and counts) it was built from
    c_source: str
    library: Path
    signature: Signature
    flags: list
    aligned: tuple = ()  # inputs read in packed 8-byte words: their data must be 8-byte aligned

    def __post_init__(self):
        self._ffi, self._lib = _load(self.library, self.signature.cdef())
        self._fn = getattr(self._lib, self.signature.fname)
        prog = self.onf.dnf.program
        self._binding = freeze_binding(prog, self.onf.fixed, {p.name: p.shape for p in self.signature.params
                                                              if p.kind == "output"})
        self._inputs = {i.name for i in prog.inputs}
        self._size_names = set(prog.size_names())
        self._updated = {u for u, _ in prog.updates}
        self._params = [(p.kind, p.name, f"{p.ctype} *", NP_DTYPE.get(p.ctype)) for p in self.signature.params]
        if self.signature.workspace:       # scratch from a per-thread buffer kept between calls
            self._fn = getattr(self._lib, f"{self.signature.fname}_with_workspace")
            self._ws_bytes = getattr(self._lib, f"{self.signature.fname}_workspace_bytes")
            self._ws = threading.local()

    def __repr__(self) -> str:
        params = ", ".join(f"{p.name}: {p.kind}" for p in self.signature.params)
        fixed = " ".join(f"{k}={v}" for k, v in self.onf.fixed.items())
        return (f"<moac.Kernel {self.signature.fname} target {self.onf.target}"
                + (f", fixed {fixed}" if fixed else "") + f": {params}; {self.library.name}>")

    def _workspace(self, size_args: list):
        """A pointer to at least the scratch these sizes need, 64-byte aligned: this
        thread's buffer, grown when too small (calls from several threads never share one)."""
        need = int(self._ws_bytes(*size_args))
        buf = getattr(self._ws, "buf", None)
        if buf is None or buf.size < need + 64:
            buf = self._ws.buf = np.empty(need + 64, np.uint8)
        addr = buf.ctypes.data
        return self._ffi.cast("void *", addr + (-addr) % 64)

    def _bind(self, args: dict) -> dict:
        """Check the arguments and bind every size (no sympy: see moac/jit/binding.py)."""
        prog = self.onf.dnf.program
        names, size_names = self._inputs, self._size_names
        extra = set(args) - names - size_names
        if extra:
            raise ArgumentError(f"unexpected argument(s) {', '.join(sorted(extra))}; the kernel takes "
                                f"{', '.join(i.name for i in prog.inputs)} (and sizes by name)")
        given = {k: v for k, v in args.items() if k in size_names}
        for k, v in given.items():
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0:
                raise ArgumentError(f"size {k} must be a non-negative integer, got {v!r}")
        for k, v in given.items():
            if k in self.onf.fixed and int(v) != self.onf.fixed[k]:
                raise ArgumentError(f"size {k} = {v}, but the kernel was compiled for {k} = {self.onf.fixed[k]}")
        shapes = {}
        for info in prog.inputs:
            if info.name not in args:
                raise ArgumentError(f"missing input '{info.name}'")
            a = args[info.name]
            if not isinstance(a, np.ndarray):
                raise ArgumentError(f"input '{info.name}' must be a numpy array, a CPU torch tensor or a DLPack "
                                    f"object, got {type(a).__name__}")
            if not dtypes.accepts(info.dtype, a):
                raise ArgumentError(f"input '{info.name}' must have dtype {dtypes.describe(info.dtype)} "
                                    f"(declared {info.dtype}), got {a.dtype}")
            if not a.flags.c_contiguous:
                raise ArgumentError(f"input '{info.name}' must be C-contiguous (use np.ascontiguousarray)")
            if info.name in self._updated and not a.flags.writeable:
                raise ArgumentError(f"input '{info.name}' is updated in place and must be writeable")
            shapes[info.name] = a.shape
        for u in sorted(self._updated):        # an input updated in place must not overlap another
            for info in prog.inputs:
                if info.name != u and np.may_share_memory(args[u], args[info.name]):   # exact: C-contiguous
                    raise ArgumentError(f"input '{u}' is updated in place and shares memory with input "
                                        f"'{info.name}': the update would change '{info.name}' under the kernel "
                                        "(pass a copy)")
        return self._binding.bind(shapes, given)

    def __call__(self, out: dict | None = None, **arrays) -> dict:
        """Run the kernel: inputs by name as numpy arrays, CPU torch tensors or DLPack
        objects (no copies); a size that no input's shape determines (a window length,
        say) is passed by name as an int.  Outputs come back as numpy arrays, or as torch
        tensors (sharing their memory) when an input was a tensor; `out` maps output names
        to preallocated C-contiguous arrays or tensors of the right dtype and shape, which
        are written and returned."""
        if out is not None and "out" in self._inputs:     # the program has an input named out
            arrays["out"], out = out, None
        torch_in = False
        for k in list(arrays):
            if k in self._inputs:
                arrays[k], t = as_array(k, arrays[k])
                torch_in |= t
        sizes = self._bind(arrays)
        given = self._outputs_given(out or {}, sizes, arrays)
        cast = self._ffi.cast
        outs, args = {}, []
        for kind, name, ptr, dtype in self._params:
            if kind == "input" or kind == "inout":
                args.append(cast(ptr, arrays[name].ctypes.data))       # kept alive by `arrays`
                if kind == "inout":
                    outs[name] = arrays[name]          # updated in place
            elif kind == "output" and name in given:
                outs[name] = given[name]
                args.append(cast(ptr, given[name].ctypes.data))
            elif kind == "output":
                shape = self._binding.output_shape(name, sizes)
                try:
                    buf = np.empty(shape, dtype=dtype)
                except (ValueError, MemoryError) as e:      # too many elements to address, or to allocate
                    raise ArgumentError(f"output '{name}' would have shape {tuple(int(s) for s in shape)}: "
                                        f"{'too large to allocate' if isinstance(e, MemoryError) else 'too large to address'}"
                                        ) from None
                outs[name] = buf
                args.append(cast(ptr, buf.ctypes.data))
            else:
                args.append(sizes[name])
        for name in self.aligned:
            if arrays[name].ctypes.data % 8:
                raise ArgumentError(f"input '{name}' must start at an 8-byte aligned address: the kernel reads it in "
                                    "packed 8-byte words (pass a copy of an offset view)")
        if self.signature.workspace:
            args.append(self._workspace([sizes[p.name] for p in self.signature.params if p.kind == "size"]))
        rc = self._fn(*args)
        if rc != 0:
            raise return_code_error(self.signature.fname, rc, self.aligned)
        if out:                                    # the caller's own objects back
            outs.update({k: out[k] for k in given})
        if torch_in:
            import torch
            outs = {k: (v if _is_torch(v) else torch.from_numpy(v)) for k, v in outs.items()}
        return outs

    def _outputs_given(self, out: dict, sizes: dict, arrays: dict) -> dict:
        """The numpy views of the `out=` arrays, checked before any C runs."""
        if not out:
            return {}
        names = [p.name for p in self.signature.params if p.kind == "output"]
        extra = set(out) - set(names)
        if extra:
            raise ArgumentError(f"out= names {', '.join(sorted(extra))}, which the kernel does not output "
                                f"(outputs: {', '.join(names)})")
        views = {}
        for p in self.signature.params:
            if p.kind != "output" or p.name not in out:
                continue
            a, _ = as_array(p.name, out[p.name])
            want = tuple(int(s) for s in self._binding.output_shape(p.name, sizes))
            dtype = NP_DTYPE[p.ctype]
            if not isinstance(a, np.ndarray) or a.dtype != dtype or a.shape != want:
                raise ArgumentError(f"out['{p.name}'] must be a {np.dtype(dtype).name} array of shape {want}, got "
                                    f"{getattr(a, 'dtype', type(a).__name__)} {getattr(a, 'shape', '')}")
            if not a.flags.c_contiguous or not a.flags.writeable:
                raise ArgumentError(f"out['{p.name}'] must be C-contiguous and writeable")
            for i in self._inputs:
                if np.may_share_memory(a, arrays[i]):
                    raise ArgumentError(f"out['{p.name}'] shares memory with input '{i}' (pass another array)")
            views[p.name] = a
        return views
