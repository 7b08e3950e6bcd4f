"""Probe only, not the product path: rewrite a generated .cu (a tensor-core tile kernel whose
16-token steps have one base per step, `moac_kb`/`moac_vb`) so that the loads of the tile go
further ahead of their use, or carry a cache hint.

    python3 bench/probes/prefetch_edit.py IN.cu OUT.cu MODE [D]   # then nvcc as moac builds it

MODE: hint   the tile's 16- and 8-byte loads as ld.global.nc.L2::256B (the L2 fetches 256-byte
             blocks) and moac_word likewise;
      bulk   lanes 0 and 1 prefetch the K and V rows of the step D steps ahead into the L2
             (cp.async.bulk.prefetch.L2, one 16-row block each; contiguous rows only);
      rows   lane l prefetches row l mod 16 of K (l < 16) or V of the step D steps ahead;
      bulkhint, rowshint: both."""
import re
import sys

src, dst, mode = sys.argv[1:4]
D = int(sys.argv[4]) if len(sys.argv) > 4 else 2
text = open(src).read()

HINT = r"""
template <typename W> static __device__ __forceinline__ W moac_ldh(const W *p);
template <> __device__ __forceinline__ uint4 moac_ldh<uint4>(const uint4 *p)
{ uint4 r; asm volatile("ld.global.nc.L2::256B.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p)); return r; }
template <> __device__ __forceinline__ uint2 moac_ldh<uint2>(const uint2 *p)
{ uint2 r; asm volatile("ld.global.nc.L2::256B.v2.u32 {%0,%1}, [%2];" : "=r"(r.x), "=r"(r.y) : "l"(p)); return r; }
"""
n = 0
if "hint" in mode:
    anchor = "template <int DK, int DV, int ST, typename E>\nstatic __device__ __forceinline__ void moac_tile_load("
    if anchor in text:
        text = text.replace(anchor, HINT + anchor)
        text, k = re.subn(r"__ldg\(reinterpret_cast<const W \*>\(", "moac_ldh(reinterpret_cast<const W *>(", text)
        assert k == 2, k
    else:
        assert "moac_word(const void" in text
    text = text.replace("{ return (uint64_t)__ldg((const unsigned long long *)p + i); }",
                        "{ uint64_t r; asm volatile(\"ld.global.nc.L2::256B.u64 %0, [%1];\" : \"=l\"(r) : "
                        "\"l\"((const unsigned long long *)p + i)); return r; }")
if "bulk" in mode or "rows" in mode:
    lines = text.split("\n")
    out = []
    step = None
    for ln in lines:
        out.append(ln)
        m = re.search(r"moac_blk = \(moac_t0 \+ (.*)\) / 16;", ln)
        if m:
            step = m.group(1)
        m = re.match(r"^(\s*)moac_tile_load\(moac_t[ab], moac_kr, moac_vr, moac_tr, moac_tc\);$", ln)
        if m and step is not None:
            ind = m.group(1)
            if "bulk" in mode:
                out.append(f"{ind}if (moac_lane < 2 && ({step}) + {16 * D + 16} <= moac_tn) {{   /* probe: L2 prefetch {D} steps ahead */")
                out.append(f"{ind}    const char *moac_pf = (const char *)((moac_lane ? moac_vb : moac_kb) + {16 * D} * 128);")
                out.append(f"{ind}    asm volatile(\"cp.async.bulk.prefetch.L2.global [%0], %1;\" :: \"l\"(moac_pf), \"r\"((unsigned)(16 * 128 * sizeof(*moac_kb))) : \"memory\");")
                out.append(f"{ind}}}")
            else:
                out.append(f"{ind}if (({step}) + {16 * D} + (moac_lane & 15) < moac_tn) {{   /* probe: L2 prefetch {D} steps ahead */")
                out.append(f"{ind}    const char *moac_pf = (const char *)((moac_lane >> 4 ? moac_vb : moac_kb) + ({16 * D} + (moac_lane & 15)) * 128);")
                out.append(f"{ind}    asm volatile(\"cp.async.bulk.prefetch.L2.global [%0], %1;\" :: \"l\"(moac_pf), \"r\"((unsigned)(128 * sizeof(*moac_kb))) : \"memory\");")
                out.append(f"{ind}}}")
            n += 1
            step = None
    assert n >= 3, n
    text = "\n".join(out)
open(dst, "w").write(text)
print(dst, mode, D, n)
