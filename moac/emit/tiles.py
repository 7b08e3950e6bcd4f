"""A tensor-core tile (cir.Tile) as CUDA: the fragment layout moac.schedule.plans.tiles
derives, printed with mma.sync.  Lane (r, c) = (lane ÷ 4, lane mod 4) of a warp holds rows
r and r + 8 (a head and its low half) and columns 2c, 2c + 1 of every accumulator.

Per 16 tokens a lane takes 2·dk/32 + 4·dv/64 words of 8 elements (K rows of tokens r and
8 + r, V rows of tokens 2c, 2c + 1, 8 + 2c, 9 + 2c), then dk/8 score tiles and dv/8
weighted-sum tiles.  The steps wait in S shared-memory stages a warp, copied there with
cp.async S − 1 = STEPS_AHEAD steps ahead (`stages`); the
per-token reads of the score and the weight (dequantisation scales) travel as far ahead in
registers (`token_reads`).  No sympy here."""
from __future__ import annotations

import dataclasses
import os

from ..dtypes import BYTES, CTYPE
from ..errors import RewriteError
from ..schedule.plans.tiles import BLOCK_SHARED, STAGES
from . import cir
from .tile_helpers import HELPERS, TILE_OUT  # noqa: F401  (the device helpers the printed tile calls; cuda prints them)




ST = {"bf16": 0, "f16": 1, "f8e4m3": 2, "f8e5m2": 3}      # HELPERS' storage codes
DECLARED = ("moac_sv", "moac_tok", "moac_blk")          # locals the printed tile declares (besides row and tok)


def _step(t: cir.Tile, buf: str, j: str, itype: str, ctype: str, reads: str) -> list[str]:
    """A step's 16 tokens from j: the scores, the online softmax and the weighted sum, the
    words in `buf`, the score's and the weight's array reads (`token_reads`) from the
    registers `reads` names (moac_r0, moac_r1, ...), where they were loaded with the copies."""
    st = ST[t.storage]
    L = ["{", "    float moac_s[2][4], moac_x[4], moac_w[4];",
         f"    moac_tile_scores<{t.dk}, {t.dv}, {st}>({buf}, moac_qa, moac_s);"]
    loads = token_reads(t)
    for e in range(4):
        b, col = divmod(e, 2)
        regs = {ld: cir.Var(f"{reads}_r{k}[{e}]") for k, ld in enumerate(loads)}
        score, weight = (_swap(x, regs) for x in (t.score, t.weight))
        L += ["    {",
              *_token(j, b, col, t.tok, itype, "        "),
              f"        const float moac_sv = moac_s[{b}][{col}] + moac_s[{b}][{col + 2}];",
              f"        moac_x[{e}] = moac_u < moac_tn ? {cir.expr(score, ctype)} : -INFINITY;",
              f"        moac_w[{e}] = {cir.expr(weight, ctype) if weight is not None else '1.0f'};",
              f"        (void){t.tok};",
              "    }"]
    L += [f"    moac_tile_pv<{t.dk}, {t.dv}, {st}>({buf}, moac_o, moac_tm, moac_tz, moac_x, moac_w, moac_live);", "}"]
    return L


def _token(j: str, b: int, col: int, tok: str, itype: str, pad: str) -> list[str]:
    """The declarations of score b·2 + col's token of the step from j: `moac_u` in the chunk,
    `tok` in the sequence (the chunk's last where moac_u is past its end)."""
    return [f"{pad}const {itype} moac_u = {j} + {8 * b + col} + 2 * moac_tc;   /* the token of score {2 * b + col} in the chunk */",
            f"{pad}const {itype} {tok} = moac_t0 + (moac_u < moac_tn ? moac_u : moac_tn - 1);"]


def _find(x, cls) -> list:
    """The nodes of class cls in x (C IR, tuples and lists of it), outermost only, each once."""
    found = []

    def walk(y):
        if isinstance(y, cls):
            found.append(y) if y not in found else None
        elif isinstance(y, (tuple, list)):
            for z in y:
                walk(z)
        elif dataclasses.is_dataclass(y):
            for f in dataclasses.fields(y):
                walk(getattr(y, f.name))
    walk(x)
    return found


def tiles_in(x) -> list:
    """The tiles in x (C IR, tuples and lists of it)."""
    return _find(x, cir.Tile)


def token_reads(t: cir.Tile) -> list:
    """The array reads of the score and the weight expressions (a token's dequantisation
    scales), each once, outermost only: they wait on memory as the K and V rows do, so the
    printed tile issues them with the step's copies, into registers of its stage."""
    return _find((t.score, t.weight), cir.Load)


def _swap(x, table: dict):
    """The expression x (None stays None) with each node that is a key of table replaced by its value."""
    if isinstance(x, tuple):
        return tuple(_swap(y, table) for y in x)
    if not dataclasses.is_dataclass(x):
        return x
    if x in table:
        return table[x]
    return type(x)(*(_swap(getattr(x, f.name), table) for f in dataclasses.fields(x)))


def _prefetch(t: cir.Tile, reads: str, j: str, itype: str, ctype: str) -> list[str]:
    """The token reads of the step from j into the registers `reads` (no lines where there are none)."""
    loads = token_reads(t)
    if not loads:
        return []
    L = []
    for e in range(4):
        b, col = divmod(e, 2)
        L += ["{", *_token(j, b, col, t.tok, itype, "    "),
              *(f"    {reads}_r{k}[{e}] = {cir.expr(ld, ctype)};" for k, ld in enumerate(loads)), "}"]
    return L


def _read_registers(t: cir.Tile, names: tuple[str, ...]) -> list[str]:
    """The declarations of the token reads' registers, 4 a read (one per score of a lane) for each name."""
    return [f"decltype(+{ld.array}[0]) {', '.join(f'{n}_r{k}[4]' for n in names)};"
            for k, ld in enumerate(token_reads(t))]


def _step_base(t: cir.Tile, j: str, itype: str, e) -> list[str]:
    """Where a step of 16 tokens never leaves a page (TensorTile.blocks): the step's block and
    its K and V bases, `moac_kb` and `moac_vb` (no lines otherwise)."""
    if t.blocks is None:
        return []
    (kb, _), (vb, _) = t.blocks
    return [f"    const {itype} moac_blk = (moac_t0 + {j}) / 16;",
            f"    const {CTYPE[t.storage]} *moac_kb = {t.k} + ({e(kb)}), *moac_vb = {t.v} + ({e(vb)});"]


def _row(t: cir.Tile, kv: int, tok: str, j: str, itype: str, e) -> tuple[str, str]:
    """(declaration, pointer) of the K (kv = 0) or V (1) row of the chunk's token `tok`, the
    chunk's last past its end, in the step from j: a stride from the step's base
    (_step_base), or the row's own offset through the token `moac_tok` the declaration binds."""
    if t.blocks is not None:
        return "", f"{('moac_kb', 'moac_vb')[kv]} + (min(({itype})({tok}), moac_tn - 1) - ({j})) * {t.blocks[kv][1]}"
    arr, off = (t.k, t.k_at) if kv == 0 else (t.v, t.v_at)
    return f"const {itype} moac_tok = moac_t0 + min(({itype})({tok}), moac_tn - 1); ", f"{arr} + ({e(off)})"


STEPS_AHEAD = STAGES - 1         # steps a warp keeps on their way while it computes one


def step_bytes(t: cir.Tile) -> int:
    """The bytes of a step's K and V rows: 16 tokens of dk + dv elements."""
    return 16 * (t.dk + t.dv) * BYTES[t.storage]


def tile_step_bytes(kernels) -> int:
    """The most bytes a gang of the tiles in these C kernels reads at a time (step_bytes of each
    of its warps), 0 where there are none."""
    return max((t.warps * step_bytes(t) for t in tiles_in(kernels)), default=0)


def tile_warps(kernels) -> int:
    """The most warps of a gang of the tiles in these C kernels, 1 where there are none."""
    return max((t.warps for t in tiles_in(kernels)), default=1)


def stages(t: cir.Tile) -> int:
    """The shared-memory stages of a warp: the step being computed and STEPS_AHEAD steps on
    their way (cp.async), 3.  The gang count scales with the step (Target.gang_target: 4 MiB
    of steps at a time), so the bytes on their way a multiprocessor do too.  Measured on the
    H200 (docs/benchmarks.md, 2026-12-03): fp8 B = 32 (4 KB steps, 1024 gangs) with 2 / 3 /
    4 stages 78.1 / 76.1 / 77.0 µs; bf16 (8 KB steps) with 512 gangs and 3 / 5 stages 124.2 /
    125.9 µs, with 1024 gangs and 2 / 3 / 4 stages 132.7 / 131.9 / 150.4 µs; 4 warps a gang,
    2 / 3 stages, 2026-12-06: B = 32 124.6 / 124.1, MHA B = 8 122.8 / 122.8 (the H100 had 2
    stages 0.3–1.1 % faster: the count fits the GPU's bytes on their way, not the program).
    MOAC_CUDA_TILE_STAGES sets another count (at least 2), for experiments."""
    forced = os.environ.get("MOAC_CUDA_TILE_STAGES")
    if forced is not None:
        return max(2, int(forced))
    return 1 + STEPS_AHEAD


def shared_bytes(t: cir.Tile) -> int:
    """The shared memory of a gang's stages: stages(t) steps for each of its warps."""
    return t.warps * stages(t) * step_bytes(t)


def dynamic(t: cir.Tile) -> bool:
    """Whether the stages are more than a block may declare statically: then they are the
    kernel's dynamic shared memory, which its launch asks for (cuda.split)."""
    return shared_bytes(t) > BLOCK_SHARED


def render(t: cir.Tile, itype: str, ctype: str = "float") -> str:
    """The tile's statements inside a gang iteration of a block of t.warps warps (`moac_lane`,
    and `moac_warp` where there are several)."""
    e = lambda x: cir.expr(x, ctype)          # noqa: E731
    m, z, o = t.parts
    st = ST[t.storage]
    ind = lambda lines, n: ["    " * n + ln for ln in lines]   # noqa: E731
    who = f"the {t.rows} heads and their low halves" if t.rows > 1 else "the head and its low half"
    L = [f"{{   /* tensor-core tile {t.shape}: {who} as rows (moac.schedule.plans.tiles) */",
         "    const int moac_tr = moac_lane >> 2, moac_tc = moac_lane & 3;",
         f"    const bool moac_live = moac_tr < {t.rows};",
         f"    const {itype} {t.row} = moac_live ? moac_tr : 0;",
         f"    const {itype} moac_t0 = {e(t.start)}, moac_tn = {e(t.count)};",
         f"    uint32_t moac_qa[{t.dk // 16}][4];",
         f"    moac_tile_q<{t.dk}, {st}>(moac_qa, {t.q} + ({e(t.q_at)}), moac_live, moac_tc);",
         f"    float moac_o[{t.dv // 8}][4];",
         f"    for (int moac_i = 0; moac_i < {t.dv // 8}; ++moac_i)",
         "        moac_o[moac_i][0] = moac_o[moac_i][1] = moac_o[moac_i][2] = moac_o[moac_i][3] = 0.0f;",
         "    float moac_tm = -INFINITY, moac_tz = 0.0f;",
         "    if (moac_tn > 0) {"]
    S, W = stages(t), t.warps
    if W > 1 and dynamic(t):
        L[1:1] = ["    extern __shared__ __align__(16) unsigned char moac_dyn_smem[];",
                  f"    auto &moac_stages = *reinterpret_cast<unsigned char (*)[{W}][{S}][moac_stage_geom<{t.dk}, {t.dv}, {st}>::BYTES]>"
                  f"(moac_dyn_smem);   /* {S} stages for each of the gang's {W} warps, dynamic shared memory */"]
    elif W > 1:
        L[1:1] = [f"    __shared__ __align__(16) unsigned char moac_stages[{W}][{S}][moac_stage_geom<{t.dk}, {t.dv}, {st}>::BYTES];"
                  f"   /* {S} stages for each of the gang's {W} warps */"]
    L += _staged(t, S, itype, ctype, e, ind)
    L += ["        }", "    }"]
    partials = (f"moac_tile_finish<{t.dv}>(moac_o, moac_tm, moac_tz, moac_live, moac_tc, {m} + ({e(t.m_at)}), "
                f"{z} + ({e(t.z_at)}), {o} + ({e(t.o_at)}));")
    finish = [partials]
    if t.direct is not None:          # a frame of one gang: its outputs, not its partials (TensorTile.direct)
        finish = [f"if ({e(t.direct)})   /* a frame of one gang: {t.out} = o ÷ z, no partials, no fold */",
                  f"    moac_tile_out<{t.dv}>(moac_o, moac_tz, moac_live, moac_tc, {t.out} + ({e(t.out_at)}));",
                  "else", "    " + partials]
    span = f"{S} * moac_stage_geom<{t.dk}, {t.dv}, {st}>::BYTES"
    merge = f"moac_tile_merge<{t.dv}, {W}, {span}>(&moac_stages[0][0][0], moac_o, moac_tm, moac_tz, moac_warp, moac_lane);"
    if W > 1 and t.direct is not None and _shared_out(t):
        L += [f"    if ({e(t.direct)})   /* a frame of one gang: its warps merge {t.dv // 8 // W} column blocks each and store "
              f"{t.out} = o ÷ z, no partials, no fold */",
              f"        moac_tile_merge_out<{t.dv}, {W}, {span}>(&moac_stages[0][0][0], moac_o, moac_tm, moac_tz, moac_warp, "
              f"moac_lane, moac_live, moac_tc, {t.out} + ({e(t.out_at)}));",
              "    else {", "        " + merge, "        if (moac_warp == 0)", "            " + partials, "    }"]
    elif W > 1:
        L += ["    " + merge,
              "    if (moac_warp == 0)" + (" {" if len(finish) > 1 else ""), *ind(finish, 2)] + (["    }"] if len(finish) > 1 else [])
    else:
        L += ind(finish, 1)
    L += ["}"]
    return "\n".join(L)


def _shared_out(t: cir.Tile) -> bool:
    """Whether a frame of one gang can share out its stores among its warps
    (moac_tile_merge_out): each takes dv ÷ 8 ÷ warps column blocks within a 64-wide block."""
    nb, rem = divmod(t.dv // 8, t.warps)
    return rem == 0 and 0 < nb <= 8 and 8 % nb == 0


def _staged(t: cir.Tile, S: int, itype: str, ctype: str, e, ind) -> list[str]:
    """The chunk's steps through S shared-memory stages, the loop unrolled S times so that
    each step's stage and token-read registers are named at compile time: the copies and
    the token reads of step k + S − 1 issued before step k is read from its stage."""
    st = ST[t.storage]
    geom = f"moac_stage_geom<{t.dk}, {t.dv}, {st}>"
    at = _rotate if rotated() else (lambda j: j)      # the token offset of logical step j

    def copy(k: int, j: str) -> list[str]:
        """Step j's rows into stage k (cp.async) and its token reads into the registers moac_r<k>."""
        j = at(j)
        lam = ["[&](int moac_t) {{ {}return {}; }}".format(*_row(t, kv, f"{j} + moac_t", j, itype, e)) for kv in (0, 1)]
        return ["{", *_step_base(t, j, itype, e), f"    moac_tile_copy<{t.dk}, {t.dv}, {st}>(moac_stage[{k}],",
                f"        {lam[0]},", f"        {lam[1]}, moac_lane);", *("    " + ln for ln in _prefetch(t, f"moac_r{k}", j, itype, ctype)), "}"]
    W = t.warps
    if W == 1:
        L = [f"        __shared__ __align__(16) unsigned char moac_stage[{S}][{geom}::BYTES];   /* this warp's {S} stages */"]
        first = [str(16 * k) for k in range(S - 1)]
    else:
        L = [f"        auto &moac_stage = moac_stages[moac_warp];   /* this warp's {S} stages */",
             f"        const {itype} moac_jw = 16 * moac_warp;   /* this warp's first step: steps w, w + {W}, ... */"]
        first = ["moac_jw"] + [f"moac_jw + {16 * W * k}" for k in range(1, S - 1)]
    L += [f"        moac_kv_tile<{t.dk}, {t.dv}, {st}> moac_ta;", *ind(_read_registers(t, tuple(f"moac_r{k}" for k in range(S))), 2)]
    if at is _rotate:
        L += [f"        const {itype} moac_ns = (moac_tn + 15) / 16 * 16;   /* the chunk's steps, in tokens */",
              f"        const {itype} moac_rot = 16 * ({itype})(blockIdx.x * 37u % (unsigned)(moac_ns / 16));   "
              "/* this block's first step: the blocks' streams staggered (MOAC_CUDA_TILE_ROTATE) */"]
    for k in range(S - 1):
        L += [f"        if ({first[k]} < moac_tn)", *ind(copy(k, first[k]), 3), "        moac_cp_commit();"]
    ahead = "the next step's copies" if S == 2 else f"the copies {S - 1} steps ahead"
    L += [f"        for ({itype} moac_j = {'0' if W == 1 else 'moac_jw'}; moac_j < moac_tn; moac_j += {16 * S * W}) {{   "
          f"/* {S} steps of 16 tokens, {ahead} first */"]
    for k in range(S):
        j = f"moac_j + {16 * W * k}" if k else "moac_j"
        if k:
            L += [f"            if ({j} >= moac_tn)", "                break;"]
        L += [f"            if ({j} + {16 * W * (S - 1)} < moac_tn)",
              *ind(copy((k + S - 1) % S, f"{j} + {16 * W * (S - 1)}"), 4),
              "            moac_cp_commit();",
              f"            moac_cp_wait<{S - 1}>();",
              "            __syncwarp();",
              f"            moac_tile_read(moac_ta, moac_stage[{k}], moac_tr, moac_tc);"]
        L += ind(_step(t, "moac_ta", at(j), itype, ctype, f"moac_r{k}"), 3)
        L += ["            __syncwarp();"]
    return L


def rotated() -> bool:
    """Whether the blocks take their chunk's steps rotated, each from a step of its own
    (blockIdx.x · 37 mod the steps) around to the one before: an experiment
    (MOAC_CUDA_TILE_ROTATE=1), off by default.  On an H100 (2026-12-06) it changed B = 32's
    kernel time by −0.5 to +0.3 %; the H200's process-dependent slowdown it was meant to
    test did not show there (docs/benchmarks.md)."""
    return os.environ.get("MOAC_CUDA_TILE_ROTATE") == "1"


def _rotate(j: str) -> str:
    """The token offset of logical step j in the rotated order (moac_rot, moac_ns: _staged)."""
    return f"(({j}) + moac_rot < moac_ns ? ({j}) + moac_rot : ({j}) + moac_rot - moac_ns)"


def _reads_lanes(x) -> bool:
    """Whether the C IR x reads the lane or the warp of its block."""
    return any(v.name in ("moac_lane", "moac_warp") for v in _find(x, cir.Var))


def team_body(body: tuple) -> tuple:
    """A gang body whose tile has several warps (cir.Tile.warps): what follows the tile, at
    every level around it, run by warp 0 alone, which holds the merged state (the others
    would repeat its stores and its count of the LastGang counter)."""
    i = next((i for i, st in enumerate(body) if tiles_in(st)), None)
    if i is None:
        return body
    st, rest = body[i], body[i + 1:]
    if isinstance(st, cir.Block):
        st = dataclasses.replace(st, body=team_body(st.body))
    elif isinstance(st, cir.If) and not tiles_in(st.other) and not _reads_lanes(st.cond):
        st = dataclasses.replace(st, then=team_body(st.then))      # the same branch for the block's warps
    elif not isinstance(st, cir.Tile):
        raise RewriteError("a tile of several warps inside a loop of its gang or a condition of its lanes")
    return body[:i] + (st,) + ((cir.If(cir.Bin("==", cir.Var("moac_warp"), cir.Int(0)), rest),) if rest else ())
