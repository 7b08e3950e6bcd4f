"""Sizes the split-K plan (moac.schedule.plans.split_k) derives from the program before
the run-time chunk choice: the fewest tokens a chunk should hold, and how many outputs a
combine gang folds."""
from __future__ import annotations

import sympy as sp

from ...dtypes import BYTES
from ..choices import CHUNK, MIN_CHUNK
from ..index import gamma, lane_diff
from ..packing import streams

COMBINE_REGS = 8     # outputs of the last axis per combine gang (d = 8·db + r)
COMBINE_GANGS = 128  # the fewest combine gangs a frame count fixed at compile time should give
SPLIT_RATIO = 16     # a chunk's K/V bytes at least this many times its partial state's bytes


def combine_regs(n_last, frames=None) -> int:
    """Outputs of the last axis per combine gang (d = R·db + r): COMBINE_REGS (at most the
    axis's extent), halved while a frame count fixed at compile time leaves fewer than
    COMBINE_GANGS gangs (a gang walks all its frame's partials, so one frame of 16 gangs
    took 15 µs on the H200 where 128 gangs of one output took 8: docs/benchmarks.md).
    frames None: the outputs per gang whatever the frames."""
    n, f = sp.sympify(n_last), sp.sympify(frames)
    R = max(1, min(COMBINE_REGS, int(n))) if n.is_Integer else COMBINE_REGS     # an empty axis: 1
    if frames is not None and f.is_Integer and n.is_Integer:
        while R > 1 and int(f) * -(-int(n) // R) < COMBINE_GANGS:
            R //= 2
    return R


def split_floor(ctx, l, E, W, heads: int, rest_ext: tuple) -> tuple:
    """(fewest tokens per chunk, why): the smallest power of two whose K/V rows outweigh the
    chunk's partial state SPLIT_RATIO times.  A chunk's gang writes, for each of its `heads`
    query heads, m, z and the rest axes' partial sums (4 bytes each), which the combine reads
    back: on the H200 the shared-KV GQA kernels (4 heads, bf16) ran fastest at 128 tokens,
    where that state is 1/16 of the rows, and their combine took 26 µs at 32 tokens
    (docs/benchmarks.md).  l: the token axis.  MIN_CHUNK where a row's bytes or the state's
    size are not fixed."""
    rest = sp.Mul(*rest_ext) if rest_ext else sp.Integer(1)
    if not rest.is_Integer:
        return MIN_CHUNK, "the partial state's size is not fixed at compile time"
    row = 0
    for body in (E, W):
        for r in streams(ctx, body, l):
            buf = ctx.buffers[r.array]
            step = sp.sympify(lane_diff(gamma(ctx.spec(tuple(r.index)), buf.shape), l))
            if not step.is_Integer or int(step) <= 0:
                return MIN_CHUNK, f"a token's row of {r.array} has no fixed size"
            row += int(step) * BYTES[buf.dtype]
    state = heads * (int(rest) + 2) * 4
    if not row:
        return MIN_CHUNK, "no rows along the tokens"
    c = MIN_CHUNK
    while c * row < SPLIT_RATIO * state and c < CHUNK:
        c *= 2
    return c, (f"its K/V rows, {row} bytes a token, at least {SPLIT_RATIO}× the partial state of its {heads} "
               f"head{'s' if heads > 1 else ''}, {state} bytes")
