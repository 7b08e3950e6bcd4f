"""Probe only, not the product path: the M exp passes of a generated OpenACC C file's
split-K partials kernel (one vector loop and one sum reduction per head of the gang)
jammed into one vector loop with M sums.

    python3 bench/probes/acc_exp_jam_edit.py IN.c OUT.c

Only the first (32-bit) partials kernel is rewritten."""
import re
import sys

src, dst = sys.argv[1:3]
text = open(src).read()
pat = re.compile(r"( *)float (zg\d) = 0\.0f;\n *#pragma acc loop vector reduction\(\+:zg\d\)\n *for \(int32_t c = 0; c < cn; \+\+c\) \{[^\n]*\n"
                 r"((?: *[^\n]*\n)*?)\1\}\n")
blocks = []
pos = 0
first = None
for m in pat.finditer(text):
    if first is not None and m.start() != pos:
        break
    if first is None:
        first = m.start()
    blocks.append(m)
    pos = m.end()
assert len(blocks) >= 2, len(blocks)
ind = blocks[0].group(1)
names = [b.group(2) for b in blocks]
body = []
for k, b in enumerate(blocks):
    lines = b.group(3).splitlines()
    for ln in lines:
        s = ln.strip()
        if s.startswith("int32_t l_ =") and k:
            continue
        s = re.sub(r"\be\b", f"e{k}", s)
        body.append(ind + "    " + s)
new = "".join(f"{ind}float {n} = 0.0f;\n" for n in names)
new += f"{ind}#pragma acc loop vector reduction(+:{', '.join(names)})\n"
new += f"{ind}for (int32_t c = 0; c < cn; ++c) {{  /* probe: the {len(names)} exp passes in one loop */\n"
new += "\n".join(body) + "\n" + ind + "}\n"
text = text[:first] + new + text[pos:]
open(dst, "w").write(text)
