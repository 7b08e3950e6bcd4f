"""The cuda target: the same Schedule as openacc, printed as CUDA C (moac.emit.cuda).

Numerics need a GPU (bench/gpu_check.py runs every example there); here the lowering is
checked as text and every example's CUDA is compiled with nvcc, skipped cleanly where
nvcc is absent."""
from __future__ import annotations

import os
import shutil
import subprocess

import pytest

import moac
from moac.emit import cir, cuda
from moac.errors import DeviceError
from moac.jit.build import build_library, compile_flags

from test_back_common import EXAMPLE_NAMES, FIXED, example

NVCC = shutil.which("nvcc")
needs_nvcc = pytest.mark.skipif(NVCC is None, reason="nvcc not found")


def test_vector_reduction_becomes_lanes_and_a_warp_butterfly():
    loop = cir.For("j", cir.Var("n_"), (cir.Assign("acc", cir.Bin("+", cir.Var("acc"), cir.Load("x_", cir.Var("j")))),),
                   level="vector", reduce=(("add", ("acc",)),))
    lanes = cuda._Lanes("float")
    code = lanes.stmts((cir.Decl("float", "acc", cir.Num(0.0)), loop))
    assert "\n".join(cir.stmts(code, "float", indent=0)) == "\n".join([
        "float acc = 0.0f;",
        "if (moac_lane != 0) {",
        "    acc = 0.0f;",
        "}",
        "#pragma unroll 4",
        "for (int64_t j = moac_lane; j < n_; j += 32) {",
        "    acc = acc + x_[j];",
        "}",
        "acc = moac_warp_add_f32(acc);",
        "__syncwarp();",
    ])
    assert lanes.warp == {"moac_warp_add_f32": "static __device__ inline float moac_warp_add_f32(float x) { "
                          "for (int o = 16; o > 0; o >>= 1) x = x + __shfl_xor_sync(0xffffffffu, x, o); return x; }"}


def test_a_lane_loop_of_exactly_32_is_one_lane_each():
    loop = cir.For("v", cir.Int(32), (cir.Store("y_", cir.Var("v"), cir.Num(1.0)),), level="vector")
    code = cuda._Lanes("float").stmts((loop,))
    assert "\n".join(cir.stmts(code, "float", indent=0)) == "\n".join([
        "{", "    const int64_t v = moac_lane;", "    y_[v] = 1.0f;", "}", "__syncwarp();"])


def test_max_reduction_starts_other_lanes_at_minus_infinity():
    _, text = cuda.warp_helper("max", "double")
    assert "fmax(x, __shfl_xor_sync(0xffffffffu, x, o))" in text and "double x" in text
    assert cuda._identity("max", "float") == cir.Num(float("-inf"))


def test_collapsed_gang_loops_become_one_grid_stride_loop():
    src = example("decode_mha").c_source(target="cuda")
    assert "__global__ void __launch_bounds__(32) moac_decode_mha_k1_partials(" in src
    assert "for (int64_t moac_gid = blockIdx.x; moac_gid < (n_ / chunk + (n_ % chunk != 0)) * B_ * h_; moac_gid += gridDim.x)" in src
    assert "const int64_t i_ = moac_gid % h_;" in src
    assert "moac_decode_mha_k1_partials<<<" in src and ", 32, 0, moac_stream>>>(" in src      # the combine
    # the partials keep their chunk's scores in shared memory, sized by the chunk at launch
    assert "extern __shared__ float moac_smem_float[];" in src
    assert ", 32, sizeof(float) * (size_t)(chunk), moac_stream>>>(" in src
    assert "#pragma acc" not in src and "#pragma omp" not in src


def test_gang_buffer_is_a_scratch_slice_elsewhere():
    """The same gang-placed scores are a tile of a scratch buffer on openacc (no gang memory)."""
    acc = example("decode_mha").c_source(target="openacc")
    assert "float *moac_p = (float *)(ws + ws_off);" in acc and "__shared__" not in acc
    cu = example("decode_mha").c_source(target="cuda")
    assert "float *moac_p = (float *)(ws + ws_off);" not in cu


def test_the_schedule_is_the_openacc_one():
    """The mapping is derived once: the ONF of cuda and openacc differ only in the target line."""
    for name in ("decode_gqa", "decode_mha", "matmul"):
        a = str(example(name).onf(target="openacc", sizes={"dk": 128, "dv": 128} if "decode" in name else {}))
        b = str(example(name).onf(target="cuda", sizes={"dk": 128, "dv": 128} if "decode" in name else {}))
        da = [ln for ln in a.splitlines() if "openacc" not in ln]
        db = [ln for ln in b.splitlines() if "cuda" not in ln]
        assert da == db, name
        assert a != b


def test_32_bit_cuda_kernels_take_32_bit_sizes():
    src = example("decode_gqa").c_source(target="cuda", index_bits=32, sizes={"dk": 128, "dv": 128})
    assert "int32_t n_" in src and "moac_decode_gqa_fits32" in src
    assert "for (int32_t moac_gid = blockIdx.x;" in src


# the examples built into whole libraries: integer inputs and their checks, updates in place,
# 8-bit storage with scales, the generic plan, a block of queries, two outputs
HOST_BUILDS = {"decode_paged", "decode_step", "decode_gqa_fp8", "matmul", "attention_forward", "decode_lse"}


@pytest.fixture(scope="module")
def nvcc_builds(tmp_path_factory):
    """Every example's CUDA compiled by nvcc on all the CPUs at once (the sources are printed
    first, one after another), with its sizes symbolic and fixed, to PTX (`-ptx`: every
    kernel, without the host compile and ptxas, which take three quarters of the time); the
    whole library (host entry, launches, data checks) for HOST_BUILDS, one example of each
    kind of entry.  {(name, fixed?): the output's path, or the exception the build raised}."""
    from concurrent.futures import ThreadPoolExecutor
    jobs = {(n, False): example(n).c_source(target="cuda") for n in EXAMPLE_NAMES}
    jobs.update({(n, True): example(n).c_source(target="cuda", sizes=FIXED[n]) for n in sorted(FIXED)})
    out = tmp_path_factory.mktemp("ptx")
    flags = [f for f in compile_flags("cuda", werror=True) if f not in ("-shared", "-Xcompiler", "-fPIC")]

    def build(item):
        (name, fixed), src = item
        try:
            if not fixed and name in HOST_BUILDS:
                return build_library(src, compile_flags("cuda", werror=True), cc="nvcc")
            cu, ptx = out / f"{name}{'-fixed' if fixed else ''}.cu", out / f"{name}{'-fixed' if fixed else ''}.ptx"
            cu.write_text(src, encoding="utf-8")
            r = subprocess.run([NVCC] + flags + ["-ptx", "-o", str(ptx), str(cu)], capture_output=True, text=True)
            if r.returncode != 0:
                raise RuntimeError(r.stderr)
            return ptx
        except Exception as e:          # reported by the test of that example
            return e
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        return dict(zip(jobs, pool.map(build, jobs.items())))


@needs_nvcc
@pytest.mark.parametrize("name", EXAMPLE_NAMES)
def test_every_example_compiles_with_nvcc(name, nvcc_builds):
    out = nvcc_builds[(name, False)]
    assert not isinstance(out, Exception), out
    assert out.exists() and (out.suffix == ".so" or ".entry" in out.read_text())


@needs_nvcc
@pytest.mark.parametrize("name", sorted(FIXED))
def test_every_example_with_fixed_sizes_compiles_with_nvcc(name, nvcc_builds):
    """Fixed sizes give the other code paths: packed loads, 32-bit kernels proven from the
    sizes, a shared KV head group with its scores in shared memory."""
    ptx = nvcc_builds[(name, True)]
    assert not isinstance(ptx, Exception), ptx
    assert ".entry" in ptx.read_text()


@needs_nvcc
def test_decode_bf16_32bit_compiles_with_nvcc():
    text = (example("decode_gqa").source.text.replace("input K : f32", "input K : bf16")
            .replace("input V : f32", "input V : bf16"))
    src = moac.parse(text, "decode_gqa_bf16.moa").c_source(target="cuda", index_bits=32, sizes={"dk": 128, "dv": 128})
    assert build_library(src, compile_flags("cuda", werror=True), cc="nvcc").exists()


@needs_nvcc
@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="this machine may have a GPU")
def test_calling_without_a_gpu_is_a_device_error():
    import numpy as np
    k = example("matmul").compile(target="cuda")
    x = np.ones((3, 4), np.float32)
    with pytest.raises(DeviceError, match="NVIDIA GPU"):
        k(A=x, B=np.ones((4, 2), np.float32), x=np.ones(4, np.float32))


def _run_warp(stmts, env: dict) -> dict:
    """Execute straight-line cir on 32 lanes at once (numpy vectors), with the two warp
    shuffles: enough to check the reductions' lane bookkeeping without a GPU."""
    import numpy as np
    lane = np.arange(32)
    env = {k: np.asarray(v, dtype=np.float64) for k, v in env.items()}
    env["moac_lane"] = lane

    def ev(e):
        match e:
            case cir.Var(name="0xffffffffu"):
                return None
            case cir.Var(name=n):
                return env[n]
            case cir.Int(value=v) | cir.Num(value=v):
                return np.full(32, v)
            case cir.Bin(op=op, a=a, b=b):
                x, y = ev(a), ev(b)
                return {"+": lambda: x + y, "&": lambda: x.astype(int) & y.astype(int), "!=": lambda: x != y}[op]()
            case cir.Cond(cond=c, a=a, b=b):
                return np.where(ev(c), ev(a), ev(b))
            case cir.Call(fn="__shfl_xor_sync", args=(_, x, o)):
                return ev(x)[lane ^ int(ev(o)[0])]
            case cir.Call(fn="__shfl_sync", args=(_, x, src)):
                return ev(x)[ev(src).astype(int)]
            case cir.Call(fn="fmaxf", args=(a, b)):
                return np.maximum(ev(a), ev(b))
        raise TypeError(e)
    for s in stmts:
        match s:
            case cir.Decl(name=n, init=x) | cir.Assign(name=n, value=x):
                env[n] = ev(x)
            case cir.Block(body=b):
                env.update(_run_warp(b, env))
            case _:
                raise TypeError(s)
    return env


@pytest.mark.parametrize("n", [2, 3, 4, 8, 13, 32])
@pytest.mark.parametrize("op", ["add", "max"])
def test_scatter_reduction_leaves_every_total_in_every_lane(n, op):
    import numpy as np
    rng = np.random.default_rng(n)
    vals = rng.standard_normal((n, 32))
    names = [f"a{k}" for k in range(n)]
    counter = iter(range(1000))
    block = cuda.scatter_reduce(op, "float", names, lambda stem: f"moac_{stem}{next(counter)}")
    env = _run_warp((block,), {nm: vals[k] for k, nm in enumerate(names)})
    for k, nm in enumerate(names):
        want = vals[k].sum() if op == "add" else vals[k].max()
        assert np.allclose(env[nm], want), (k, env[nm][:4], want)
    shuffles = str(block).count("__shfl_xor_sync")
    assert shuffles < 5 * n or n == 1


def test_the_last_gang_of_a_frame_folds_its_partials_on_cuda_only():
    """The split-K combine placed in the partials kernel (a LastGang of the Schedule): cuda
    counts each frame's gangs on a counter zeroed before the launch and lets the last one
    fold, launching the combine kernel only where the frame has more partials than the
    fold takes; openacc always runs the combine kernel.  The ONF is the same for both."""
    sizes = {"dk": 128, "dv": 128, "hq": 32, "hkv": 8}
    prog = example("decode_gqa_batched")
    onf = str(prog.onf(target="cuda", sizes=sizes))
    assert "last   · < ⌈n÷chunk⌉" in onf and "done     scratch" in onf
    cu = prog.c_source(target="cuda", sizes=sizes)
    assert "atomicAdd((unsigned *)&moac_done[moac_slot], 1u) == moac_need - 1u" in cu
    assert cu.count("__threadfence();") == 4                    # writer and reader side, 64- and 32-bit kernels
    assert "cudaMemsetAsync(moac_done, 0," in cu
    launch = cu.index("moac_decode_gqa_batched_k2_combine_i32<<<")
    assert "if (8 * B_ < 32 || n_ / chunk + (n_ % chunk != 0) > 32 || n_ / chunk + (n_ % chunk != 0) < 1) {" in cu[launch - 300:launch]
    acc = prog.c_source(target="openacc", sizes=sizes)
    assert "atomic" not in acc and "moac_last" not in acc
    assert "#pragma acc parallel loop gang collapse(3) vector_length(32) deviceptr(moac_m_part, moac_o_part, moac_z_part, out_)" in acc


@pytest.mark.parametrize("name, sizes, bound", [("decode_ragged", {"dk": 128, "dv": 128, "hq": 32, "hkv": 8}, "N"),
                                                ("decode_paged", {"d": 128, "hq": 32, "hkv": 8, "page": 16}, "(16·maxp)")])
def test_a_ragged_batch_folds_its_frames_in_the_last_gangs_and_zero_fills_the_empty_ones(name, sizes, bound):
    """A token axis read from data: a frame's gangs count to its own ⌈lens[b]/chunk⌉ partials,
    the host decides for all frames by the chunks of the axis's bound (every frame has fewer
    partials), and the output is zero-filled before the kernel where the last gangs fold: a
    sequence with lens[b] = 0 has no gang, and 0 is its result.  Measured on
    the H200 (docs/benchmarks.md, 2026-12-03): ragged 90.4 → 94.3 %, paged 89.8 → 92.8 % of
    the dense kernel, the 12.7 µs combine kernel gone."""
    prog = example(name)
    onf = str(prog.onf(target="cuda", sizes=sizes))
    assert ("last   · < ⌈⟨b⟩ψlens÷chunk⌉   the last of the frame's ⌈⟨b⟩ψlens÷chunk⌉ gangs folds its partials where "
            f"⌈{bound}÷chunk⌉ ≤ 32 and 8·B ≥ 32") in onf and "; out zero-filled first" in onf
    assert "out is zero-filled before the kernel for the frames with no tokens, which no gang folds" in onf
    cu = prog.c_source(target="cuda", sizes=sizes)
    assert cu.count("const unsigned moac_need = (int64_t)lens_[b_] / chunk + ((int64_t)lens_[b_] % chunk != 0);") == 2
    lines = [ln.strip() for ln in cu.splitlines()]
    fills = [i for i, ln in enumerate(lines) if ln == "cudaMemsetAsync(out_, 0, sizeof(float) * (size_t)(4096 * B_), moac_stream);"]
    counters = [i for i, ln in enumerate(lines) if ln.startswith("cudaMemsetAsync(moac_done, 0,")]
    # before the 64- and the 32-bit partials kernel: the fill where the last gangs fold, the
    # counters only where a frame may have two partials or more (the bound's chunks > 1)
    assert len(fills) == len(counters) == 2
    assert lines[fills[0] - 1].startswith("if (8 * B_ >= 32 && ") and lines[fills[0] - 1].endswith("<= 32)")
    G = lines[fills[0] - 1].split(" && ")[1].removesuffix(" >= 1")          # ⌈bound ÷ chunk⌉
    assert all(lines[c - 1] == f"if (8 * B_ >= 32 && {G} <= 32 && {G} > 1)" for c in counters), lines[counters[0] - 1]
    launch = cu.index(f"moac_{name}_k2_combine_i32<<<")
    assert "if (8 * B_ < 32 || " in cu[launch - 300:launch]       # the combine kernel only where no gang folds
    acc = prog.c_source(target="openacc", sizes=sizes)
    assert "cudaMemsetAsync" not in acc and "moac_last" not in acc    # openacc runs the combine kernel


def test_a_ragged_gang_finds_its_sequence_with_the_lanes_of_its_warp():
    """The pick of a ragged batch's gang (chunk g of sequence b from the gang number w): on the
    GPU the 32 lanes count 32 sequences' chunks at once, a shuffle scan sums them and a ballot
    finds the sequence, where the portable helper walks the sequences one by one with a
    division each (the host keeps that one).  Measured on the H200 (docs/benchmarks.md,
    2026-12-03): ragged 137.0 → 134.4 µs, paged 139.4 → 138.2 µs, outputs as before."""
    sizes = {"dk": 128, "dv": 128, "hq": 32, "hkv": 8}
    cu = example("decode_ragged").c_source(target="cuda", sizes=sizes)
    head = "static __host__ __device__ inline int64_t moac_ragged_pick_i32(int64_t w, const int32_t *lens, int64_t B, int64_t chunk)"
    assert cu.count(head) == 1 and "static inline int64_t moac_ragged_pick_i32" not in cu
    body = cu[cu.index(head):]
    body = body[:body.index("\n}\n")]
    device, host = body.split("#else", 1)
    assert "#if defined(__CUDA_ARCH__)" in device and "__shfl_up_sync(0xffffffffu, s, o)" in device
    assert "__ballot_sync(0xffffffffu, w - base < (int64_t)s)" in device and "__ffs(hit) - 1" in device
    assert "for (; b < B; ++b)" in host and "__shfl" not in host
    # every call is at the gang level, where all lanes of the block run (the full mask)
    calls = [ln.strip() for ln in cu.splitlines() if "= moac_ragged_pick_i32(w, lens_, B_, chunk);" in ln]
    assert len(calls) == 2
    assert "moac_ragged_pick" not in example("decode_gqa_batched").c_source(target="cuda", sizes=sizes)


def test_the_combine_reads_a_partials_outputs_in_packed_words():
    """The combine kernel's R = 8 outputs of a partial are adjacent in o_part: 4 packed
    8-byte words per lane (the workspace is then checked for 8-byte alignment)."""
    cu = example("decode_gqa_batched").c_source(target="cuda", sizes={"dk": 128, "dv": 128, "hq": 32, "hkv": 8})
    assert "uint64_t ow6w = moac_word(moac_o_part," in cu
    assert "if ((uintptr_t)workspace % 8 != 0)" in cu


def test_one_frame_keeps_the_combine_kernel():
    """Fewer than 32 frames (a single decode head): the combine stays a kernel of its own on
    every target, and the ONF says why."""
    prog = example("decode")
    onf = str(prog.onf(target="cuda", sizes={"dk": 128, "dv": 128}))
    assert "combine: a kernel of its own on every target (fewer frames (1) than the 32" in onf
    assert "moac_last" not in prog.c_source(target="cuda", sizes={"dk": 128, "dv": 128})
