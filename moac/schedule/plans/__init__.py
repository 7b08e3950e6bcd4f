"""The plans, tried in order: each module has `match(stmts, ctx, opts)` (a match, or a
string saying why it declines), `describe(match)` and `schedule(ctx, match[, opts])`.
The generic plan fits every DNF and comes last."""
from __future__ import annotations

from . import generic, split_k

PLANS = (split_k, generic)


def choose(stmts: tuple, ctx, opts):
    """(plan module, match, ((plan name, reason), …) for the plans that declined)."""
    declined = []
    for plan in PLANS:
        m = plan.match(stmts, ctx, opts)
        if not isinstance(m, str):
            return plan, m, tuple(declined)
        declined.append((plan.NAME, m))
    raise AssertionError("the generic plan fits every DNF")  # pragma: no cover
