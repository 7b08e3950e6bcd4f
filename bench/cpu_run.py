#!/usr/bin/env python3
"""The CPU decode benchmark: moac (openmp, c) next to numpy, PyTorch's
scaled_dot_product_attention (f32, bf16) and a read-bandwidth ceiling, in one process,
interleaved rounds, best and median.

    python3 bench/cpu_run.py --json bench/results/DATE/cpu_decode.json [--rounds 7] [--only NAME,…]
                             [--targets openmp,c] [-- MOAC_COMPILE_OPTIONS as key=value]

Every case is a decode step with d = 128 (the shapes of the CPU-roofline issue plus
decode n = 4096 and GQA n = 4096).  Bandwidth is K+V bytes per second of the best time.
The f32 and bf16 cases of one shape share their rounds: each implementation times the two
back to back (milliseconds apart, in an order that alternates between rounds), so that bf16
against f32 is measured side by side and not across the host's drift.  bf16 against f32 is
reported per moac target and for the read ceiling: best against best, median against
median, and the median of the rounds' own ratios (paired).  Each round starts one
implementation later than the one before, so that no implementation always follows the
same one (before K and V were evicted, below, the call after another implementation's
calls on the same arrays was flattered by what the L3 kept of them; 2026-12-04/05).
Every time is kept in the JSON (times_ms).
The ceiling is a plain C loop summing the words of the case's own K and V arrays with every
core (gcc -O3 -march=native -fopenmp, `omp parallel for simd`, integer adds): the bytes the
kernels read.  Every timed call starts from cold caches: every line of the case's K and V
buffers (numpy's and torch's) is evicted, then a buffer of twice the last-level cache is
read (`timed`).  A host whose L3 holds 260 MB otherwise kept K and V partly cached between
calls; the read alone still left part of them there after an implementation that read them
repeatedly, so that a call was faster or slower by up to a quarter depending on which
implementation came before it (2026-12-05).  Every output is checked against a
float64 numpy reference on the same data (bf16 widened exactly).  numpy is the obvious
vectorised implementation (batched matmul, K/V never repeated for GQA; bf16 widened to
f32 first, the only way numpy reads bf16, into buffers allocated once); torch runs SDPA with enable_gqa on (B, h, 1, d)
queries.  torch is optional: without it those columns are absent.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# Thread pools of three runtimes (moac's libgomp, torch's own libgomp, numpy's OpenBLAS) take
# turns on the same two cores. Each pool's idle threads spin for a bounded time and then
# sleep: long enough that the parallel regions of one call find them awake, short enough
# that a pool no longer spins when the next implementation runs (a flush of the caches,
# tens of ms, comes between).  Measured 2026-12-04: under OMP_WAIT_POLICY=PASSIVE (the
# setting before) every region paid a wake-up (torch SDPA decode n = 262144 110 ms, 12 ms
# with this spin; a moac call 50-100 µs more); OpenBLAS's default spin (2^28 cycles) was
# still running during the next calls (the read loop after numpy 7.3 against 4.4 ms).
if "OMP_WAIT_POLICY" not in os.environ:
    os.environ.setdefault("GOMP_SPINCOUNT", "10000")
os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "22")     # 2^22 cycles, about 1.5 ms

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import moac  # noqa: E402
from moac import dtypes  # noqa: E402

D = {"dk": 128, "dv": 128}
GQA = {**D, "hq": 32, "hkv": 8}

# name, example, K/V dtype, compile-time sizes, run-time sizes, (B, hkv, g, n) of the attention
CASES = [
    ("decode_f32_n256k", "decode", "f32", D, {"n": 262144}, (1, 1, 1, 262144)),
    ("decode_bf16_n256k", "decode", "bf16", D, {"n": 262144}, (1, 1, 1, 262144)),
    ("decode_f32_n4k", "decode", "f32", D, {"n": 4096}, (1, 1, 1, 4096)),
    ("mha_f32_B4h8", "decode_mha", "f32", D, {"B": 4, "h": 8, "n": 4096}, (4, 8, 1, 4096)),
    ("mha_bf16_B4h8", "decode_mha", "bf16", D, {"B": 4, "h": 8, "n": 4096}, (4, 8, 1, 4096)),
    ("gqa_f32_n32k", "decode_gqa", "f32", GQA, {"n": 32768}, (1, 8, 4, 32768)),
    ("gqa_bf16_n32k", "decode_gqa", "bf16", GQA, {"n": 32768}, (1, 8, 4, 32768)),
    ("gqa_f32_n4k", "decode_gqa", "f32", GQA, {"n": 4096}, (1, 8, 4, 4096)),
    ("gqa_bf16_n4k", "decode_gqa", "bf16", GQA, {"n": 4096}, (1, 8, 4, 4096)),
]

CEILING_C = r"""
#include <stddef.h>
#include <stdint.h>
/* the words of K and V summed with every core: integer adds (one cycle each, so the sum
   never waits on its own latency, and no bit pattern is a slow float) */
uint32_t moac_bench_read(const uint32_t *a, size_t na, const uint32_t *b, size_t nb) {
    uint32_t s = 0;
    #pragma omp parallel for simd reduction(+:s) schedule(static)
    for (size_t i = 0; i < na; ++i)
        s += a[i];
    #pragma omp parallel for simd reduction(+:s) schedule(static)
    for (size_t i = 0; i < nb; ++i)
        s += b[i];
    return s;
}
/* every cache line of a buffer evicted from every level of the caches: a read of a larger
   buffer does not evict lines that this host's L3 has seen reused */
void moac_bench_evict(const char *p, size_t n) {
#if defined(__x86_64__)
    #pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i += 64)
        __builtin_ia32_clflush(p + i);
    __builtin_ia32_mfence();
#else
    (void)p; (void)n;
#endif
}
/* a buffer written once with every core (its pages faulted in before the first timed call) */
void moac_bench_fill(uint32_t *x, size_t n, uint32_t v) {
    #pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; ++i)
        x[i] = v + (uint32_t)i;
}
"""


def read_ceiling():
    """A function reading the bytes of two arrays (a case's K and V) with every core."""
    import cffi
    tmp = Path(tempfile.mkdtemp(prefix="moac_bench_"))
    (tmp / "read.c").write_text(CEILING_C)
    subprocess.run(["gcc", "-O3", "-march=native", "-fopenmp", "-fPIC", "-shared", "-o", str(tmp / "read.so"),
                    str(tmp / "read.c")], check=True)
    ffi = cffi.FFI()
    ffi.cdef("uint32_t moac_bench_read(const uint32_t *a, size_t na, const uint32_t *b, size_t nb);"
             "void moac_bench_fill(uint32_t *x, size_t n, uint32_t v);"
             "void moac_bench_evict(const char *p, size_t n);")
    lib = ffi.dlopen(str(tmp / "read.so"))
    global _FLUSH, _EVICT
    _EVICT = lambda ptr, nbytes: lib.moac_bench_evict(ffi.cast("const char *", ptr), nbytes)  # noqa: E731
    junk = np.empty(max(64 << 20, 2 * last_level_cache()) // 4, np.uint32)
    lib.moac_bench_fill(ffi.cast("uint32_t *", junk.ctypes.data), junk.size, 1)     # its pages, once
    # read, not written: the caches then hold clean lines, and the timed call's misses evict
    # them without writing anything back (a write left 2 × L3 of dirty lines to drain)
    _FLUSH = lambda: lib.moac_bench_read(ffi.cast("const uint32_t *", junk.ctypes.data), junk.size,  # noqa: E731
                                         ffi.cast("const uint32_t *", junk.ctypes.data), 0)

    def run(a: np.ndarray, b: np.ndarray):
        assert a.flags.c_contiguous and b.flags.c_contiguous and a.nbytes % 4 == 0 and b.nbytes % 4 == 0
        return lib.moac_bench_read(ffi.cast("const uint32_t *", a.ctypes.data), a.nbytes // 4,
                                   ffi.cast("const uint32_t *", b.ctypes.data), b.nbytes // 4)
    return run


def widen_bf16(bits: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """bf16 bits (uint16) as f32, exactly; into `out` (uint32, bits' shape) where given, so
    that a timed call allocates nothing (fresh memory on this VM cost page faults that took
    numpy's bf16 call from 0.12 s to as much as 1 s, 2026-12-05)."""
    if out is None:
        return (bits.astype(np.uint32) << 16).view(np.float32)
    np.copyto(out, bits, casting="unsafe")
    np.left_shift(out, 16, out=out)
    return out.view(np.float32)


def attention(Q4, K4, V4):
    """softmax(Q Kᵀ/√d) V per (sequence, KV head), the g queries of a group together:
    Q4 ⟨B hkv g d⟩, K4, V4 ⟨B hkv n d⟩ (numpy's batched matmul; K and V are not repeated)."""
    s = np.matmul(Q4, np.swapaxes(K4, -1, -2)) * Q4.dtype.type(1.0 / np.sqrt(Q4.shape[-1]))
    s -= s.max(axis=-1, keepdims=True)
    np.exp(s, out=s)
    z = s.sum(axis=-1, keepdims=True)
    return np.matmul(s, V4) / z


def moac_arrays(example: str, Q4, K4, V4) -> dict:
    """The canonical ⟨B hkv g d⟩ / ⟨B hkv n d⟩ arrays in the example's own shapes."""
    B, hkv, g, d = Q4.shape
    n = K4.shape[2]
    if example == "decode":
        return {"q": Q4.reshape(d), "K": K4.reshape(n, d), "V": V4.reshape(n, d)}
    if example == "decode_mha":
        return {"Q": Q4.reshape(B, hkv, d), "K": K4, "V": V4}
    if example == "decode_gqa":
        return {"Q": Q4.reshape(hkv * g, d), "K": K4.reshape(hkv, n, d), "V": V4.reshape(hkv, n, d)}
    raise ValueError(example)


def case_program(example: str, kv: str):
    text = (ROOT / "examples" / f"{example}.moa").read_text(encoding="utf-8")
    if kv != "f32":
        text = text.replace("input K : f32", f"input K : {kv}").replace("input V : f32", f"input V : {kv}")
    return moac.parse(text, f"{example}_{kv}.moa")


def compile_options(pairs: list) -> dict:
    """moac compile options from key=value words: True/False, integers, else strings."""
    options = {}
    for kv in pairs:
        k, v = kv.split("=", 1)
        options[k] = {"True": True, "False": False}.get(v, int(v) if v.lstrip("-").isdigit() else v)
    return options


_FLUSH = None     # set by read_ceiling(): reads a buffer of twice the last-level cache
_EVICT = None     # set by read_ceiling(): (address, bytes) -> every line of that memory evicted


def last_level_cache() -> int:
    """Bytes of the largest CPU cache the OS reports (0 where it reports none)."""
    sizes = []
    for f in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*/size"):
        txt = f.read_text().strip()
        mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(txt[-1:], 1)
        sizes.append(int(txt.rstrip("KMG")) * mult)
    return max(sizes, default=0)


def timed(fn, evict=()) -> float:
    """Seconds of one call, from cold caches: K and V are read from memory, as in a decode
    step of a model whose caches hold other layers.  `evict`: the case's large buffers
    (`buffers`), every line of them evicted first; then a buffer of twice the
    last-level cache is read, for everything else.  The read alone was not enough: this
    host's L3 of 260 MB kept part of K and V after an implementation that read them
    repeatedly (after torch SDPA f32 on GQA n = 32768, the read loop took 6.2-6.4 ms, against
    7.9-8.1 ms with K and V evicted; 2026-12-05)."""
    if _FLUSH is not None:
        for ptr, nbytes, _ in evict:
            _EVICT(ptr, nbytes)
        _FLUSH()
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def buffers(*arrays) -> tuple:
    """(address, bytes, the array) of numpy arrays and torch tensors (None skipped), for
    `timed`; the array is kept so that its memory stays allocated while the tuple lives."""
    out = []
    for a in arrays:
        if a is None:
            continue
        if isinstance(a, np.ndarray):
            out.append((a.ctypes.data, a.nbytes, a))
        else:
            out.append((a.data_ptr(), a.numel() * a.element_size(), a))
    return tuple(out)


def case_data(rng, kv: str, bhgn: tuple, d: int):
    """Random Q, K, V of a case as f32 (B, hkv, g or n, d) arrays, K and V also as bf16 bits
    where kv is bf16 (else None; K and V then hold the widened values the kernels see), and
    the float64 reference output."""
    B, hkv, g, n = bhgn
    Q4 = rng.standard_normal((B, hkv, g, d), dtype=np.float32)
    K4 = rng.standard_normal((B, hkv, n, d), dtype=np.float32)
    V4 = rng.standard_normal((B, hkv, n, d), dtype=np.float32)
    Kb = Vb = None
    if kv == "bf16":
        Kb, Vb = dtypes.bf16_bits(K4), dtypes.bf16_bits(V4)
        K4, V4 = widen_bf16(Kb), widen_bf16(Vb)
    return Q4, K4, V4, Kb, Vb, attention(Q4.astype(np.float64), K4.astype(np.float64), V4.astype(np.float64))


def setup(case, rng, targets, options, torch, F, ceiling):
    """(name, the row without timings, the implementations to time by name, their max
    errors against the float64 reference, the buffers to evict before each call) of one
    case of CASES."""
    name, example, kv, fixed, run, (B, hkv, g, n) = case
    d = fixed["dk"]
    Q4, K4, V4, Kb, Vb, ref = case_data(rng, kv, (B, hkv, g, n), d)
    kv_bytes = 2 * B * hkv * n * d * (2 if kv == "bf16" else 4)
    prog = case_program(example, kv)
    arrays = moac_arrays(example, Q4, Kb if kv == "bf16" else K4, Vb if kv == "bf16" else V4)
    impls = {}
    for t in targets:
        kern = prog.compile(target=t, sizes=fixed, **options)
        sizes = {k: v for k, v in run.items() if k in kern.onf.params}
        impls[f"moac_{t}"] = (lambda kern=kern, sizes=sizes: kern(**arrays, **sizes)[prog.outputs[0]])
    if kv == "bf16":
        wk, wv = np.empty(Kb.shape, np.uint32), np.empty(Vb.shape, np.uint32)     # widened in place each call
        impls["numpy"] = lambda: attention(Q4, widen_bf16(Kb, wk), widen_bf16(Vb, wv))
    else:
        impls["numpy"] = lambda: attention(Q4, K4, V4)
    big = [Kb, Vb] if kv == "bf16" else [K4, V4]   # the K and V every implementation reads, evicted before each call
    if torch is not None:
        tq = torch.from_numpy(Q4.reshape(B, hkv * g, 1, d))
        tk, tv = torch.from_numpy(K4), torch.from_numpy(V4)
        if kv == "bf16":
            tq, tk, tv = tq.bfloat16(), tk.bfloat16(), tv.bfloat16()
            big += [tk, tv]

        def sdpa(tq=tq, tk=tk, tv=tv):
            with torch.no_grad():
                return F.scaled_dot_product_attention(tq, tk, tv, enable_gqa=g > 1)
        impls["torch_sdpa"] = sdpa
    kv_arrays = (Kb, Vb) if kv == "bf16" else (K4, V4)     # the very bytes the kernels read
    impls["read_ceiling"] = lambda arrays=kv_arrays: ceiling(*arrays)
    errors = {}
    for key, fn in impls.items():
        if key == "read_ceiling":
            continue
        got = fn()
        got = got.float().numpy() if torch is not None and isinstance(got, torch.Tensor) else np.asarray(got)
        errors[key] = float(np.max(np.abs(got.reshape(ref.shape).astype(np.float64) - ref)))
    row = {"kv_dtype": kv, "kv_bytes": kv_bytes, "sizes": {**fixed, **run}, "impls": {}}
    return name, row, impls, errors, buffers(*big)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", required=True)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--only", default="")
    ap.add_argument("--targets", default="openmp,c")
    ap.add_argument("options", nargs="*", help="moac compile options key=value (e.g. share_kv=False)")
    args = ap.parse_args()
    options = compile_options(args.options)
    try:
        import torch
        import torch.nn.functional as F
        torch.set_num_threads(os.cpu_count() or 1)
    except ImportError:
        torch = F = None
    targets = [t for t in args.targets.split(",") if t]
    only = set(filter(None, args.only.split(",")))
    ceiling = read_ceiling()
    rng = np.random.default_rng(0)
    results = {"machine": {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
                           "python": platform.python_version(), "numpy": np.__version__,
                           "torch": torch.__version__ if torch else None, "moac": moac.__version__},
               "date": time.strftime("%Y-%m-%d"), "command": " ".join([Path(sys.argv[0]).name] + sys.argv[1:]),
               "rounds": args.rounds, "options": options, "cases": {}}
    groups: dict = {}        # the cases of one shape (f32 and bf16 K/V) share their rounds
    for case in CASES:
        if not only or case[0] in only:
            groups.setdefault((case[1], tuple(case[4].items()), tuple(case[3].items())), []).append(case)
    for group in groups.values():
        setups = [setup(case, rng, targets, options, torch, F, ceiling) for case in group]
        times = [{k: [] for k in impls} for _, _, impls, _, _ in setups]
        keys = list(setups[0][2])
        for r in range(args.rounds):
            # each round starts one implementation later (none always follows the same one),
            # and each implementation times the group's cases back to back, in an order that
            # alternates between rounds: bf16 against f32 compares calls made milliseconds
            # apart, not the host's drift between parts of a round
            for key in keys[r % len(keys):] + keys[:r % len(keys)]:
                pairs = list(zip(setups, times))
                for (_, _, impls, _, big), ts in (pairs if r % 2 == 0 else pairs[::-1]):
                    ts[key].append(timed(impls[key], big))
        for (name, row, _, errors, _), ts in zip(setups, times):
            ceil_best = min(ts["read_ceiling"])
            for key, t in ts.items():
                best, med = min(t), statistics.median(t)
                row["impls"][key] = {"best_ms": best * 1e3, "median_ms": med * 1e3,
                                     "gb_per_s": row["kv_bytes"] / best / 1e9, "of_ceiling": ceil_best / best,
                                     "max_abs_err": errors.get(key), "times_ms": [x * 1e3 for x in t]}
            results["cases"][name] = row
            line = "  ".join(f"{k} {v['best_ms']:.2f}/{v['median_ms']:.2f} ms ({v['of_ceiling']:.2f})"
                             for k, v in row["impls"].items())
            print(f"{name:20s} {line}", flush=True)
        dts = {row["kv_dtype"]: (name, t) for (name, row, _, _, _), t in zip(setups, times)}
        if "f32" in dts and "bf16" in dts:    # bf16 against f32 from the same rounds, each moac target
            (name, t16), (_, t32) = dts["bf16"], dts["f32"]
            vs = {k: {"best": min(t32[k]) / min(t16[k]), "median": statistics.median(t32[k]) / statistics.median(t16[k]),
                      "paired_median": statistics.median(a / b for a, b in zip(t32[k], t16[k]))}
                  for k in t16 if (k.startswith("moac_") or k == "read_ceiling") and k in t32}
            results["cases"][name]["bf16_vs_f32"] = vs
            print(f"{'':20s} bf16 against f32, same rounds: " + "  ".join(
                f"{k} {v['best']:.2f}× best, {v['median']:.2f}× median, {v['paired_median']:.2f}× paired"
                for k, v in vs.items()), flush=True)
        del setups, times
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
