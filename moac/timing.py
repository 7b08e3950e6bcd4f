"""What `moac -v` and `--time` print: each stage's wall time and the commands moac ran.

Off unless the command line turns it on (`start`); a stage then costs one perf_counter pair.
The log is the process's, for the one command the CLI runs (not for concurrent use).
"""
from __future__ import annotations

import contextlib
import time

_LOG: list | None = None


def start() -> None:
    global _LOG
    _LOG = []


def take() -> list:
    """The (label, seconds or None) entries so far; logging stops."""
    global _LOG
    log, _LOG = _LOG or [], None
    return log


@contextlib.contextmanager
def stage(name: str):
    if _LOG is None:
        yield
        return
    t0 = time.perf_counter()
    try:
        yield
    finally:
        _LOG.append((name, time.perf_counter() - t0))


def note(text: str) -> None:
    """A line without a time: a command moac ran, a cache hit."""
    if _LOG is not None:
        _LOG.append((text, None))


def render(log: list) -> str:
    width = max((len(n) for n, t in log if t is not None), default=0)
    total = sum(t for _, t in log if t is not None)
    lines = [f"moac: {n:<{width}} {t * 1e3:8.1f} ms" if t is not None else f"moac: {n}" for n, t in log]
    lines.append(f"moac: {'total':<{width}} {total * 1e3:8.1f} ms (the stages above; Python's start is not counted)")
    return "\n".join(lines)
