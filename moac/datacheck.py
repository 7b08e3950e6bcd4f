"""Conditions on integer inputs (every lens[b] ≤ N, every page number < P) as plain numpy
functions, for the call paths of the host Kernel and of moac.gpu's DeviceKernel: no sympy
here.  front/data.py prints a condition as the two pieces of source this module compiles
(the extents of its quantified indices and the test over them); a GPU bundle's manifest
carries them as text."""
from __future__ import annotations

import numpy as np


def make_grid(extents: str, test: str):
    """`grid(A, S) -> ndarray`: the value of `test` at every index of the quantified
    indices, A the integer inputs by name (numpy), S the sizes by name; the indices are
    G[0], G[1], … (broadcast aranges over `extents`), the result broadcast to their extents.
    An integer `mod` or `⌊/⌋` by 0 (a size fixed to 0) is 0, numpy's value and moac's
    (moac.dnf.walk.replace_sizes), without numpy's warning."""
    code = (f"def grid(A, S):\n"
            f"    n = {extents}\n"
            f"    G = [np.arange(x, dtype=np.int64).reshape((1,) * k + (-1,) + (1,) * (len(n) - k - 1))\n"
            f"         for k, x in enumerate(n)]\n"
            f"    with np.errstate(divide='ignore'):\n"
            f"        return np.broadcast_to({test}, n)\n")
    scope = {"np": np, "distinct": distinct}
    exec(compile(code, "<moac data condition>", "exec"), scope)     # moac's own printed source
    return scope["grid"]


def distinct(extents: tuple, keys: tuple) -> bool:
    """Whether the key tuples (arrays broadcast over the grid `extents`) are pairwise
    distinct: a scatter writes each element at most once."""
    if not keys:
        return int(np.prod(extents)) <= 1
    cols = [np.broadcast_to(np.asarray(k, dtype=np.int64), extents).ravel() for k in keys]
    rows = np.stack(cols, axis=1) if len(cols) > 1 else cols[0]
    return len(np.unique(rows, axis=0)) == len(rows)


def make_check(extents: str, test: str):
    """`ok(A, S) -> bool`: whether the condition `test` holds at every index (make_grid)."""
    grid = make_grid(extents, test)
    return lambda A, S: bool(np.all(grid(A, S)))
