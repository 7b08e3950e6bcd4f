"""The OpenACC runtime a GPU bundle carries (DIR/lib/: libgomp and its nvptx plugin), set
up for the bench runners on the GPU machine (gpu_run.py, gpu_check.py)."""
from __future__ import annotations

import ctypes
import os
import sys
from pathlib import Path


def bundle_runtime(libdir: Path) -> ctypes.CDLL | None:
    """Make the bundled libgomp the process's, or return None where the bundles carry none
    (CUDA bundles).  libgomp finds its nvptx plugin through the loader's search path, which
    is read at start-up: without `libdir` on LD_LIBRARY_PATH the script re-executes itself
    with it (and ACC_DEVICE_TYPE=nvidia, so a missing GPU is an error, not a host run).
    Call it before `import torch`: torch ships its own libgomp.so.1 with the same soname but
    without the plugin, and whichever loads first wins."""
    libdir = libdir.resolve()
    if not libdir.is_dir():
        return None
    if str(libdir) not in os.environ.get("LD_LIBRARY_PATH", "").split(":"):
        env = dict(os.environ, LD_LIBRARY_PATH=f"{libdir}:{os.environ.get('LD_LIBRARY_PATH', '')}")
        env.setdefault("ACC_DEVICE_TYPE", "nvidia")
        os.execve(sys.executable, [sys.executable] + sys.argv, env)
    return ctypes.CDLL(str(libdir / "libgomp.so.1"), mode=ctypes.RTLD_GLOBAL)
