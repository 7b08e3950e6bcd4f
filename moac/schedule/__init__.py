"""Stage 4: DNF -> Schedule (the hardware mapping tree) and its counts."""
from __future__ import annotations

from ..dnf.passes import PASSES
from ..targets import get_target
from .ir import Schedule
from .lower import Context
from .plans import choose


def to_schedule(dnf, opts) -> Schedule:
    """Run the DNF passes, choose the first plan that fits and let it build the Schedule."""
    target = get_target(opts.target)
    stmts = tuple(dnf.stmts)
    for p in PASSES:
        stmts = p(stmts)
    ctx = Context(dnf, target, opts.size_dict, dict(opts.storage))
    plan, m, declined = choose(stmts, ctx, opts)
    plan.schedule(ctx, m, opts)
    prog = dnf.program
    params = tuple(s.name for s in prog.sizes if s.name not in ctx.fixed)
    return Schedule(dnf, plan.NAME, plan.describe(m), declined, target.name, dict(ctx.fixed), params, ctx.dtype,
                    tuple(ctx.buffers.values()), tuple(ctx.kernels), tuple(ctx.choices), tuple(ctx.lifts),
                    tuple(m.stmts), tuple(ctx.notes))
