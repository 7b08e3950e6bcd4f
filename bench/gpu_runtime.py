"""Puts this repository's moac on sys.path (the GPU machine has the tree, not an installed
moac; moac.gpu needs neither sympy nor a compiler) and sets up a bundle's OpenACC runtime
for the bench runners (gpu_run.py, gpu_check.py): moac.gpu.runtime.load_runtime."""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from moac.gpu.runtime import load_runtime  # noqa: E402


def bundle_runtime(libdir: Path):
    """Make the bundled libgomp the process's, or return None where the bundles carry none
    (CUDA bundles).  Without `libdir` on LD_LIBRARY_PATH the script re-executes itself
    with it (and ACC_DEVICE_TYPE=nvidia, so a missing GPU is an error, not a host run).
    Call it before `import torch`: torch ships its own libgomp.so.1 with the same soname
    but without the plugin, and whichever loads first wins."""
    return load_runtime(libdir, reexec=True)
