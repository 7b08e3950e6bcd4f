"""Tensor-core tiles for the split-K partials (a gang's chunk of a softmax contraction).

The scores of a KV group are a small matrix product: the `rows` query heads of the group
against the chunk's tokens, contracted over d.  With the heads as the rows of an mma tile
(m16n8k16: 16 rows, 8 columns, 16 summed terms) and the tokens as its columns, and the
weighted sum Σ_l p·v as a second tile (the heads as rows, 8 output elements as columns,
16 tokens summed), each K and V element is one operand of one tile instruction instead of
`rows` FMAs per lane.  What the algebra allows, and the tile uses:

  * d is the reduction axis of q·kᵀ, so any bijection of d onto the k-slots of the
    fragments gives the same sum, provided q's fragment uses the same one.  The one that
    puts 8 contiguous elements of a key row in one lane, d = 32·j + 8·c + 4·h + e (lane
    column c < 4, k-step 2j + h, e < 4), makes every K fragment one 16-byte load: lanes
    4r … 4r + 3 read 64 contiguous bytes of token r (γ-difference 1 along d).
  * the tokens are the reduction axis of p·v: the slots of the second tile take the
    columns of the first as they are (a lane's scores are its p fragment), and the output
    axis is permuted, dv = 64·h + 8·r + e, so that a lane's 16-byte load of a V row feeds
    8 column blocks; two tokens' loads are paired by one byte permute per fragment word.
  * the 16 rows hold the group's heads and the low halves of a two-term bf16 split of
    the same operands (q = q_hi + q_lo, p = p_hi + p_lo, rows r and r + 8): a lane holds
    both rows of every accumulator, so the halves are added in the lane and the products
    keep about 16 significant bits of q and p, where one bf16 term keeps 8.

The plan derives the tile wherever the DNF allows it; the target decides whether it has
tile instructions (Target.tensor_tiles).  Everywhere else the gang runs the lane passes,
which the TensorTile node carries as its body (and which the counts and the verifier read).
"""
from __future__ import annotations

import dataclasses
import os

import sympy as sp

from ...dnf import DOp, DRead
from ...front.data import has_data
from ..index import gamma, internal, lane_diff
from ..choices import MIN_CHUNK
from ..ir import TensorTile
from ..lower import Names, lower
from .generic import midx, msub, outer_reductions, replace_node

# K and V storage -> the operand type of the tile instruction (16 rows × 8 columns, 16 terms),
# which holds every value of the storage exactly (E4M3 and E5M2 are f16 values)
STORAGE = {"bf16": "bf16", "f16": "f16", "f8e4m3": "f16", "f8e5m2": "f16"}
MAX_ROWS = 8                     # heads of a group: rows r and r + 8 hold the two halves


def _starts_aligned(off, shape, k: int = 8) -> bool:
    """Every row start is a multiple of k elements: the row length (the last extent) is, and
    the offset is a sum of terms with that factor (a page number read from data times it)."""
    last = sp.sympify(shape[-1]) if shape else sp.Integer(1)
    if not (last.is_Integer and int(last) % k == 0):
        return False
    return all(sp.fraction(sp.cancel(t / k))[1] == 1 for t in sp.Add.make_args(sp.expand(off)))


STEP = 16                        # tokens of one tile step; a step starts at a multiple of it
STAGES = 3                       # shared-memory stages of a warp: the step it computes and 2 on their way
BLOCK_SHARED = 48 << 10          # the static shared memory of a block (CUDA: 48 KiB without opting in)
GANG_SHARED = 96 << 10           # the stages of a gang at most: two gangs a multiprocessor (228 KiB on sm_90)
MAX_WARPS = 4                    # warps of a gang at most


def team_warps(step_bytes: int) -> int:
    """The warps of a gang: the most, a power of two up to MAX_WARPS, whose STAGES stages of
    step_bytes fit in GANG_SHARED (past BLOCK_SHARED they are dynamic shared memory).  They
    share the gang's chunk step by step (warp w takes steps w, w + W, ...), so the gang reads
    W·step bytes at a time from one stream, and its partials stay one (the warps' states
    merged through the stages at the end).  Fewer, longer streams: on the H200 one stream of
    16 KB steps per block read 1 GiB at 117 µs, 4 KB steps from 4 times as many blocks at
    130 µs (bench/probes/stream_read).  bf16 d = 128 (8 KB steps), fp8, d = 64: 4 warps;
    d = 256: 2.  4 warps against 2 at bf16 d = 128 (96 against 48 KiB), H200, 2026-12-03:
    batched GQA B = 32 123.3 / 123.5 µs, B = 1 n = 131072 123.1 / 124.3, B = 4 n = 2048
    10.9 / 11.2, MHA 122.4 / 122.8; ragged 133.2 / 134.4 and paged 134.6 / 138.2 µs
    (docs/benchmarks.md).  MOAC_TILE_WARPS sets another count (a power of two), for
    experiments."""
    forced = os.environ.get("MOAC_TILE_WARPS")
    if forced is not None:
        return max(1, int(forced))
    w = 1
    while 2 * w <= MAX_WARPS and 2 * w * STAGES * step_bytes <= GANG_SHARED:
        w *= 2
    return w


def _blocked(off, tok):
    """off(tok) as base(τ) + stride·u for tok = 16·τ + u, u < 16, where the algebra allows it:
    a row of contiguous tokens, or rows through a page of m tokens (⌊tok ÷ m⌋, tok mod m) with
    16 | m, whose page a step never leaves.  Returns (base, stride) or None (then each lane
    computes each of its rows' offsets)."""
    tb, tu = internal("moac_blk"), internal("moac_tu")

    def one(x):
        if isinstance(x, sp.floor):
            num, den = sp.fraction(sp.together(x.args[0]))
            if num == tok and den.is_Integer and int(den) % STEP == 0:
                return sp.floor(tb / (int(den) // STEP))
        if isinstance(x, sp.Mod) and x.args[0] == tok and x.args[1].is_Integer and int(x.args[1]) % STEP == 0:
            return STEP * sp.Mod(tb, int(x.args[1]) // STEP) + tu
        return x
    new = sp.expand(sp.sympify(off).replace(lambda x: isinstance(x, (sp.floor, sp.Mod)), one)
                    .xreplace({tok: STEP * tb + tu}))
    stride = sp.sympify(lane_diff(new, tu))
    base = sp.expand(new - stride * tu)
    if not stride.is_Integer or base.has(tu) or new.has(tok):
        return None
    return base, int(stride)


def derive(ctx, E, W, Wt, ev, l, members: list, group, rest, rest_ext, start, count, body,
           parts, out=None) -> TensorTile | str:
    """The tile of a gang's chunk, or why there is none.  E is the score of token l (one
    reduction over ev), W the weighted values and Wt their factor per token (or None),
    members the group's substitutions and
    group (gv, gc, a) with gv = gc·a + m, or None for one head a gang (a tile of one row: a
    step costs the same tile instructions as for a group, and on the H200 MHA bf16 took
    122.3 µs so against 125.9 in the lane passes, which had been thought memory-bound); rest
    the output axes; body the lane passes it replaces; parts the (buffer, index) of the
    partials m, z, o of member 0; out the output (name, index), which a frame of one gang
    may store from the tile (TensorTile.out: split_k sets where, TensorTile.direct)."""
    M = len(members)
    if M > MAX_ROWS:
        return f"{M} heads per gang: a tile holds {MAX_ROWS} heads and their low halves"
    reds = outer_reductions(E, [])
    if len(reds) != 1 or reds[0].op != "add" or reds[0].var != ev:
        return "the score is not one sum over the head dimension"
    red = reds[0]
    dk = sp.sympify(red.extent)
    if not dk.is_Integer or int(dk) % 32 or int(dk) == 0:
        return f"the head dimension {red.extent} is not a fixed multiple of 32 (-D dk=…)"
    if len(rest) != 1 or not sp.sympify(rest_ext[0]).is_Integer or int(rest_ext[0]) % 64 or int(rest_ext[0]) == 0:
        return "the weighted sum's output axis is not one fixed multiple of 64"
    prod = red.body
    if not (isinstance(prod, DOp) and prod.op == "mul" and len(prod.args) == 2
            and all(isinstance(x, DRead) for x in prod.args)):
        return "the score's terms are not a product of two array elements"
    kr = [x for x in prod.args if any(l in sp.sympify(i).free_symbols for i in x.index)]
    qr = [x for x in prod.args if x not in kr]
    if len(kr) != 1 or len(qr) != 1:
        return "the score's terms are not a query element times a key element of token l"
    if not isinstance(W, DRead):
        return "the weighted values are not one array element"
    kr, qr, vr = kr[0], qr[0], W
    if any(has_data(sp.sympify(i)) for i in qr.index):
        return f"the query {qr.array} is read through an index array"
    kd, vd, qd = (ctx.buffers[x.array].dtype for x in (kr, vr, qr))
    if kd not in STORAGE or kd != vd:
        return (f"K and V are stored as {kd} and {vd}: the tile reads one of {', '.join(STORAGE)} "
                "as its operands")
    if qd != "f32":
        return f"the query is stored as {qd}: the tile splits f32 queries"
    row, tok = internal("moac_row"), internal("moac_tok")
    if group is None:
        sub = {}
    else:
        gv, gc, a = group
        sub = {sp.floor(gv / gc): a, sp.Mod(gv, gc): row, gv: a * gc + row}
    dv = rest[0]
    offs = {}
    for r, axis, name in ((qr, ev, "query"), (kr, ev, "key"), (vr, dv, "value")):
        full = gamma(tuple(midx(sp.sympify(i), sub).xreplace({l: tok}) for i in r.index), ctx.buffers[r.array].shape)
        if sp.sympify(lane_diff(full, axis)) != 1:
            return f"the {name} rows are not contiguous along {axis.name}"
        offs[name] = sp.expand(full.xreplace({axis: 0}))
        if name != "query" and row in offs[name].free_symbols:
            return f"the {name} rows differ between the heads of a group"
        if not _starts_aligned(offs[name], ctx.buffers[r.array].shape):
            return f"the {name} rows do not start at multiples of 8 elements (16-byte loads)"
    Es = replace_node(msub(E, sub), msub(red, sub), DRead("@moac_sv", ()))
    pre, score = lower(Es, Names(), reads={("@moac_sv", ()): "moac_sv"})
    if pre:
        return "the score has a second reduction"
    weight = None
    if Wt is not None:
        pre, weight = lower(msub(Wt, sub), Names())
        if pre:
            return "the values' factor per token has a reduction"
    (m, mi), (z, zi), (o, oi) = parts

    def part(buf, idx):
        return sp.expand(gamma(tuple(midx(sp.sympify(i), sub) for i in idx), ctx.buffers[buf].shape))
    # a gang's tokens start at g·chunk, the chunk a power of two of at least MIN_CHUNK tokens
    kb, vb = _blocked(offs["key"], tok), _blocked(offs["value"], tok)
    blocks = (kb, vb) if MIN_CHUNK % STEP == 0 and kb and vb else None
    tile = TensorTile(body=body, q=qr.array, k=kr.array, v=vr.array, q_at=offs["query"], k_at=offs["key"],
                      v_at=offs["value"], blocks=blocks, row=row, tok=tok, tok_var=l,
                      rows=M, dk=int(dk), dv=int(rest_ext[0]), start=start, count=count, score=score,
                      parts=(m, z, o), m_at=part(m, mi), z_at=part(z, zi), o_at=part(o, oi),
                      shape=f"m16n8k16 {STORAGE[kd]} → f32", storage=kd, weight=weight)
    out_at = None if out is None else _out_row(ctx, out, sub, dv)
    if out_at is not None:
        tile = dataclasses.replace(tile, out=out[0], out_at=out_at)
    return dataclasses.replace(tile, warps=team_warps(tile.step_bytes))


def _out_row(ctx, out, sub, dv):
    """The offset of a row's output element 0 where a lane may store the row's outputs o ÷ z
    from the tile: f32 elements, the row contiguous along the output axis dv (γ-difference 1)
    from a multiple of 4 elements (16-byte stores); else None."""
    name, idx = out
    buf = ctx.buffers[name]
    if buf.dtype != "f32":
        return None
    full = gamma(tuple(midx(sp.sympify(i), sub) for i in idx), buf.shape)
    at = sp.expand(full.xreplace({dv: 0}))
    return at if sp.sympify(lane_diff(full, dv)) == 1 and _starts_aligned(at, buf.shape, 4) else None
