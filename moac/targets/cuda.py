"""CUDA C (nvcc): the OpenACC target's Schedule with each level given its CUDA meaning
(moac.emit.cuda): gang -> block (a grid-stride loop over the collapsed gang loops),
vector -> lane of a one-warp block, vector reductions -> warp shuffles.  The device entry
takes device pointers and a stream; builds need nvcc and run only on an NVIDIA GPU."""
import os

from .base import Target

VECTOR_LENGTH = 32
ARCH = os.environ.get("MOAC_CUDA_ARCH", "sm_90a")     # the H200's; any sm_XX nvcc knows

_FLAGS = ("-O3", f"-arch={ARCH}", "--use_fast_math", "-diag-suppress=177", "-x", "cu", "-Xcompiler", "-fPIC", "-shared")

TARGET = Target(
    name="cuda",
    description=f"CUDA C for NVIDIA GPUs (nvcc -arch={ARCH}; needs a GPU to run)",
    cflags=_FLAGS,
    base_flags=(),
    werror_flags=("-Werror", "all-warnings"),
    device_entry=True,
    vector_length=VECTOR_LENGTH,
    printer="cuda",
    compiler="nvcc",
    suffix=".cu",
    stream=True,
    # one-warp blocks: about 31 per multiprocessor of an H200; more, smaller chunks measured
    # slower here (bench/results/2026-12-01/defaults2_h200.json), while OpenACC wants 16384
    gangs=int(os.environ.get("MOAC_CUDA_GANGS", "4096")),
    gangs_per_block=int(os.environ.get("MOAC_CUDA_WARPS", "1")),
    gang_memory=True,                  # __shared__
    scan_gangs=True,
    last_gang=True,                    # atomicAdd and __threadfence: the split-K combine in the partials kernel
    tensor_tiles=int("".join(c for c in ARCH[3:] if c.isdigit()) or 0) >= 80,   # mma.sync with bf16: sm_80 on
    # the gang count for kernels with tensor-core tiles whose chunks all hold the same tokens:
    # about one wave of their one-warp blocks (8 a multiprocessor at 210-255 registers, 132
    # multiprocessors on an H200: 1056).  Measured against 4096 on the H200 (docs/benchmarks.md,
    # 2026-12-02, night): batched GQA bf16 B = 32 -6 %, B = 1 n = 131072 -8 %, n = 32768 -11 %,
    # fp8 B = 32 -12 %; a gang's end (its partials, a fence, the fold) stalls its warp, and
    # 4096 gangs gave each warp four of them.  A ragged batch's chunks hold any number of
    # tokens: it aims for twice as many, two waves (base.Target.gang_target; ragged B = 32 at
    # 90.5 % of the dense kernel with 2048, 87.2 % with 4096, 81.0 % with 1024, 75.9 % with
    # 8192).  MOAC_CUDA_TILE_GANGS sets another count (0: `gangs`), for experiments
    tile_gangs=int(os.environ.get("MOAC_CUDA_TILE_GANGS", "1024")),
    # chunks of at least 128 tokens (8 tile steps) for tile kernels: where the gang target gave
    # fewer (single-sequence GQA, small batches: 16 … 64 tokens, a few tile steps a gang and
    # hundreds of partials a frame), 128 measured faster in every case tried on the H200, 256
    # faster still at n = 32768 but slower at n = 4096 … 8192 (docs/benchmarks.md, 2026-12-02
    # evening); MOAC_CUDA_TILE_MIN_CHUNK sets another floor, for experiments
    tile_min_chunk=int(os.environ.get("MOAC_CUDA_TILE_MIN_CHUNK", "128")),
    offload={"nvptx": _FLAGS},
)
