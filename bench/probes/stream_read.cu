/* Probe only, not the product path: how fast one-warp blocks stream a decode step's K and V
 * into shared memory on this GPU, by the copy instruction, with no arithmetic beside it.
 * Each block streams its own contiguous slices of K and of V, STEP bytes of each a step,
 * through S shared stages, and folds what lands into one word (so nothing is optimised away).
 *   kind 0: cp.async.cg of 16 bytes a lane (what moac's tile kernels print)
 *   kind 1: cp.async.bulk of the step's STEP bytes of K and of V by lane 0, an mbarrier a stage
 *   kind 2: cp.async.bulk of each 256-byte row (a K or V row of d = 128 bf16) by the lanes in
 *           turn, an mbarrier a stage (rows that need not be contiguous, as a page table's)
 *   kind 3: blocks of 4 warps that copy each step together (cp.async.cg, 16 bytes a thread, one
 *           __syncthreads a step), each warp folding a quarter of it: STEP is the block's step
 *   kind 4: blocks of 4 warps, each warp its own stages and steps w, w + 4, ... of the block's
 *           slice (the tile kernels' pattern since 2026-12-03): STEP is a warp's step
 *   kind 5: kind 4 with a __syncthreads after each step, so that the block's warps copy in step
 *   kind 6: kind 4 with the steps of a slice handed out by a counter of the slice (atomicAdd by
 *           lane 0 of a warp, as it issues the step's copies): a warp whose slice is used up
 *           takes steps of other slices, (own + 97 j) mod slices for j = 1 ... 8, then stops.
 *           What perfect balance of the blocks would buy a decode kernel whose blocks finish
 *           at different times (2026-12-06: the multiprocessors' active cycles spread over
 *           71-99 % of the kernel's); a decode kernel would fold the stolen steps' partial
 *           states, which the probe leaves out
 *   kind 7: kind 4 with D dependent FMAs a lane after each step (stream_read_work(D)), a stand-in
 *           for the tile's arithmetic between its copies
 *   kind 8: the same arithmetic in 4 consumer warps, each taking a quarter of the block's stage,
 *           and a fifth, producer warp whose lane 0 copies each stage (cp.async.bulk, 4 STEP
 *           bytes of K and of V) once the consumers have released it (mbarriers full / empty):
 *           whether copies issued by a warp that does no arithmetic keep the copies' rate
 * Built: nvcc -O3 -arch=sm_90a -Xcompiler -fPIC -shared -o stream_read.so stream_read.cu
 * Run: bench/probes/stream_read.py. */
#include <cstdint>
#include <cuda_runtime.h>

static __device__ __forceinline__ unsigned smem(const void *p) { return (unsigned)__cvta_generic_to_shared(p); }

/* STEP bytes of K and of V of step i into the stage d, by T threads (t the caller's), 16 bytes a copy */
template <int STEP, int T>
static __device__ __forceinline__ void copy_step(unsigned char *d, const unsigned char *k, const unsigned char *v, long long i, int t)
{
#pragma unroll
    for (int j = 0; j < STEP / 16 / T; ++j) {
        const int o = 16 * (t + T * j);
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" :: "r"(smem(d + o)), "l"(k + i * STEP + o) : "memory");
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" :: "r"(smem(d + STEP + o)), "l"(v + i * STEP + o) : "memory");
    }
}

/* what landed in the stage d, folded into one word by T threads */
template <int STEP, int T>
static __device__ __forceinline__ unsigned fold_step(const unsigned char *d, int t)
{
    const uint4 *w = reinterpret_cast<const uint4 *>(d);
    unsigned acc = 0;
#pragma unroll
    for (int j = 0; j < 2 * STEP / 16 / T; ++j) { const uint4 x = w[t + T * j]; acc ^= x.x ^ x.y ^ x.z ^ x.w; }
    return acc;
}

static int g_work = 0;           /* D of kinds 7 and 8 */
extern "C" void stream_read_work(int d) { g_work = d; }

/* D dependent FMAs seeded by acc (not optimised away: their result folds into acc) */
static __device__ __forceinline__ unsigned work(unsigned acc, int d)
{
    float x = __uint_as_float((acc & 0x007fffffu) | 0x3f800000u);
    for (int j = 0; j < d; ++j) x = fmaf(x, 0.999f, 0.001f);
    return acc ^ __float_as_uint(x);
}

template <int STEP, int S, bool ROWS>
__global__ void __launch_bounds__(32) rd_bulk(const unsigned char *K, const unsigned char *V, long long slice,
                                              unsigned *sink)
{
    extern __shared__ __align__(128) unsigned char st[];
    __shared__ __align__(8) unsigned long long bar[S];
    const int lane = threadIdx.x;
    const unsigned char *k = K + blockIdx.x * slice, *v = V + blockIdx.x * slice;
    const long long steps = slice / STEP;
    if (lane == 0)
        for (int s = 0; s < S; ++s) asm volatile("mbarrier.init.shared.b64 [%0], 1;" :: "r"(smem(&bar[s])) : "memory");
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    __syncwarp();
    auto issue = [&](long long i) {
        const int s = (int)(i % S);
        unsigned char *d = st + s * 2 * STEP;
        if (lane == 0)
            asm volatile("mbarrier.arrive.expect_tx.shared.b64 _, [%0], %1;" :: "r"(smem(&bar[s])), "r"(2 * STEP) : "memory");
        if (ROWS) {
            __syncwarp();           /* the expected bytes before any row's completion */
            for (int r = lane; r < 2 * STEP / 256; r += 32) {
                const unsigned char *src = r < STEP / 256 ? k + i * STEP + 256 * r : v + i * STEP + 256 * (r - STEP / 256);
                asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], 256, [%2];"
                             :: "r"(smem(d + 256 * r)), "l"(src), "r"(smem(&bar[s])) : "memory");
            }
            return;
        }
        if (lane != 0) return;
        asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                     :: "r"(smem(d)), "l"(k + i * STEP), "r"(STEP), "r"(smem(&bar[s])) : "memory");
        asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                     :: "r"(smem(d + STEP)), "l"(v + i * STEP), "r"(STEP), "r"(smem(&bar[s])) : "memory");
    };
    unsigned acc = 0;
    for (int s = 0; s < S - 1; ++s) if (s < steps) issue(s);
    for (long long i = 0; i < steps; ++i) {
        if (i + S - 1 < steps) issue(i + S - 1);
        const int s = (int)(i % S);
        const unsigned phase = (unsigned)((i / S) & 1);
        unsigned done = 0;
        while (!done)
            asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
                         : "=r"(done) : "r"(smem(&bar[s])), "r"(phase) : "memory");
        const uint4 *d = reinterpret_cast<const uint4 *>(st + s * 2 * STEP);
#pragma unroll
        for (int j = 0; j < 2 * STEP / 16 / 32; ++j) { const uint4 w = d[lane + 32 * j]; acc ^= w.x ^ w.y ^ w.z ^ w.w; }
        __syncwarp();
    }
    if (acc == 0x9e3779b9u) sink[blockIdx.x] = acc;
}

/* kind 3: the block's 128 threads copy STEP bytes of K and of V a step into one shared stage */
template <int STEP, int S>
__global__ void __launch_bounds__(128) rd_block(const unsigned char *K, const unsigned char *V, long long slice,
                                                unsigned *sink)
{
    extern __shared__ __align__(128) unsigned char st[];          /* S stages of 2·STEP bytes */
    const int tid = threadIdx.x;
    const unsigned char *k = K + blockIdx.x * slice, *v = V + blockIdx.x * slice;
    const long long steps = slice / STEP;
    unsigned acc = 0;
    for (int s = 0; s < S - 1; ++s) {
        if (s < steps) copy_step<STEP, 128>(st + s * 2 * STEP, k, v, s, tid);
        asm volatile("cp.async.commit_group;" ::: "memory");
    }
    for (long long i = 0; i < steps; ++i) {
        asm volatile("cp.async.wait_group %0;" :: "n"(S - 2) : "memory");
        __syncthreads();            /* step i landed for every thread; step i - 1 folded by every warp */
        if (i + S - 1 < steps) copy_step<STEP, 128>(st + ((i + S - 1) % S) * 2 * STEP, k, v, i + S - 1, tid);
        asm volatile("cp.async.commit_group;" ::: "memory");
        acc ^= fold_step<STEP, 128>(st + (i % S) * 2 * STEP, tid);
    }
    if (acc == 0x9e3779b9u) sink[blockIdx.x] = acc;
}

/* kinds 0, 4, 5: W warps a block, each with its own S stages of STEP bytes of K and of V, taking
 * the block's steps w, w + W, ... (W = 1: a one-warp block streaming its slice) */
template <int STEP, int S, int W, bool SYNC>
__global__ void __launch_bounds__(32 * W) rd_warps(const unsigned char *K, const unsigned char *V, long long slice,
                                                   unsigned *sink, int D = 0)
{
    extern __shared__ __align__(128) unsigned char st_all[];
    const int lane = threadIdx.x % 32, w = threadIdx.x / 32;
    unsigned char *st = st_all + w * S * 2 * STEP;
    const unsigned char *k = K + blockIdx.x * slice, *v = V + blockIdx.x * slice;
    const long long steps = slice / STEP;
    unsigned acc = 0;
    for (int s = 0; s < S - 1; ++s) {
        const long long i = w + W * s;
        if (i < steps) copy_step<STEP, 32>(st + s * 2 * STEP, k, v, i, lane);
        asm volatile("cp.async.commit_group;" ::: "memory");
    }
    for (long long i = w; i < steps; i += W) {
        const long long a = i + W * (S - 1);     /* the block's step a, a % W == w */
        if (a < steps) copy_step<STEP, 32>(st + ((a / W) % S) * 2 * STEP, k, v, a, lane);
        asm volatile("cp.async.commit_group;" ::: "memory");
        asm volatile("cp.async.wait_group %0;" :: "n"(S - 1) : "memory");
        __syncwarp();
        acc ^= fold_step<STEP, 32>(st + ((i / W) % S) * 2 * STEP, lane);
        if (D) acc = work(acc, D);
        if (SYNC) __syncthreads(); else __syncwarp();      /* SYNC: the block's warps in step */
    }
    if (acc == 0x9e3779b9u) sink[blockIdx.x] = acc;
}

/* kind 6: rd_warps<STEP, S, 4> whose warps claim their steps from the counters next[slice] */
static __device__ int g_next[8192];

template <int STEP, int S>
__global__ void __launch_bounds__(128) rd_steal(const unsigned char *K, const unsigned char *V, long long slice,
                                                unsigned *sink)
{
    extern __shared__ __align__(128) unsigned char st_all[];
    const int lane = threadIdx.x % 32, w = threadIdx.x / 32;
    unsigned char *st = st_all + w * S * 2 * STEP;
    const int own = blockIdx.x, slices = gridDim.x;
    const int steps = (int)(slice / STEP);
    int s = own, hops = 0;
    int got_s[S], got_i[S];                 /* the slice and step each stage holds (-1: none) */
    auto claim = [&](int k) {
        got_i[k] = -1;
        while (hops <= 8) {
            int i = 0;
            if (lane == 0) i = atomicAdd(&g_next[s], 1);
            i = __shfl_sync(0xffffffffu, i, 0);
            if (i < steps) { got_s[k] = s; got_i[k] = i; break; }
            ++hops;
            s = (int)((own + 97LL * hops) % slices);
        }
        if (got_i[k] >= 0)
            copy_step<STEP, 32>(st + k * 2 * STEP, K + got_s[k] * slice, V + got_s[k] * slice, got_i[k], lane);
        asm volatile("cp.async.commit_group;" ::: "memory");
    };
    unsigned acc = 0;
#pragma unroll
    for (int k = 0; k < S - 1; ++k) claim(k);
    for (bool more = true; more;) {
#pragma unroll
        for (int k = 0; k < S; ++k) {
            claim((k + S - 1) % S);
            asm volatile("cp.async.wait_group %0;" :: "n"(S - 1) : "memory");
            __syncwarp();
            if (got_i[k] < 0) { more = false; break; }     /* claims stop for good: the later stages hold none */
            acc ^= fold_step<STEP, 32>(st + k * 2 * STEP, lane);
            __syncwarp();
        }
    }
    if (acc == 0x9e3779b9u) sink[blockIdx.x] = acc;
}

/* kind 8: 4 consumer warps and a producer warp (warp 4); a stage holds the block's step, 4 STEP bytes
 * of K and of V, warp w folding the w-th STEP of each */
template <int STEP, int S>
__global__ void __launch_bounds__(160) rd_prod(const unsigned char *K, const unsigned char *V, long long slice,
                                               unsigned *sink, int D)
{
    extern __shared__ __align__(128) unsigned char st[];          /* S stages of 8 STEP bytes */
    __shared__ __align__(8) unsigned long long full[S], empty[S];
    const int lane = threadIdx.x % 32, w = threadIdx.x / 32;
    const unsigned char *k = K + blockIdx.x * slice, *v = V + blockIdx.x * slice;
    const long long steps = slice / (4 * STEP);
    if (threadIdx.x == 0)
        for (int s = 0; s < S; ++s) {
            asm volatile("mbarrier.init.shared.b64 [%0], 1;" :: "r"(smem(&full[s])) : "memory");
            asm volatile("mbarrier.init.shared.b64 [%0], 4;" :: "r"(smem(&empty[s])) : "memory");
        }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    __syncthreads();
    auto wait = [](unsigned long long *b, unsigned phase) {
        unsigned done = 0;
        while (!done)
            asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
                         : "=r"(done) : "r"(smem(b)), "r"(phase) : "memory");
    };
    if (w == 4) {                      /* the producer */
        if (lane == 0)
            for (long long i = 0; i < steps; ++i) {
                const int s = (int)(i % S);
                if (i >= S) wait(&empty[s], (unsigned)((i / S - 1) & 1));
                unsigned char *d = st + s * 8 * STEP;
                asm volatile("mbarrier.arrive.expect_tx.shared.b64 _, [%0], %1;" :: "r"(smem(&full[s])), "r"(8 * STEP) : "memory");
                asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                             :: "r"(smem(d)), "l"(k + i * 4 * STEP), "r"(4 * STEP), "r"(smem(&full[s])) : "memory");
                asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                             :: "r"(smem(d + 4 * STEP)), "l"(v + i * 4 * STEP), "r"(4 * STEP), "r"(smem(&full[s])) : "memory");
            }
        return;
    }
    unsigned acc = 0;
    for (long long i = 0; i < steps; ++i) {
        const int s = (int)(i % S);
        wait(&full[s], (unsigned)((i / S) & 1));
        const unsigned char *d = st + s * 8 * STEP;
        const uint4 *kw = reinterpret_cast<const uint4 *>(d + w * STEP), *vw = reinterpret_cast<const uint4 *>(d + 4 * STEP + w * STEP);
#pragma unroll
        for (int j = 0; j < STEP / 16 / 32; ++j) {
            const uint4 a = kw[lane + 32 * j], b = vw[lane + 32 * j];
            acc ^= a.x ^ a.y ^ a.z ^ a.w ^ b.x ^ b.y ^ b.z ^ b.w;
        }
        if (D) acc = work(acc, D);
        __syncwarp();
        if (lane == 0) asm volatile("mbarrier.arrive.shared.b64 _, [%0];" :: "r"(smem(&empty[s])) : "memory");
    }
    if (acc == 0x9e3779b9u) sink[blockIdx.x] = acc;
}

template <int STEP, int S>
static int go(int kind, const void *K, const void *V, long long bytes, int blocks, unsigned *sink, cudaStream_t st)
{
    const long long slice = bytes / blocks;
    const size_t sm = (size_t)S * 2 * STEP;
    if (kind == 0) {
        cudaFuncSetAttribute(rd_warps<STEP, S, 1, false>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm);
        rd_warps<STEP, S, 1, false><<<blocks, 32, sm, st>>>((const unsigned char *)K, (const unsigned char *)V, slice, sink);
    } else if (kind == 1) {
        cudaFuncSetAttribute(rd_bulk<STEP, S, false>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm);
        rd_bulk<STEP, S, false><<<blocks, 32, sm, st>>>((const unsigned char *)K, (const unsigned char *)V, slice, sink);
    } else if (kind == 3) {
        cudaFuncSetAttribute(rd_block<STEP, S>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm);
        rd_block<STEP, S><<<blocks, 128, sm, st>>>((const unsigned char *)K, (const unsigned char *)V, slice, sink);
    } else if (kind == 4) {
        cudaFuncSetAttribute(rd_warps<STEP, S, 4, false>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)(4 * sm));
        rd_warps<STEP, S, 4, false><<<blocks, 128, 4 * sm, st>>>((const unsigned char *)K, (const unsigned char *)V, slice, sink);
    } else if (kind == 5) {
        cudaFuncSetAttribute(rd_warps<STEP, S, 4, true>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)(4 * sm));
        rd_warps<STEP, S, 4, true><<<blocks, 128, 4 * sm, st>>>((const unsigned char *)K, (const unsigned char *)V, slice, sink);
    } else if (kind == 7) {
        cudaFuncSetAttribute(rd_warps<STEP, S, 4, false>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)(4 * sm));
        rd_warps<STEP, S, 4, false><<<blocks, 128, 4 * sm, st>>>((const unsigned char *)K, (const unsigned char *)V, slice, sink, g_work);
    } else if (kind == 8) {
        cudaFuncSetAttribute(rd_prod<STEP, S>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)(4 * sm));
        rd_prod<STEP, S><<<blocks, 160, 4 * sm, st>>>((const unsigned char *)K, (const unsigned char *)V, slice, sink, g_work);
    } else if (kind == 6) {
        void *next = nullptr;
        if (blocks > 8192 || cudaGetSymbolAddress(&next, g_next) != cudaSuccess) return -2;
        cudaMemsetAsync(next, 0, sizeof(int) * (size_t)blocks, st);
        cudaFuncSetAttribute(rd_steal<STEP, S>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)(4 * sm));
        rd_steal<STEP, S><<<blocks, 128, 4 * sm, st>>>((const unsigned char *)K, (const unsigned char *)V, slice, sink);
    } else {
        cudaFuncSetAttribute(rd_bulk<STEP, S, true>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm);
        rd_bulk<STEP, S, true><<<blocks, 32, sm, st>>>((const unsigned char *)K, (const unsigned char *)V, slice, sink);
    }
    return (int)cudaGetLastError();
}

/* bytes: of K (and of V); blocks must divide it into slices of whole steps */
extern "C" int stream_read(int kind, int step, int stages, const void *K, const void *V, long long bytes, int blocks,
                           unsigned *sink, void *stream)
{
    cudaStream_t st = (cudaStream_t)stream;
#define CASE(P, Q) if (step == P && stages == Q) return go<P, Q>(kind, K, V, bytes, blocks, sink, st);
    CASE(4096, 2) CASE(4096, 3) CASE(4096, 4) CASE(8192, 2) CASE(8192, 3) CASE(16384, 2) CASE(16384, 3)
    CASE(16384, 4) CASE(32768, 2) CASE(32768, 3) CASE(4096, 6)
#undef CASE
    return -1;
}
