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
    # about one wave of their one-warp blocks (8 a multiprocessor, 132 multiprocessors on an
    # H200: 1056), measured against 4096 on the H200 (docs/benchmarks.md, 2026-12-02, night):
    # batched GQA bf16 B = 32 -6 %, fp8 B = 32 -12 %; a gang's end (partials, fence, fold) stalls
    # its warp.  Fewer where a step is large: at most 4 MiB of tile steps at a time, 512 gangs for
    # 8 KB steps (bf16 or f16 at d = 128), with long chunks (the ceiling below).  Fewer, longer
    # streams read faster: one-warp blocks streaming K and V with no arithmetic took 128.8 µs as
    # 1024 blocks of 4 KB steps and 117.4 µs as 256 blocks of 16 KB (2026-12-03), and the bf16
    # tile kernel took 124.2 µs with 512 gangs against 129.0 with 1024 at B = 32, 126.9 against
    # 135.1 at B = 1 n = 131072 (256 one-warp gangs: 141 µs, short of compute).  A gang of
    # several warps (plans.tiles.team_warps) reads a step of each at a time, so the bytes above
    # are a gang's: 4 warps for bf16 at d = 128 and the 8-bit and d = 64 tiles (B = 32 with
    # 2 warps: 123.6 against 124.4 µs for 512 one-warp gangs; fp8 70.8 against 75.0 µs for
    # 1024, 2026-12-03).
    # A ragged batch's chunks hold any number of tokens: it aims for twice tile_gangs warps,
    # two waves, and no fewer than tile_gangs gangs (ragged B = 32 at 90.5 % of the dense
    # kernel with 2048 one-warp gangs, 81.0 % with 1024 on 2026-12-02; with 2 warps a gang
    # 90.4 % with 1024 gangs, 89.3 % with 2048, 82.7 % with 512 on 2026-12-03; with 4 warps
    # 92.0 % with 512 gangs and 93.5 % with 1024, paged 90.6 and 92.6 %, later that day).
    # The chunk ceiling, 65536 tokens, binds at none of the shapes measured: where a batch's
    # frames alone fill the wave (B = 32 GQA or B = 8 MHA at n = 16384, B = 16 at n = 32768)
    # the gang target asks for one chunk a frame, and the former ceiling of 8192 split each
    # frame in two, a second wave of gangs: 1.1-2.1 % slower, also for single-sequence
    # n = 524288 (bench/results/2026-12-05/chunk_cap_h200.json).  MOAC_CUDA_TILE_GANGS,
    # MOAC_CUDA_TILE_WAVE_BYTES and MOAC_CUDA_TILE_MAX_CHUNK set others, for experiments
    tile_gangs=int(os.environ.get("MOAC_CUDA_TILE_GANGS", "1024")),
    tile_wave_bytes=int(os.environ.get("MOAC_CUDA_TILE_WAVE_BYTES", str(4 << 20))),
    tile_max_chunk=int(os.environ.get("MOAC_CUDA_TILE_MAX_CHUNK", "65536")),
    # chunks of at least 128 tokens (8 tile steps) for tile kernels: where the gang target gave
    # fewer (single-sequence GQA, small batches: 16 … 64 tokens, a few tile steps a gang and
    # hundreds of partials a frame), 128 measured faster in every case tried on the H200, 256
    # faster still at n = 32768 but slower at n = 4096 … 8192 (docs/benchmarks.md, 2026-12-02
    # evening); MOAC_CUDA_TILE_MIN_CHUNK sets another floor, for experiments
    tile_min_chunk=int(os.environ.get("MOAC_CUDA_TILE_MIN_CHUNK", "128")),
    offload={"nvptx": _FLAGS},
)
