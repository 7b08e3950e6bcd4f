"""A built library, loaded: the Kernel a user calls.

cffi loads the library in ABI mode from the same Signature that printed the C prototype;
a call checks dtype, layout and shapes (moac.jit.binding, no sympy) before any C runs.
"""
from __future__ import annotations

import math
import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .. import dtypes
from ..emit.codegen import Signature
from ..errors import ArgumentError, return_code_error
from .arrays import _as_torch, _is_torch, _np_dtype, as_array, wrong_dtype
from .bench import Timing
from .bench import bench as _bench
from .binding import freeze_binding

__all__ = ["Kernel", "Timing", "as_array"]


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
    """A compiled, loaded program: call it with the inputs by name, get a dict of outputs.

    Made by `Program.compile(...)`, which caches it; the library stays loaded for the life
    of the process.  `onf` is the ONF it was built from, `c_source` the C it compiled,
    `library` the shared library in the build cache, `signature` the C entry's parameters,
    `flags` the compiler flags used.  Calls from several threads may run at once: each
    thread has its own scratch buffer.
    """
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
        self._declared = {i.name: i.dtype for i in prog.inputs}
        self._size_names = set(prog.size_names())
        self._updated = {u for u, _ in prog.updates}
        self._params = [(p.kind, p.name, f"{p.ctype} *", None if p.kind == "size" else _np_dtype(p))
                        for p in self.signature.params]
        self._dtype = {p.name: p.dtype for p in self.signature.params if p.kind != "size"}
        if self.signature.workspace:       # scratch from a per-thread buffer kept between calls
            self._fn = getattr(self._lib, f"{self.signature.fname}_with_workspace")
            self._ws_bytes = getattr(self._lib, f"{self.signature.fname}_workspace_bytes")
        self._ws = threading.local()
        # the fast path of a call (see _fast_call): plain numpy inputs of the declared dtypes
        self._fast_in = tuple((i.name, np.dtype(dtypes.NUMPY[i.dtype])) for i in prog.inputs)
        self._fast_params = tuple((p.kind, p.name, None if p.kind == "size" else self._ffi.typeof(f"{p.ctype}[]"),
                                   _np_dtype(p) if p.kind == "output" else None)
                                  for p in self.signature.params)
        self._out_dtype = {p.name: _np_dtype(p) for p in self.signature.params if p.kind == "output"}
        self._fast_ok = not self._updated          # in-place updates check overlaps on every call
        self._plans: dict = {}                      # input shapes -> (sizes, output shapes, workspace bytes)
        # conditions on integer inputs (every lens[b] ≤ N, every page number < P): checked on every call
        from ..front.data import INDEX_DTYPES, compile_condition, on_data
        self._data_checks = tuple((compile_condition(c.cond, c.over), c) for c in prog.constraints if on_data(c))
        self._ints = tuple(i.name for i in prog.inputs if i.dtype in INDEX_DTYPES)

    def check_data(self, arrays: dict, sizes: dict) -> None:
        """A positioned ArgumentError if an integer input breaks a condition of the program
        (a length beyond the cache, a page number outside the pool): the kernel would read
        outside its buffers."""
        if not self._data_checks:
            return
        ints = {n: arrays[n] for n in self._ints}
        sizes = {**self.onf.fixed, **sizes}
        for ok, c in self._data_checks:
            if ok(ints, sizes):
                continue
            from ..front.data import violation        # the slow path: which element, and its value
            from ..front.core import size_symbol
            env = {size_symbol(k): v for k, v in sizes.items()}
            bad = violation(c.cond, c.over, env, {n: np.asarray(a) for n, a in ints.items()})
            raise ArgumentError(f"{c.message}, but {bad}", c.span, self.onf.dnf.program.source)

    def __repr__(self) -> str:
        params = ", ".join(f"{p.name}: {p.kind}" for p in self.signature.params)
        fixed = " ".join(f"{k}={v}" for k, v in self.onf.fixed.items())
        return (f"<moac.Kernel {self.signature.fname} target {self.onf.target}"
                + (f", fixed {fixed}" if fixed else "") + f": {params}; {self.library.name}>")

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
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or not 0 <= v < 2**63:
                raise ArgumentError(f"size {k} must be a non-negative integer below 2^63, got {v!r}")
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
                raise wrong_dtype(f"input '{info.name}'", info.dtype, a.dtype)
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

    def _fast_call(self, arrays: dict, out: dict | None = None):
        """A call of C-contiguous numpy arrays of exactly the declared dtypes and sizes as
        ints, by name, or None when this call is not one.  Sizes, output shapes and workspace
        bytes of a set of input shapes and sizes are worked out once by the full checks
        (`_bind`) and reused; dtype, layout and alignment are checked on every call."""
        given = ()
        if len(arrays) != len(self._fast_in):
            given = tuple(sorted((k, v) for k, v in arrays.items() if k in self._size_names))
            if len(arrays) - len(given) != len(self._fast_in) or any(type(v) is not int for _, v in given):
                return None
        shapes = []
        for name, dt in self._fast_in:
            a = arrays.get(name)
            if type(a) is not np.ndarray or a.dtype != dt or not a.flags.c_contiguous:
                return None
            shapes.append(a.shape)
        key = (tuple(shapes), given)
        plan = self._plans.get(key)
        if plan is None:
            sizes = self._bind(arrays)
            outs = {name: tuple(int(x) for x in self._binding.output_shape(name, sizes))
                    for kind, name, _, _ in self._fast_params if kind == "output"}
            if any(math.prod(shape) * self._out_dtype[name].itemsize > 2**62 for name, shape in outs.items()):
                return None                         # the full path says why it cannot allocate
            ws = int(self._ws_bytes(*[sizes[p.name] for p in self.signature.params if p.kind == "size"])) \
                if self.signature.workspace else 0
            if len(self._plans) >= 256:
                self._plans.clear()
            plan = self._plans[key] = (sizes, outs, ws)
        sizes, outs, ws = plan
        if self._data_checks:
            self.check_data(arrays, sizes)
        if out:                                     # numpy out= arrays exactly as the outputs are
            for k, (name, a) in enumerate(out.items()):
                if (type(a) is not np.ndarray or name not in outs or a.shape != outs[name]
                        or a.dtype != self._out_dtype[name] or not a.flags.c_contiguous
                        or not a.flags.writeable or any(np.may_share_memory(a, arrays[n]) for n, _ in self._fast_in)
                        or any(np.may_share_memory(a, b) for b in list(out.values())[:k])):
                    return None                     # the full path says what is wrong
        from_buffer, result, args = self._ffi.from_buffer, {}, []
        for kind, name, ctype, dtype in self._fast_params:
            if kind == "output":
                try:
                    buf = result[name] = out[name] if out and name in out else np.empty(outs[name], dtype)
                except MemoryError:
                    return None                     # the full path says it cannot allocate
                args.append(from_buffer(ctype, buf))
            elif kind == "size":
                args.append(sizes[name])
            else:
                args.append(from_buffer(ctype, arrays[name]))
        for name in self.aligned:
            if arrays[name].__array_interface__["data"][0] % 8:
                return None                         # the full path raises the message
        if self.signature.workspace:
            args.append(self._workspace_for(ws))
        self._check_rc(self._fn(*args))
        return result

    def _workspace_for(self, need: int):
        """This thread's scratch buffer (at least `need` bytes, 64-byte aligned), grown when
        too small: calls from several threads never share one."""
        buf = getattr(self._ws, "buf", None)
        if buf is None or buf.size < need + 64:
            buf = self._ws.buf = np.empty(need + 64, np.uint8)
            addr = buf.ctypes.data
            self._ws.ptr = self._ffi.cast("void *", addr + (-addr) % 64)
        return self._ws.ptr

    def _check_rc(self, rc: int) -> None:
        if rc != 0:
            raise return_code_error(self.signature.fname, rc, self.aligned)

    def __call__(self, out: dict | None = None, **arrays) -> dict:
        """Run the kernel: inputs by name as numpy arrays, CPU torch tensors or DLPack
        objects (no copies; bf16 as uint16 bit patterns, ml_dtypes.bfloat16 or torch
        bfloat16), C-contiguous; a size that no input's shape determines (a window length,
        say) is passed by name as an int.  Returns a dict of output name -> array (an input
        the program updates in place is returned too, as the buffer it updated): numpy
        arrays, or torch tensors (sharing their memory) when an input was a tensor.  `out`
        maps output names to preallocated C-contiguous arrays or tensors of the right dtype
        and shape, which are written and returned.

        Every argument is checked before any C runs: a wrong name, dtype, layout, shape or
        size is an ArgumentError (naming the input and what was expected); a kernel that
        needs a GPU the machine does not show is a DeviceError; scratch memory that could
        not be allocated, a MemoryError."""
        if out is not None and "out" in self._inputs:     # the program has an input named out
            arrays["out"], out = out, None
        if out is not None and not isinstance(out, dict):
            raise ArgumentError(f"out= must map output names to arrays (a dict), got {type(out).__name__}")
        if self._fast_ok:
            result = self._fast_call(arrays, out)
            if result is not None:
                return result
        torch_in, own = False, {}
        for k in list(arrays):
            if k in self._inputs:
                own[k] = arrays[k]
                arrays[k], t = as_array(k, arrays[k], self._declared[k])
                torch_in |= t
        sizes = self._bind(arrays)
        self.check_data(arrays, sizes)
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
            args.append(self._workspace_for(int(self._ws_bytes(*[sizes[p.name] for p in self.signature.params
                                                                 if p.kind == "size"]))))
        self._check_rc(self._fn(*args))
        if torch_in:
            outs = {k: (v if _is_torch(v) else _as_torch(v, self._dtype.get(k, ""))) for k, v in outs.items()}
        # the caller's own objects back: its out= arrays, and the inputs updated in place
        outs.update({k: out[k] for k in given} if out else {})
        outs.update({k: own[k] for k in self._updated if k in outs and _is_torch(own[k])})
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
            a, _ = as_array(p.name, out[p.name], p.dtype, out=True)
            want = tuple(int(s) for s in self._binding.output_shape(p.name, sizes))
            ok = dtypes.accepts(p.dtype, a) if p.dtype and isinstance(a, np.ndarray) else \
                isinstance(a, np.ndarray) and a.dtype == _np_dtype(p)
            if not ok or a.shape != want:
                what = dtypes.describe(p.dtype) if p.dtype else _np_dtype(p).name
                raise ArgumentError(f"out['{p.name}'] must be a {what} array of shape {want}, got "
                                    f"{getattr(a, 'dtype', type(a).__name__)} {getattr(a, 'shape', '')}")
            if not a.flags.c_contiguous or not a.flags.writeable:
                raise ArgumentError(f"out['{p.name}'] must be C-contiguous and writeable")
            for i in self._inputs:
                if np.may_share_memory(a, arrays[i]):
                    raise ArgumentError(f"out['{p.name}'] shares memory with input '{i}' (pass another array)")
            for o, b in views.items():
                if np.may_share_memory(a, b):
                    raise ArgumentError(f"out['{p.name}'] shares memory with out['{o}']: each output needs "
                                        "memory of its own")
            views[p.name] = a
        return views

    bench = _bench         # kern.bench(reps=…, **arrays) -> Timing (moac/jit/bench.py)

    def _summary(self) -> tuple:
        """(the parameter rows, the labelled facts) that the notebook displays show."""
        from ..front.core import show_shape
        from ..dnf import fmt_index
        import sympy as sp
        rows = [(p.name, p.kind, p.ctype, show_shape(p.shape) if p.kind != "size" else "") for p in self.signature.params]
        fixed = ", ".join(f"{k} = {v}" for k, v in self.onf.fixed.items())
        facts = [("target", self.onf.target), ("plan", self.onf.plan), ("fixed sizes", fixed or "none"),
                 ("DRAM bytes", fmt_index(sp.factor(self.onf.traffic))),
                 ("minimum", fmt_index(sp.factor(self.onf.minimum))), ("flops", fmt_index(sp.factor(self.onf.flops))),
                 ("library", str(self.library))]
        return rows, facts

    def _repr_pretty_(self, p, cycle: bool) -> None:       # IPython: the signature and the counts
        from ..show import pretty
        rows, facts = self._summary()
        width = max(len(r[0]) for r in rows) if rows else 0
        lines = [repr(self), "parameters:"] + [f"  {n:{width}}  {k:6} {c:7} {s}".rstrip() for n, k, c, s in rows]
        lines += [f"{label:12} {text}" for label, text in facts]
        lines.append(f"C source     {len(self.c_source):,} characters (kern.c_source)")
        pretty(self, p, cycle, "\n".join(lines))

    def _repr_html_(self) -> str:                           # Jupyter: the same, and the C source folded
        from html import escape
        from ..show import html, table
        rows, facts = self._summary()
        body = (table(("parameter", "kind", "C type", "shape"), rows)
                + "<table>" + "".join(f"<tr><th>{escape(k)}</th><td>{escape(v)}</td></tr>" for k, v in facts)
                + "</table>")
        return html(repr(self), self.c_source, body, f"C source ({len(self.c_source):,} characters)")
