// Probe (not a moac kernel): tensor cores for the GQA decode partials with the operands
// loaded straight into registers by 16-byte loads, no shared memory at all.
//
// The earlier probe (gqa_mma.cu) loaded wmma fragments from global memory with wmma's own
// layout (4-byte loads, the mma chain waiting on each) and needed a cp.async staging level
// to pay.  This one uses what the algebra allows instead: the head dimension d is the
// reduction axis of q·Kᵀ, so any bijection of d onto the k-slots of an mma fragment gives
// the same sum, provided q's fragment uses the same one.  Choosing the bijection that puts
// 8 contiguous d of one key row in one lane makes every K fragment one 16-byte load
// (lanes 4g … 4g+3 read 64 contiguous bytes of token g).  The token axis is the reduction
// axis of p·V: its k-slots may be permuted too, and the output axis dv is permuted so
// that a lane's 8 contiguous dv of a V row feed 8 n-blocks; pairs of tokens are then
// packed with one byte-permute each (the B fragment holds 2 tokens of one dv).
//
// Rows of the 16-row A operand: the g = 4 query heads (rows 0-3) and the low halves of a
// two-term bf16 split of the same operands (rows 8-11): q = q_hi + q_lo and p = p_hi + p_lo,
// so the scores and the weighted sum keep about 16 significant bits of Q and of p (f32 Q,
// as in moac's example), not bf16's 8.  A lane holds rows g and g + 8 of every accumulator,
// so the two halves are added in the lane.  Online softmax per tile of 16 tokens, all in
// registers.  Same split-K layout and partials (m, z, o) as moac's kernels.
//
//   nvcc -O3 -arch=sm_90a --use_fast_math [-DCHUNK=256 -DWARPS=1 -DPIPE=1] \
//        -o gqa_mma_regs bench/probes/gqa_mma_regs.cu
//   ./gqa_mma_regs [B hkv n reps]
//
// CHUNK: tokens per warp (a multiple of 16); WARPS: warps per block (each its own chunk);
// PIPE = 1: the next tile's 16 loads are issued before the current tile is computed.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <cstdint>
#include <cstring>
#include <cstdio>
#include <cstdlib>
#include <cmath>
#include <vector>
#include <algorithm>

#ifndef CHUNK
#define CHUNK 256
#endif
#ifndef WARPS
#define WARPS 1
#endif
#ifndef PIPE
#define PIPE 1
#endif
constexpr int D = 128, G = 4;

__device__ __forceinline__ void mma16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {        // lo in the low 16 bits
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t *>(&v);
}
__device__ __forceinline__ float hi_part(float x) { return __bfloat162float(__float2bfloat16_rn(x)); }
__device__ __forceinline__ uint4 ldg16(const void *p) { return __ldg(reinterpret_cast<const uint4 *>(p)); }
__device__ __forceinline__ uint32_t word(const uint4 &v, int w) { return w == 0 ? v.x : w == 1 ? v.y : w == 2 ? v.z : v.w; }
__device__ __forceinline__ float ex(float x) { return exp2f(x * 1.44269504088896340736f); }

struct Tile { uint4 k[2][4]; uint4 v[4][2]; };

// lane (g, t) = (lane / 4, lane % 4).  K: token j + 8b + g, d = 32jj + 8t … +7.
// V: tokens j + 2t, j + 2t + 1, j + 8 + 2t, j + 9 + 2t, dv = 64h + 8g … +7.
__device__ __forceinline__ void load_tile(Tile &T, const uint16_t *Kf, const uint16_t *Vf, int j, int g, int t) {
    #pragma unroll
    for (int b = 0; b < 2; ++b)
        #pragma unroll
        for (int jj = 0; jj < 4; ++jj) T.k[b][jj] = ldg16(Kf + (size_t)(j + 8 * b + g) * D + 32 * jj + 8 * t);
    const int vt[4] = {j + 2 * t, j + 2 * t + 1, j + 8 + 2 * t, j + 9 + 2 * t};
    #pragma unroll
    for (int r = 0; r < 4; ++r)
        #pragma unroll
        for (int h = 0; h < 2; ++h) T.v[r][h] = ldg16(Vf + (size_t)vt[r] * D + 64 * h + 8 * g);
}

__device__ __forceinline__ void compute_tile(const Tile &T, const uint32_t (&qa)[8][4], float (&o)[16][4], float &m,
                                             float &zs, bool live, float scale) {
    float s[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
    #pragma unroll
    for (int b = 0; b < 2; ++b)
        #pragma unroll
        for (int st = 0; st < 8; ++st) {
            const uint4 &kw = T.k[b][st / 2];
            mma16816(s[b], qa[st], st % 2 ? kw.z : kw.x, st % 2 ? kw.w : kw.y);
        }
    // head g's scores of tokens 2t, 2t+1 (block 0) and 8+2t, 9+2t (block 1): hi row + lo row
    const float x0 = (s[0][0] + s[0][2]) * scale, x1 = (s[0][1] + s[0][3]) * scale;
    const float x2 = (s[1][0] + s[1][2]) * scale, x3 = (s[1][1] + s[1][3]) * scale;
    float tm = fmaxf(fmaxf(x0, x1), fmaxf(x2, x3));
    tm = fmaxf(tm, __shfl_xor_sync(~0u, tm, 1));
    tm = fmaxf(tm, __shfl_xor_sync(~0u, tm, 2));
    const float mn = fmaxf(m, tm), alpha = ex(m - mn);
    m = mn;
    const float p0 = ex(x0 - mn), p1 = ex(x1 - mn), p2 = ex(x2 - mn), p3 = ex(x3 - mn);
    zs = zs * alpha + ((p0 + p1) + (p2 + p3));
    #pragma unroll
    for (int nb = 0; nb < 16; ++nb)
        #pragma unroll
        for (int i = 0; i < 4; ++i) o[nb][i] *= alpha;
    uint32_t pa[4] = {0u, 0u, 0u, 0u};
    if (live) {
        const float h0 = hi_part(p0), h1 = hi_part(p1), h2 = hi_part(p2), h3 = hi_part(p3);
        pa[0] = pack2(h0, h1); pa[1] = pack2(p0 - h0, p1 - h1);
        pa[2] = pack2(h2, h3); pa[3] = pack2(p2 - h2, p3 - h3);
    }
    #pragma unroll
    for (int h = 0; h < 2; ++h)
        #pragma unroll
        for (int w = 0; w < 4; ++w) {
            const uint32_t a0 = word(T.v[0][h], w), a1 = word(T.v[1][h], w);
            const uint32_t a2 = word(T.v[2][h], w), a3 = word(T.v[3][h], w);
            mma16816(o[8 * h + 2 * w], pa, __byte_perm(a0, a1, 0x5410), __byte_perm(a2, a3, 0x5410));
            mma16816(o[8 * h + 2 * w + 1], pa, __byte_perm(a0, a1, 0x7632), __byte_perm(a2, a3, 0x7632));
        }
}

__global__ void __launch_bounds__(32 * WARPS) partials(const float *__restrict__ Q, const uint16_t *__restrict__ K,
                                                       const uint16_t *__restrict__ V, float *__restrict__ M,
                                                       float *__restrict__ Z, float *__restrict__ O, int frames, int n,
                                                       int chunks, float scale) {
    const int lane = threadIdx.x & 31, w = blockIdx.x * WARPS + (threadIdx.x >> 5);
    if (w >= frames * chunks) return;
    const int f = w / chunks, c = w % chunks, t0 = c * CHUNK, cn = min(CHUNK, n - t0);   // cn % 16 == 0 here
    const int g = lane >> 2, t = lane & 3;
    const bool live = g < G;
    uint32_t qa[8][4];
    {
        const float *qrow = Q + ((size_t)f * G + (live ? g : 0)) * D;
        #pragma unroll
        for (int jj = 0; jj < 4; ++jj) {
            const float4 u0 = *reinterpret_cast<const float4 *>(qrow + 32 * jj + 8 * t);
            const float4 u1 = *reinterpret_cast<const float4 *>(qrow + 32 * jj + 8 * t + 4);
            float x[8] = {u0.x, u0.y, u0.z, u0.w, u1.x, u1.y, u1.z, u1.w}, hx[8];
            #pragma unroll
            for (int e = 0; e < 8; ++e) { x[e] = live ? x[e] : 0.f; hx[e] = hi_part(x[e]); }
            #pragma unroll
            for (int hs = 0; hs < 2; ++hs) {       // k-step 2jj + hs: d = 32jj + 8t + 4hs + {0,1 | 2,3}
                const int e = 4 * hs;
                qa[2 * jj + hs][0] = pack2(hx[e], hx[e + 1]);
                qa[2 * jj + hs][1] = pack2(x[e] - hx[e], x[e + 1] - hx[e + 1]);
                qa[2 * jj + hs][2] = pack2(hx[e + 2], hx[e + 3]);
                qa[2 * jj + hs][3] = pack2(x[e + 2] - hx[e + 2], x[e + 3] - hx[e + 3]);
            }
        }
    }
    const uint16_t *Kf = K + ((size_t)f * n + t0) * D, *Vf = V + ((size_t)f * n + t0) * D;
    float o[16][4];
    #pragma unroll
    for (int nb = 0; nb < 16; ++nb)
        #pragma unroll
        for (int i = 0; i < 4; ++i) o[nb][i] = 0.f;
    float m = -INFINITY, zs = 0.f;
#if PIPE
    Tile A, Bt;
    load_tile(A, Kf, Vf, 0, g, t);
    for (int j = 0; j < cn; j += 32) {
        if (j + 16 < cn) load_tile(Bt, Kf, Vf, j + 16, g, t);
        compute_tile(A, qa, o, m, zs, live, scale);
        if (j + 16 >= cn) break;
        if (j + 32 < cn) load_tile(A, Kf, Vf, j + 32, g, t);
        compute_tile(Bt, qa, o, m, zs, live, scale);
    }
#else
    for (int j = 0; j < cn; j += 16) {
        Tile A;
        load_tile(A, Kf, Vf, j, g, t);
        compute_tile(A, qa, o, m, zs, live, scale);
    }
#endif
    zs += __shfl_xor_sync(~0u, zs, 1);
    zs += __shfl_xor_sync(~0u, zs, 2);
    if (!live) return;
    if (t == 0) { M[(size_t)w * G + g] = m; Z[(size_t)w * G + g] = zs; }
    // lane t holds dv = 64h + 16t + e (cols 2t) and 64h + 16t + 8 + e (cols 2t + 1), e < 8
    #pragma unroll
    for (int h = 0; h < 2; ++h) {
        float r[16];
        #pragma unroll
        for (int e = 0; e < 8; ++e) { r[e] = o[8 * h + e][0] + o[8 * h + e][2]; r[8 + e] = o[8 * h + e][1] + o[8 * h + e][3]; }
        float4 *dst = reinterpret_cast<float4 *>(O + ((size_t)w * G + g) * D + 64 * h + 16 * t);
        #pragma unroll
        for (int q = 0; q < 4; ++q) dst[q] = make_float4(r[4 * q], r[4 * q + 1], r[4 * q + 2], r[4 * q + 3]);
    }
}

static uint16_t to_bf16(float x) {           // round to nearest even
    uint32_t u; memcpy(&u, &x, 4);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}
static float from_bf16(uint16_t h) { uint32_t u = (uint32_t)h << 16; float x; memcpy(&x, &u, 4); return x; }

int main(int argc, char **argv) {
    const int B = argc > 1 ? atoi(argv[1]) : 32, hkv = argc > 2 ? atoi(argv[2]) : 8;
    const int n = argc > 3 ? atoi(argv[3]) : 4096, reps = argc > 4 ? atoi(argv[4]) : 30;
    if (n % CHUNK) { printf("{\"error\": \"n must be a multiple of CHUNK\"}\n"); return 1; }
    const int frames = B * hkv, chunks = n / CHUNK;
    const size_t kv = (size_t)frames * n * D;
    std::vector<float> hq((size_t)frames * G * D);
    std::vector<uint16_t> hk(kv), hv(kv);
    srand(1);
    auto rnd = [] { return (float)rand() / RAND_MAX * 2.f - 1.f; };
    for (auto &x : hq) x = 3.f * rnd();
    for (auto &x : hk) x = to_bf16(rnd());
    for (auto &x : hv) x = to_bf16(rnd());
    float *dq, *dm, *dz, *dout; uint16_t *dk, *dv;
    cudaMalloc(&dq, hq.size() * 4); cudaMalloc(&dk, kv * 2); cudaMalloc(&dv, kv * 2);
    cudaMalloc(&dm, (size_t)frames * chunks * G * 4); cudaMalloc(&dz, (size_t)frames * chunks * G * 4);
    cudaMalloc(&dout, (size_t)frames * chunks * G * D * 4);
    cudaMemcpy(dq, hq.data(), hq.size() * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(dk, hk.data(), kv * 2, cudaMemcpyHostToDevice);
    cudaMemcpy(dv, hv.data(), kv * 2, cudaMemcpyHostToDevice);
    const float scale = 1.f / sqrtf((float)D);
    const int warps = frames * chunks, blocks = (warps + WARPS - 1) / WARPS;
    std::vector<float> ms;
    cudaEvent_t e0, e1; cudaEventCreate(&e0); cudaEventCreate(&e1);
    for (int r = 0; r < reps + 3; ++r) {
        cudaEventRecord(e0);
        partials<<<blocks, 32 * WARPS>>>(dq, dk, dv, dm, dz, dout, frames, n, chunks, scale);
        cudaEventRecord(e1); cudaEventSynchronize(e1);
        float tt; cudaEventElapsedTime(&tt, e0, e1);
        if (r >= 3) ms.push_back(tt);
    }
    if (cudaGetLastError() != cudaSuccess) { printf("{\"error\": \"launch failed\"}\n"); return 1; }
    std::sort(ms.begin(), ms.end());
    const double bytes = 2.0 * kv * 2;
    // combine frames 0 and frames-1 on the host; float64 attention on the same f32 Q, bf16 K/V
    double worst = 0, biggest = 0;
    for (int f : {0, frames - 1}) {
        std::vector<float> m(chunks * G), z(chunks * G), o((size_t)chunks * G * D);
        cudaMemcpy(m.data(), dm + (size_t)f * chunks * G, m.size() * 4, cudaMemcpyDeviceToHost);
        cudaMemcpy(z.data(), dz + (size_t)f * chunks * G, z.size() * 4, cudaMemcpyDeviceToHost);
        cudaMemcpy(o.data(), dout + (size_t)f * chunks * G * D, o.size() * 4, cudaMemcpyDeviceToHost);
        const float *qf = hq.data() + (size_t)f * G * D;
        const uint16_t *kf = hk.data() + (size_t)f * n * D, *vf = hv.data() + (size_t)f * n * D;
        for (int h = 0; h < G; ++h) {
            double M0 = -INFINITY, Zs = 0; std::vector<double> acc(D, 0.0), ref(D, 0.0), sc(n);
            for (int c = 0; c < chunks; ++c) M0 = std::max(M0, (double)m[c * G + h]);
            for (int c = 0; c < chunks; ++c) {
                double fct = exp(m[c * G + h] - M0); Zs += fct * z[c * G + h];
                for (int d = 0; d < D; ++d) acc[d] += fct * o[((size_t)c * G + h) * D + d];
            }
            double mx = -INFINITY, zz = 0;
            for (int tk = 0; tk < n; ++tk) {
                double a = 0; for (int d = 0; d < D; ++d) a += (double)qf[h * D + d] * from_bf16(kf[(size_t)tk * D + d]);
                sc[tk] = a / sqrt((double)D); mx = std::max(mx, sc[tk]);
            }
            for (int tk = 0; tk < n; ++tk) { double e = exp(sc[tk] - mx); zz += e;
                for (int d = 0; d < D; ++d) ref[d] += e * from_bf16(vf[(size_t)tk * D + d]); }
            for (int d = 0; d < D; ++d) {
                worst = std::max(worst, fabs(acc[d] / Zs - ref[d] / zz));
                biggest = std::max(biggest, fabs(ref[d] / zz));
            }
        }
    }
    printf("{\"probe\": \"gqa_mma_regs\", \"chunk\": %d, \"warps_per_block\": %d, \"pipe\": %d, \"B\": %d, \"hkv\": %d, "
           "\"g\": %d, \"n\": %d, \"d\": %d, \"best_us\": %.1f, \"median_us\": %.1f, \"kv_bytes\": %.0f, "
           "\"best_tb_s\": %.3f, \"max_abs_err\": %.3g, \"max_abs_ref\": %.3g}\n",
           CHUNK, WARPS, PIPE, B, hkv, G, n, D, ms[0] * 1e3, ms[ms.size() / 2] * 1e3, bytes,
           bytes / (ms[0] * 1e-3) / 1e12, worst, biggest);
    return 0;
}
