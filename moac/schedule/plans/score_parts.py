"""The split-K score pass without a vector reduction per score (every target with lanes).

The lanes-over-d pass of split_k_passes.scores lifts the score's reduction axis d over the
32 lanes, so every score of every head ends in a reduction across the lanes, which GCC's
OpenACC prints as five shuffles and five adds each (160 shuffles for 128 multiply-adds a
lane with 4 heads and 8 tokens a pass), and it re-enters the vector loop, re-reading q,
for every 8 tokens.  Here the 32 lanes take T tokens × P parts of d instead:

    lane x = P·u + cp (u < T, cp < P),   d = w·(P·s + cp) + e (s < S registers, e < w packed),
    the lane's tokens t = T·j + u, j over the chunk in sequence,

so P adjacent lanes read P·w contiguous elements of one row (γ-difference w: the packed
coalescing criterion within a group of lanes, one group per token), each lane keeps its
M·S·w elements of q in registers for the whole chunk (loaded once), and its partial sums
over its S·w terms are stored to a scratch p_part (frame, token, cp) of the gang.  A
vector pass over the tokens then adds each token's P partials, finishes the score and
takes the chunk maximum (one vector reduction per chunk and head, not per score).

P is the smallest power of two with P lanes covering a 32-byte sector of a row and q's
elements fitting Q_REGS registers a lane; U tokens a lane are summed together so that
packing.IN_FLIGHT packed words are on their way.  The pass is taken where the gang's M
heads share a K row at least once per packed word W a lane loads per token in the
lanes-over-d pass (M ≥ W: GQA, bf16 MHA, one f32 head at d = 64), not for one f32 head at
d = 128 (M = 1 < W = 2).  One Schedule serves every target, and for one head the targets
disagree: on the H200 the pass made cuda's lane-pass kernels 11–21 % slower at both head
sizes and openacc's 3–11 % faster at d = 128, 27–47 % at d = 64; the rule takes it where
the gain is the larger.  Measured on the H200 (OpenACC, docs/benchmarks.md, 2026-12-03;
GQA bf16 d = 128, 4 heads a gang: P = 8, T = 4, S = 4, U = 2): the partials kernel 84 → 64
µs at n = 32768, 338 → 248 µs at B = 32 n = 4096 and at B = 1 n = 131072, MHA bf16 189 →
151 µs.  MOAC_SCORE_PARTS=0 (read when moac is imported) keeps the lanes-over-d pass
everywhere, for experiments."""
from __future__ import annotations

import os

import sympy as sp

from ...dnf import DRead, substitute
from ...dtypes import BYTES
from ..index import internal
from ..ir import Const, Guard, Let, LetIndex, Lift, Local, Loop, Op, Set, Store, Unpack
from ..lower import logical, lower
from ..packing import IN_FLIGHT, LANES, dedupe_unpacks, lane_words, streams, token_streams, unpacks, word_bytes
from .generic import midx, msub, replace_node

SECTOR = 32          # bytes: the memory's unit of transfer; P lanes of a token cover one
Q_REGS = 64          # elements of the token-free operands (q) a lane keeps in registers at most
ENABLED = os.environ.get("MOAC_SCORE_PARTS", "1") != "0"    # experiments: 0 keeps the lanes-over-d pass


def _pow2(n: int) -> int:
    p = 1
    while p < n:
        p *= 2
    return p


def plan(ctx, red, ev, l, pk: tuple, M: int) -> tuple | str:
    """(P, S, T, U) for the score reduction `red` over ev with the packing pk = (w, R), or
    why the lanes-over-d pass stays."""
    w, _ = pk
    if red.op != "add":
        return f"the score's reduction is {red.op}, not a sum of partials"
    per_token = token_streams(ctx, red.body, ev, l)
    held = [r for r in streams(ctx, red.body, ev) if r not in per_token]
    if not per_token:
        return f"no read of the score walks the tokens {l.name}"
    words = int(red.extent) // w                       # a row's runs of w elements
    wb = word_bytes(w, max(BYTES[ctx.buffers[r.array].dtype] for r in per_token))
    held_elems = M * len(held) * int(red.extent)       # q's elements, all lanes of a token together
    P = _pow2(max(-(-SECTOR // wb), -(-held_elems // Q_REGS), 1))
    if P > LANES or words % P:
        return (f"{P} lanes a token (a {SECTOR}-byte sector, at most {Q_REGS} held elements a lane) do not "
                f"divide the {words} runs of a row")
    S = words // P
    W = lane_words(ctx, per_token, pk[1] * w)          # the lanes-over-d pass: words a lane loads per token
    if M < W:
        return (f"{M} head{'s' if M > 1 else ''} a row and {W} packed words a lane per token: the lanes-over-d "
                f"pass ends fewer than one reduction a word (H200, one f32 head at d = 128: cuda 13–21 % faster "
                f"with it, openacc 3–11 % slower)")
    U = max(1, IN_FLIGHT // lane_words(ctx, per_token, S * w))
    return P, S, LANES // P, U


def passes(ctx, names, E, red, ev, l, pidx: tuple, C, members: list, pk: tuple, mg) -> tuple | str:
    """Pass 1 as two vector loops (the lanes' partial sums, then the scores and the chunk
    maximum), or why not (then the caller prints the lanes-over-d pass)."""
    if not ENABLED:
        return "turned off (MOAC_SCORE_PARTS=0)"
    M = len(members)
    got = plan(ctx, red, ev, l, pk, M)
    if isinstance(got, str):
        return got
    P, S, T, U = got
    w = pk[0]
    g, cn, cq = internal("g"), internal("cn"), internal("cq")
    x, u, cp, c = internal("x"), internal("u"), internal("cp"), internal("c")
    pbuf = ctx.buffers["@p"]
    ctx.add_buffer("@pp", "scratch", tuple(pbuf.shape) + (P,), placement="gang", tile=tuple(pbuf.tile) + ((0, P),))
    toks = [internal(f"t{k}") for k in range(U)]

    def ppidx(tok, mi):
        return tuple(tok if y == l else midx(y, members[mi]) for y in pidx) + (cp,)

    def step(ks: list) -> tuple:
        """The partial sums of the tokens toks[k], k in ks, for every member, and their stores."""
        accs = {(k, mi): names.fresh("ps") for k in ks for mi in range(M)}
        body: list = [Let(a, Const(0.0)) for a in accs.values()]
        for s in range(S):
            base = w * (P * s + cp)
            for k in ks:
                for mi in range(M):
                    bk = substitute(msub(red.body, members[mi]), {l: toks[k]})
                    loads, locs = unpacks(ctx, bk, ev, base, w, names, f"{k}{s}", {toks[k]: l})
                    body += loads
                    for e in range(w):
                        pre, val = lower(substitute(bk, {ev: base + e}), names, subst={toks[k]: l}, reads=locs)
                        body += pre
                        body.append(Set(accs[k, mi], Op("add", (Local(accs[k, mi]), val))))
        body = dedupe_unpacks(body)
        body = [st for st in body if isinstance(st, Unpack)] + [st for st in body if not isinstance(st, Unpack)]
        for k in ks:
            for mi in range(M):
                ix = ppidx(toks[k], mi)
                body.append(Store("@pp", ix, logical(ix, {toks[k]: l}), Local(accs[k, mi])))
        return tuple(body)

    main = step(list(range(U)))
    held = [st for st in main if isinstance(st, Unpack) and not _per_token(st, toks)]
    main = tuple(st for st in main if st not in held)
    one = tuple(dedupe_unpacks(held + list(step([0])))[len(held):])   # q read from the held unpacks
    span = T * U
    decls = tuple(LetIndex(toks[k], g * C + span * cq + T * k + u) for k in range(U))
    loops = (Loop(cq, sp.floor(cn / span), "seq", decls + main, trip=C / span,
                  note=f"the lane's tokens g·chunk + {span}·cq + {T}·k + u, k < {U}: partial sums of the {M} "
                       f"head{'s' if M > 1 else ''}"),
             Loop(cq, sp.ceiling(cn / T), "seq", (Guard(sp.StrictLessThan(T * cq + u, cn),
                                                        (LetIndex(toks[0], g * C + T * cq + u),) + one),),
                  start=U * sp.floor(cn / span), trip=sp.Integer(0),
                  note=f"the chunk's last tokens, {T} a step"))
    lanes = Loop(x, LANES, "vector", (LetIndex(u, sp.floor(x / P)), LetIndex(cp, sp.Mod(x, P))) + tuple(held) + loops,
                 note=f"pass 1a: lanes x = {P}·u + cp over {T} tokens × {P} parts of {ev.name} "
                      f"({ev.name} = {w}·({P}·s + cp) + e, s < {S}), partial sums to p_part",
                 lanes=cp, binds=((ev, red.extent), (cp, P)))
    # pass 1b: a token's P partials, the score around them, the chunk maximum
    ph = DRead("@psum", ())
    Ep = replace_node(E, red, ph)
    body: list = [LetIndex(l, g * C + c)]
    mgs = []
    for mi in range(M):
        ix0 = tuple(midx(y, members[mi]) for y in pidx)
        parts = tuple(names.fresh("pp") for _ in range(P))
        body.append(Unpack("@pp", ix0 + (0,), ix0 + (cp,), parts))
        tot = Local(parts[0])
        for p in parts[1:]:
            tot = Op("add", (tot, Local(p)))
        s_name, sc = names.fresh("psum"), f"sc_{mi}" if M > 1 else "sc"
        pre, sx = lower(msub(Ep, members[mi]), names, reads={("@psum", ()): s_name})
        body += [Let(s_name, tot)] + list(pre) + [Let(sc, sx), Store("@p", ix0, ix0, Local(sc)),
                                                   Set(mg(mi), Op("max", (Local(mg(mi)), Local(sc))))]
        mgs.append(mg(mi))
    sums = Loop(c, cn, "vector", tuple(body), note=f"pass 1b: token {l.name} = g·chunk + c: the sum of its {P} "
                f"partials, its score, the chunk maximum", reduce=(("max", tuple(mgs)),), lanes=l, trip=C,
                binds=((cp, P),))
    ctx.lifts.append(Lift(ev.name, red.extent, P * w, "s cp", "e", False,
                          f"score partials: {ev.name} = {w}·({P}·s + cp) + e, cp < {P} lanes of a token, s < {S}"))
    ctx.notes.append(f"score pass: the lanes take {T} tokens × {P} parts of {ev.name} (a token's {P} lanes read "
                     f"{P * w} contiguous elements of its row, at least a {SECTOR}-byte sector; q's {M * S * w} "
                     f"elements a lane stay in registers, at most {Q_REGS}), {U} token{'s' if U > 1 else ''} a lane "
                     f"at a time; each lane's partial sums go to p_part and a pass over the tokens adds a token's "
                     f"{P}: no vector reduction per score")
    return lanes, sums


def _per_token(st: Unpack, toks: list) -> bool:
    return any(sp.sympify(i).has(*toks) for i in st.index)
