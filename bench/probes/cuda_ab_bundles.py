"""Probe only: what the CUDA A/B build scripts of bench/probes share (cuda_q_ab_build.py,
cuda_chunk_cap_build.py, cuda_rev_ab_build.py): the bundles of a variant compiled from a
tree of moac, a detached worktree of a revision to compile them from, and the spec that
bench/gpu_ab.py reads."""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
import gpu_cases  # noqa: E402

GQA, D = gpu_cases.GQA, gpu_cases.D
# bundle: example, K/V dtype, compile-time sizes
BUNDLES = {"gqa_bf16": ("decode_gqa", "bf16", GQA), "gqab_bf16": ("decode_gqa_batched", "bf16", GQA),
           "mha_bf16": ("decode_mha", "bf16", D), "gqab_fp8": ("decode_gqa_fp8", "f8e4m3", GQA)}


def sources(bundles: dict, out: Path) -> dict:
    """{bundle: the .moa source written into out} (gpu_cases.source)."""
    return {b: gpu_cases.source(ex, kv, out) for b, (ex, kv, _) in bundles.items()}


def compile_bundles(bundles: dict, srcs: dict, out: Path, label: str, tree: Path = ROOT, env: dict | None = None):
    """Each bundle compiled for cuda by the moac of `tree` into out/<bundle>_<label>.{cu,so,json},
    with `env` added to the environment."""
    for b, (_, _, fixed) in bundles.items():
        subprocess.run([sys.executable, "-m", "moac", "compile", str(srcs[b]), "--target", "cuda",
                        "--offload", "nvptx", "-o", str(out / f"{b}_{label}.cu")]
                       + [f"-D{k}={v}" for k, v in fixed.items()],
                       cwd=tree, check=True, env={**os.environ, "PYTHONPATH": str(tree), **(env or {})})


@contextlib.contextmanager
def worktree(rev: str, label: str):
    """A detached worktree of this repository at `rev`, removed afterwards."""
    tree = Path(tempfile.mkdtemp(prefix=f"moac_{label}_")) / "tree"
    subprocess.run(["git", "worktree", "add", "--detach", "-q", str(tree), rev], cwd=ROOT, check=True)
    try:
        yield tree
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT, check=True)
        shutil.rmtree(tree.parent, ignore_errors=True)


def write_spec(out: Path, cases: list, labels: list) -> None:
    """out/spec.json for bench/gpu_ab.py: each case (name, bundle, run-time sizes, SDPA shape)
    with a variant per label, the first the reference of max|Δ|."""
    spec = [{"name": name, "sizes": sizes, "sdpa": sdpa, "variants": [[label, f"{b}_{label}.json"] for label in labels]}
            for name, b, sizes, sdpa in cases]
    (out / "spec.json").write_text(json.dumps(spec, indent=1) + "\n")
