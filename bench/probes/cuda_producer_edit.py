"""Probe only, not the product path: rewrite the generated batched GQA bf16 .cu (examples/
decode_gqa_batched.moa in bf16, d = 128, 4 heads a KV head) so that its 32-bit partials kernel
has a fifth, producer warp that copies every stage of the 4 computing warps (cp.async by its
32 lanes, completion signalled on an mbarrier `full` a stage with cp.async.mbarrier.arrive),
each computing warp releasing its stage (mbarrier `empty`) as soon as it has read it into
registers.  The stream probe (kinds 7 and 8, docs/benchmarks.md, 2026-12-06) says a producer
warp keeps part of the rate the arithmetic costs the copies; this measures it on the kernel.

    python3 bench/probes/cuda_producer_edit.py [--tma] IN.cu OUT.cu   # then nvcc as moac builds it

--tma3d: the same with 3-D boxes (64 elements × 2 halves × 64 rows), so that a box reads
whole 256-byte rows; --tma3dw: boxes of 16 rows, one a computing warp, each with an mbarrier
of its own (a warp waits for its rows alone).
--tma: the producer's lane 0 copies each 64-token step with four tensor copies
(cp.async.bulk.tensor.2d: K and V, two halves of 64 elements each, 64 rows, the 128-byte
swizzle) from tensor maps the host entry makes at each call (cuTensorMapEncodeTiled through
cudaGetDriverEntryPointByVersion); the computing warps read their fragments at the swizzled
places (moac_tma_read), which puts two lanes of a phase on one bank for K.  Needs n a multiple
of 64.

Covers only a frame of one gang in one block (B·8 blocks, one chunk a frame: B = 32 n = 4096);
the kernel traps otherwise.  The merge of the 4 warps' states is moac_tile_merge_out with a
named barrier of the 128 computing threads in place of __syncthreads."""
import re
import sys

NAME = "moac_decode_gqa_batched_bf16_k1_partials_i32"

HELPERS = r'''
/* probe: wait for the phase of parity `phase` of the mbarrier b */
static __device__ __forceinline__ void moac_mbar_wait(unsigned long long *b, unsigned phase)
{
    unsigned done = 0;
    while (!done)
        asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
                     : "=r"(done) : "r"((unsigned)__cvta_generic_to_shared(b)), "r"(phase) : "memory");
}
'''

STEP = r'''
                        float moac_s[2][4], moac_x[4], moac_w[4];
                        moac_tile_scores<128, 128, 0>(moac_ta, moac_qa, moac_s);
#pragma unroll
                        for (int e = 0; e < 4; ++e) {
                            const int32_t moac_u = moac_j + 8 * (e >> 1) + (e & 1) + 2 * moac_tc;
                            const float moac_sv = moac_s[e >> 1][e & 1] + moac_s[e >> 1][(e & 1) + 2];
                            moac_x[e] = moac_u < moac_tn ? moac_sv / sqrtf((float)128) : -INFINITY;
                            moac_w[e] = 1.0f;
                        }
                        moac_tile_pv<128, 128, 0>(moac_ta, moac_o, moac_tm, moac_tz, moac_x, moac_w, moac_live);
'''

KERNEL = r'''__global__ void __launch_bounds__(160, 2) ''' + NAME + r'''(const uint16_t *__restrict__ K_, const float *__restrict__ Q_, const uint16_t *__restrict__ V_, float *__restrict__ moac_done, float *__restrict__ moac_m_part, float *__restrict__ moac_o_part, float *__restrict__ moac_z_part, float *__restrict__ out_, int32_t B_, int32_t chunk, int32_t n_)
{   /* probe: 4 computing warps and a producer warp (warp 4) a block; one frame a block */
    const int moac_lane = threadIdx.x % 32, moac_warp = threadIdx.x / 32;
    __shared__ __align__(8) unsigned long long moac_full[3], moac_empty[3];
    if (threadIdx.x == 0)
        for (int s = 0; s < 3; ++s) {
            asm volatile("mbarrier.init.shared.b64 [%0], 32;" :: "r"((unsigned)__cvta_generic_to_shared(&moac_full[s])) : "memory");
            asm volatile("mbarrier.init.shared.b64 [%0], 4;" :: "r"((unsigned)__cvta_generic_to_shared(&moac_empty[s])) : "memory");
        }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    __syncthreads();
    if (n_ / chunk + (n_ % chunk != 0) != 1 || gridDim.x != (unsigned)(B_ * 8))
        __trap();
    const int32_t i_ = blockIdx.x / 8 % B_, a = blockIdx.x % 8;
    const int32_t moac_tn = moac_imin32(chunk, n_), moac_steps = (moac_tn + 63) / 64;
    extern __shared__ __align__(16) unsigned char moac_dyn_smem[];
    auto &moac_stages = *reinterpret_cast<unsigned char (*)[4][3][moac_stage_geom<128, 128, 0>::BYTES]>(moac_dyn_smem);
    if (moac_warp == 4) {
        for (int32_t i = 0; i < moac_steps; ++i) {
            const int s = i % 3;
            if (i >= 3)
                moac_mbar_wait(&moac_empty[s], (unsigned)((i / 3 - 1) & 1));
#pragma unroll
            for (int w = 0; w < 4; ++w) {
                const int32_t j = 64 * i + 16 * w;
                if (j < moac_tn) {
                    const uint16_t *moac_kb = K_ + (128 * j + 128 * a * n_ + 1024 * i_ * n_), *moac_vb = V_ + (128 * j + 128 * a * n_ + 1024 * i_ * n_);
                    moac_tile_copy<128, 128, 0>(moac_stages[w][s],
                        [&](int t) { return moac_kb + (min((int32_t)(j + t), moac_tn - 1) - j) * 128; },
                        [&](int t) { return moac_vb + (min((int32_t)(j + t), moac_tn - 1) - j) * 128; }, moac_lane);
                }
            }
            asm volatile("cp.async.mbarrier.arrive.noinc.shared.b64 [%0];" :: "r"((unsigned)__cvta_generic_to_shared(&moac_full[s])) : "memory");
        }
        moac_cp_wait<0>();
        return;
    }
    const int moac_tr = moac_lane >> 2, moac_tc = moac_lane & 3;
    const bool moac_live = moac_tr < 4;
    const int32_t moac_row = moac_live ? moac_tr : 0;
    uint32_t moac_qa[8][4];
    moac_tile_q<128, 0>(moac_qa, Q_ + (512 * a + 128 * moac_row + 4096 * i_), moac_live, moac_tc);
    float moac_o[16][4];
    for (int moac_i = 0; moac_i < 16; ++moac_i)
        moac_o[moac_i][0] = moac_o[moac_i][1] = moac_o[moac_i][2] = moac_o[moac_i][3] = 0.0f;
    float moac_tm = -INFINITY, moac_tz = 0.0f;
    moac_kv_tile<128, 128, 0> moac_ta;
    for (int32_t i = 0; i < moac_steps; ++i) {
        const int32_t moac_j = 64 * i + 16 * moac_warp;
        if (moac_j >= moac_tn)
            break;
        const int s = i % 3;
        moac_mbar_wait(&moac_full[s], (unsigned)((i / 3) & 1));
        moac_tile_read(moac_ta, moac_stages[moac_warp][s], moac_tr, moac_tc);
        __syncwarp();
        if (moac_lane == 0)
            asm volatile("mbarrier.arrive.shared.b64 _, [%0];" :: "r"((unsigned)__cvta_generic_to_shared(&moac_empty[s])) : "memory");
        {''' + STEP + r'''        }
    }
    moac_tile_merge_out_c<128, 4, 3 * moac_stage_geom<128, 128, 0>::BYTES>(&moac_stages[0][0][0], moac_o, moac_tm, moac_tz, moac_warp, moac_lane, moac_live, moac_tc, out_ + (512 * a + 128 * moac_row + 4096 * i_));
}

'''


TMA_HELPERS = r"""
/* probe: a lane's words of warp w's 16 tokens in a tensor-copied stage: K's halves (d 0-63, 64-127), then V's,
 * each 64 rows of 128 bytes whose 16-byte chunk j sits at j ^ (row mod 8) */
static __device__ __forceinline__ void moac_tma_read(moac_kv_tile<128, 128, 0> &t, const unsigned char *stage, int w, int r, int c)
{
    const uint4 *q = reinterpret_cast<const uint4 *>(stage);
#pragma unroll
    for (int b = 0; b < 2; ++b)
#pragma unroll
        for (int s = 0; s < 4; ++s) {
            const int row = 16 * w + 8 * b + r, x = 4 * s + c;
            t.k[b][s] = q[(x >> 3) * 512 + row * 8 + ((x & 7) ^ (row & 7))];
        }
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int row = 16 * w + 8 * (i / 2) + i % 2 + 2 * c, x = 8 * h + r;
            t.v[i][h] = q[(2 + h) * 512 + row * 8 + ((x & 7) ^ (row & 7))];
        }
}
"""

TMA3_READ = r"""
/* probe: the same from a stage of 3-D boxes: line L = 2 row + half of 128 bytes, chunk j at j ^ (L mod 8) */
static __device__ __forceinline__ void moac_tma3_read(moac_kv_tile<128, 128, 0> &t, const unsigned char *stage, int w, int r, int c)
{
    const uint4 *q = reinterpret_cast<const uint4 *>(stage);
#pragma unroll
    for (int b = 0; b < 2; ++b)
#pragma unroll
        for (int s = 0; s < 4; ++s) {
            const int row = 16 * w + 8 * b + r, x = 4 * s + c, L = 2 * row + (x >> 3);
            t.k[b][s] = q[L * 8 + ((x & 7) ^ (L & 7))];
        }
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int row = 16 * w + 8 * (i / 2) + i % 2 + 2 * c, x = 8 * h + r, L = 2 * row + h;
            t.v[i][h] = q[1024 + L * 8 + ((x & 7) ^ (L & 7))];
        }
}
"""

TMA_HOST = r"""
#include <cuda.h>
/* probe: a 2-D tensor map of rows × 128 bf16, boxes of 64 × 64 with the 128-byte swizzle */
typedef CUresult (*moac_encode_tiled_t)(CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *, const cuuint64_t *, const cuuint64_t *,
                                        const cuuint32_t *, const cuuint32_t *, CUtensorMapInterleave, CUtensorMapSwizzle,
                                        CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
static int moac_tma_map(CUtensorMap *m, const void *base, long long rows)
{
    static moac_encode_tiled_t enc = nullptr;
    if (!enc) {
        cudaDriverEntryPointQueryResult q;
        if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", (void **)&enc, 12000, cudaEnableDefault, &q) != cudaSuccess || !enc)
            return -1;
    }
#if MOAC_TMA_RANK == 3      /* rows × 2 halves × 64: a box's rows whole (256 bytes), MOAC_TMA_BOX rows */
    const cuuint64_t dims[3] = {64, 2, (cuuint64_t)rows}, strides[2] = {128, 256};
    const cuuint32_t box[3] = {64, 2, MOAC_TMA_BOX}, es[3] = {1, 1, 1};
#else
    const cuuint64_t dims[2] = {128, (cuuint64_t)rows}, strides[1] = {256};
    const cuuint32_t box[2] = {64, 64}, es[2] = {1, 1};
#endif
    return enc(m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, MOAC_TMA_RANK, const_cast<void *>(base), dims, strides, box, es, CU_TENSOR_MAP_INTERLEAVE_NONE,
               CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS ? 0 : -2;
}
"""

TMA3_PRODUCER = r"""    if (moac_warp == 4) {
        if (moac_lane == 0) {
            const int32_t moac_row0 = (i_ * 8 + a) * n_;
            for (int32_t i = 0; i < moac_steps; ++i) {
                const int s = i % 3;
                if (i >= 3)
                    moac_mbar_wait(&moac_empty[s], (unsigned)((i / 3 - 1) & 1));
                const unsigned d = (unsigned)__cvta_generic_to_shared(moac_tb + 32768 * s);
#pragma unroll
                for (int w = 0; w < NW; ++w) {      /* NW boxes of 64 / NW rows, each to its own mbarrier */
                    const unsigned mb = (unsigned)__cvta_generic_to_shared(&moac_fullw[w][s]);
                    asm volatile("mbarrier.arrive.expect_tx.shared.b64 _, [%0], %1;" :: "r"(mb), "r"(32768 / NW) : "memory");
#pragma unroll
                    for (int kv = 0; kv < 2; ++kv)
                        asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];"
                                     :: "r"(d + 16384 * kv + 16384 / NW * w), "l"(reinterpret_cast<uint64_t>(kv == 0 ? &moac_tmK : &moac_tmV)),
                                        "r"(0), "r"(0), "r"(moac_row0 + 64 * i + 64 / NW * w), "r"(mb) : "memory");
                }
            }
        }
        return;
    }
"""

TMA_PRODUCER = r"""    if (moac_warp == 4) {
        if (moac_lane == 0) {
            const int32_t moac_row0 = (i_ * 8 + a) * n_;
            for (int32_t i = 0; i < moac_steps; ++i) {
                const int s = i % 3;
                if (i >= 3)
                    moac_mbar_wait(&moac_full[s] + 3, (unsigned)((i / 3 - 1) & 1));
                const unsigned mb = (unsigned)__cvta_generic_to_shared(&moac_full[s]);
                asm volatile("mbarrier.arrive.expect_tx.shared.b64 _, [%0], %1;" :: "r"(mb), "r"(32768) : "memory");
                const unsigned d = (unsigned)__cvta_generic_to_shared(moac_tb + 32768 * s);
#pragma unroll
                for (int h = 0; h < 4; ++h)
                    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];"
                                 :: "r"(d + 8192 * h), "l"(reinterpret_cast<uint64_t>(h < 2 ? &moac_tmK : &moac_tmV)),
                                    "r"(64 * (h & 1)), "r"(moac_row0 + 64 * i), "r"(mb) : "memory");
            }
        }
        return;
    }
"""


def edit_tma(text: str, rank3: bool = False, per_warp: bool = False) -> str:
    """The --tma form of edit(); rank3: boxes of whole rows (--tma3d), per_warp: a box and an
    mbarrier for each computing warp's 16 rows (--tma3dw)."""
    text = edit(text)
    k = text
    k = k.replace("float *__restrict__ out_, int32_t B_, int32_t chunk, int32_t n_)\n{   /* probe: 4 computing warps",
                  "float *__restrict__ out_, int32_t B_, int32_t chunk, int32_t n_, const __grid_constant__ CUtensorMap moac_tmK, "
                  "const __grid_constant__ CUtensorMap moac_tmV)\n{   /* probe: 4 computing warps", 1)
    assert k != text
    k = k.replace('asm volatile("mbarrier.init.shared.b64 [%0], 32;"', 'asm volatile("mbarrier.init.shared.b64 [%0], 1;"', 1)
    k = k.replace("    __shared__ __align__(8) unsigned long long moac_full[3], moac_empty[3];",
                  "    __shared__ __align__(8) unsigned long long moac_full[6];   /* full[s], then empty[s] at full + 3 + s */\n"
                  "    unsigned long long *moac_empty = moac_full + 3;", 1)
    k = k.replace("    if (n_ / chunk + (n_ % chunk != 0) != 1 || gridDim.x != (unsigned)(B_ * 8))",
                  "    if (n_ / chunk + (n_ % chunk != 0) != 1 || gridDim.x != (unsigned)(B_ * 8) || n_ % 64 != 0)", 1)
    a = k.index("    if (moac_warp == 4) {")
    b = k.index("        return;\n    }\n", a) + len("        return;\n    }\n")
    nw = 4 if per_warp else 1
    base = "    unsigned char *moac_tb = moac_dyn_smem + ((1024u - ((unsigned)__cvta_generic_to_shared(moac_dyn_smem) & 1023u)) & 1023u);\n"
    if rank3:
        base += (f"    constexpr int NW = {nw};\n    __shared__ __align__(8) unsigned long long moac_fullw[NW][3];\n"
                 "    if (threadIdx.x == 0)\n        for (int w = 0; w < NW; ++w)\n            for (int s = 0; s < 3; ++s)\n"
                 '                asm volatile("mbarrier.init.shared.b64 [%0], 1;" :: "r"((unsigned)__cvta_generic_to_shared(&moac_fullw[w][s])) : "memory");\n'
                 '    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");\n    __syncthreads();\n')
    k = k[:a] + base + (TMA3_PRODUCER if rank3 else TMA_PRODUCER) + k[b:]
    if rank3:
        k = k.replace("        moac_mbar_wait(&moac_full[s], (unsigned)((i / 3) & 1));",
                      "        moac_mbar_wait(&moac_fullw[NW == 1 ? 0 : moac_warp][s], (unsigned)((i / 3) & 1));", 1)
    k = k.replace("moac_tile_read(moac_ta, moac_stages[moac_warp][s], moac_tr, moac_tc);",
                  f"moac_{'tma3' if rank3 else 'tma'}_read(moac_ta, moac_tb + 32768 * s, moac_warp, moac_tr, moac_tc);", 1)
    k = k.replace("moac_tile_merge_out_c<128, 4, 3 * moac_stage_geom<128, 128, 0>::BYTES>(&moac_stages[0][0][0],",
                  "moac_tile_merge_out_c<128, 4, 3 * moac_stage_geom<128, 128, 0>::BYTES>(moac_tb,", 1)
    at = k.index("static __device__ inline float moac_warp_max_f32")
    k = k[:at] + TMA_HELPERS.lstrip("\n") + TMA3_READ + k[at:]
    at = k.index("#include <cuda_runtime.h>\n") + len("#include <cuda_runtime.h>\n")
    k = k[:at] + f"#define MOAC_TMA_RANK {3 if rank3 else 2}\n#define MOAC_TMA_BOX {64 // nw}\n" + TMA_HOST + k[at:]
    launch = f"{NAME}<<<"
    i = k.index(launch)
    j = k.index(", 160, 98304, moac_stream>>>(K_, Q_, V_, moac_done, moac_m_part, moac_o_part, moac_z_part, out_, B_, chunk, n_);", i)
    line_start = k.rindex("\n", 0, i) + 1
    ind = k[line_start:i]
    tail = ", 160, 98304, moac_stream>>>(K_, Q_, V_, moac_done, moac_m_part, moac_o_part, moac_z_part, out_, B_, chunk, n_);"
    new = (", 160, 99328, moac_stream>>>(K_, Q_, V_, moac_done, moac_m_part, moac_o_part, moac_z_part, out_, B_, chunk, n_, "
           "moac_tmK, moac_tmV);")
    k = k[:j] + new + k[j + len(tail):]
    k = k[:line_start] + (f"{ind}CUtensorMap moac_tmK, moac_tmV;   /* probe */\n"
                          f"{ind}if (moac_tma_map(&moac_tmK, K_, (long long)B_ * 8 * n_) || moac_tma_map(&moac_tmV, V_, (long long)B_ * 8 * n_))\n"
                          f"{ind}    return 99;\n") + k[line_start:]
    k = k.replace(f"cudaFuncSetAttribute({NAME}, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)(98304));",
                  f"cudaFuncSetAttribute({NAME}, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)(99328));", 1)
    return k


def edit(text: str) -> str:
    start = text.index(f"__global__ void __launch_bounds__(128) {NAME}(")
    end = text.index("__global__", start + 10)
    text = text[:start] + KERNEL + text[end:]
    m = re.search(r"template <int DV, int W, int SPAN>\nstatic __device__ __forceinline__ void moac_tile_merge_out\(.*?\n}\n", text, re.S)
    assert m, "no moac_tile_merge_out"
    merge_c = m.group(0).replace("moac_tile_merge_out(", "moac_tile_merge_out_c(").replace(
        "__syncthreads();", 'asm volatile("bar.sync 1, 128;" ::: "memory");')
    at = text.index("static __device__ inline float moac_warp_max_f32")
    text = text[:at] + HELPERS.lstrip("\n") + merge_c + text[at:]
    launch = f"{NAME}<<<"
    i = text.index(launch)
    j = text.index(", 128, 98304, moac_stream>>>", i)
    text = text[:j] + ", 160, 98304, moac_stream>>>" + text[j + len(", 128, 98304, moac_stream>>>"):]
    return text


if __name__ == "__main__":
    opt = sys.argv[1] if sys.argv[1].startswith("--") else ""
    src, dst = sys.argv[1 + bool(opt):3 + bool(opt)]
    text = open(src).read()
    forms = {"": edit, "--tma": edit_tma, "--tma3d": lambda t: edit_tma(t, rank3=True),
             "--tma3dw": lambda t: edit_tma(t, rank3=True, per_warp=True)}
    open(dst, "w").write(forms[opt](text))
