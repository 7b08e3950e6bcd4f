"""Probe only, not the product path: rewrite a generated OpenACC C file of the batched GQA
decode (its split-K partials keep the chunk's scores p in a DRAM scratch buffer) so that the
scores live in an array declared inside the gang loop's body, which GCC 12 makes gang-private
and places in the block's shared memory (`__gang_private_shared` in its PTX).

    python3 bench/probes/acc_gang_scores_edit.py IN.c OUT.c HEADS MAXCHUNK   # then gcc as moac builds it

The array holds HEADS × MAXCHUNK floats: only for sizes whose chunk is at most MAXCHUNK tokens
(moac's chunk is at most 1024; 64 at B = 32 n = 4096, 128 at B = 1 n = 131072 on openacc).
Score (head m, token t) of gang g at m·chunk + t − g·chunk."""
import re
import sys

src, dst, heads, maxchunk = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
text = open(src).read()
CH = r"\(chunk \* \(n_ / chunk \+ \(n_ % chunk != 0\)\)\)"
pat = re.compile(r"moac_p\[i_ \* \d+ \* " + CH + r" \+ (?:(\d+) \* a|\((\d+) \* a \+ (\d+)\)) \* " + CH + r" \+ (\w+)\]")


def local(m):
    head = int(m.group(3) or 0)
    return f"moac_pl[{head} * chunk + {m.group(4)} - g * chunk]"


text, k = pat.subn(local, text)
assert k > 0 and "moac_p[" not in text, (k, text.count("moac_p["))
lines = text.split("\n")
out, pending = [], 0
for ln in lines:
    out.append(ln)
    if "#pragma acc parallel loop gang collapse(3)" in ln and "moac_p," in ln:
        pending = 3
    elif pending and ln.strip().startswith("for ("):
        pending -= 1
        if pending == 0:
            out.append(" " * (len(ln) - len(ln.lstrip()) + 4) + f"float moac_pl[{heads} * {maxchunk}];   /* this gang's scores: gang-private, in shared memory */")
assert sum("float moac_pl[" in ln for ln in out) == 2
open(dst, "w").write("\n".join(out))
print(f"{k} accesses of p rewritten")
