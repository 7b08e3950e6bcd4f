"""Where a frozen unit keeps its buffers: the gang buffers a target keeps on chip, the
buffers a kernel stores to (its packed reads of them avoid a read-only path), and the
scratch the frozen code never names (scratch only lane passes use, which a target's tiles
replace, is not allocated)."""
from __future__ import annotations

import re

from ..schedule.ir import Schedule, Store, arrays_touched
from .cir import names_in


def on_chip_buffers(s: Schedule, target) -> set:
    """The gang-placed buffers a target with gang memory keeps on chip: per kernel the first
    (by name) it touches; a kernel's other gang buffers (the score partials beside the
    scores) stay in device memory, as on a target without gang memory."""
    if not target.gang_memory:
        return set()
    gang = {b.name for b in s.buffers if b.placement == "gang"}
    out, rest = set(), set()
    for k in s.kernels:
        mine = sorted(gang & arrays_touched(k.body, set()))
        out.update(mine[:1])
        rest.update(mine[1:])
    return out | (gang - out - rest)


def stored(body, out: set) -> set:
    """The buffers a Schedule subtree stores to."""
    for st in body:
        if isinstance(st, Store):
            out.add(st.array)
        for fld in ("body", "then", "other"):
            sub = getattr(st, fld, None)
            if isinstance(sub, tuple):
                stored(sub, out)
    return out


def unused_scratch(s: Schedule, kernels, mangle) -> set:
    """The scratch buffers the frozen kernels' code never names (`mangle`: a buffer's C name)."""
    text = "\n".join(names_in(tuple(k.code for k in kernels), set()))
    return {b.name for b in s.buffers if b.role == "scratch" and not re.search(rf"\b{mangle(b.name)}\b", text)}
