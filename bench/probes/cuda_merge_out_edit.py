"""Probe only, not the product path: rewrite a generated .cu whose tile kernels have gangs of
several warps so that a frame of one gang merges its warps' states in parallel.

    python3 bench/probes/cuda_merge_out_edit.py IN.cu OUT.cu     # then nvcc as moac builds it

As generated, warp 0 merges the other warps' o, m and z one after the other
(moac_tile_merge) and alone stores the frame's outputs (moac_tile_out): at B = 32 every
gang does so at the same moment, at the end of the kernel.  Here every warp leaves its
state in the stages and merges the DV / 8 / W column blocks of its own, from all W warps,
and stores them; gangs that write partials (frames of several gangs) are unchanged."""
import re
import sys

HELPER = r'''
/* probe: a frame of one gang, W warps: every warp merges DV / 8 / W column blocks of the W states and stores them */
template <int DV, int W, int SPAN>
static __device__ __forceinline__ void moac_tile_merge_out(unsigned char *stages, const float (&o)[DV / 8][4], float m, float z,
                                                           int warp, int lane, bool live, int c, float *out)
{
    constexpr int NB = DV / 8 / W;
    static_assert(NB == 4, "this probe stores 4 column blocks a warp as float4");
    moac_cp_wait<0>();
    __syncthreads();
    {
        float *s = reinterpret_cast<float *>(stages + warp * SPAN);
#pragma unroll
        for (int nb = 0; nb < DV / 8; ++nb)
#pragma unroll
            for (int i = 0; i < 4; ++i) s[(4 * nb + i) * 32 + lane] = o[nb][i];
        s[DV / 2 * 32 + lane] = m;
        s[(DV / 2 + 1) * 32 + lane] = z;
    }
    __syncthreads();
    float mw[W], M = -INFINITY;
#pragma unroll
    for (int w = 0; w < W; ++w) {
        mw[w] = reinterpret_cast<const float *>(stages + w * SPAN)[DV / 2 * 32 + lane];
        M = fmaxf(M, mw[w]);
    }
    const float shift = fmaxf(M, -3.4028234663852886e38f);
    float a[W], Z = 0.0f, acc[NB][4];
#pragma unroll
    for (int w = 0; w < W; ++w) {
        a[w] = moac_expf(mw[w] - shift);
        Z += a[w] * reinterpret_cast<const float *>(stages + w * SPAN)[(DV / 2 + 1) * 32 + lane];
    }
#pragma unroll
    for (int k = 0; k < NB; ++k)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            float x = 0.0f;
#pragma unroll
            for (int w = 0; w < W; ++w)
                x += a[w] * reinterpret_cast<const float *>(stages + w * SPAN)[(4 * (warp * NB + k) + i) * 32 + lane];
            acc[k][i] = x;
        }
    __syncthreads();
    Z += __shfl_xor_sync(0xffffffffu, Z, 1);
    Z += __shfl_xor_sync(0xffffffffu, Z, 2);
    if (!live)
        return;
    const int nb0 = warp * NB, hh = nb0 >> 3, e0 = nb0 & 7;
    float *dst = out + 64 * hh + 16 * c + e0;
    float r0[4], r1[4];
#pragma unroll
    for (int k = 0; k < NB; ++k) {
        r0[k] = Z != 0.0f ? (acc[k][0] + acc[k][2]) / Z : 0.0f;
        r1[k] = Z != 0.0f ? (acc[k][1] + acc[k][3]) / Z : 0.0f;
    }
    if (((uintptr_t)out & 15u) == 0) {
        *reinterpret_cast<float4 *>(dst) = make_float4(r0[0], r0[1], r0[2], r0[3]);
        *reinterpret_cast<float4 *>(dst + 8) = make_float4(r1[0], r1[1], r1[2], r1[3]);
    } else {
#pragma unroll
        for (int k = 0; k < NB; ++k) { dst[k] = r0[k]; dst[8 + k] = r1[k]; }
    }
}
'''

CALL = re.compile(
    r"(?P<ind> *)moac_tile_merge<(?P<targs>[^>]*>::BYTES)>\((?P<args>[^;]*)\);\n"
    r"(?P=ind)if \(moac_warp == 0\) \{\n"
    r"(?P=ind)    if \((?P<cond>.*)\)   /\*[^\n]*\*/\n"
    r"(?P=ind)        moac_tile_out<(?P<dv>\d+)>\(moac_o, moac_tz, moac_live, moac_tc, (?P<out>.*)\);\n"
    r"(?P=ind)    else\n"
    r"(?P=ind)        (?P<finish>moac_tile_finish<.*;)\n"
    r"(?P=ind)\}\n")


def edit(text: str) -> str:
    def sub(mt):
        i = mt["ind"]
        return (f"{i}if ({mt['cond']})   /* probe: the warps merge and store in parallel */\n"
                f"{i}    moac_tile_merge_out<{mt['targs']}>({mt['args']}, moac_live, moac_tc, {mt['out']});\n"
                f"{i}else {{\n{i}    moac_tile_merge<{mt['targs']}>({mt['args']});\n"
                f"{i}    if (moac_warp == 0)\n{i}        {mt['finish']}\n{i}}}\n")
    text, k = CALL.subn(sub, text)
    assert k >= 1, "no multi-warp tile with a one-gang frame"
    at = text.index("static __device__ inline float moac_warp_max_f32")
    return text[:at] + HELPER.lstrip("\n") + text[at:]


if __name__ == "__main__":
    src, dst = sys.argv[1:3]
    open(dst, "w").write(edit(open(src).read()))
