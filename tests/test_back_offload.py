"""The GPU bundle: `moac compile --target openacc --offload nvptx` builds on a CPU machine
with gcc-12-offload-nvptx, and the shared library carries PTX for sm_80 (GPU.md: GCC 12
defaults to sm_35, which the CUDA 13 ptxas rejects).  Skipped where the nvptx offload
compiler is not installed; CI installs it."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from test_back_common import moac_cli


def _gcc_print(flag: str) -> str:
    try:
        return subprocess.run(["gcc", flag], capture_output=True, text=True, check=False).stdout.strip()
    except OSError:
        return ""


def _offload_available() -> tuple[bool, str]:
    plugin = Path(_gcc_print("-print-file-name=libgomp-plugin-nvptx.so.1"))
    if not (plugin.is_absolute() and plugin.exists()):
        return False, "libgomp-plugin-nvptx.so.1 not found (install gcc-12-offload-nvptx)"
    install = next((ln.split(":", 1)[1].strip() for ln in _gcc_print("-print-search-dirs").splitlines()
                    if ln.startswith("install:")), "")
    candidates = [Path(install) / "accel" / "nvptx-none" / "mkoffload",
                  Path("/usr/lib/gcc/x86_64-linux-gnu/12/accel/nvptx-none/mkoffload")]
    if not any(p.exists() for p in candidates):
        return False, "the nvptx mkoffload is missing (install gcc-12-offload-nvptx)"
    return True, ""


_OK, _WHY = _offload_available()
pytestmark = [pytest.mark.offload, pytest.mark.skipif(not _OK, reason=_WHY)]


def test_offload_bundle_embeds_sm80_ptx(tmp_path):
    out = tmp_path / "tmp" / "decode.c"
    out.parent.mkdir()
    r = moac_cli("compile", "examples/decode.moa", "--target", "openacc", "--offload", "nvptx",
                 "-D", "dk=128", "-D", "dv=128", "-o", str(out))
    assert r.returncode == 0, r.stdout + r.stderr
    so = out.with_suffix(".so")
    assert out.exists() and so.exists()
    data = so.read_bytes()
    assert b".target sm_80" in data, "no sm_80 PTX embedded in the offload library"
    assert b".target sm_35" not in data
    assert b"moac_decode_device" in data and b"moac_decode" in data
    manifest = json.loads(out.with_suffix(".json").read_text())
    assert manifest["function"] == "moac_decode"
    assert manifest["fixed"] == {"dk": 128, "dv": 128}
    assert "-foffload-options=nvptx-none=-misa=sm_80" in manifest["flags"]
    for lib in ("libgomp.so.1", "libgomp-plugin-nvptx.so.1"):
        assert (tmp_path / "tmp" / "lib" / lib).exists(), lib
    # the C beside it is the same text as a plain compile
    plain = moac_cli("compile", "examples/decode.moa", "--target", "openacc", "-D", "dk=128", "-D", "dv=128")
    assert plain.returncode == 0 and plain.stdout == out.read_text()


def test_offload_needs_openacc_target(tmp_path):
    r = moac_cli("compile", "examples/decode.moa", "--target", "c", "--offload", "nvptx",
                 "-o", str(tmp_path / "x.c"))
    assert r.returncode != 0
    assert "Traceback" not in r.stderr
    assert "--offload nvptx needs --target openacc" in r.stderr
