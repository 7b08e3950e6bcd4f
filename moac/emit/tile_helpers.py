"""The CUDA device helpers of the tensor-core tiles (moac.emit.tiles): the fragment layout of
moac.schedule.plans.tiles in mma.sync m16n8k16, the shared-memory stages and their cp.async
copies, the online softmax of a step and the merge of a gang's warps.  C text, no Python
logic; moac.emit.cuda prints it once into a unit that has tiles."""

HELPERS = r"""/* tensor-core tiles of the split-K partials (moac.schedule.plans.tiles): mma.sync m16n8k16 with
 * bf16 or f16 operands and f32 accumulators; lane (r, c) = (lane / 4, lane % 4) of the fragments.
 * ST, the storage of K and V: 0 bf16, 1 f16 (16-byte loads of 8 elements), 2 f8e4m3, 3 f8e5m2
 * (8-byte loads of 8 elements, widened exactly to f16 pairs); bf16 storage uses bf16 operands,
 * the others f16 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
template <int ST> struct moac_tile_word { typedef uint4 type; };
template <> struct moac_tile_word<2> { typedef uint2 type; };
template <> struct moac_tile_word<3> { typedef uint2 type; };
template <int ST>
static __device__ __forceinline__ void moac_mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1)
{
    if constexpr (ST == 0)
        asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]) : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    else
        asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]) : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
/* x rounded to the operand type, and two floats as an operand pair (the first in the low half) */
template <int ST> static __device__ __forceinline__ float moac_tile_round(float x)
{
    if constexpr (ST == 0) return __bfloat162float(__float2bfloat16_rn(x));
    else return __half2float(__float2half_rn(x));
}
template <int ST> static __device__ __forceinline__ uint32_t moac_tile_pair(float lo, float hi)
{
    uint32_t u;
    if constexpr (ST == 0) { __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi); u = *reinterpret_cast<uint32_t *>(&v); }
    else { __half2 v = __floats2half2_rn(lo, hi); u = *reinterpret_cast<uint32_t *>(&v); }
    return u;
}
/* two 8-bit elements (the low one in the low byte) as an exact f16 pair */
template <int ST> static __device__ __forceinline__ uint32_t moac_tile_widen(uint32_t two)
{
    __half2_raw h = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)(two & 0xffffu), ST == 2 ? __NV_E4M3 : __NV_E5M2);
    return (uint32_t)h.x | ((uint32_t)h.y << 16);
}
/* the K fragment words of k-step 2s + hs from the lane's 8 elements of a key row */
template <int ST> static __device__ __forceinline__ void moac_tile_kfrag(const typename moac_tile_word<ST>::type &w,
                                                                         int hs, uint32_t &b0, uint32_t &b1)
{
    if constexpr (ST < 2) { b0 = hs ? w.z : w.x; b1 = hs ? w.w : w.y; }
    else { const uint32_t q = hs ? w.y : w.x; b0 = moac_tile_widen<ST>(q); b1 = moac_tile_widen<ST>(q >> 16); }
}
/* element e (of 8) of two tokens' V words as one operand pair (the first token in the low half) */
template <int ST> static __device__ __forceinline__ uint32_t moac_tile_vpair(const typename moac_tile_word<ST>::type &a,
                                                                             const typename moac_tile_word<ST>::type &b, int e)
{
    if constexpr (ST < 2) {
        const uint32_t x = (&a.x)[e / 2], y = (&b.x)[e / 2];
        return __byte_perm(x, y, e % 2 ? 0x7632 : 0x5410);
    } else {
        const uint32_t x = (&a.x)[e / 4], y = (&b.x)[e / 4];
        return moac_tile_widen<ST>(__byte_perm(x, y, ((4 + e % 4) << 4) | (e % 4)));
    }
}
/* a lane's words of 16 tokens: K rows of tokens r and 8 + r (8 contiguous d per 32), V rows of
 * tokens 2c, 2c + 1, 8 + 2c, 9 + 2c (8 contiguous dv per 64) */
template <int DK, int DV, int ST> struct moac_kv_tile {
    typename moac_tile_word<ST>::type k[2][DK / 32], v[4][DV / 64];
};
/* the steps of a warp staged in shared memory (cp.async, 16-byte granules, consecutive lanes on
 * consecutive granules of a step's rows: whole 128-byte lines a request).  A stage holds 16 K
 * rows, then 16 V rows, of W-words (8 elements); word x of K row t is kept at x ^ 4 (t mod
 * 32/sizeof W) and of V row t at x ^ (32/sizeof W) ((t >> 1) mod 4), within aligned blocks of
 * the largest power of two dividing the row's words, so that the lanes of one phase of
 * moac_tile_read fall in distinct banks */
template <int DK, int DV, int ST> struct moac_stage_geom {
    typedef typename moac_tile_word<ST>::type W;
    static constexpr int ES = ST < 2 ? 2 : 1;                                  /* element bytes */
    static constexpr int KW = DK * ES / (int)sizeof(W), VW = DV * ES / (int)sizeof(W);   /* words a row */
    static constexpr int KG = DK * ES / 16, VG = DV * ES / 16;                 /* granules a row */
    static constexpr int BYTES = 16 * (KW + VW) * (int)sizeof(W);
};
template <int R> static __device__ __forceinline__ int moac_swz(int x, int phi) { return x ^ (phi & ((R & -R) - 1)); }
static __device__ __forceinline__ void moac_cp16(void *dst, const void *src)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" :: "r"((unsigned)__cvta_generic_to_shared(dst)), "l"(src) : "memory");
}
static __device__ __forceinline__ void moac_cp_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N> static __device__ __forceinline__ void moac_cp_wait() { asm volatile("cp.async.wait_group %0;" :: "n"(N) : "memory"); }
/* a step's 16 K and 16 V rows into a stage: krow(t), vrow(t) point at row t's first element */
template <int DK, int DV, int ST, typename KR, typename VR>
static __device__ __forceinline__ void moac_tile_copy(unsigned char *stage, KR krow, VR vrow, int lane)
{
    typedef moac_stage_geom<DK, DV, ST> G;
    constexpr int WS = sizeof(typename G::W), WG = 16 / WS;
#pragma unroll
    for (int i = 0; i < (16 * G::KG + 31) / 32; ++i) {
        const int g = lane + 32 * i, t = g / G::KG, p = g % G::KG;
        if (16 * G::KG % 32 == 0 || g < 16 * G::KG)
            moac_cp16(stage + WS * (t * G::KW + moac_swz<G::KW>(WG * p, 4 * (t % (32 / WS)))),
                      reinterpret_cast<const unsigned char *>(krow(t)) + 16 * p);
    }
    unsigned char *vs = stage + WS * 16 * G::KW;
#pragma unroll
    for (int i = 0; i < (16 * G::VG + 31) / 32; ++i) {
        const int g = lane + 32 * i, t = g / G::VG, p = g % G::VG;
        if (16 * G::VG % 32 == 0 || g < 16 * G::VG)
            moac_cp16(vs + WS * (t * G::VW + moac_swz<G::VW>(WG * p, (32 / WS) * ((t >> 1) & 3))),
                      reinterpret_cast<const unsigned char *>(vrow(t)) + 16 * p);
    }
}
/* a lane's words of a staged step (moac_kv_tile) */
template <int DK, int DV, int ST>
static __device__ __forceinline__ void moac_tile_read(moac_kv_tile<DK, DV, ST> &t, const unsigned char *stage, int r, int c)
{
    typedef moac_stage_geom<DK, DV, ST> G;
    typedef typename G::W W;
    const W *ks = reinterpret_cast<const W *>(stage), *vs = ks + 16 * G::KW;
#pragma unroll
    for (int b = 0; b < 2; ++b)
#pragma unroll
        for (int s = 0; s < DK / 32; ++s) {
            const int row = 8 * b + r;
            t.k[b][s] = ks[row * G::KW + moac_swz<G::KW>(4 * s + c, 4 * (row % (32 / (int)sizeof(W))))];
        }
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int h = 0; h < DV / 64; ++h) {
            const int row = 8 * (i / 2) + i % 2 + 2 * c;
            t.v[i][h] = vs[row * G::VW + moac_swz<G::VW>(8 * h + r, (32 / (int)sizeof(W)) * ((row >> 1) & 3))];
        }
}
/* the lane's query row as two halves q = q_hi + q_lo in the fragments of k-step 2s + h:
 * d = 32 s + 8 c + 4 h + {0, 1 | 2, 3}, row r the high half, row r + 8 the low; 0 past the group */
template <int DK, int ST>
static __device__ __forceinline__ void moac_tile_q(uint32_t (&qa)[DK / 16][4], const float *q, bool live, int c)
{
#pragma unroll
    for (int s = 0; s < DK / 32; ++s) {
        const float4 u0 = *reinterpret_cast<const float4 *>(q + 32 * s + 8 * c);
        const float4 u1 = *reinterpret_cast<const float4 *>(q + 32 * s + 8 * c + 4);
        float x[8] = {u0.x, u0.y, u0.z, u0.w, u1.x, u1.y, u1.z, u1.w}, h[8];
#pragma unroll
        for (int e = 0; e < 8; ++e) { x[e] = live ? x[e] : 0.0f; h[e] = moac_tile_round<ST>(x[e]); }
#pragma unroll
        for (int hs = 0; hs < 2; ++hs) {
            const int e = 4 * hs;
            qa[2 * s + hs][0] = moac_tile_pair<ST>(h[e], h[e + 1]);
            qa[2 * s + hs][1] = moac_tile_pair<ST>(x[e] - h[e], x[e + 1] - h[e + 1]);
            qa[2 * s + hs][2] = moac_tile_pair<ST>(h[e + 2], h[e + 3]);
            qa[2 * s + hs][3] = moac_tile_pair<ST>(x[e + 2] - h[e + 2], x[e + 3] - h[e + 3]);
        }
    }
}
/* the dot products of 16 tokens: s[b][e] row r (high half) and s[b][e + 2] (low half) of token 8 b + 2 c + e */
template <int DK, int DV, int ST>
static __device__ __forceinline__ void moac_tile_scores(const moac_kv_tile<DK, DV, ST> &t,
                                                        const uint32_t (&qa)[DK / 16][4], float (&s)[2][4])
{
#pragma unroll
    for (int b = 0; b < 2; ++b) {
        s[b][0] = s[b][1] = s[b][2] = s[b][3] = 0.0f;
#pragma unroll
        for (int st = 0; st < DK / 16; ++st) {
            uint32_t b0, b1;
            moac_tile_kfrag<ST>(t.k[b][st / 2], st % 2, b0, b1);
            moac_mma<ST>(s[b], qa[st], b0, b1);
        }
    }
}
/* the online softmax of the lane's 4 scores x (tokens 2c, 2c + 1, 8 + 2c, 9 + 2c of head r) and the
 * weighted sum as tiles of p·w (w: a factor of each token's values, 1 where there is none),
 * p·w = hi + lo in rows r and r + 8 */
template <int DK, int DV, int ST>
static __device__ __forceinline__ void moac_tile_pv(const moac_kv_tile<DK, DV, ST> &t, float (&o)[DV / 8][4], float &m,
                                                    float &z, const float (&x)[4], const float (&w)[4], bool live)
{
    float tm = fmaxf(fmaxf(x[0], x[1]), fmaxf(x[2], x[3]));
    tm = fmaxf(tm, __shfl_xor_sync(0xffffffffu, tm, 1));
    tm = fmaxf(tm, __shfl_xor_sync(0xffffffffu, tm, 2));
    const float mn = fmaxf(m, tm);
    /* the shift clamped to the least finite float: while every score so far is −∞ (a mask) the
     * state stays the identity (−∞, 0, 0) instead of exp(−∞ − (−∞)) = NaN; a NaN score stays NaN */
    const float shift = fmaxf(mn, -3.4028234663852886e38f), alpha = moac_expf(m - shift);
    float p[4], pw[4], h[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) {
        p[e] = moac_expf(x[e] - shift);
        pw[e] = p[e] * w[e];
        h[e] = moac_tile_round<ST>(pw[e]);
    }
    m = mn;
    z = z * alpha + ((p[0] + p[1]) + (p[2] + p[3]));
    /* the accumulators rescaled only where a lane's maximum grew (alpha = exp(0) = 1 exactly
     * elsewhere, so skipping the products changes no bit); the vote keeps the warp together */
    if (__any_sync(0xffffffffu, alpha != 1.0f))
#pragma unroll
        for (int nb = 0; nb < DV / 8; ++nb)
#pragma unroll
            for (int i = 0; i < 4; ++i) o[nb][i] *= alpha;
    uint32_t pa[4] = {0u, 0u, 0u, 0u};
    if (live) {
        pa[0] = moac_tile_pair<ST>(h[0], h[1]); pa[1] = moac_tile_pair<ST>(pw[0] - h[0], pw[1] - h[1]);
        pa[2] = moac_tile_pair<ST>(h[2], h[3]); pa[3] = moac_tile_pair<ST>(pw[2] - h[2], pw[3] - h[3]);
    }
#pragma unroll
    for (int hh = 0; hh < DV / 64; ++hh)
#pragma unroll
        for (int e = 0; e < 8; ++e)
            moac_mma<ST>(o[8 * hh + e], pa, moac_tile_vpair<ST>(t.v[0][hh], t.v[1][hh], e),
                         moac_tile_vpair<ST>(t.v[2][hh], t.v[3][hh], e));
}
/* a warp's state (o, m, z) left in its own SPAN bytes of the stages, lane by lane, for a merge */
template <int DV, int SPAN>
static __device__ __forceinline__ void moac_tile_leave(unsigned char *stages, const float (&o)[DV / 8][4], float m, float z,
                                                       int warp, int lane)
{
    static_assert((DV / 2 + 2) * 32 * (int)sizeof(float) <= SPAN, "a warp's stages hold its state");
    float *s = reinterpret_cast<float *>(stages + warp * SPAN);
#pragma unroll
    for (int nb = 0; nb < DV / 8; ++nb)
#pragma unroll
        for (int i = 0; i < 4; ++i) s[(4 * nb + i) * 32 + lane] = o[nb][i];
    s[DV / 2 * 32 + lane] = m;
    s[(DV / 2 + 1) * 32 + lane] = z;
}
/* the states of a gang's W warps merged into warp 0's, lane by lane (every warp holds the same rows
 * and columns of the fragments): warp w > 0 leaves its o, m and z in its own SPAN bytes of the
 * stages, warp 0 rescales and adds them as the online softmax does a step; the stages are free again
 * when it returns */
template <int DV, int W, int SPAN>
static __device__ __forceinline__ void moac_tile_merge(unsigned char *stages, float (&o)[DV / 8][4], float &m, float &z,
                                                       int warp, int lane)
{
    moac_cp_wait<0>();
    __syncthreads();
    if (warp > 0)
        moac_tile_leave<DV, SPAN>(stages, o, m, z, warp, lane);
    __syncthreads();
    if (warp == 0)
        for (int w = 1; w < W; ++w) {
            const float *s = reinterpret_cast<const float *>(stages + w * SPAN);
            const float mw = s[DV / 2 * 32 + lane], mn = fmaxf(m, mw), shift = fmaxf(mn, -3.4028234663852886e38f);
            const float a0 = moac_expf(m - shift), a1 = moac_expf(mw - shift);
#pragma unroll
            for (int nb = 0; nb < DV / 8; ++nb)
#pragma unroll
                for (int i = 0; i < 4; ++i) o[nb][i] = o[nb][i] * a0 + s[(4 * nb + i) * 32 + lane] * a1;
            z = z * a0 + s[(DV / 2 + 1) * 32 + lane] * a1;
            m = mn;
        }
    __syncthreads();
}
/* head r's 16 outputs of block hh held by the lane (dv = 64 hh + 16 c + 0 … 15): its rows r and r + 8 of
 * the accumulator fragments (the two bf16 halves of q and p) added */
template <int DV>
static __device__ __forceinline__ void moac_tile_row(const float (&o)[DV / 8][4], int hh, float (&r)[16])
{
#pragma unroll
    for (int e = 0; e < 8; ++e) { r[e] = o[8 * hh + e][0] + o[8 * hh + e][2]; r[8 + e] = o[8 * hh + e][1] + o[8 * hh + e][3]; }
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
        moac_tile_row<DV>(o, hh, r);
        float4 *dst = reinterpret_cast<float4 *>(op + 64 * hh + 16 * c);
#pragma unroll
        for (int q = 0; q < 4; ++q) dst[q] = make_float4(r[4 * q], r[4 * q + 1], r[4 * q + 2], r[4 * q + 3]);
    }
}"""

# a frame of one gang (TensorTile.direct): the row's outputs stored from the tile, the fold's
# identity (M = m, e^0 = 1, Z = z) done in the lane
TILE_OUT = r"""/* a frame of one gang: head r's outputs o ÷ z stored from the tile (0 where z = 0, no tokens), what the
 * fold of its one partial would store; 16-byte stores where the output row is 16-byte aligned */
template <int DV>
static __device__ __forceinline__ void moac_tile_out(const float (&o)[DV / 8][4], float z, bool live, int c, float *out)
{
    z += __shfl_xor_sync(0xffffffffu, z, 1);
    z += __shfl_xor_sync(0xffffffffu, z, 2);
    if (!live)
        return;
    const bool wide = ((uintptr_t)out & 15u) == 0;
#pragma unroll
    for (int hh = 0; hh < DV / 64; ++hh) {
        float r[16];
        moac_tile_row<DV>(o, hh, r);
#pragma unroll
        for (int e = 0; e < 16; ++e) r[e] = z != 0.0f ? r[e] / z : 0.0f;
        float *dst = out + 64 * hh + 16 * c;
        if (wide) {
#pragma unroll
            for (int q = 0; q < 4; ++q)
                reinterpret_cast<float4 *>(dst)[q] = make_float4(r[4 * q], r[4 * q + 1], r[4 * q + 2], r[4 * q + 3]);
        } else {
#pragma unroll
            for (int e = 0; e < 16; ++e) dst[e] = r[e];
        }
    }
}
/* a frame of one gang of W warps: every warp leaves its o, m and z in its own SPAN bytes of the stages,
 * then merges NB = DV / 8 / W column blocks of the W states (block nb = NB w + k; rescaled and added
 * as the online softmax does a step) and stores their outputs o ÷ z, so that no warp merges the
 * others' states in turn; the stages are free again when it returns (16-byte stores where NB is a
 * multiple of 4 and the output row is 16-byte aligned) */
template <int DV, int W, int SPAN>
static __device__ __forceinline__ void moac_tile_merge_out(unsigned char *stages, const float (&o)[DV / 8][4], float m, float z,
                                                           int warp, int lane, bool live, int c, float *out)
{
    constexpr int NB = DV / 8 / W;
    static_assert(NB * W == DV / 8 && NB <= 8 && 8 % NB == 0, "the warps share out the column blocks of a 64-wide block");
    moac_cp_wait<0>();
    __syncthreads();
    moac_tile_leave<DV, SPAN>(stages, o, m, z, warp, lane);
    __syncthreads();
    float mw[W], mx = -INFINITY;
#pragma unroll
    for (int w = 0; w < W; ++w) {
        mw[w] = reinterpret_cast<const float *>(stages + w * SPAN)[DV / 2 * 32 + lane];
        mx = fmaxf(mx, mw[w]);
    }
    const float shift = fmaxf(mx, -3.4028234663852886e38f);
    float a[W], zt = 0.0f, acc[NB][4];
#pragma unroll
    for (int w = 0; w < W; ++w) {
        a[w] = moac_expf(mw[w] - shift);
        zt += a[w] * reinterpret_cast<const float *>(stages + w * SPAN)[(DV / 2 + 1) * 32 + lane];
    }
#pragma unroll
    for (int k = 0; k < NB; ++k)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            float x = 0.0f;
#pragma unroll
            for (int w = 0; w < W; ++w)
                x += a[w] * reinterpret_cast<const float *>(stages + w * SPAN)[(4 * (NB * warp + k) + i) * 32 + lane];
            acc[k][i] = x;
        }
    __syncthreads();
    zt += __shfl_xor_sync(0xffffffffu, zt, 1);
    zt += __shfl_xor_sync(0xffffffffu, zt, 2);
    if (!live)
        return;
    const int nb0 = NB * warp;
    float *dst = out + 64 * (nb0 >> 3) + 16 * c + (nb0 & 7);   /* outputs e and 8 + e of block nb = 8 hh + e */
    float r[2][NB];
#pragma unroll
    for (int k = 0; k < NB; ++k) {
        r[0][k] = zt != 0.0f ? (acc[k][0] + acc[k][2]) / zt : 0.0f;
        r[1][k] = zt != 0.0f ? (acc[k][1] + acc[k][3]) / zt : 0.0f;
    }
    if (NB % 4 == 0 && ((uintptr_t)out & 15u) == 0) {
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
            for (int q = 0; q < NB / 4; ++q)
                reinterpret_cast<float4 *>(dst + 8 * h)[q] = make_float4(r[h][4 * q], r[h][4 * q + 1], r[h][4 * q + 2], r[h][4 * q + 3]);
    } else {
#pragma unroll
        for (int k = 0; k < NB; ++k) { dst[k] = r[0][k]; dst[8 + k] = r[1][k]; }
    }
}"""
