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
import re
import sys

src, dst = sys.argv[1:3]
R, U = int(sys.argv[3]), int(sys.argv[4])
T, S = 32 // R, 32 // R          # tokens a lane step, K words a lane a token
text = open(src).read()

m = re.search(r"float \*moac_p = \(float \*\)\(ws \+ ws_off\);\n\s*ws_off \+= \(sizeof\(float\) \* \(size_t\)\((.*)\) \+ 255\) / 256 \* 256;", text)
X = m.group(1)
old = f"sizeof(float) * (size_t)({X})"
assert text.count(old) == 2, text.count(old)
text = text.replace(old, f"sizeof(float) * (size_t)({R + 1} * ({X}))")

head = "for (int32_t cq = 0; cq < cn / 8; ++cq) {"
i = text.index(head)
start = text.rindex("#pragma acc loop seq", 0, i)
end = text.index("float zg0 = 0.0f;", i)
seg = text[start:end]
indent = re.search(r"\n( *)#pragma acc loop seq\s*$", text[:start + len("#pragma acc loop seq")]).group(1)
kexpr = re.search(r"moac_word\(K_, (32 \* t0 \+ v[^;]*)\);", seg).group(1)
qexpr = re.search(r"q0_2w = moac_word\(Q_, ([^;]*)\);", seg).group(1)
pidx = [re.search(r"moac_p\[(.*)\] = sc0_%d;" % r, seg).group(1) for r in range(4)]
assert "2 * v" in qexpr, qexpr
P = [p.replace("t0", "l_") for p in pidx]

f = lambda w, hi: f"moac_bits_to_f32((uint32_t)({w}{' >> 32' if hi else ''}))"   # noqa: E731
L = ["#pragma acc loop vector",
     "for (int32_t x = 0; x < 32; ++x) {  /* probe: lanes over tokens × parts of d, each lane's tokens in sequence */",
     f"    int32_t u = x / {R}, c = x % {R};"]
for r in range(4):
    for s in range(S):
        q = qexpr.replace("2 * v", f"{2 * R * s} + 2 * c")
        L += [f"    uint64_t qw{r}_{s}a = moac_word(Q_, {q} + {64 * r}), qw{r}_{s}b = moac_word(Q_, {q} + {64 * r + 1});",
              f"    float q{r}_{s}_0 = {f(f'qw{r}_{s}a', 0)}, q{r}_{s}_1 = {f(f'qw{r}_{s}a', 1)}, "
              f"q{r}_{s}_2 = {f(f'qw{r}_{s}b', 0)}, q{r}_{s}_3 = {f(f'qw{r}_{s}b', 1)};"]
L += ["    #pragma acc loop seq",
      f"    for (int32_t cq = 0; cq < (cn + {T * U - 1}) / {T * U}; ++cq) {{"]
for k in range(U):
    L += [f"        int32_t c{k} = {T * U} * cq + {T * k} + u;",
          f"        int32_t l{k} = (c{k} < cn ? c{k} : cn - 1) + chunk * g;"]
    L += [f"        float s{k}_{r} = 0.0f;" for r in range(4)]
for s in range(S):
    for k in range(U):
        K = kexpr.replace("32 * t0 + v", f"32 * l{k} + {R * s} + c")
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
L += ["    }", "}",
      "#pragma acc loop vector reduction(max:mg0, mg1, mg2, mg3)",
      "for (int32_t c = 0; c < cn; ++c) {  /* probe: a token's partials, its score, the chunk maximum */",
      "    int32_t l_ = c + chunk * g;"]
for r in range(4):
    at = f"(({X}) + {R} * ({P[r]})) / 2"
    L += [f"    uint64_t p{r}w{k} = moac_word(moac_p, {at} + {k});" for k in range(R // 2)]
    parts = " + ".join(f(f"p{r}w{k}", h) for k in range(R // 2) for h in (0, 1))
    L += [f"    float sc{r} = ({parts}) / sqrtf((float)128);",
          f"    moac_p[{P[r]}] = sc{r};",
          f"    mg{r} = fmaxf(mg{r}, sc{r});"]
L += ["}"]
new = ("\n" + indent).join(L) + "\n" + indent
text = text[:start] + new + text[end:]
open(dst, "w").write(text)
