"""Probe only: run bench/probes/stream_read.cu's streaming kernels on the K and V of the batched
GQA decode case (B = 32, 8 KV heads, n = 4096, d = 128, bf16: 256 MiB each) beside SDPA bf16 on
the same shape, alternating, in one process; medians of kernel time over ROUNDS rounds of REPS.

    python3 bench/probes/stream_read.py LIB.so OUT.json [ROUNDS REPS]"""
import ctypes, json, os, statistics, sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import gpu_runtime  # noqa: F401,E402
from moac.gpu.run import kernel_time  # noqa: E402
import torch  # noqa: E402

lib = ctypes.CDLL(sys.argv[1])
lib.stream_read.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p,
                            ctypes.c_longlong, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]
out = Path(sys.argv[2])
rounds, reps = (int(sys.argv[3]), int(sys.argv[4])) if len(sys.argv) > 4 else (7, 30)
B, HQ, HKV, N, D = 32, 32, 8, 4096, 128
q = torch.randn(B, HQ, 1, D, device="cuda", dtype=torch.bfloat16)
K, V = (torch.randn(B, HKV, N, D, device="cuda", dtype=torch.bfloat16) for _ in range(2))
sink = torch.zeros(1 << 16, device="cuda", dtype=torch.int32)
nbytes = K.numel() * K.element_size()
# (kind, STEP, stages, blocks); VARIANTS=second picks the second probe's list
FIRST = [(0, 4096, 2, 1024), (0, 4096, 3, 1024), (0, 8192, 2, 1024), (0, 4096, 2, 2048), (0, 16384, 2, 512),
         (1, 4096, 2, 1024), (1, 4096, 3, 1024), (1, 4096, 4, 1024), (1, 8192, 2, 1024), (1, 8192, 3, 1024),
         (1, 16384, 2, 1024), (1, 16384, 3, 512), (1, 16384, 2, 256)]
SECOND = [(0, 4096, 2, 1024), (0, 16384, 2, 256), (0, 16384, 3, 256), (0, 8192, 3, 512), (1, 16384, 2, 256),
          (2, 16384, 2, 256), (2, 16384, 3, 256), (2, 8192, 3, 512), (2, 4096, 2, 1024), (2, 4096, 3, 1024)]
# third (2026-12-05): blocks of 4 warps, the tile kernels' per-warp stages (kind 4; kind 5 with the
# warps in step) against one stage of the block copied together (kind 3), beside the one-warp 16 KB streams of the second
THIRD = [(4, 4096, 3, 256), (5, 4096, 3, 256), (3, 16384, 3, 256), (3, 16384, 2, 256), (3, 16384, 4, 256), (3, 32768, 2, 256),
         (0, 16384, 3, 256), (4, 4096, 3, 512), (3, 16384, 3, 512)]
# fourth: one block a multiprocessor (128 KB of stages or more) against two (96 KB)
FOURTH = [(4, 4096, 3, 256), (4, 4096, 4, 256), (4, 4096, 6, 256), (3, 16384, 3, 256), (3, 16384, 4, 256),
          (3, 32768, 2, 256), (3, 32768, 3, 256), (3, 16384, 4, 128), (3, 32768, 2, 128)]
# fifth (2026-12-06): the steps handed out by counters, a warp whose slice is used up taking another's
# (kind 6), beside the same pattern with fixed slices (kind 4)
FIFTH = [(4, 4096, 3, 256), (6, 4096, 3, 256), (6, 4096, 2, 256), (6, 4096, 4, 256), (4, 4096, 3, 512), (6, 4096, 3, 512), (3, 16384, 3, 256)]
# sixth: D dependent FMAs a lane after each step, in the warps that copy (kind 7) or in consumer warps
# beside a producer warp (kind 8); (kind, STEP, stages, blocks, D)
SIXTH = [(k, 4096, 3, 256, d) for d in (0, 128, 512) for k in (7, 8)]
VARIANTS = {"second": SECOND, "third": THIRD, "fourth": FOURTH, "fifth": FIFTH, "sixth": SIXTH}.get(os.environ.get("VARIANTS", ""), FIRST)


lib.stream_read_work.argtypes = [ctypes.c_int]


def launcher(kind, step, stages, blocks, work=0):
    def f():
        lib.stream_read_work(work)
        rc = lib.stream_read(kind, step, stages, K.data_ptr(), V.data_ptr(), nbytes, blocks, sink.data_ptr(),
                             torch.cuda.current_stream().cuda_stream)
        assert rc == 0, rc
    return f


NAMES = ('cpasync', 'bulk', 'bulk rows', 'block cpasync', 'warps cpasync', 'warps in step', 'warps stealing',
         'warps + work', 'producer + work')
fns = {f"{NAMES[v[0]]} step {v[1]} stages {v[2]} blocks {v[3]}" + (f" D {v[4]}" if len(v) > 4 else ""): launcher(*v)
       for v in VARIANTS}
fns["sdpa_bf16"] = lambda: torch.nn.functional.scaled_dot_product_attention(q, K, V, enable_gqa=True)
res = {k: [] for k in fns}
for _ in range(rounds):
    for k, f in fns.items():
        res[k].append(kernel_time(f, (lambda name: True) if k == "sdpa_bf16" else (lambda name: "rd_" in name), torch, reps) * 1e6)
summary = {}
for k in fns:
    med = statistics.median(res[k])
    summary[k] = dict(kernel_us=res[k], median_us=med, tb_s=2 * nbytes / med / 1e6)
    print(f"{k:36s} median {med:7.1f} µs  {2 * nbytes / med / 1e6:5.2f} TB/s of K and V read")
out.write_text(json.dumps(dict(gpu=torch.cuda.get_device_name(0), bytes_each=nbytes, results=summary), indent=1))
