"""C source -> loaded kernel (stage 6: `build`).

gcc runs without a shell; libraries live in a content-hashed cache (key = C source
+ compiler argv + compiler version + moac version) and are named by the key, so a
changed kernel never reuses a stale dlopen handle.  A library is built into a
temporary file and renamed into place, which makes concurrent builds of the same
key safe.  cffi loads it in ABI mode from the same Signature that printed the C
prototype; a call checks dtype, layout and shapes before any C runs.
"""
from __future__ import annotations

import functools
import hashlib
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from . import dtypes
from .binding import freeze_binding
from .emit.codegen import Signature
from .errors import ArgumentError, BuildError
from .targets import flags as target_flags

NP_DTYPE = {"float": np.float32, "double": np.float64}
BASE_FLAGS = ("-O3", "-std=gnu11", "-fPIC", "-shared")


def cache_dir() -> Path:
    root = os.environ.get("MOAC_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "moac")
    p = Path(root)
    p.mkdir(parents=True, exist_ok=True)
    return p


@functools.cache
def compiler_version(cc: str) -> str:
    try:
        r = subprocess.run([cc, "--version"], capture_output=True, text=True, check=False)
    except OSError as e:
        raise BuildError(f"cannot run the C compiler {cc!r}: {e.strerror}", [cc, "--version"], "", "") from None
    return r.stdout.splitlines()[0] if r.stdout else cc


def compile_flags(target: str, offload: str = "none", werror: bool = False) -> list[str]:
    """The gcc flags for a target: the common ones and the target's own (a device build
    for `offload` takes the target's complete offload flag list)."""
    flags = target_flags(target, offload) if offload != "none" else list(BASE_FLAGS) + target_flags(target)
    if werror:
        flags += ["-Wall", "-Werror"]
    return flags


def write_atomic(path: str | Path, text: str) -> None:
    """Write a file so that a reader never sees it half-written."""
    path = Path(path)
    if not (path.parent if str(path.parent) else Path(".")).is_dir():
        raise FileNotFoundError(2, "no such directory", str(path.parent))
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent or ".")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def build_library(c_source: str, flags: list[str], cc: str = "gcc") -> Path:
    """Compile C source into a shared library in the cache; return its path."""
    from .version import __version__
    argv_tail = list(flags) + ["-lm"]
    key = hashlib.sha256("\0".join([c_source, " ".join([cc] + argv_tail), compiler_version(cc),
                                    __version__]).encode()).hexdigest()[:24]
    root = cache_dir()
    lib = root / f"moac_{key}.so"
    if lib.exists():
        return lib
    c_file = root / f"moac_{key}.c"
    if not c_file.exists():
        write_atomic(c_file, c_source)
    fd, tmp = tempfile.mkstemp(prefix=f".moac_{key}.", suffix=".so", dir=root)
    os.close(fd)
    argv = [cc] + list(flags) + ["-o", tmp, str(c_file), "-lm"]
    try:
        r = subprocess.run(argv, capture_output=True, text=True, check=False)
    except OSError as e:
        Path(tmp).unlink(missing_ok=True)
        raise BuildError(f"cannot run the C compiler {cc!r}: {e.strerror}", argv, "", str(c_file)) from None
    if r.returncode != 0:
        Path(tmp).unlink(missing_ok=True)
        raise BuildError(f"the C compiler failed (exit {r.returncode})", argv, r.stderr, str(c_file))
    os.replace(tmp, lib)
    return lib


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

    def _bind(self, args: dict) -> dict:
        """Check the arguments and bind every size (no sympy: see moac/binding.py)."""
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
                raise ArgumentError(f"input '{info.name}' must be a numpy array, got {type(a).__name__}")
            if not dtypes.accepts(info.dtype, a):
                raise ArgumentError(f"input '{info.name}' must have dtype {dtypes.describe(info.dtype)} "
                                    f"(declared {info.dtype}), got {a.dtype}")
            if not a.flags.c_contiguous:
                raise ArgumentError(f"input '{info.name}' must be C-contiguous (use np.ascontiguousarray)")
            if info.name in self._updated and not a.flags.writeable:
                raise ArgumentError(f"input '{info.name}' is updated in place and must be writeable")
            shapes[info.name] = a.shape
        return self._binding.bind(shapes, given)

    def __call__(self, **arrays) -> dict:
        """Run the kernel: inputs as numpy arrays by name; a size that no input's shape
        determines (a window length, say) is passed by name as an int."""
        sizes = self._bind(arrays)
        cast = self._ffi.cast
        outs, args = {}, []
        for kind, name, ptr, dtype in self._params:
            if kind == "input" or kind == "inout":
                args.append(cast(ptr, arrays[name].ctypes.data))       # kept alive by `arrays`
                if kind == "inout":
                    outs[name] = arrays[name]          # updated in place
            elif kind == "output":
                out = np.empty(self._binding.output_shape(name, sizes), dtype=dtype)
                outs[name] = out
                args.append(cast(ptr, out.ctypes.data))
            else:
                args.append(sizes[name])
        rc = self._fn(*args)
        if rc != 0:
            raise MemoryError(f"{self.signature.fname}: scratch memory could not be allocated")
        return outs


def build(art, cc: str = "gcc", werror: bool = False, extra_flags: tuple = ()) -> Kernel:
    """Build the C source of a lowering (moac.driver.Artifacts) and load it."""
    if shutil.which(cc) is None and not os.path.exists(cc):
        raise BuildError(f"C compiler {cc!r} not found", [cc], "", "")
    flags = compile_flags(art.options.target, werror=werror) + list(extra_flags)
    lib = build_library(art.c_source, flags, cc)
    return Kernel(art.onf, art.c_source, lib, art.signature, flags)
