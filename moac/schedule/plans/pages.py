"""Tokens read through a page (a paged KV cache: ⟨⟨b ⌊l ÷ page⌋⟩ψtable (l mod page) …⟩): the
split-K passes take several tokens per step, and where the page size is a literal those
tokens lie in one page, so the page number is read once per step."""
from __future__ import annotations

import dataclasses

import sympy as sp

from ...dnf import reads
from ..choices import MIN_CHUNK
from ..index import internal
from ..ir import LetIndex, Prefetch, Read, Unpack


PAGE_TOKENS = 4     # GPU weighted sum: tokens per step where the rows are read through a page


def paged_tokens(ctx, W, l) -> int:
    """Tokens per step of the GPU weighted sum: 1, or PAGE_TOKENS where W reads a row through
    a page (an index with ⌊l ÷ m⌋ or l mod m, m a literal that PAGE_TOKENS divides): then the
    step's tokens share one page number (align_tokens), read once for PAGE_TOKENS rows.
    Measured on the H200 (decode_paged, pages of 16, bf16): 86 % of the dense kernel's bandwidth
    with 1 token per step, 91 % with 2, 101 % with 4."""
    for r in reads(W):
        for i in r.index:
            for x in sp.sympify(i).atoms(sp.floor, sp.Mod):
                num, den = (sp.fraction(sp.together(x.args[0])) if isinstance(x, sp.floor) else x.args)
                if num == l and sp.sympify(den).is_Integer and int(den) % PAGE_TOKENS == 0:
                    ctx.notes.append(f"weighted sum: {PAGE_TOKENS} tokens per step, the rows of one step in one "
                                     f"page of {int(den)} (read through ⌊{l.name} ÷ {int(den)}⌋)")
                    return PAGE_TOKENS
    return 1


def align_tokens(ctx, body: tuple, toks: list, U: int, first) -> tuple:
    """The U tokens of one unrolled step are t_u = first + u, and `first` is a multiple of
    U (the chunk, a power of two ≥ MIN_CHUNK, is one when U divides MIN_CHUNK).  Where an
    index reads ⌊t_u ÷ m⌋ or t_u mod m for a literal m that U divides (a page of m tokens:
    ⟨⟨b ⌊l ÷ page⌋⟩ψtable (l mod page) …⟩), write t_u = U·ta + u: then ⌊t_u ÷ m⌋ = ⌊ta ÷ (m/U)⌋
    is one value for all U tokens (one page-table read, not U) and t_u mod m = U·(ta mod
    m/U) + u a constant offset from it.  Other bodies are returned as they are."""
    if U <= 1 or MIN_CHUNK % U:
        return body
    ta = internal("ta")
    pos = {t: u for u, t in enumerate(toks)}
    changed = [False]

    def fix(e):
        e = sp.sympify(e)
        if not e.has(*toks) or not e.has(sp.floor, sp.Mod):
            return e

        def one(x):
            if isinstance(x, sp.floor):
                num, den = sp.fraction(sp.together(x.args[0]))
                if num in pos and den.is_Integer and int(den) % U == 0:
                    changed[0] = True
                    return sp.floor(ta / (int(den) // U))
            if isinstance(x, sp.Mod) and x.args[0] in pos and x.args[1].is_Integer and int(x.args[1]) % U == 0:
                changed[0] = True
                return U * sp.Mod(ta, int(x.args[1]) // U) + pos[x.args[0]]
            return x
        return e.replace(lambda x: isinstance(x, (sp.floor, sp.Mod)), one)

    def walk(x):
        if isinstance(x, tuple):
            return tuple(walk(y) for y in x)
        if isinstance(x, (Read, Unpack, Prefetch)):
            return dataclasses.replace(x, index=tuple(fix(i) for i in x.index))
        if dataclasses.is_dataclass(x) and not isinstance(x, type):
            kw = {f.name: walk(getattr(x, f.name)) for f in dataclasses.fields(x)
                  if isinstance(getattr(x, f.name), tuple) or dataclasses.is_dataclass(getattr(x, f.name))}
            return dataclasses.replace(x, **kw) if kw else x
        return x
    out = walk(body)
    if not changed[0]:
        return body
    note = f"{U} tokens per step start at a multiple of {U}: the page index ⌊t ÷ m⌋ is read once per step"
    if note not in ctx.notes:               # the score pass and the weighted sum say it once
        ctx.notes.append(note)
    return (LetIndex(ta, sp.floor(sp.sympify(first) / U)),) + out
