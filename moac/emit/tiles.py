"""A tensor-core tile (cir.Tile) as CUDA: the fragment layout moac.schedule.plans.tiles
derives, printed with mma.sync.  Lane (r, c) = (lane ÷ 4, lane mod 4) of a warp holds rows
r and r + 8 (a head and its low half) and columns 2c, 2c + 1 of every accumulator.

Per 16 tokens a lane issues 2·dk/32 + 4·dv/64 16-byte loads (K rows of tokens r and 8 + r,
V rows of tokens 2c, 2c + 1, 8 + 2c, 9 + 2c), dk/8 score tiles and dv/8 weighted-sum
tiles; the next 16 tokens' loads are issued before this step's tiles (two register
buffers).  No sympy here."""
from __future__ import annotations

from . import cir

HELPERS = r"""/* tensor-core tiles of the split-K partials (moac.schedule.plans.tiles): mma.sync m16n8k16 with
 * bf16 operands and f32 accumulators; lane (r, c) = (lane / 4, lane % 4) of the fragments */
#include <cuda_bf16.h>
static __device__ __forceinline__ void moac_mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1)
{
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]) : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
/* two floats as a bf16 pair (round to nearest even), the first in the low half */
static __device__ __forceinline__ uint32_t moac_bf16x2(float lo, float hi)
{
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t *>(&v);
}
static __device__ __forceinline__ float moac_bf16_round(float x) { return __bfloat162float(__float2bfloat16_rn(x)); }
/* what a lane loads for 16 tokens: K rows of tokens r and 8 + r (8 contiguous d per 32),
 * V rows of tokens 2c, 2c + 1, 8 + 2c, 9 + 2c (8 contiguous dv per 64) */
template <int DK, int DV> struct moac_kv_tile { uint4 k[2][DK / 32]; uint4 v[4][DV / 64]; };
template <int DK, int DV>
static __device__ __forceinline__ void moac_tile_load(moac_kv_tile<DK, DV> &t, const uint16_t *k, const uint16_t *v,
                                                      int64_t ks, int64_t vs, int j, int last, int r, int c)
{
#pragma unroll
    for (int b = 0; b < 2; ++b) {
        const uint16_t *row = k + (int64_t)min(j + 8 * b + r, last) * ks + 8 * c;
#pragma unroll
        for (int s = 0; s < DK / 32; ++s) t.k[b][s] = __ldg(reinterpret_cast<const uint4 *>(row + 32 * s));
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const uint16_t *row = v + (int64_t)min(j + 8 * (i / 2) + 2 * c + i % 2, last) * vs + 8 * r;
#pragma unroll
        for (int h = 0; h < DV / 64; ++h) t.v[i][h] = __ldg(reinterpret_cast<const uint4 *>(row + 64 * h));
    }
}
/* the lane's query row as two bf16 halves q = q_hi + q_lo in the fragments of k-step 2s + h:
 * d = 32 s + 8 c + 4 h + {0, 1 | 2, 3}, row r the high half, row r + 8 the low; 0 past the group */
template <int DK>
static __device__ __forceinline__ void moac_tile_q(uint32_t (&qa)[DK / 16][4], const float *q, bool live, int c)
{
#pragma unroll
    for (int s = 0; s < DK / 32; ++s) {
        const float4 u0 = *reinterpret_cast<const float4 *>(q + 32 * s + 8 * c);
        const float4 u1 = *reinterpret_cast<const float4 *>(q + 32 * s + 8 * c + 4);
        float x[8] = {u0.x, u0.y, u0.z, u0.w, u1.x, u1.y, u1.z, u1.w}, h[8];
#pragma unroll
        for (int e = 0; e < 8; ++e) { x[e] = live ? x[e] : 0.0f; h[e] = moac_bf16_round(x[e]); }
#pragma unroll
        for (int hs = 0; hs < 2; ++hs) {
            const int e = 4 * hs;
            qa[2 * s + hs][0] = moac_bf16x2(h[e], h[e + 1]);
            qa[2 * s + hs][1] = moac_bf16x2(x[e] - h[e], x[e + 1] - h[e + 1]);
            qa[2 * s + hs][2] = moac_bf16x2(h[e + 2], h[e + 3]);
            qa[2 * s + hs][3] = moac_bf16x2(x[e + 2] - h[e + 2], x[e + 3] - h[e + 3]);
        }
    }
}
/* the dot products of 16 tokens: s[b][e] row r (high half) and s[b][e + 2] (low half) of token 8 b + 2 c + e */
template <int DK, int DV>
static __device__ __forceinline__ void moac_tile_scores(const moac_kv_tile<DK, DV> &t, const uint32_t (&qa)[DK / 16][4],
                                                        float (&s)[2][4])
{
#pragma unroll
    for (int b = 0; b < 2; ++b) {
        s[b][0] = s[b][1] = s[b][2] = s[b][3] = 0.0f;
#pragma unroll
        for (int st = 0; st < DK / 16; ++st) {
            const uint4 &w = t.k[b][st / 2];
            moac_mma_bf16(s[b], qa[st], st % 2 ? w.z : w.x, st % 2 ? w.w : w.y);
        }
    }
}
/* the online softmax of the lane's 4 scores x (tokens 2c, 2c + 1, 8 + 2c, 9 + 2c of head r) and the
 * weighted sum as tiles, p = p_hi + p_lo in rows r and r + 8; the V pairs by one byte permute */
template <int DK, int DV>
static __device__ __forceinline__ void moac_tile_pv(const moac_kv_tile<DK, DV> &t, float (&o)[DV / 8][4], float &m,
                                                    float &z, const float (&x)[4], bool live)
{
    float tm = fmaxf(fmaxf(x[0], x[1]), fmaxf(x[2], x[3]));
    tm = fmaxf(tm, __shfl_xor_sync(0xffffffffu, tm, 1));
    tm = fmaxf(tm, __shfl_xor_sync(0xffffffffu, tm, 2));
    const float mn = fmaxf(m, tm);
    const bool none = mn == -INFINITY;          /* every score so far −∞: no weight yet */
    const float alpha = none ? 1.0f : moac_expf(m - mn);
    float p[4], h[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) { p[e] = none ? 0.0f : moac_expf(x[e] - mn); h[e] = moac_bf16_round(p[e]); }
    m = mn;
    z = z * alpha + ((p[0] + p[1]) + (p[2] + p[3]));
#pragma unroll
    for (int nb = 0; nb < DV / 8; ++nb)
#pragma unroll
        for (int i = 0; i < 4; ++i) o[nb][i] *= alpha;
    uint32_t pa[4] = {0u, 0u, 0u, 0u};
    if (live) {
        pa[0] = moac_bf16x2(h[0], h[1]); pa[1] = moac_bf16x2(p[0] - h[0], p[1] - h[1]);
        pa[2] = moac_bf16x2(h[2], h[3]); pa[3] = moac_bf16x2(p[2] - h[2], p[3] - h[3]);
    }
#pragma unroll
    for (int hh = 0; hh < DV / 64; ++hh)
#pragma unroll
        for (int w = 0; w < 4; ++w) {
            const uint32_t a0 = (&t.v[0][hh].x)[w], a1 = (&t.v[1][hh].x)[w];
            const uint32_t a2 = (&t.v[2][hh].x)[w], a3 = (&t.v[3][hh].x)[w];
            moac_mma_bf16(o[8 * hh + 2 * w], pa, __byte_perm(a0, a1, 0x5410), __byte_perm(a2, a3, 0x5410));
            moac_mma_bf16(o[8 * hh + 2 * w + 1], pa, __byte_perm(a0, a1, 0x7632), __byte_perm(a2, a3, 0x7632));
        }
}
/* the partials of head r: m, z (summed over the lane's column group), o (lane c holds dv = 64 h + 16 c + 0 … 15) */
template <int DV>
static __device__ __forceinline__ void moac_tile_finish(const float (&o)[DV / 8][4], float m, float z, bool live, int c,
                                                        float *mp, float *zp, float *op)
{
    z += __shfl_xor_sync(0xffffffffu, z, 1);
    z += __shfl_xor_sync(0xffffffffu, z, 2);
    if (!live)
        return;
    if (c == 0) { *mp = m; *zp = z; }
#pragma unroll
    for (int hh = 0; hh < DV / 64; ++hh) {
        float r[16];
#pragma unroll
        for (int e = 0; e < 8; ++e) { r[e] = o[8 * hh + e][0] + o[8 * hh + e][2]; r[8 + e] = o[8 * hh + e][1] + o[8 * hh + e][3]; }
        float4 *dst = reinterpret_cast<float4 *>(op + 64 * hh + 16 * c);
#pragma unroll
        for (int q = 0; q < 4; ++q) dst[q] = make_float4(r[4 * q], r[4 * q + 1], r[4 * q + 2], r[4 * q + 3]);
    }
}"""


def _step(t: cir.Tile, buf: str, j: str, itype: str, ctype: str) -> list[str]:
    L = ["{", "    float moac_s[2][4], moac_x[4];", f"    moac_tile_scores<{t.dk}, {t.dv}>({buf}, moac_qa, moac_s);"]
    score = cir.expr(t.score, ctype)
    for e in range(4):
        b, col = divmod(e, 2)
        L += ["    {",
              f"        const {itype} moac_u = {j} + {8 * b + col} + 2 * moac_tc;   /* the token of score {e} in the chunk */",
              f"        const {itype} {t.tok} = moac_t0 + moac_u;",
              f"        const float moac_sv = moac_s[{b}][{col}] + moac_s[{b}][{col + 2}];",
              f"        moac_x[{e}] = moac_u < moac_tn ? {score} : -INFINITY;",
              f"        (void){t.tok};",
              "    }"]
    L += [f"    moac_tile_pv<{t.dk}, {t.dv}>({buf}, moac_o, moac_tm, moac_tz, moac_x, moac_live);", "}"]
    return L


def render(t: cir.Tile, itype: str, ctype: str = "float") -> str:
    """The tile's statements inside a gang iteration of a one-warp block (`moac_lane`)."""
    e = lambda x: cir.expr(x, ctype)          # noqa: E731
    m, z, o = t.parts
    load = (f"moac_tile_load<{t.dk}, {t.dv}>({{buf}}, moac_kb, moac_vb, {t.k_step}, {t.v_step}, {{j}}, "
            "moac_tn - 1, moac_tr, moac_tc);")
    ind = lambda lines, n: ["    " * n + ln for ln in lines]   # noqa: E731
    L = [f"{{   /* tensor-core tile {t.shape}: the {t.rows} heads and their low halves as rows (moac.schedule.plans.tiles) */",
         "    const int moac_tr = moac_lane >> 2, moac_tc = moac_lane & 3;",
         f"    const bool moac_live = moac_tr < {t.rows};",
         f"    const {itype} {t.row} = moac_live ? moac_tr : 0;",
         f"    const {itype} moac_t0 = {e(t.start)}, moac_tn = {e(t.count)};",
         f"    uint32_t moac_qa[{t.dk // 16}][4];",
         f"    moac_tile_q<{t.dk}>(moac_qa, {t.q} + ({e(t.q_at)}), moac_live, moac_tc);",
         f"    const uint16_t *moac_kb = {t.k} + ({e(t.k_at)}), *moac_vb = {t.v} + ({e(t.v_at)});",
         f"    float moac_o[{t.dv // 8}][4];",
         f"    for (int moac_i = 0; moac_i < {t.dv // 8}; ++moac_i)",
         "        moac_o[moac_i][0] = moac_o[moac_i][1] = moac_o[moac_i][2] = moac_o[moac_i][3] = 0.0f;",
         "    float moac_tm = -INFINITY, moac_tz = 0.0f;",
         "    if (moac_tn > 0) {",
         f"        moac_kv_tile<{t.dk}, {t.dv}> moac_ta, moac_tb;",
         "        " + load.format(buf="moac_ta", j="0"),
         f"        for ({itype} moac_j = 0; moac_j < moac_tn; moac_j += 32) {{   /* 16 tokens a step, the next step's loads first */",
         "            if (moac_j + 16 < moac_tn)",
         "                " + load.format(buf="moac_tb", j="moac_j + 16")]
    L += ind(_step(t, "moac_ta", "moac_j", itype, ctype), 3)
    L += ["            if (moac_j + 16 >= moac_tn)", "                break;",
          "            if (moac_j + 32 < moac_tn)", "                " + load.format(buf="moac_ta", j="moac_j + 32")]
    L += ind(_step(t, "moac_tb", "moac_j + 16", itype, ctype), 3)
    L += ["        }", "    }",
          f"    moac_tile_finish<{t.dv}>(moac_o, moac_tm, moac_tz, moac_live, moac_tc, {m} + ({e(t.m_at)}), "
          f"{z} + ({e(t.z_at)}), {o} + ({e(t.o_at)}));",
          "}"]
    return "\n".join(L)
