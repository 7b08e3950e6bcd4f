"""Probe only, not the product path: the score pass of a generated OpenACC C file of batched
GQA (4 heads a gang, d = 128, bf16 K) rewritten with its vector lanes over the chunk's tokens
and each lane's dot products in sequence over d, instead of lanes over d and one vector
reduction (5 shuffles) per score.

    python3 bench/probes/acc_token_lanes_edit.py IN.c OUT.c

Only the 32-bit kernel is rewritten (the one the H200 runs at these sizes)."""
import re
import sys

src, dst = sys.argv[1:3]
text = open(src).read()
head = "for (int32_t cq = 0; cq < cn / 8; ++cq) {"
i = text.index(head)
start = text.rindex("#pragma acc loop seq", 0, i)
end = text.index("float zg0 = 0.0f;", i)
indent = re.search(r"\n( *)#pragma acc loop seq\s*$", text[:start + len("#pragma acc loop seq")]).group(1)
P = "moac_p[i_ * 32 * (chunk * (n_ / chunk + (n_ % chunk != 0))) + {h} * (chunk * (n_ / chunk + (n_ % chunk != 0))) + l_]"
heads = ["4 * a", "(4 * a + 1)", "(4 * a + 2)", "(4 * a + 3)"]
L = ["#pragma acc loop vector reduction(max:mg0, mg1, mg2, mg3)",
     "for (int32_t c = 0; c < cn; ++c) {  /* probe: lanes over tokens, each lane's dot products in sequence */",
     "    int32_t l_ = c + chunk * g;",
     "    float s0 = 0.0f, s1 = 0.0f, s2 = 0.0f, s3 = 0.0f;",
     "    #pragma acc loop seq",
     "    for (int32_t w = 0; w < 32; ++w) {",
     "        uint64_t kw = moac_word(K_, w + 32 * l_ + 32 * a * n_ + 256 * i_ * n_);",
     "        float k0 = moac_bf16_to_f32((uint16_t)kw), k1 = moac_bf16_to_f32((uint16_t)(kw >> 16));",
     "        float k2 = moac_bf16_to_f32((uint16_t)(kw >> 32)), k3 = moac_bf16_to_f32((uint16_t)(kw >> 48));"]
for r in range(4):
    L += [f"        uint64_t qa{r} = moac_word(Q_, 256 * a + {64 * r} + 2 * w + 2048 * i_), "
          f"qb{r} = moac_word(Q_, 256 * a + {64 * r} + 2 * w + 2048 * i_ + 1);",
          f"        s{r} = s{r} + moac_bits_to_f32((uint32_t)qa{r}) * k0 + moac_bits_to_f32((uint32_t)(qa{r} >> 32)) * k1"
          f" + moac_bits_to_f32((uint32_t)qb{r}) * k2 + moac_bits_to_f32((uint32_t)(qb{r} >> 32)) * k3;"]
L += ["    }"]
for r in range(4):
    L += [f"    float sc{r} = s{r} / sqrtf((float)128);", f"    {P.format(h=heads[r])} = sc{r};",
          f"    mg{r} = fmaxf(mg{r}, sc{r});"]
L += ["}"]
new = ("\n" + indent).join(L) + "\n" + indent
text = text[:start] + new + text[end:]
open(dst, "w").write(text)
