"""Probe only, not the product path: the weighted sum of a generated OpenACC C file of GQA
(4 heads a gang, d = 128, bf16 V, the lanes-over-d pass with one token a step) rewritten with
its lanes over 4 tokens × 8 parts of d, as the score partials do for K: lane x = 8·u + cp
reads words 8·s + cp (s < 4) of the rows of tokens 4·j + u, 2 tokens a step (8 packed
words on their way a lane, not 1), keeps 4 heads × 16 outputs, and stores them to the gang's
region of p_part (free again after the score pass); a second vector loop adds the 4 token
slots' partials of each output.  Needs chunks of at least 64 tokens (p_part's region).

    python3 bench/probes/acc_wsum_parts_edit.py IN.c OUT.c

Only the first (32-bit) partials kernel is rewritten."""
import sys

src, dst = sys.argv[1:3]
text = open(src).read()
head = "#pragma acc loop vector\n"
import re

start_line = re.search(r"for \(int32_t v = 0; v < 32; \+\+v\) \{  /\* vector lanes: [a-z] = 4·v \+ k, k < 4 \*/", text).group(0)
i = text.index(start_line)
p0 = text.rindex(head, 0, i)
ls = text.rindex("\n", 0, p0) + 1
ind = text[ls:p0]
# the loop's end: match braces from its `{`
k = text.index("{", i)
depth, j = 0, k
while True:
    depth += text[j] == "{"
    depth -= text[j] == "}"
    j += 1
    if depth == 0:
        break
end = text.index("\n", j) + 1
loop = text[ls:end]
# the index expressions of the original pass, reused verbatim
pidx = [re.search(r"float pc%d = moac_p\[(.*)\];" % m, loop).group(1) for m in range(4)]
vw = re.search(r"moac_word\(V_, v \+ (.*)\);", loop).group(1)
oidx = [re.search(r"moac_o_part\[(.*)\] = o%d_0;" % m, loop).group(1) for m in range(4)]
assert all(o.endswith("4 * v") for o in oidx), oidx
# the gang's region of p_part for head m: where pass 1a stored the head's partials of token t0
ppst = re.findall(r"moac_pp\[(.*) \+ t0 \* 8 \+ cp\] = ps\d+;", text[:ls])[:4]
assert len(ppst) == 4, ppst
pb = lambda m: pidx[m]
ppb = lambda m: f"{ppst[m]} + chunk * g * 8"
L = [head.strip(),
     "for (int32_t x = 0; x < 32; ++x) {  /* probe: lanes x = 8·u + cp over 4 tokens × 8 parts of d, partial sums to p_part */",
     "    int32_t u = x / 8;", "    int32_t cp = x % 8;"]
acc = lambda m, s, e: f"wa{m}_{s}_{e}"
L += [f"    float {acc(m, s, e)} = 0.0f;" for m in range(4) for s in range(4) for e in range(4)]

def token(tok, guard):
    out = [f"int32_t l_ = {tok} + chunk * g;"]
    out += [f"float pc{m} = moac_p[{pb(m)}];" for m in range(4)]
    for s in range(4):
        out.append(f"uint64_t vw{s} = moac_word(V_, {vw} + {8 * s} + cp);")
        for e in range(4):
            out.append(f"float vv{s}_{e} = moac_bf16_to_f32((uint16_t)(vw{s} >> {16 * e}));")
    for s in range(4):
        for e in range(4):
            out += [f"{acc(m, s, e)} = {acc(m, s, e)} + pc{m} * vv{s}_{e};" for m in range(4)]
    body = ["{"] + ["    " + x for x in out] + ["}"]
    return [f"if ({tok} < cn) " + body[0]] + body[1:] if guard else body

L += ["    #pragma acc loop seq", "    for (int32_t j = 0; j < cn / 8; ++j) {  /* tokens 8·j + u and 8·j + 4 + u */"]
for t in ("8 * j + u", "8 * j + 4 + u"):
    L += ["        " + x for x in token(t, False)]
L += ["    }", "    #pragma acc loop seq", "    for (int32_t j = 2 * (cn / 8); j < cn / 4 + (cn % 4 != 0); ++j) {  /* the last tokens, 4 a step */"]
L += ["        " + x for x in token("4 * j + u", True)]
L += ["    }"]
for m in range(4):
    for s in range(4):
        for e in range(4):
            L.append(f"    moac_pp[{ppb(m)} + u * 128 + 4 * (8 * {s} + cp) + {e}] = {acc(m, s, e)};")
L += ["}",
      head.strip(),
      "for (int32_t v = 0; v < 32; ++v) {  /* probe: outputs 4·v + k: the 4 token slots' partials added */"]
for m in range(4):
    for k2 in range(4):
        terms = " + ".join(f"moac_pp[{ppb(m)} + {128 * uu} + 4 * v + {k2}]" for uu in range(4))
        L.append(f"    moac_o_part[{oidx[m]} + {k2}] = {terms};")
L.append("}")
new = "".join(ind + x + "\n" for x in L)
open(dst, "w").write(text[:ls] + new + text[end:])
print("rewrote", text[ls:end].count("\n"), "lines into", len(L))
