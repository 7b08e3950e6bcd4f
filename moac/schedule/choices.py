"""Values chosen at run time (Schedule.choices), as Python functions for evaluating the
Schedule's expressions at given sizes; the C helper of the same name computes them in
the kernel (moac.emit.codegen.HELPERS)."""
from __future__ import annotations

CHUNK = 1024         # the most tokens per gang in the split-K lifting


def chunk_size(tokens: int, frames: int) -> int:
    """moac_chunk: at most 64 chunks per frame, at most about 8192 gangs, 16 … 1024 tokens
    per chunk (measured on the H200: the combine's cost grows with the chunks per frame,
    docs/benchmarks.md)."""
    want, c = max((tokens + 63) // 64, (tokens * frames + 8191) // 8192), 16
    while c < want and c < CHUNK:
        c *= 2
    return c


RULES = {"moac_chunk": chunk_size}


def evaluate(choice, values: dict) -> int:
    """A Choice's value where every size is known (values: sympy symbol -> integer)."""
    import sympy as sp
    return RULES[choice.rule](*(int(sp.sympify(a).xreplace(values)) for a in choice.args))
