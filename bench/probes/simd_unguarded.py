"""A bench/cpu_ab.py variant: the openmp lowering as it was before its AVX-512 guard (commit
b7f721c's moac/emit/simd.py, read from git), i.e. the explicit 16-float vectors whatever the
build's flags.  With FLAGS from the environment (MOAC_AB_FLAGS, e.g. "-march=x86-64-v3"),
so that a build without AVX-512 can be compared with the guarded one's `#else` branch:

    MOAC_AB_FLAGS=-march=x86-64-v3 OMP_NUM_THREADS=1 python3 bench/cpu_ab.py gqa_bf16_n4k \\
        bench/probes/simd_unguarded.py bench/probes/flags_only.py --n 1024 --warm --rounds 100
"""
import dataclasses
import importlib.util
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from moac.emit import codegen

ROOT = Path(__file__).resolve().parents[2]
_text = subprocess.run(["git", "-C", str(ROOT), "show", "b7f721c:moac/emit/simd.py"],
                       capture_output=True, text=True, check=True).stdout
_path = Path(tempfile.mkdtemp(prefix="moac_simd_")) / "simd_unguarded.py"
_path.write_text(_text.replace('HELPER = "moac_v16"', 'HELPER = "moac_v16u"'))
_spec = importlib.util.spec_from_file_location("moac.emit.simd_unguarded", _path)
old = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = old
_spec.loader.exec_module(old)
codegen.OPTIONAL_HELPERS[old.HELPER] = old.HELPER_TEXT

FLAGS = os.environ.get("MOAC_AB_FLAGS", "").split()
TARGET = lambda t: dataclasses.replace(t, lower=old.lower)     # noqa: E731
