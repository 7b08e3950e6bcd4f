"""Probe only: what plain reads of a decode step's K and V reach on this GPU, beside SDPA bf16
on the same shape, in one process (kernel time from the profiler, median of ROUNDS rounds of
REPS calls).  Tells how far the ~4.2 TB/s of moac's tile and lane kernels are from a read
ceiling, and whether SDPA's kernel is at it.

    python3 bench/probes/read_ceiling.py OUT.json [ROUNDS REPS]

Readers: torch.sum of the bf16 K and V (dtype f32: one read of every byte), torch's copy of K
into a second tensor (read + write), and SDPA bf16 (B = 32, 32/8 heads, n = 4096, d = 128)."""
import json, statistics, sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import gpu_runtime  # noqa: F401,E402
from moac.gpu.run import kernel_time  # noqa: E402
import torch  # noqa: E402

out = Path(sys.argv[1])
rounds, reps = (int(sys.argv[2]), int(sys.argv[3])) if len(sys.argv) > 3 else (9, 30)
B, HQ, HKV, N, D = 32, 32, 8, 4096, 128
q = torch.randn(B, HQ, 1, D, device="cuda", dtype=torch.bfloat16)
K, V = (torch.randn(B, HKV, N, D, device="cuda", dtype=torch.bfloat16) for _ in range(2))
K2 = torch.empty_like(K)
kv_bytes = 2 * K.numel() * K.element_size()
acc = torch.empty((), device="cuda", dtype=torch.float32)
fns = {
    "sum_K_and_V": (lambda: (torch.sum(K, dtype=torch.float32), torch.sum(V, dtype=torch.float32)), kv_bytes),
    "copy_K": (lambda: K2.copy_(K), 2 * K.numel() * K.element_size()),
    "sdpa_bf16": (lambda: torch.nn.functional.scaled_dot_product_attention(q, K, V, enable_gqa=True), kv_bytes),
}
res = {k: [] for k in fns}
for _ in range(rounds):
    for k, (f, _) in fns.items():
        res[k].append(kernel_time(f, lambda name: True, torch, reps) * 1e6)
summary = {}
for k, (f, nbytes) in fns.items():
    med = statistics.median(res[k])
    summary[k] = dict(kernel_us=res[k], median_us=med, bytes=nbytes, tb_s=nbytes / med / 1e6)
    print(f"{k:14s} median {med:7.1f} µs  {nbytes / med / 1e6:5.2f} TB/s of bytes moved")
out.write_text(json.dumps(dict(gpu=torch.cuda.get_device_name(0), torch=torch.__version__, rounds=rounds,
                               reps=reps, results=summary), indent=1))
