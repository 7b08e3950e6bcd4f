"""Values chosen at run time (Schedule.choices), as Python functions for evaluating the
Schedule's expressions at given sizes; the C helper of the same name computes them in
the kernel (moac.emit.codegen.HELPERS)."""
from __future__ import annotations

CHUNK = 1024         # the most tokens per gang in the split-K lifting (a target may allow more for
                     # kernels with tensor-core tiles: Target.chunk_ceiling)
MIN_CHUNK = 16       # the fewest


CHUNKS_PER_FRAME = 2048   # the most chunks of one frame the combine merges
GANGS = 16384             # the default gang count aimed for (a target may set its own: Target.gangs)
FLOOR_GANGS = 8           # the plan's floor on the chunk yields where it would leave fewer than a target's
                          # gangs ÷ 8 gangs (on the H200, GQA n = 4096 ran 1.9x slower on openacc in 256
                          # gangs of 128 tokens than in 2048 of 16: docs/benchmarks.md)


def floor_gangs(gangs: int) -> int:
    """The fewest gangs the plan's floor on the chunk may leave: a target's gangs ÷ FLOOR_GANGS."""
    return max(1, gangs // FLOOR_GANGS)


def chunk_size(tokens: int, frames: int, floor: int = MIN_CHUNK, gangs: int = GANGS, least: int = MIN_CHUNK,
               most: int = CHUNK) -> int:
    """moac_chunk: the smallest power of two in 16 … 1024 tokens per chunk that keeps at
    most CHUNKS_PER_FRAME chunks per frame, about `gangs` gangs in all and at least `floor`
    tokens (measured on the H200, docs/benchmarks.md: fewer gangs leave multiprocessors
    idle, which the single-head and shared-KV cases showed; the combine folds a frame's
    chunks with lanes over them, so its cost grows with the chunks).  `floor` is the
    plan's, the fewest tokens whose K/V rows outweigh the chunk's partial state 16 times
    (plans.split_sizes.split_floor), lowered where it would leave fewer than
    floor_gangs(gangs) gangs, since a kernel of few gangs is bound by latency, not bytes.
    `least`: the target's smallest chunk (MIN_CHUNK, or more for kernels with tensor-core
    tiles: Target.chunk_floor); `most`: its largest (CHUNK, or more for tile kernels:
    Target.chunk_ceiling)."""
    floor = min(floor, tokens * frames // floor_gangs(gangs))
    want = max((tokens + CHUNKS_PER_FRAME - 1) // CHUNKS_PER_FRAME, (tokens * frames + gangs - 1) // gangs, floor)
    c = least
    while c < want and c < most:
        c *= 2
    return c


RULES = {"moac_chunk": chunk_size}


def evaluate(choice, values: dict, gangs: int = GANGS, least: int = MIN_CHUNK, most: int = CHUNK) -> int:
    """A Choice's value where every size is known (values: sympy symbol -> integer), for a
    target aiming at `gangs` gangs with chunks of `least` … `most` tokens."""
    import sympy as sp
    return RULES[choice.rule](*(int(sp.sympify(a).xreplace(values)) for a in choice.args), gangs, least, most)
