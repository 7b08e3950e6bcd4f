// Probe (not a moac kernel): do tensor cores lift the GQA decode partials above the
// issue bound of the CUDA-core mapping?  One warp per (frame, chunk of C tokens) as in
// moac's split-K plan; the g = 4 query heads of a KV head padded to the 16 rows of a
// bf16 wmma tile.  Scores S = Q·Kᵀ by 16 × 16 × 16 tiles (K tile loaded as the column-
// major B operand straight from global memory), the chunk's softmax partial in shared
// memory, P (rounded to bf16, as SDPA does) · V by tiles into 8 accumulator tiles of
// 16 × 16 (d = 128).  Writes the partials (m, z, o) per (frame, chunk, head) like moac.
//
//   nvcc -O3 -arch=sm_90a -o gqa_mma bench/probes/gqa_mma.cu && ./gqa_mma [B hkv n reps U]
//
// U (1, 2, 4): score tiles of 16 tokens computed together (U·8 fragment loads in flight);
// U = 0: the rows staged through shared memory by asynchronous copies (partials_async).
//
// It prints the partials kernel's time (CUDA events, best and median of reps), the KV
// bytes over that time, and the largest difference of the combined output against a
// float64 reference on the host for the first frame (computed from the same bf16 K/V).
#include <cuda_bf16.h>
#include <mma.h>
#include <cuda_pipeline.h>
#include <cstdio>
#include <cstdlib>
#include <cmath>
#include <vector>
#include <algorithm>

using namespace nvcuda;
#ifndef CHUNK
#define CHUNK 256
#endif
#ifndef STAGE_ROWS
#define STAGE_ROWS 32
#endif
constexpr int D = 128, G = 4, C = CHUNK, T = 16;   // head dim, heads per KV head, chunk, tile

template <int U>
__global__ void partials(const __nv_bfloat16 *__restrict__ Q, const __nv_bfloat16 *__restrict__ K,
                         const __nv_bfloat16 *__restrict__ V, float *__restrict__ M, float *__restrict__ Z,
                         float *__restrict__ O, int frames, int n, int chunks, float scale) {
    __shared__ __align__(32) __nv_bfloat16 q[T * D];      // rows G … 15 zero
    __shared__ __align__(32) float s[G * C];              // the chunk's scores of the G heads
    __shared__ __align__(32) float stage[T * T];          // one accumulator tile
    __shared__ __align__(32) __nv_bfloat16 pt[T * T];     // one tile of p, rows G … 15 zero
    const int lane = threadIdx.x;
    for (int i = lane; i < T * T; i += 32) pt[i] = __float2bfloat16(0.f);
    for (int w = blockIdx.x; w < frames * chunks; w += gridDim.x) {
        const int f = w / chunks, c = w % chunks, t0 = c * C;
        const int cn = min(C, n - t0);                     // a multiple of 16 here
        for (int i = lane; i < T * D; i += 32)
            q[i] = i / D < G ? Q[(size_t)f * G * D + i] : __float2bfloat16(0.f);
        __syncwarp();
        const __nv_bfloat16 *Kf = K + ((size_t)f * n + t0) * D, *Vf = V + ((size_t)f * n + t0) * D;
        for (int j = 0; j < cn; j += U * T) {              // U tiles of 16 tokens at once: U·8 loads in flight
            wmma::fragment<wmma::accumulator, T, T, T, float> acc[U];
            #pragma unroll
            for (int u = 0; u < U; ++u) wmma::fill_fragment(acc[u], 0.f);
            #pragma unroll
            for (int k = 0; k < D; k += T) {
                wmma::fragment<wmma::matrix_a, T, T, T, __nv_bfloat16, wmma::row_major> a;
                wmma::load_matrix_sync(a, q + k, D);
                wmma::fragment<wmma::matrix_b, T, T, T, __nv_bfloat16, wmma::col_major> b[U];
                #pragma unroll
                for (int u = 0; u < U; ++u) wmma::load_matrix_sync(b[u], Kf + (size_t)(j + u * T) * D + k, D);
                #pragma unroll
                for (int u = 0; u < U; ++u) wmma::mma_sync(acc[u], a, b[u], acc[u]);
            }
            #pragma unroll
            for (int u = 0; u < U; ++u) {
                wmma::store_matrix_sync(stage, acc[u], T, wmma::mem_row_major);
                __syncwarp();
                for (int i = lane; i < G * T; i += 32) s[(i / T) * C + j + u * T + i % T] = stage[i] * scale;
                __syncwarp();
            }
        }
        float mx[G];
        #pragma unroll
        for (int h = 0; h < G; ++h) {                       // the chunk maximum of each head
            mx[h] = -INFINITY;
            for (int j = lane; j < cn; j += 32) mx[h] = fmaxf(mx[h], s[h * C + j]);
            for (int o2 = 16; o2; o2 >>= 1) mx[h] = fmaxf(mx[h], __shfl_xor_sync(~0u, mx[h], o2));
        }
        float z[G] = {0.f, 0.f, 0.f, 0.f};
        wmma::fragment<wmma::accumulator, T, T, T, float> acc[D / T];
        #pragma unroll
        for (int d = 0; d < D / T; ++d) wmma::fill_fragment(acc[d], 0.f);
        for (int j = 0; j < cn; j += T) {
            for (int i = lane; i < G * T; i += 32) {        // p = exp(s − m) in bf16, summed as used
                const int h = i / T;
                __nv_bfloat16 e = __float2bfloat16(__expf(s[h * C + j + i % T] - mx[h]));
                pt[i] = e;
                #pragma unroll
                for (int hh = 0; hh < G; ++hh) if (hh == h) z[hh] += __bfloat162float(e);
            }
            __syncwarp();
            wmma::fragment<wmma::matrix_a, T, T, T, __nv_bfloat16, wmma::row_major> a;
            wmma::load_matrix_sync(a, pt, T);
            #pragma unroll
            for (int d = 0; d < D / T; ++d) {
                wmma::fragment<wmma::matrix_b, T, T, T, __nv_bfloat16, wmma::row_major> b;
                wmma::load_matrix_sync(b, Vf + (size_t)j * D + d * T, D);
                wmma::mma_sync(acc[d], a, b, acc[d]);
            }
            __syncwarp();
        }
        #pragma unroll
        for (int h = 0; h < G; ++h) {
            float zz = z[h];
            for (int o2 = 16; o2; o2 >>= 1) zz += __shfl_xor_sync(~0u, zz, o2);
            if (lane == 0) { M[(size_t)w * G + h] = mx[h]; Z[(size_t)w * G + h] = zz; }
        }
        #pragma unroll
        for (int d = 0; d < D / T; ++d) {
            wmma::store_matrix_sync(stage, acc[d], T, wmma::mem_row_major);
            __syncwarp();
            for (int i = lane; i < G * T; i += 32)
                O[((size_t)w * G + i / T) * D + d * T + i % T] = stage[i];
            __syncwarp();
        }
    }
}


// The same partials with the K and V rows of the chunk staged through shared memory by
// asynchronous copies (cp.async, 16 bytes a lane), TK tokens a stage, two stages in
// flight, rows padded to DP elements against bank conflicts; wmma then reads shared memory.
constexpr int TK = STAGE_ROWS, DP = D + 8;

__device__ inline void stage_rows(__nv_bfloat16 *dst, const __nv_bfloat16 *src, int rows, int lane) {
    for (int i = lane; i < rows * (D / 8); i += 32) {          // 8 bf16 = 16 bytes per copy
        const int r = i / (D / 8), c = i % (D / 8);
        __pipeline_memcpy_async(dst + r * DP + c * 8, src + (size_t)r * D + c * 8, 16);
    }
    __pipeline_commit();
}

__global__ void partials_async(const __nv_bfloat16 *__restrict__ Q, const __nv_bfloat16 *__restrict__ K,
                               const __nv_bfloat16 *__restrict__ V, float *__restrict__ M, float *__restrict__ Z,
                               float *__restrict__ O, int frames, int n, int chunks, float scale) {
    extern __shared__ __align__(128) unsigned char smem[];
    __nv_bfloat16 *buf = (__nv_bfloat16 *)smem;               // 2 stages of TK rows of DP
    __nv_bfloat16 *q = buf + 2 * TK * DP;                       // T × D, rows G … 15 zero
    float *s = (float *)(q + T * D);                            // G × C
    float *stage = s + G * C;                                   // T × T
    __nv_bfloat16 *pt = (__nv_bfloat16 *)(stage + T * T);       // T × T
    const int lane = threadIdx.x;
    for (int i = lane; i < T * T; i += 32) pt[i] = __float2bfloat16(0.f);
    for (int w = blockIdx.x; w < frames * chunks; w += gridDim.x) {
        const int f = w / chunks, c = w % chunks, t0 = c * C;
        const int cn = min(C, n - t0);                          // a multiple of TK here
        for (int i = lane; i < T * D; i += 32)
            q[i] = i / D < G ? Q[(size_t)f * G * D + i] : __float2bfloat16(0.f);
        const __nv_bfloat16 *Kf = K + ((size_t)f * n + t0) * D, *Vf = V + ((size_t)f * n + t0) * D;
        const int steps = cn / TK;
        stage_rows(buf, Kf, TK, lane);
        for (int st = 0; st < steps; ++st) {                    // pass 1: scores, K through shared memory
            if (st + 1 < steps) stage_rows(buf + ((st + 1) & 1) * TK * DP, Kf + (size_t)(st + 1) * TK * D, TK, lane);
            else __pipeline_commit();
            __pipeline_wait_prior(1);
            __syncwarp();
            const __nv_bfloat16 *kt = buf + (st & 1) * TK * DP;
            wmma::fragment<wmma::accumulator, T, T, T, float> acc[TK / T];
            #pragma unroll
            for (int u = 0; u < TK / T; ++u) wmma::fill_fragment(acc[u], 0.f);
            #pragma unroll
            for (int k = 0; k < D; k += T) {
                wmma::fragment<wmma::matrix_a, T, T, T, __nv_bfloat16, wmma::row_major> a;
                wmma::load_matrix_sync(a, q + k, D);
                #pragma unroll
                for (int u = 0; u < TK / T; ++u) {
                    wmma::fragment<wmma::matrix_b, T, T, T, __nv_bfloat16, wmma::col_major> b;
                    wmma::load_matrix_sync(b, kt + u * T * DP + k, DP);
                    wmma::mma_sync(acc[u], a, b, acc[u]);
                }
            }
            #pragma unroll
            for (int u = 0; u < TK / T; ++u) {
                wmma::store_matrix_sync(stage, acc[u], T, wmma::mem_row_major);
                __syncwarp();
                for (int i = lane; i < G * T; i += 32) s[(i / T) * C + st * TK + u * T + i % T] = stage[i] * scale;
                __syncwarp();
            }
        }
        stage_rows(buf, Vf, TK, lane);                          // the first V rows while the maximum is taken
        float mx[G];
        #pragma unroll
        for (int h = 0; h < G; ++h) {
            mx[h] = -INFINITY;
            for (int j = lane; j < cn; j += 32) mx[h] = fmaxf(mx[h], s[h * C + j]);
            for (int o2 = 16; o2; o2 >>= 1) mx[h] = fmaxf(mx[h], __shfl_xor_sync(~0u, mx[h], o2));
        }
        float z[G] = {0.f, 0.f, 0.f, 0.f};
        wmma::fragment<wmma::accumulator, T, T, T, float> acc[D / T];
        #pragma unroll
        for (int d = 0; d < D / T; ++d) wmma::fill_fragment(acc[d], 0.f);
        for (int st = 0; st < steps; ++st) {                    // pass 2: p·V, V through shared memory
            if (st + 1 < steps) stage_rows(buf + ((st + 1) & 1) * TK * DP, Vf + (size_t)(st + 1) * TK * D, TK, lane);
            else __pipeline_commit();
            __pipeline_wait_prior(1);
            __syncwarp();
            const __nv_bfloat16 *vt = buf + (st & 1) * TK * DP;
            for (int u = 0; u < TK / T; ++u) {
                const int j = st * TK + u * T;
                for (int i = lane; i < G * T; i += 32) {
                    const int h = i / T;
                    __nv_bfloat16 e = __float2bfloat16(__expf(s[h * C + j + i % T] - mx[h]));
                    pt[i] = e;
                    #pragma unroll
                    for (int hh = 0; hh < G; ++hh) if (hh == h) z[hh] += __bfloat162float(e);
                }
                __syncwarp();
                wmma::fragment<wmma::matrix_a, T, T, T, __nv_bfloat16, wmma::row_major> a;
                wmma::load_matrix_sync(a, pt, T);
                #pragma unroll
                for (int d = 0; d < D / T; ++d) {
                    wmma::fragment<wmma::matrix_b, T, T, T, __nv_bfloat16, wmma::row_major> b;
                    wmma::load_matrix_sync(b, vt + u * T * DP + d * T, DP);
                    wmma::mma_sync(acc[d], a, b, acc[d]);
                }
                __syncwarp();
            }
        }
        #pragma unroll
        for (int h = 0; h < G; ++h) {
            float zz = z[h];
            for (int o2 = 16; o2; o2 >>= 1) zz += __shfl_xor_sync(~0u, zz, o2);
            if (lane == 0) { M[(size_t)w * G + h] = mx[h]; Z[(size_t)w * G + h] = zz; }
        }
        #pragma unroll
        for (int d = 0; d < D / T; ++d) {
            wmma::store_matrix_sync(stage, acc[d], T, wmma::mem_row_major);
            __syncwarp();
            for (int i = lane; i < G * T; i += 32)
                O[((size_t)w * G + i / T) * D + d * T + i % T] = stage[i];
            __syncwarp();
        }
    }
}

int main(int argc, char **argv) {
    const int B = argc > 1 ? atoi(argv[1]) : 32, hkv = argc > 2 ? atoi(argv[2]) : 8;
    const int n = argc > 3 ? atoi(argv[3]) : 4096, reps = argc > 4 ? atoi(argv[4]) : 30;
    const int frames = B * hkv, chunks = (n + C - 1) / C;
    const size_t kv = (size_t)frames * n * D;
    std::vector<__nv_bfloat16> hq((size_t)frames * G * D), hk(kv), hv(kv);
    srand(1);
    auto rnd = [] { return (float)rand() / RAND_MAX * 2.f - 1.f; };
    for (auto &x : hq) x = __float2bfloat16(rnd());
    for (auto &x : hk) x = __float2bfloat16(rnd());
    for (auto &x : hv) x = __float2bfloat16(rnd());
    __nv_bfloat16 *dq, *dk, *dv; float *dm, *dz, *dout;
    cudaMalloc(&dq, hq.size() * 2); cudaMalloc(&dk, kv * 2); cudaMalloc(&dv, kv * 2);
    cudaMalloc(&dm, (size_t)frames * chunks * G * 4); cudaMalloc(&dz, (size_t)frames * chunks * G * 4);
    cudaMalloc(&dout, (size_t)frames * chunks * G * D * 4);
    cudaMemcpy(dq, hq.data(), hq.size() * 2, cudaMemcpyHostToDevice);
    cudaMemcpy(dk, hk.data(), kv * 2, cudaMemcpyHostToDevice);
    cudaMemcpy(dv, hv.data(), kv * 2, cudaMemcpyHostToDevice);
    const float scale = 1.f / sqrtf((float)D);
    int sms; cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
    const int U = argc > 5 ? atoi(argv[5]) : 1;     // 0: the asynchronous-copy kernel
    const int ASYNC_SMEM = (2 * TK * DP + T * D) * 2 + (G * C + T * T) * 4 + T * T * 2;
    cudaFuncSetAttribute(partials_async, cudaFuncAttributeMaxDynamicSharedMemorySize, ASYNC_SMEM);
    std::vector<float> ms;
    cudaEvent_t e0, e1; cudaEventCreate(&e0); cudaEventCreate(&e1);
    for (int r = 0; r < reps + 3; ++r) {
        cudaEventRecord(e0);
        if (U == 4) partials<4><<<frames * chunks, 32>>>(dq, dk, dv, dm, dz, dout, frames, n, chunks, scale);
        else if (U == 2) partials<2><<<frames * chunks, 32>>>(dq, dk, dv, dm, dz, dout, frames, n, chunks, scale);
        else if (U == 0) partials_async<<<frames * chunks, 32, ASYNC_SMEM>>>(dq, dk, dv, dm, dz, dout, frames, n,
                                                                                chunks, scale);
        else partials<1><<<frames * chunks, 32>>>(dq, dk, dv, dm, dz, dout, frames, n, chunks, scale);
        cudaEventRecord(e1); cudaEventSynchronize(e1);
        float t; cudaEventElapsedTime(&t, e0, e1);
        if (r >= 3) ms.push_back(t);
    }
    if (cudaGetLastError() != cudaSuccess) { printf("launch failed\n"); return 1; }
    std::sort(ms.begin(), ms.end());
    const double bytes = 2.0 * kv * 2;
    // combine frame 0 on the host and compare with float64 attention on the same bf16 values
    std::vector<float> m(chunks * G), z(chunks * G), o((size_t)chunks * G * D);
    cudaMemcpy(m.data(), dm, m.size() * 4, cudaMemcpyDeviceToHost);
    cudaMemcpy(z.data(), dz, z.size() * 4, cudaMemcpyDeviceToHost);
    cudaMemcpy(o.data(), dout, o.size() * 4, cudaMemcpyDeviceToHost);
    double worst = 0;
    for (int h = 0; h < G; ++h) {
        double M0 = -INFINITY, Zs = 0; std::vector<double> acc(D, 0.0), ref(D, 0.0), sc(n);
        for (int c = 0; c < chunks; ++c) M0 = std::max(M0, (double)m[c * G + h]);   // m holds scaled scores
        for (int c = 0; c < chunks; ++c) {
            double f = exp(m[c * G + h] - M0); Zs += f * z[c * G + h];
            for (int d = 0; d < D; ++d) acc[d] += f * o[((size_t)c * G + h) * D + d];
        }
        double mx = -INFINITY, zz = 0;
        for (int t = 0; t < n; ++t) {
            double a = 0; for (int d = 0; d < D; ++d) a += (double)__bfloat162float(hq[h * D + d]) * __bfloat162float(hk[(size_t)t * D + d]);
            sc[t] = a * scale; mx = std::max(mx, sc[t]);
        }
        for (int t = 0; t < n; ++t) { double e = exp(sc[t] - mx); zz += e;
            for (int d = 0; d < D; ++d) ref[d] += e * __bfloat162float(hv[(size_t)t * D + d]); }
        for (int d = 0; d < D; ++d) worst = std::max(worst, fabs(acc[d] / Zs - ref[d] / zz));
    }
    printf("{\"U\": %d, \"B\": %d, \"hkv\": %d, \"g\": %d, \"n\": %d, \"d\": %d, \"chunk\": %d, \"blocks\": %d, \"sms\": %d, "
           "\"best_us\": %.1f, \"median_us\": %.1f, \"kv_bytes\": %.0f, \"best_tb_s\": %.3f, \"max_abs_err_frame0\": %.3g}\n",
           U, B, hkv, G, n, D, C, frames * chunks, sms, ms[0] * 1e3, ms[ms.size() / 2] * 1e3, bytes,
           bytes / (ms[0] * 1e-3) / 1e12, worst);
    return 0;
}
