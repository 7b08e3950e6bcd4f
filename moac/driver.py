"""The back half's driver: one line per stage, every intermediate kept.

    DNF --DNF passes, plans--> Schedule --count--> Counts
        --to_cunit--> C unit (the one sympy -> C crossing) --to_c--> C text --build--> Kernel
"""
from __future__ import annotations

import os
from dataclasses import dataclass

from .emit.codegen import Signature, signature, to_c
from .emit.cuda import to_cuda
from .emit.freeze import CUnit, to_cunit
from .options import Options
from .schedule import to_schedule
from .schedule.counts import Counts, count
from .schedule.ir import Schedule
from .schedule.onf import ONF
from .targets import get_target
from .timing import stage

PRINTERS = {"c": to_c, "cuda": to_cuda}     # a target's `printer` -> the function that writes its source


@dataclass(frozen=True)
class Artifacts:
    options: Options
    schedule: Schedule
    counts: Counts
    onf: ONF
    cunit: CUnit
    signature: Signature
    c_source: str


def lower(dnf, opts: Options) -> Artifacts:
    target = get_target(opts.target)
    with stage("to_schedule (passes, plan)"):
        sched = to_schedule(dnf, opts)          # stage 4: DNF passes, a plan -> Schedule
    with stage("count (traffic, flops)"):
        counts = count(sched)                    # traffic, flops, coalescing: pure functions of it
    if os.environ.get("MOAC_VERIFY") == "1":
        from .verify import verify_schedule
        verify_schedule(sched)
    with stage("to_cunit (C IR)"):
        unit = to_cunit(sched, counts, target, opts.index_bits)   # stage 5a: Schedule -> C IR
    sig = signature(sched)
    with stage(f"to_{target.printer} (text)"):
        src = PRINTERS[target.printer](unit, sig, target)   # stage 5b: C IR -> C (or CUDA) text
    if os.environ.get("MOAC_VERIFY") == "1":
        from .verify import verify_cunit
        verify_cunit(unit, tuple(p.cname for p in sig.params))
    return Artifacts(opts, sched, counts, ONF(sched, counts, opts.mapping), unit, sig, src)
