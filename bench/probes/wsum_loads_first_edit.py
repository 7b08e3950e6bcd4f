"""bench/cpu_ab.py variant (probe, 2026-12-03): in the openmp weighted sum, every head's new
accumulator row value is computed into a local before any of them is stored, so that no
load of o_part follows a store whose address matches it in its low 12 bits (the g heads'
rows of o_part lie a multiple of 4 KB apart: 4K aliasing).  The sums are the same."""
import re

ROW = re.compile(r"^(\s*)(moac_o_part\[[^\]]+\]) = (\2 \+ .*);$")


def edit(c: str) -> str:
    out, lines, i = [], c.split("\n"), 0
    while i < len(lines):
        group = []
        while i < len(lines) and ROW.match(lines[i]):
            group.append(ROW.match(lines[i]))
            i += 1
        if len(group) > 1:
            ind = group[0].group(1)
            out += [f"{ind}float moac_new{k} = {m.group(3)};" for k, m in enumerate(group)]
            out += [f"{ind}{m.group(2)} = moac_new{k};" for k, m in enumerate(group)]
        else:
            out += [m.group(0) for m in group]
            if i < len(lines):
                out.append(lines[i])
                i += 1
            continue
    return "\n".join(out)
