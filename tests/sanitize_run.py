"""Every example's kernels rebuilt with AddressSanitizer and UndefinedBehaviorSanitizer
and run on edge sizes (0, 1, primes, non-multiples of every lifting factor; the sizes of
test_back_common.SIZES and FIXED): run by tests/test_sanitizers.py in a subprocess with
the sanitizer runtimes preloaded.  Prints one line per run and exits 0 only if every run
finished and agreed with the interpreter (a sanitizer finding aborts the process)."""
from __future__ import annotations

import sys

import numpy as np

import moac
from moac.commands import random_inputs

from test_back_common import EXAMPLE_NAMES, FIXED, SIZES, example, tolerance, assert_close, call

ASAN = ("-fsanitize=address", "-fno-omit-frame-pointer", "-g", "-O1")
UBSAN = ("-fsanitize=undefined", "-fno-sanitize-recover=all")
# GCC cannot put UBSan's data into an OpenACC routine: the openacc host build gets ASan only
FLAGS = {"c": ASAN + UBSAN, "openmp": ASAN + UBSAN, "openacc": ASAN}
# beyond the common tables: the batched GQA example, and GQA with the packed and SIMD paths
# (d = 128 fixed, g = 4 literal: packed words on openacc, prefetches and 4-token loops on openmp)
EXTRA_SIZES = {"decode_gqa_batched": [dict(B=1, hq=1, hkv=1, n=1, dk=1, dv=1), dict(B=2, hq=6, hkv=2, n=130, dk=33, dv=40),
                                      dict(B=1, hq=8, hkv=2, n=1031, dk=128, dv=128)]}
EXTRA_SIZES["decode_gqa_fp8"] = EXTRA_SIZES["decode_gqa_fp8_head"] = EXTRA_SIZES["decode_gqa_batched"]   # 8-bit K, V
EXTRA_FIXED = {name: dict(hq=8, hkv=2, dk=128, dv=128) for name in ("decode_gqa_batched", "decode_gqa_fp8",
                                                                   "decode_gqa_fp8_head")}
PACKED = [("decode_gqa", dict(hkv=2, g=4, dk=128, dv=128), [dict(n=1), dict(n=37), dict(n=1031)])]


def main(names: list) -> int:
    runs = 0
    for name in names:
        prog = example(name)
        table, fixed_of = SIZES.get(name) or EXTRA_SIZES[name], FIXED.get(name) or EXTRA_FIXED[name]
        builds = [({}, s) for s in table] + [(fixed_of, {**s, **fixed_of}) for s in table[:2]]
        builds += [(f, {**s, **f}) for n2, f, ss in PACKED if n2 == name for s in ss]
        for target, flags in FLAGS.items():
            for fixed, sizes in builds:
                try:
                    kern = prog.compile(target=target, sizes=fixed, extra_flags=flags, native=False)
                except moac.MoacError:
                    continue                              # these sizes contradict the fixed ones
                try:
                    arrays, all_sizes = random_inputs(prog, sizes, 1)
                except moac.MoacError:
                    continue
                try:
                    got = call(prog, kern, arrays, all_sizes)
                except moac.MoacError:
                    continue                              # a run-time condition refuses these sizes
                ref = prog.evaluate(sizes=all_sizes, **arrays)
                for out in got:
                    assert_close(f"{name}.{out}", got[out], ref[out], tolerance(kern, all_sizes), floor=1.0)
                runs += 1
                print(f"ok {name} {target} {sizes}", flush=True)
    print(f"{runs} sanitized runs, no finding")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:] or list(EXAMPLE_NAMES)))
