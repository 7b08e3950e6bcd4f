"""C with OpenMP for CPU multicore: gangs become threads, vector lanes SIMD slots
(`omp simd`, reductions reassociated across the slots as the pragma allows); the
split-K plan puts lane loops innermost for them (moac.schedule.plans.split_k_passes)."""
from ..emit import simd
from .base import Target

TARGET = Target(
    name="openmp",
    description="C with OpenMP pragmas for CPU multicore (gcc -fopenmp)",
    # the fast-math parts its lanes need and no more: reductions over SIMD lanes vectorise
    # only where the compiler may reassociate them (GCC's `omp simd reduction` sums the
    # lanes one by one at every exit); no finite-math assumption, so NaN and ±inf keep
    # their meaning, and no reciprocal rewrites
    cflags=("-fopenmp", "-fno-math-errno", "-fno-trapping-math", "-fassociative-math", "-fno-signed-zeros"),
    gang="#pragma omp parallel for{collapse} schedule(static)",
    vector="#pragma omp simd",
    vector_reduce=None,     # reassociated by the compiler (cflags), not by `omp simd reduction`
    native_flags=("-march=native",),   # JIT builds use the machine's SIMD width; written C stays portable
    lanes="simd",
    # GCC calls libm's fmaxf unless -ffinite-math-only: the chunk maxima ran 12 % of the
    # GQA bf16 kernel's time in calls (docs/cpu.md); the helpers are selects with C's rule
    c_calls=(("fmaxf", "moac_fmaxf"), ("fminf", "moac_fminf"), ("fmax", "moac_fmax"), ("fmin", "moac_fmin")),
    # into L2 (prefetcht1): into L1 the prefetches of a token loop held the miss buffers its
    # own loads need and the GQA kernel ran 2x slower (docs/benchmarks.md)
    prefetch="__builtin_prefetch({addr}, 0, 2)",
    gangs=256,
    # jammed lane reductions (the scores of U tokens × g heads) in explicit 16-float vectors with
    # one transposed reduction at the end, not one horizontal sum per score (moac.emit.simd)
    lower=simd.lower,          # a few per thread of a large host: chunks of up to 1024 tokens
)
