"""Peak figures of the hardware `moac cost` knows.  Datasheet figures, dense (no
sparsity); docs/cost.md lists the sources.  `cpu` is measured on the spot."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Hardware:
    name: str
    description: str
    bandwidth: float        # bytes/s of DRAM/HBM
    fp32: float             # flop/s, non-tensor fp32
    bf16: float             # flop/s, dense 16-bit tensor/matrix math
    source: str


HARDWARE = {
    "H100": Hardware("H100", "NVIDIA H100 SXM5 80 GB", 3.35e12, 66.9e12, 989.4e12,
                     "NVIDIA H100 Tensor Core GPU datasheet (SXM5: 3.35 TB/s HBM3, FP32 67 TFLOPS, "
                     "BF16 1979 TFLOPS with sparsity = 989 dense)"),
    "H200": Hardware("H200", "NVIDIA H200 SXM 141 GB", 4.8e12, 66.9e12, 989.4e12,
                     "NVIDIA H200 Tensor Core GPU datasheet (4.8 TB/s HBM3e; compute as H100 SXM)"),
    "A100": Hardware("A100", "NVIDIA A100 SXM4 80 GB", 2.039e12, 19.5e12, 312e12,
                     "NVIDIA A100 Tensor Core GPU datasheet (80 GB SXM: 2,039 GB/s, FP32 19.5 TFLOPS, "
                     "BF16 312 TFLOPS dense)"),
    "B200": Hardware("B200", "NVIDIA B200 (HGX, 1000 W)", 8.0e12, 80e12, 2250e12,
                     "NVIDIA HGX B200 specifications (8 TB/s HBM3e per GPU; FP32 80 TFLOPS; "
                     "BF16 4.5 PFLOPS with sparsity = 2.25 dense)"),
    "MI300X": Hardware("MI300X", "AMD Instinct MI300X", 5.3e12, 163.4e12, 1307.4e12,
                       "AMD Instinct MI300X data sheet (5.3 TB/s HBM3, FP32 163.4 TFLOPS, BF16 1307.4 "
                       "TFLOPS dense)"),
}


def measure_cpu() -> Hardware:
    """This machine's CPU, measured now with numpy: a large copy (bytes read + written)
    and a float32 matrix product (best of three each)."""
    import os
    import time

    import numpy as np
    a = np.ones(32 * 2**20, dtype=np.float32)       # 128 MiB, far beyond the caches
    b = np.empty_like(a)
    best = float("inf")
    for _ in range(3):
        t = time.perf_counter()
        np.copyto(b, a)
        best = min(best, time.perf_counter() - t)
    bw = 2 * a.nbytes / best
    m = np.ones((1024, 1024), dtype=np.float32)
    best = float("inf")
    for _ in range(3):
        t = time.perf_counter()
        m @ m
        best = min(best, time.perf_counter() - t)
    flops = 2 * 1024**3 / best
    return Hardware("cpu", f"this machine's CPU ({os.cpu_count()} cores), measured now", bw, flops, flops,
                    "measured by moac cost: numpy copy of 128 MiB and a 1024×1024 float32 matrix product")


def get(name: str) -> Hardware:
    if name.lower() == "cpu":
        return measure_cpu()
    for k, h in HARDWARE.items():
        if k.lower() == name.lower():
            return h
    raise KeyError(name)
