"""Kernel.bench (this module's bench, a method of moac.jit.kernel.Kernel): calls of a kernel
timed, and the Timing they give."""
from __future__ import annotations

import gc
import math
import time
from dataclasses import dataclass

import numpy as np

from ..errors import ArgumentError
from .arrays import as_array


def bench(kernel, *, reps: int = 100, warmup: int = 3, min_time: float = 0.0, **arrays) -> "Timing":
    """Time calls of the kernel on these inputs (named as for a call): `warmup` untimed
    calls, then at least `reps` timed ones, and more until the timed calls add up to
    `min_time` seconds.  The outputs are allocated once, by the first call, and every
    later call writes them through out=, so no allocation is timed (except for a program
    with an input named out, which a call cannot give out=); a timed call is a whole
    `kern(out=..., **arrays)`, its argument checks included.  An input the program
    updates in place is copied first (the caller's array is left as it was) and the
    copy is updated by every call.  The garbage collector is off while calls are timed.
    Returns a Timing: the samples, and the ONF's DRAM bytes and flops at these sizes."""
    for name, v, least in (("reps", reps, 1), ("warmup", warmup, 0)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < least:
            raise ArgumentError(f"bench: {name} must be an integer of at least {least}, got {v!r}")
    if isinstance(min_time, bool) or not isinstance(min_time, (int, float)) or not 0 <= min_time < math.inf:
        raise ArgumentError(f"bench: min_time must be a finite number of seconds >= 0, got {min_time!r}")
    taken = sorted({"reps", "warmup", "min_time"} & (kernel._inputs | kernel._size_names))
    if taken:
        raise ArgumentError(f"bench: the program names {', '.join(taken)}, which are bench's own keywords; "
                            "time calls of the kernel in a loop of your own")
    for name in sorted(kernel._updated & set(arrays)):
        a, _ = as_array(name, arrays[name])
        if isinstance(a, np.ndarray) and a.flags.c_contiguous:    # else the call says what is wrong
            arrays[name] = a.copy()
    first = kernel(**arrays)                   # checks everything, allocates the outputs
    sizes = kernel._bind({k: (as_array(k, v)[0] if k in kernel._inputs else v) for k, v in arrays.items()})
    out = None if "out" in kernel._inputs else \
        {p.name: first[p.name] for p in kernel.signature.params if p.kind == "output"}
    del first
    call = (lambda: kernel(**arrays)) if out is None else (lambda: kernel(out=out, **arrays))
    for _ in range(int(warmup)):
        call()
    samples = []
    clock = time.perf_counter
    gc_was_on = gc.isenabled()
    gc.disable()
    try:
        total = 0.0
        while len(samples) < reps or total < min_time:
            t = clock()
            call()
            dt = clock() - t
            samples.append(dt)
            total += dt
    finally:
        if gc_was_on:
            gc.enable()
    from ..cost import counts_at
    traffic, minimum, flops = counts_at(kernel.onf, sizes)
    return Timing(kernel.signature.fname, tuple(samples), int(warmup), tuple(sorted(sizes.items())),
                  traffic, minimum, flops)


def _seconds(t: float) -> str:
    """A time in the unit that gives it three significant figures or so."""
    for unit, k in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)):
        if t >= k:
            return f"{t / k:.3g} {unit}"
    return f"{t / 1e-9:.3g} ns"


@dataclass(frozen=True)
class Timing:
    """What Kernel.bench measured: seconds per call, and the ONF's counts for one call at
    the call's sizes; the rates are those of the best time."""
    kernel: str              # the C entry
    samples: tuple           # seconds of each timed call, in the order they ran
    warmup: int              # untimed calls before them
    sizes: tuple             # (name, value) of every size of the call
    dram_bytes: int          # the DRAM bytes the ONF counts for one call (its traffic)
    minimum_bytes: int       # each input element the outputs need read once, each output written once
    flops: int

    @property
    def reps(self) -> int:
        return len(self.samples)

    @property
    def best(self) -> float:
        return min(self.samples)

    @property
    def median(self) -> float:
        import statistics
        return statistics.median(self.samples)

    @property
    def mean(self) -> float:
        return sum(self.samples) / len(self.samples)

    @property
    def gbps(self) -> float:
        """Counted DRAM bytes per second at the best time, in GB/s (10^9 bytes)."""
        return self.dram_bytes / self.best / 1e9 if self.best > 0 else float("inf")

    @property
    def gflops(self) -> float:
        """Counted flops per second at the best time, in GFLOP/s."""
        return self.flops / self.best / 1e9 if self.best > 0 else float("inf")

    def __str__(self) -> str:
        sizes = " ".join(f"{k}={v}" for k, v in self.sizes)
        return (f"{self.kernel}{' (' + sizes + ')' if sizes else ''}: best {_seconds(self.best)}, median "
                f"{_seconds(self.median)}, mean {_seconds(self.mean)} over {self.reps} calls; "
                f"{self.dram_bytes:,} DRAM bytes, {self.flops:,} flops per call: {self.gbps:.3g} GB/s, "
                f"{self.gflops:.3g} GFLOP/s at the best time")

    def __repr__(self) -> str:
        return f"<moac Timing of {self}>"
