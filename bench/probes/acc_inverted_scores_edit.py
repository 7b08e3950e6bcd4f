"""Probe only, not the product path: the score pass of a generated OpenACC C file of GQA
(4 heads a gang, d = 128, bf16 K, f32 Q) as ONE vector loop whose lanes each walk the
chunk's tokens in sequence, no vector reduction and no fork of the lanes per token step.
Lane x = PARTS·u + c takes tokens u, u + 32/PARTS, ... and the words PARTS·s + c of their K
rows (s < 32/PARTS; adjacent lanes read adjacent words: a load instruction touches whole
sectors), holds its q elements of the 4 heads in registers (loaded once), sums its
products per head and stores the partial; UNROLL tokens of a lane are summed together (their
loads in flight together).  A second vector loop, lanes over tokens, adds a token's PARTS
partials, scales, stores the score and takes the chunk maximum.  The partials live after
the score buffer (made PARTS + 1 times as large).

    python3 bench/probes/acc_inverted_scores_edit.py IN.c OUT.c PARTS UNROLL

Only the first (32-bit) partials kernel is rewritten (the one the H200 runs at these sizes)."""
import sys

from score_pass_c import bits, locate, splice, sum_pass

src, dst = sys.argv[1:3]
R, U = int(sys.argv[3]), int(sys.argv[4])
T, S = 32 // R, 32 // R          # tokens a lane step, K words a lane a token
at = locate(open(src).read(), R)
X, P = at["X"], at["pidx"]

L = ["#pragma acc loop vector",
     "for (int32_t x = 0; x < 32; ++x) {  /* probe: lanes over tokens × parts of d, each lane's tokens in sequence */",
     f"    int32_t u = x / {R}, c = x % {R};"]
for r in range(4):
    for s in range(S):
        q = at["qexpr"].replace("2 * v", f"{2 * R * s} + 2 * c")
        L += [f"    uint64_t qw{r}_{s}a = moac_word(Q_, {q} + {64 * r}), qw{r}_{s}b = moac_word(Q_, {q} + {64 * r + 1});",
              f"    float q{r}_{s}_0 = {bits(f'qw{r}_{s}a', 0)}, q{r}_{s}_1 = {bits(f'qw{r}_{s}a', 1)}, "
              f"q{r}_{s}_2 = {bits(f'qw{r}_{s}b', 0)}, q{r}_{s}_3 = {bits(f'qw{r}_{s}b', 1)};"]
L += ["    #pragma acc loop seq",
      f"    for (int32_t cq = 0; cq < (cn + {T * U - 1}) / {T * U}; ++cq) {{"]
for k in range(U):
    L += [f"        int32_t c{k} = {T * U} * cq + {T * k} + u;",
          f"        int32_t l{k} = (c{k} < cn ? c{k} : cn - 1) + chunk * g;"]
    L += [f"        float s{k}_{r} = 0.0f;" for r in range(4)]
for s in range(S):
    for k in range(U):
        K = at["kexpr"].replace("32 * t0 + v", f"32 * l{k} + {R * s} + c")
        L += [f"        uint64_t kw{k}_{s} = moac_word(K_, {K});"]
for s in range(S):
    for k in range(U):
        ks = [f"moac_bf16_to_f32((uint16_t)(kw{k}_{s} >> {16 * e}))" for e in range(4)]
        L += [f"        float k{k}_{s}_{e} = {ks[e]};" for e in range(4)]
        for r in range(4):
            L += [f"        s{k}_{r} = s{k}_{r} + " + " + ".join(f"q{r}_{s}_{e} * k{k}_{s}_{e}" for e in range(4)) + ";"]
for k in range(U):
    L += [f"        if (c{k} < cn) {{"]
    L += [f"            moac_p[({X}) + {R} * ({P[r].replace('l_', f'l{k}')}) + c] = s{k}_{r};" for r in range(4)]
    L += ["        }"]
L += ["    }", "}"] + sum_pass(X, R, P)
open(dst, "w").write(splice(at, L))
