"""A bench/cpu_ab.py variant (probe only, not the product path): the openmp GQA kernel's
bf16 rows widened as even and odd halves of 64-byte loads instead of 16-element
zero-extensions, in the score pass and the weighted sum.

Main widens 16 bf16 elements with `vpmovzxwd` (a shuffle, port 5 only) and `vpslld 16`
(port 0): two port operations per 16 elements, on the two ports the FMAs need.  Loaded 32
at a time as 16 words of 32 bits, element 2i+1 is the word with its low half cleared
(`vpandd`, port 0 or 5) and element 2i the word shifted left by 16 (`vpslld`): two
operations per 32 elements.  The score pass then needs the query's elements in the same
even/odd order (permuted once per call, `moac_qp`); the weighted sum accumulates o_part in
that order and puts each 32-element block back in order at the chunk's end.

Only for the decode_gqa example at hq = 32, d = 128 (the query's permuted copy is sized for
it); the edit asserts the patterns it rewrites."""
import os
import re

HELPERS = r"""
static inline moac_f32x16 moac_v16_bf16_ev(const uint16_t *p) {   /* elements 0, 2, …, 30 of 32 */
    moac_i32x16 w; __builtin_memcpy(&w, p, 64); w = w << 16;
    moac_f32x16 f; __builtin_memcpy(&f, &w, 64); return f;
}
static inline moac_f32x16 moac_v16_bf16_od(const uint16_t *p) {   /* elements 1, 3, …, 31 of 32 */
    moac_i32x16 w; __builtin_memcpy(&w, p, 64); w = w & -65536;
    moac_f32x16 f; __builtin_memcpy(&f, &w, 64); return f;
}
"""

QP = r"""    float moac_qp[32 * 128] __attribute__((aligned(64)));   /* Q with each 32-block as its even then its odd elements */
    for (int h = 0; h < 32 * 128; h += 32)
        for (int i = 0; i < 16; ++i) { moac_qp[h + i] = Q_[h + 2 * i]; moac_qp[h + 16 + i] = Q_[h + 2 * i + 1]; }
"""


def edit(c: str) -> str:
    anchor = "#if defined(__clang__) || __GNUC__ >= 12"
    assert anchor in c
    c = c.replace(anchor, HELPERS + anchor, 1)
    first = c.index("    #if defined(__AVX512F__)   /* explicit vectors (moac_v16) */\n    #pragma omp parallel for collapse(2)")
    end = c.index("    #else", first)
    k = c[first:end]
    head = "    #if defined(__AVX512F__)   /* explicit vectors (moac_v16) */\n"
    k = head + QP + k[len(head):]
    # score pass: 32 elements an iteration, even and odd halves
    hdr = "for (int64_t j_ = 0; j_ < 128; j_ += 16) {  /* vector reduction over DNF axis j, 4 tokens × 4 heads jammed"
    assert hdr in k
    k = k.replace(hdr, hdr.replace("j_ += 16", "j_ += 32"))
    pf = re.compile(r"( *)__builtin_prefetch\(\(const char \*\)&K_\[(.*?)\] \+ 8 \* j_, 0, 2\);\n *__builtin_prefetch\(\(const char \*\)&K_\[.*?\] \+ 8 \* j_ \+ 64, 0, 2\);\n")
    assert pf.search(k)
    k = pf.sub(lambda m: "".join(f"{m.group(1)}__builtin_prefetch((const char *)&K_[{m.group(2)}] + 16 * j_ + {o}, 0, 2);\n"
                                 for o in (0, 64, 128, 192)), k)
    term = re.compile(r"moac_v16_ld\(Q_ \+ \((.*?) \+ j_\)\) \* moac_v16_ld_bf16\(K_ \+ \((.*?) \+ j_\)\)")
    n = len(term.findall(k))
    assert n == 16, n
    k = term.sub(lambda m: f"moac_v16_ld(moac_qp + ({m.group(1)} + j_)) * moac_v16_bf16_ev(K_ + ({m.group(2)} + j_)) + "
                           f"moac_v16_ld(moac_qp + ({m.group(1)} + j_ + 16)) * moac_v16_bf16_od(K_ + ({m.group(2)} + j_))", k)
    if os.environ.get("MOAC_EO_SCORES_ONLY") == "1":      # the score pass only
        return c[:first] + k + c[end:]
    # weighted sum: each d-loop that widens V rows, 32 elements an iteration
    loop = re.compile(r"( *)for \(int64_t d_ = 0; d_ < 128; d_ \+= 16\) \{(  /\* SIMD lanes over DNF axis d < 128: \d rows? of the weighted values[^\n]*)\n(.*?)\n\1\}\n", re.S)

    def wsum(m):
        ind, comment, body = m.group(1), m.group(2), m.group(3)
        lines = body.split("\n")
        pre = [ln for ln in lines if "__builtin_prefetch" in ln]
        rest = [ln for ln in lines if "__builtin_prefetch" not in ln]
        out = []
        if pre:
            p0 = re.match(r"( *)__builtin_prefetch\(\(const char \*\)&V_\[(.*?)\] \+ 8 \* d_, 0, 2\);", pre[0])
            out += [f"{p0.group(1)}__builtin_prefetch((const char *)&V_[{p0.group(2)}] + 16 * d_ + {o}, 0, 2);" for o in (0, 64, 128, 192)]
        ev = [ln.replace("moac_v16_ld_bf16(", "moac_v16_bf16_ev(") for ln in rest]
        od = [re.sub(r"(moac_o_part \+ \([^;]*?) \+ d_\)", r"\1 + d_ + 16)", ln.replace("moac_v16_ld_bf16(", "moac_v16_bf16_od("))
              for ln in rest]
        out += ev + [f"{ind}    {{"] + ["    " + ln for ln in od] + [f"{ind}    }}"]
        comment = comment.replace(" */", ", even and odd halves */")
        return f"{ind}for (int64_t d_ = 0; d_ < 128; d_ += 32) {{{comment}\n" + "\n".join(out) + f"\n{ind}}}\n"
    k, n = loop.subn(wsum, k)
    assert n == 2, n
    # o_part back in order at the chunk's end, before its m and z are stored
    mp = re.compile(r"( *)moac_m_part\[4 \* a \* \(n_ / chunk \+ \(n_ % chunk != 0\)\) \+ g\] = mg0;\n")
    m = mp.search(k)
    assert m
    ind = m.group(1)
    fix = [f"{ind}for (int r = 0; r < 4; ++r)   /* o_part's 32-blocks back in order */",
           f"{ind}    for (int b = 0; b < 128; b += 32) {{",
           f"{ind}        float *o = moac_o_part + ((4 * a + r) * (n_ / chunk + (n_ % chunk != 0)) * 128 + g * 128 + b);",
           f"{ind}        moac_f32x16 e = moac_v16_ld(o), d = moac_v16_ld(o + 16);",
           f"{ind}        moac_v16_st(o, MOAC_V16_SH(e, d, 0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23));",
           f"{ind}        moac_v16_st(o + 16, MOAC_V16_SH(e, d, 8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31));",
           f"{ind}    }}"]
    k = k[:m.start()] + "\n".join(fix) + "\n" + k[m.start():]
    return c[:first] + k + c[end:]
