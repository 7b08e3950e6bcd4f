/* Probe only (not a target): can clang-19's OpenMP offload stream bf16 rows on the H200 as
 * fast as the CUDA target?  q·row for 4M rows of 128 bf16 (1 GiB), f32 sums, three forms:
 *   A  teams distribute over blocks of rows, `parallel for reduction` over a row's 32 words
 *      (the shape GCC 12's OpenACC prints: lanes over d, a reduction per row);
 *   B  ompx_bare (a CUDA-like SPMD kernel): 4 warps a team, each warp 4 rows at a time, a lane
 *      one 8-byte word of each row, five shuffles per row (ompx_shfl_down_sync_f);
 *   C  as B with 16-byte words: half a warp a row, 8 rows a warp in flight.
 * Build (here, Debian 12's clang-19 and libomp-19-dev): clang-19 -O3 -fopenmp
 *   -fopenmp-targets=nvptx64-nvidia-cuda --offload-arch=sm_90 --cuda-path=CUDA
 *   --libomptarget-nvptx-bc-path=/usr/lib/llvm-19/lib/libomptarget-nvptx-sm_90.bc -fopenmp-target-jit
 *   omp_offload_stream.c -lm
 * Run (there): LD_LIBRARY_PATH=<libomp, libomptarget, libLLVM and the libraries they need, a libcuda.so
 *   link> LD_PRELOAD=<omp_offload_jitinit.so> ./a.out [reps]
 * -fopenmp-target-jit (LLVM IR in the binary, compiled on the GPU machine) because libomptarget 19
 * found no device for the sm_90 image that CUDA 13's ptxas assembled (it never opened libcuda), and
 * omp_offload_jitinit.c because Debian's libomptarget then found no NVPTX target in libLLVM.
 * Prints one JSON line per form: seconds (best of reps, omp_get_wtime around the target
 * region), TB/s of rows read, max relative error against a host reference of 4096 rows. */
#include <math.h>
#include <omp.h>
#include <ompx.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define D 128
#define WORDS (D / 4)                 /* 8-byte words a row */
static const int64_t ROWS = 4l << 20;

#pragma omp declare target
static inline float bf(uint32_t h) { uint32_t u = h << 16; float f; memcpy(&f, &u, 4); return f; }
static inline float dot4(const float *q, uint64_t w)
{
    return q[0] * bf((uint32_t)(w & 0xffff)) + q[1] * bf((uint32_t)((w >> 16) & 0xffff))
         + q[2] * bf((uint32_t)((w >> 32) & 0xffff)) + q[3] * bf((uint32_t)(w >> 48));
}
#pragma omp end declare target

typedef struct { uint64_t lo, hi; } __attribute__((aligned(16))) w16;

static void form_a(const float *q, const uint64_t *K, float *s, int dev)
{
    #pragma omp target teams distribute num_teams(ROWS / 64) thread_limit(32) is_device_ptr(q, K, s) device(dev)
    for (int64_t t = 0; t < ROWS / 64; ++t)
        for (int64_t r = 0; r < 64; ++r) {
            float acc = 0.0f;
            #pragma omp parallel for reduction(+:acc) num_threads(32)
            for (int v = 0; v < WORDS; ++v)
                acc += dot4(q + 4 * v, K[(t * 64 + r) * WORDS + v]);
            s[t * 64 + r] = acc;
        }
}

static void form_b(const float *q, const uint64_t *K, float *s, int dev, int teams)
{
    #pragma omp target teams ompx_bare num_teams(teams) thread_limit(128) is_device_ptr(q, K, s) device(dev)
    {
        const int lane = ompx_thread_id_x() % 32, warp = ompx_thread_id_x() / 32;
        float qv[4];
        for (int e = 0; e < 4; ++e) qv[e] = q[4 * lane + e];
        const int64_t warps = (int64_t)ompx_grid_dim_x() * 4;
        for (int64_t r0 = 4 * ((int64_t)ompx_block_id_x() * 4 + warp); r0 < ROWS; r0 += 4 * warps) {
            uint64_t w[4];
            for (int i = 0; i < 4; ++i) w[i] = K[(r0 + i) * WORDS + lane];
            float a[4];
            for (int i = 0; i < 4; ++i) a[i] = dot4(qv, w[i]);
            for (int off = 16; off; off >>= 1)
                for (int i = 0; i < 4; ++i) a[i] += ompx_shfl_down_sync_f(~0ul, a[i], off, 32);
            if (lane == 0)
                for (int i = 0; i < 4; ++i) s[r0 + i] = a[i];
        }
    }
}

static void form_c(const float *q, const uint64_t *K, float *s, int dev, int teams)
{
    #pragma omp target teams ompx_bare num_teams(teams) thread_limit(128) is_device_ptr(q, K, s) device(dev)
    {
        const int lane = ompx_thread_id_x() % 32, warp = ompx_thread_id_x() / 32, half = lane / 16, l16 = lane % 16;
        float qv[8];
        for (int e = 0; e < 8; ++e) qv[e] = q[8 * l16 + e];
        const int64_t warps = (int64_t)ompx_grid_dim_x() * 4;
        const w16 *K16 = (const w16 *)K;
        for (int64_t r0 = 8 * ((int64_t)ompx_block_id_x() * 4 + warp); r0 < ROWS; r0 += 8 * warps) {
            w16 w[4];
            for (int i = 0; i < 4; ++i) w[i] = K16[(r0 + 2 * i + half) * (WORDS / 2) + l16];
            float a[4];
            for (int i = 0; i < 4; ++i) a[i] = dot4(qv, w[i].lo) + dot4(qv + 4, w[i].hi);
            for (int off = 8; off; off >>= 1)
                for (int i = 0; i < 4; ++i) a[i] += ompx_shfl_down_sync_f(~0ul, a[i], off, 32);
            if (l16 == 0)
                for (int i = 0; i < 4; ++i) s[r0 + 2 * i + half] = a[i];
        }
    }
}

int main(int argc, char **argv)
{
    const int reps = argc > 1 ? atoi(argv[1]) : 20, dev = omp_get_default_device();
    const size_t kb = (size_t)ROWS * WORDS * 8;
    int on_device = 0;           /* (libomp's omp_get_num_devices says 0 beside libomptarget 19: ask a region) */
    #pragma omp target map(from: on_device) device(dev)
    { on_device = !omp_is_initial_device(); }
    if (!on_device) { fprintf(stderr, "the target region ran on the host: no offload device\n"); return 1; }
    uint64_t *hK = malloc(4096 * WORDS * 8);
    float hq[D];
    srand(1);
    for (int i = 0; i < D; ++i) hq[i] = (float)rand() / (float)RAND_MAX - 0.5f;
    for (int i = 0; i < 4096 * WORDS; ++i) {
        uint64_t w = 0;
        for (int e = 0; e < 4; ++e) {
            float f = (float)rand() / (float)RAND_MAX - 0.5f; uint32_t u; memcpy(&u, &f, 4);
            w |= (uint64_t)(u >> 16) << (16 * e);
        }
        hK[i] = w;
    }
    uint64_t *K = omp_target_alloc(kb, dev);
    float *q = omp_target_alloc(sizeof hq, dev), *s = omp_target_alloc(ROWS * 4, dev), *hs = malloc(4096 * 4);
    for (int64_t off = 0; off < ROWS; off += 4096)             /* the same 4096 rows over and over */
        omp_target_memcpy(K, hK, 4096 * WORDS * 8, off * WORDS * 8, 0, dev, omp_get_initial_device());
    omp_target_memcpy(q, hq, sizeof hq, 0, 0, dev, omp_get_initial_device());
    const char *names[] = {"A teams+parallel-for reduction", "B bare, 8-byte words", "C bare, 16-byte words"};
    for (int f = 0; f < 3; ++f)
        for (int tm = 0; tm < (f ? 3 : 1); ++tm) {
            const int teams = (int[]){132 * 4, 132 * 8, 132 * 16}[tm];
            double best = 1e9;
            for (int r = 0; r < reps + 2; ++r) {
                double t0 = omp_get_wtime();
                if (f == 0) form_a(q, K, s, dev); else if (f == 1) form_b(q, K, s, dev, teams); else form_c(q, K, s, dev, teams);
                double t = omp_get_wtime() - t0;
                if (r >= 2 && t < best) best = t;
            }
            omp_target_memcpy(hs, s, 4096 * 4, 0, (ROWS - 4096) * 4, omp_get_initial_device(), dev);
            double err = 0;
            for (int i = 0; i < 4096; ++i) {
                double ref = 0;
                for (int v = 0; v < WORDS; ++v)
                    for (int e = 0; e < 4; ++e) {
                        uint32_t u = (uint32_t)((hK[i * WORDS + v] >> (16 * e)) & 0xffff) << 16; float x; memcpy(&x, &u, 4);
                        ref += (double)hq[4 * v + e] * x;
                    }
                double d = fabs(hs[i] - ref) / (fabs(ref) + 1e-3);
                if (d > err) err = d;
            }
            printf("{\"form\": \"%s\", \"teams\": %d, \"seconds\": %.6e, \"tbps\": %.3f, \"max_rel_err\": %.2e}\n",
                   names[f], f ? teams : (int)(ROWS / 64), best, kb / best / 1e12, err);
            fflush(stdout);
        }
    return 0;
}
