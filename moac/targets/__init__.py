"""The code generation targets, one file each (adding a target = one file + its tests)."""
from __future__ import annotations

from . import c, openacc, openmp
from .base import Target

TARGETS: dict[str, Target] = {t.name: t for t in (openacc.TARGET, openmp.TARGET, c.TARGET)}


def get_target(name: str) -> Target:
    try:
        return TARGETS[name]
    except KeyError:
        raise ValueError(f"unknown target {name!r}; choose one of {', '.join(TARGETS)}") from None


def flags(name: str, offload: str = "none") -> list:
    """A target's compiler flags for a host build or a device build for `offload`."""
    f = get_target(name).flags(offload)
    if f is None:
        able = " or ".join(t.name for t in TARGETS.values() if t.flags(offload) is not None) or "(none)"
        raise ValueError(f"--offload {offload} needs --target {able}")
    return f
