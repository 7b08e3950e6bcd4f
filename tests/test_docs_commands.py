"""The ```console blocks of docs/*.md are executed: each `$ moac ...` line is run from the
repository root and its output must equal the lines that follow it in the block.

After an intended change of output, regenerate the blocks with
    MOAC_REGEN_DOCS=1 python -m pytest tests/test_docs_commands.py
and review the diff.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = sorted((ROOT / "docs").glob("*.md"))
BLOCK = re.compile(r"```console\n(.*?)```", re.S)


def _blocks(path: Path):
    text = path.read_text(encoding="utf-8")
    for m in BLOCK.finditer(text):
        yield m


def _commands(block: str):
    """(command, expected output lines) pairs of one console block."""
    out, cmd, lines = [], None, []
    for line in block.splitlines():
        if line.startswith("$ "):
            if cmd is not None:
                out.append((cmd, lines))
            cmd, lines = line[2:], []
        elif cmd is not None:
            lines.append(line)
    if cmd is not None:
        out.append((cmd, lines))
    return out


def run(cmd: str, env: dict) -> tuple[int, str]:
    shell_cmd = re.sub(r"(^|\|\s*|&&\s*)moac ", lambda m: f"{m.group(1)}{sys.executable} -m moac ", cmd)
    r = subprocess.run(shell_cmd, shell=True, cwd=ROOT, capture_output=True, text=True, env=env)
    return r.returncode, (r.stdout + r.stderr).rstrip("\n")


def _env(tmp_path):
    env = dict(os.environ)
    env.setdefault("MOAC_CACHE_DIR", str(tmp_path / "cache"))
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env["COLUMNS"] = "100"
    env["MOAC_NATIVE"] = "0"     # error figures of `moac check` must not depend on the CPU's SIMD width
    return env


def _cases():
    for path in DOCS:
        for k, m in enumerate(_blocks(path)):
            if _commands(m.group(1)):
                yield pytest.param(path, k, id=f"{path.name}#{k}")


@pytest.fixture(scope="module")
def outputs(tmp_path_factory):
    """Every block's commands run once, the blocks side by side on all CPUs (each block's
    commands in order, each block with a cache directory of its own): the blocks are
    independent, and one at a time they were the suite's longest serial part.
    (path, k) -> [(command, status, output), …]."""
    from concurrent.futures import ThreadPoolExecutor

    def one(case):
        path, k = case
        env = _env(tmp_path_factory.mktemp(f"{path.stem}{k}"))
        m = list(_blocks(path))[k]
        return case, [(cmd, *run(cmd, env)) for cmd, _ in _commands(m.group(1))]
    cases = [tuple(p.values) for p in _cases()]
    with ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2)) as pool:
        return dict(pool.map(one, cases))


@pytest.mark.parametrize("path,k", list(_cases()))
def test_console_block(path: Path, k: int, outputs):
    m = list(_blocks(path))[k]
    regen = os.environ.get("MOAC_REGEN_DOCS") == "1"
    new_lines = []
    for (cmd, expected), (ran, rc, out) in zip(_commands(m.group(1)), outputs[path, k]):
        assert ran == cmd
        assert "Traceback" not in out, f"{cmd} printed a traceback:\n{out}"
        if regen:
            new_lines += [f"$ {cmd}"] + ([out] if out else [])
            continue
        got = [ln.rstrip() for ln in out.splitlines()]
        want = [ln.rstrip() for ln in expected]
        assert got == want, f"output of `{cmd}` in {path.name} drifted; rerun with MOAC_REGEN_DOCS=1"
    if regen:
        text = path.read_text(encoding="utf-8")
        blocks = list(_blocks(path))
        m = blocks[k]
        text = text[:m.start(1)] + "\n".join(new_lines) + "\n" + text[m.end(1):]
        path.write_text(text, encoding="utf-8")
