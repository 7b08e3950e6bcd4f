"""Device helpers of the cuda target that replace moac.emit.codegen's portable ones, or that
only a GPU has: packed loads through the read-only path, the exact 8-bit widenings, the
warp-parallel pick of a ragged batch's chunks.  C text; no sympy here."""
from __future__ import annotations

from . import tiles


WORD_HELPERS = {
    "moac_word": "/* one 8-byte word of a read-only array (a packed load through the read-only path) */\n"
                 "static __device__ inline uint64_t moac_word(const void *p, int64_t i) "
                 "{ return (uint64_t)__ldg((const unsigned long long *)p + i); }",
    "moac_sword": "/* one 8-byte word of a scratch array the same kernel writes (a plain load: not the read-only path) */\n"
                  "static __device__ inline uint64_t moac_sword(const void *p, int64_t i) "
                  "{ return ((const uint64_t *)p)[i]; }",
    "moac_word4": "/* one 4-byte word of a read-only array (four one-byte elements, the read-only path) */\n"
                  "static __device__ inline uint32_t moac_word4(const void *p, int64_t i) "
                  "{ return (uint32_t)__ldg((const unsigned int *)p + i); }",
}


# 8-bit storage widened on the GPU by its conversions to f16, which are exact (every E4M3 and
# E5M2 value, NaN and inf included, is an f16): E4M3 by the hardware conversion of sm_89 and
# later (one instruction), E5M2 being the top byte of an f16; then f16 -> f32 (one more).
# The portable integer widening of moac.emit.codegen stays for the host and older GPUs.
_FP8_DEVICE = {
    "moac_f8e4m3_to_f32": ("defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890",
                           "    return __half2float(__half(__nv_cvt_fp8_to_halfraw((__nv_fp8_storage_t)b, __NV_E4M3)));"),
    "moac_f8e5m2_to_f32": ("defined(__CUDA_ARCH__)",
                           "    __half_raw h; h.x = (unsigned short)((unsigned short)b << 8); return __half2float(__half(h));"),
    "moac_f8e4m3x2_to_f32": ("defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890",
                             "    __half2_raw r = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)two, __NV_E4M3);\n"
                             "    __half_raw h; h.x = k ? r.y : r.x; return __half2float(__half(h));"),
    "moac_f8e5m2x2_to_f32": ("defined(__CUDA_ARCH__)",
                             "    __half_raw h; h.x = k ? (unsigned short)(two & 0xff00u) : (unsigned short)(two << 8);\n"
                             "    return __half2float(__half(h));"),
}


def _device_or_portable(portable: str, cond: str, device: str, note: str) -> str:
    """A helper of moac.emit.codegen (`portable`, its comment and `static inline T f(...)`, then
    its body, on one line or several) for host and device: `device` under `#if cond`, else the
    portable body; `note` goes before the portable helper's own comment."""
    if "{\n" in portable:
        head, body = portable.split("{\n", 1)
        body = body.rsplit("\n}", 1)[0]
    else:                                       # a one-line helper: static inline T f(...) { body }
        head, body = portable.split("{ ", 1)
        body = "    " + body.rsplit(" }", 1)[0]
    return (f"{note}{head.rstrip()}\n".replace("static inline", "static __host__ __device__ inline")
            + "{\n" + f"#if {cond}\n{device}\n#else\n{body}\n#endif\n" + "}")


def _fp8_helper(name: str, portable: str) -> str:
    """The CUDA helper for an 8-bit widening: the device conversion under #if, else the
    portable body."""
    cond, device = _FP8_DEVICE[name]
    note = ("/* on the GPU: the exact conversion to f16 (E4M3: the hardware's, sm_89 and later), then to f32;\n"
            " * on the host and older GPUs: */\n")
    includes = "#include <cuda_fp16.h>\n#include <cuda_fp8.h>\n" if "x2" not in name else ""
    return includes + _device_or_portable(portable, cond, device, note)


# A ragged batch's gang w finds its sequence with the warp's 32 lanes at once: each lane counts
# one sequence's chunks, a shuffle scan sums them, a ballot finds the first sequence whose sum
# passes w.  The portable helper walks the sequences one by one (a division each), which every
# gang, live or past the last chunk, paid before its first copy.  Called where every lane of
# the block's warps runs the gang's statements (cuda.split's gang level), as the full mask says.
# The helper's name -> the unsigned type of its lengths' chunk counts.
_PICK_DEVICE = {"moac_ragged_pick_i32": "uint32_t", "moac_ragged_pick_i64": "uint64_t"}


def _pick_helper(name: str, portable: str) -> str:
    """The CUDA pick: lanes over the sequences under __CUDA_ARCH__, else the portable loop."""
    ut = _PICK_DEVICE[name]
    device = (f"    const unsigned moac_l = threadIdx.x & 31u;\n"
              f"    const {ut} c = ({ut})chunk;\n"
              f"    int64_t base = 0;   /* the chunks of the sequences before b0 */\n"
              f"    for (int64_t b0 = 0; b0 < B; b0 += 32) {{\n"
              f"        const int64_t b = b0 + moac_l;\n"
              f"        const {ut} n = b < B ? (({ut})lens[b] + c - 1u) / c : 0u;   /* this lane's sequence's chunks */\n"
              f"        {ut} s = n;   /* their inclusive sum over the lanes */\n"
              f"        for (int o = 1; o < 32; o <<= 1) {{ const {ut} t = __shfl_up_sync(0xffffffffu, s, o); if (moac_l >= (unsigned)o) s += t; }}\n"
              f"        const unsigned hit = __ballot_sync(0xffffffffu, w - base < (int64_t)s);\n"
              f"        if (hit) {{   /* the first lane whose sum passes w holds its sequence */\n"
              f"            const int l = __ffs(hit) - 1;\n"
              f"            return (w - base - (int64_t)__shfl_sync(0xffffffffu, s - n, l)) * (B + 1) + b0 + l;\n"
              f"        }}\n"
              f"        base += (int64_t)__shfl_sync(0xffffffffu, s, 31);\n"
              f"    }}\n"
              f"    return (w - base) * (B + 1) + B;")
    note = "/* on the GPU: the lanes of a warp count 32 sequences' chunks at once (every lane calls it); on the host: */\n"
    return _device_or_portable(portable, "defined(__CUDA_ARCH__)", device, note)


def replaced() -> tuple:
    """The names of moac.emit.codegen's helpers that this module prints instead (or, for
    moac_tile, the name under which a unit asks for the tile helpers)."""
    return (*WORD_HELPERS, *_FP8_DEVICE, "moac_tile", "moac_tile_out", *_PICK_DEVICE)


def device_helpers(wanted) -> tuple:
    """The texts of the helpers a unit asks for (its `helpers`) that this module prints."""
    from .codegen import OPTIONAL_HELPERS
    return (tuple(text for w, text in WORD_HELPERS.items() if w in wanted)
            + ((tiles.HELPERS,) if "moac_tile" in wanted else ())
            + ((tiles.TILE_OUT,) if "moac_tile_out" in wanted else ())
            + tuple(_fp8_helper(w, OPTIONAL_HELPERS[w]) for w in _FP8_DEVICE if w in wanted)
            + tuple(_pick_helper(w, OPTIONAL_HELPERS[w]) for w in _PICK_DEVICE if w in wanted))
