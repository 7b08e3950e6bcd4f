"""A bench/cpu_ab.py variant (probe only, not the product path): the openmp kernels'
weighted-sum updates o = o + p0·w0 + p1·w1 + … printed as a chain of explicit FMAs
(`_mm512_fmadd_ps`) instead of the sum GCC reassociates under -fassociative-math.

GCC's reassociation turns the 4-token update of main into a tree (4 multiplies, 4 FMAs,
2 adds and the add of o per 16 elements and head: 32 port operations where 16 FMAs and
the widening would do).  It edits the C printed before 1239832, which put the chain in
the lowering itself (`moac.emit.simd._fma`); on later C there is nothing left to rewrite and
the edit's assertion says so.  With MOAC_EVENODD=1 in the environment the bf16 even/odd edit
(bf16_evenodd_edit.py) is applied first."""
import importlib.util
import os
import re
from pathlib import Path

HELPER = r"""
static inline moac_f32x16 moac_v16_fma(moac_f32x16 acc, float s, moac_f32x16 w) {   /* acc + s·w, one FMA */
    __m512 a, x; __builtin_memcpy(&a, &acc, 64); __builtin_memcpy(&x, &w, 64);
    a = _mm512_fmadd_ps(_mm512_set1_ps(s), x, a); __builtin_memcpy(&acc, &a, 64); return acc;
}
"""


def edit(c: str) -> str:
    if os.environ.get("MOAC_EVENODD") == "1":
        spec = importlib.util.spec_from_file_location("eo", Path(__file__).with_name("bf16_evenodd_edit.py"))
        eo = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(eo)
        c = eo.edit(c)
    anchor = "#if defined(__clang__) || __GNUC__ >= 12"
    assert anchor in c
    c = c.replace(anchor, HELPER + anchor, 1)
    line = re.compile(r"moac_v16_st\((moac_o_part \+ \([^;]*?\)), moac_v16_ld\(\1\)((?: \+ \w+ \* \w+)+)\);")

    def chain(m):
        acc = f"moac_v16_ld({m.group(1)})"
        for s, w in re.findall(r" \+ (\w+) \* (\w+)", m.group(2)):
            acc = f"moac_v16_fma({acc}, {s}, {w})"
        return f"moac_v16_st({m.group(1)}, {acc});"
    first = c.index("#if defined(__AVX512F__)   /* explicit vectors")
    end = c.index("    #else", first)
    k, n = line.subn(chain, c[first:end])
    assert n >= 1, n
    return c[:first] + k + c[end:]
