"""Probe only, not the product path: the score pass of a generated OpenACC C file of GQA
(4 heads a gang, d = 128, bf16 K, f32 Q) rewritten so that no score is a 32-lane vector
reduction.  A warp's 32 lanes take 8 tokens × 4 parts of d: lane 4·u + c reads the
words 4·s + c (s < 8) of token u's K row, so 4 adjacent lanes read one 32-byte sector and
a load instruction touches 8 sectors (as many as the 256 contiguous bytes of the lanes-
over-d pass).  Each lane sums its 32 products per head and stores the partial; a second
vector loop, lanes over tokens, adds a token's 4 partials, scales, stores the score and
takes the chunk maximum (the max reduction the generated pass had).  The partials live
after the score buffer (the workspace's score buffer made PARTS + 1 times as large).

    python3 bench/probes/acc_quarter_lanes_edit.py IN.c OUT.c [PARTS]

PARTS (4, the default, or 8): the lanes a token's row is split over (32 ÷ PARTS tokens a
vector step; with 8, lane 8·u + c reads the words 8·s + c, s < 4: two sectors of each of
4 tokens).

Only the first (32-bit) partials kernel is rewritten (the one the H200 runs at these sizes)."""
import sys

from score_pass_c import locate, splice, sum_pass

src, dst = sys.argv[1:3]
R = int(sys.argv[3]) if len(sys.argv) > 3 else 4   # lanes a token
T, S = 32 // R, 32 // R      # tokens a vector step, words a lane
at = locate(open(src).read(), R)
X, P = at["X"], at["pidx"]
K = at["kexpr"].replace("32 * t0 + v", f"32 * l_ + {R} * s + c")
Q = at["qexpr"].replace("2 * v", f"{2 * R} * s + 2 * c")

L = ["#pragma acc loop seq",
     f"for (int32_t cq = 0; cq < (cn + {T - 1}) / {T}; ++cq) {{  /* probe: lanes over {T} tokens × {R} parts of d */",
     "    #pragma acc loop vector",
     "    for (int32_t x = 0; x < 32; ++x) {",
     f"        int32_t u = x / {R}, c = x % {R};",
     f"        if ({T} * cq + u < cn) {{",
     f"            int32_t l_ = {T} * cq + u + chunk * g;",
     "            float s0 = 0.0f, s1 = 0.0f, s2 = 0.0f, s3 = 0.0f;",
     f"            #pragma GCC unroll {S}",
     f"            for (int32_t s = 0; s < {S}; ++s) {{",
     f"                uint64_t kw = moac_word(K_, {K});",
     "                float k0 = moac_bf16_to_f32((uint16_t)kw), k1 = moac_bf16_to_f32((uint16_t)(kw >> 16));",
     "                float k2 = moac_bf16_to_f32((uint16_t)(kw >> 32)), k3 = moac_bf16_to_f32((uint16_t)(kw >> 48));"]
for r in range(4):
    L += [f"                uint64_t qa{r} = moac_word(Q_, {Q} + {64 * r}), qb{r} = moac_word(Q_, {Q} + {64 * r + 1});",
          f"                s{r} = s{r} + moac_bits_to_f32((uint32_t)qa{r}) * k0 + moac_bits_to_f32((uint32_t)(qa{r} >> 32)) * k1"
          f" + moac_bits_to_f32((uint32_t)qb{r}) * k2 + moac_bits_to_f32((uint32_t)(qb{r} >> 32)) * k3;"]
L += ["            }"]
for r in range(4):
    L += [f"            moac_p[({X}) + {R} * ({P[r]}) + c] = s{r};"]
L += ["        }", "    }", "}"] + sum_pass(X, R, P)
open(dst, "w").write(splice(at, L))
