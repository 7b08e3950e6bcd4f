"""The OpenACC runtime an OpenACC bundle carries (DIR/lib/: libgomp.so.1 and its nvptx
plugin), made the process's libgomp.

The bundle's library needs `libgomp.so.1` by soname, and libgomp loads its plugin by the
bare name `libgomp-plugin-nvptx.so.1`; the dynamic loader answers both with a library
already loaded under that soname.  So `load_runtime` loads both files by absolute path,
globally, before the bundle's library: no LD_LIBRARY_PATH is needed.  That only works
while no other libgomp.so.1 is loaded: torch ships its own (without the nvptx plugin) and
loads it at `import torch`, so load OpenACC bundles before importing torch (torch then
uses the bundle's libgomp), or start Python with LD_LIBRARY_PATH=DIR/lib, which torch's
loader search honours too.  A conflict is an error, not a silent host run.

`load_runtime(libdir, reexec=True)` is the bench scripts' older way: where DIR/lib is not
on LD_LIBRARY_PATH the process re-executes itself with it and with ACC_DEVICE_TYPE=nvidia.
"""
from __future__ import annotations

import ctypes
import filecmp
import os
import sys
from pathlib import Path

from ..errors import MoacError

ACC_DEVICE_NVIDIA = 5          # acc_device_nvidia in GCC's openacc.h
GOMP = "libgomp.so.1"
PLUGIN = "libgomp-plugin-nvptx.so.1"
_LOADED: dict = {}             # resolved lib dir -> the libgomp CDLL (never unloaded)


class _DlInfo(ctypes.Structure):
    _fields_ = [("dli_fname", ctypes.c_char_p), ("dli_fbase", ctypes.c_void_p),
                ("dli_sname", ctypes.c_char_p), ("dli_saddr", ctypes.c_void_p)]


def loaded_path(soname: str, symbol: str) -> str | None:
    """The file of the library loaded under `soname` (found through one of its symbols),
    or None where none is loaded."""
    try:
        lib = ctypes.CDLL(soname, mode=os.RTLD_NOLOAD)
        addr = ctypes.cast(getattr(lib, symbol), ctypes.c_void_p).value
    except (OSError, AttributeError):
        return None
    info = _DlInfo()
    libc = ctypes.CDLL(None)
    libc.dladdr.argtypes = [ctypes.c_void_p, ctypes.POINTER(_DlInfo)]
    if not libc.dladdr(addr, ctypes.byref(info)) or not info.dli_fname:
        return "(unknown file)"
    return os.path.realpath(info.dli_fname.decode(errors="replace"))


def _same(a: str, b: Path) -> bool:
    try:
        return os.path.samefile(a, b) or filecmp.cmp(a, b, shallow=False)
    except OSError:
        return False


def load_runtime(libdir, reexec: bool = False) -> ctypes.CDLL | None:
    """Make the bundle's libgomp (and its nvptx plugin) the process's and return it, or
    None where `libdir` holds no libgomp (a CUDA bundle needs none).  MoacError where
    another libgomp.so.1 is loaded already (see the module's docstring)."""
    libdir = Path(libdir).resolve()
    gomp = libdir / GOMP
    if not gomp.is_file():
        return None
    if libdir in _LOADED:
        return _LOADED[libdir]
    if reexec and str(libdir) not in os.environ.get("LD_LIBRARY_PATH", "").split(":"):
        env = dict(os.environ, LD_LIBRARY_PATH=f"{libdir}:{os.environ.get('LD_LIBRARY_PATH', '')}")
        env.setdefault("ACC_DEVICE_TYPE", "nvidia")
        argv = list(getattr(sys, "orig_argv", [sys.executable] + sys.argv))   # keeps -m, -X
        sys.stdout.flush()
        os.execve(sys.executable, [sys.executable] + argv[1:], env)
    other = loaded_path(GOMP, "omp_get_num_threads")
    if other is not None and not _same(other, gomp):
        raise MoacError(f"another {GOMP} is loaded already ({other}; torch ships one, without the nvptx plugin), "
                        f"so the bundle's {gomp} cannot be the process's: load OpenACC bundles before "
                        f"`import torch`, or start Python with LD_LIBRARY_PATH={libdir}")
    try:                                      # the same file, or a copy of it, loaded: use that one
        lib = ctypes.CDLL(GOMP if other else str(gomp), mode=os.RTLD_GLOBAL | (os.RTLD_NOLOAD if other else 0))
        if (libdir / PLUGIN).is_file() and loaded_path(PLUGIN, "GOMP_OFFLOAD_get_name") is None:
            ctypes.CDLL(str(libdir / PLUGIN), mode=os.RTLD_GLOBAL)   # libgomp asks for it by soname
    except OSError as e:
        raise MoacError(f"cannot load the bundle's OpenACC runtime in {libdir}: {e}") from None
    lib.acc_get_num_devices.restype = ctypes.c_int
    lib.acc_get_num_devices.argtypes = [ctypes.c_int]
    lib.acc_set_device_num.restype = None
    lib.acc_set_device_num.argtypes = [ctypes.c_int, ctypes.c_int]
    lib.acc_get_current_cuda_context.restype = ctypes.c_void_p
    _LOADED[libdir] = lib
    return lib
