"""AddressSanitizer and UndefinedBehaviorSanitizer over every example's kernels on edge
sizes (tests/sanitize_run.py in a subprocess with the sanitizer runtimes preloaded), and
a check that the harness does catch an out-of-bounds read."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def _runtimes() -> str | None:
    libs = []
    for name in ("libasan.so", "libubsan.so"):
        p = subprocess.run(["gcc", f"-print-file-name={name}"], capture_output=True, text=True).stdout.strip()
        if not os.path.isabs(p) or not os.path.exists(p):
            return None
        libs.append(p)
    return " ".join(libs)


PRELOAD = _runtimes() if shutil.which("gcc") else None
pytestmark = pytest.mark.skipif(PRELOAD is None, reason="gcc's sanitizer runtimes are not installed")


def _run(args: list, timeout: float = 600) -> subprocess.CompletedProcess:
    env = dict(os.environ, LD_PRELOAD=PRELOAD, ASAN_OPTIONS="detect_leaks=0:abort_on_error=0:exitcode=23",
               UBSAN_OPTIONS="halt_on_error=1:exitcode=24", MOAC_NATIVE="0",
               PYTHONPATH=os.pathsep.join([str(ROOT), str(HERE)] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else [])))
    return subprocess.run([sys.executable] + args, cwd=HERE, env=env, capture_output=True, text=True, timeout=timeout)


# the test suite's slice: one example for each code path the kernels take (batched GQA
# with packed words, 8-bit storage, min extents, an in-place update with a catenation,
# and split-K over a length read from data with indices read from a page table);
# `python tests/sanitize_run.py` runs every example (docs/reliability.md)
SLICE = ["decode_paged", "decode_gqa_batched", "decode_gqa_fp8", "decode_sinks", "decode_step"]


def test_the_examples_are_clean_under_the_sanitizers():
    r = _run([str(HERE / "sanitize_run.py"), *SLICE])
    assert r.returncode == 0, f"exit {r.returncode}\n{r.stdout[-3000:]}\n{r.stderr[-6000:]}"
    assert "no finding" in r.stdout and "AddressSanitizer" not in r.stderr and "runtime error" not in r.stderr


def test_the_harness_catches_an_out_of_bounds_read(tmp_path):
    """The same preload and flags on a kernel made to read one element past its input."""
    script = tmp_path / "oob.py"
    script.write_text(
        "import numpy as np, moac\n"
        "from moac.jit import build\n"
        "from moac.jit.kernel import Kernel\n"
        "prog = moac.parse('size n\\ninput x : f32 ⟨n⟩\\ny = x + 1\\noutput y\\n', 'oob.moa')\n"
        "art = prog.lower(moac.options.Options.make(target='c'))\n"
        "src = art.c_source.replace('x_[i_]', 'x_[i_ + 1]')\n"
        "assert src != art.c_source\n"
        "flags = build.compile_flags('c') + ['-fsanitize=address', '-fno-omit-frame-pointer', '-g', '-O1']\n"
        "lib = build.build_library(src, flags)\n"
        "k = Kernel(art.onf, src, lib, art.signature, flags, ())\n"
        "k(x=np.ones(5, np.float32))\n"
        "print('no finding')\n", encoding="utf-8")
    r = _run([str(script)], timeout=120)
    assert r.returncode == 23 and "heap-buffer-overflow" in r.stderr, r.stderr[-2000:]
