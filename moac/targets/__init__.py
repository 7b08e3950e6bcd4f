"""The code generation targets, one file each: a module of this package that defines
TARGET is a target (adding one = one file plus its tests).  openacc is the default."""
from __future__ import annotations

import importlib
import pkgutil

from .base import Target

_ORDER = ("openacc", "openmp", "c")       # how the CLI lists the built-in ones


def _discover() -> dict:
    found = {}
    for info in pkgutil.iter_modules(__path__):
        mod = importlib.import_module(f"{__name__}.{info.name}")
        t = getattr(mod, "TARGET", None)
        if isinstance(t, Target):
            found[t.name] = t
    return {n: found[n] for n in sorted(found, key=lambda n: (_ORDER.index(n) if n in _ORDER else len(_ORDER), n))}


TARGETS: dict[str, Target] = _discover()


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
