"""Probe only, not the product path: rewrite the generated batched GQA bf16 .cu (examples/
decode_gqa_batched.moa in bf16, d = 128, 4 heads a KV head) so that its 32-bit partials kernel
has a fifth, producer warp that copies every stage of the 4 computing warps (cp.async by its
32 lanes, completion signalled on an mbarrier `full` a stage with cp.async.mbarrier.arrive),
each computing warp releasing its stage (mbarrier `empty`) as soon as it has read it into
registers.  The stream probe (kinds 7 and 8, docs/benchmarks.md, 2026-12-06) says a producer
warp keeps part of the rate the arithmetic costs the copies; this measures it on the kernel.

    python3 bench/probes/cuda_producer_edit.py IN.cu OUT.cu   # then nvcc as moac builds it

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
    src, dst = sys.argv[1:3]
    open(dst, "w").write(edit(open(src).read()))
