"""C unit -> C source (stage 5b: `to_c`).

The file skeleton is a Jinja2 template (templates/kernel.c.j2); loop nests are printed
from the frozen C IR by moac.emit.cir; the target's data (allocator, data region, helper
prefix) fills the skeleton's slots.  One `Signature` drives the C prototype, the cffi
declaration and the argument checks of the loaded kernel.  No sympy here.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path

import jinja2

from ..dtypes import CTYPE
from ..schedule.choices import CHUNK, CHUNKS_PER_FRAME, MIN_CHUNK, floor_gangs
from . import simd
from . import cir
from . import tiles
from .freeze import INT_HELPERS, CUnit, mangle

HELPERS = (
    "static inline int64_t moac_floordiv(int64_t a, int64_t b) { int64_t q = a / b; "
    "return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q; }",
    "static inline int64_t moac_ceildiv(int64_t a, int64_t b) { return -moac_floordiv(-a, b); }",
    "static inline int64_t moac_mod(int64_t a, int64_t b) { int64_t r = a % b; "
    "return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r; }",
    "static inline int64_t moac_imin(int64_t a, int64_t b) { return a < b ? a : b; }",
    "static inline int64_t moac_imax(int64_t a, int64_t b) { return a > b ? a : b; }",
    "/* exp through exp2 of a prescaled argument: one fast hardware instruction on GPUs */\n"
    "static inline float moac_expf(float x) { return exp2f(x * 1.44269504088896340736f); }",
    "static inline double moac_exp(double x) { return exp(x); }",
    "/* bf16 and f16 storage, widened to f32 on load */\n"
    "static inline float moac_bf16_to_f32(uint16_t h) { union { uint32_t u; float f; } v; "
    "v.u = (uint32_t)h << 16; return v.f; }",
    "static inline float moac_f16_to_f32(uint16_t h) {\n"
    "    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu, u;\n"
    "    if (e == 0 && m == 0) u = sign;                                  /* ±0 */\n"
    "    else if (e == 0) {                                               /* subnormal: normalise */\n"
    "        e = 113; while (!(m & 0x400u)) { m <<= 1; e--; }\n"
    "        u = sign | (e << 23) | ((m & 0x3ffu) << 13);\n"
    "    } else if (e == 31) u = sign | 0x7f800000u | (m << 13);          /* inf, nan */\n"
    "    else u = sign | ((e + 112) << 23) | (m << 13);\n"
    "    union { uint32_t u; float f; } v; v.u = u; return v.f;\n"
    "}",
)

# for targets whose lanes are SIMD slots: libmvec's vector exp2f (glibc 2.35 on, x86-64),
# which glibc's headers declare only under -ffast-math; a loop of SIMD lanes over exp then
# calls it, with no other fast-math assumption (GCC's attribute: clang has its own -fveclib)
SIMD_MATH = (
    "/* SIMD lanes call libmvec's vector exp2f (declared by glibc only under -ffast-math) */\n"
    "#if defined(__x86_64__) && defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 35)) && !defined(__clang__)\n"
    "float exp2f(float) __attribute__((simd(\"notinbranch\")));\n"
    "#endif\n"
    "/* a lane loop clang cannot vectorise runs as written: not an error under -Werror */\n"
    "#if defined(__clang__)\n"
    "#pragma clang diagnostic ignored \"-Wpass-failed\"\n"
    "#endif")


def _chunk_choice(unit, target) -> str:
    """The unit's moac_chunk: the target's gang count and chunk bounds for its kernels (tensor-core
    tiles, their chunks even or not, their steps' bytes)."""
    tiled = "moac_tile" in unit.helpers
    kernels = unit.kernels + unit.kernels32
    step, warps = (tiles.tile_step_bytes(kernels), tiles.tile_warps(kernels)) if tiled else (0, 1)
    return chunk_helper(*target.chunk_choice(tiled, "moac_tile_even" in unit.helpers, step, warps))


def chunk_helper(gangs: int, lo: int = MIN_CHUNK, hi: int = CHUNK) -> str:
    """moac_chunk, moac.schedule.choices.chunk_size in C, for a target aiming at `gangs` gangs
    with chunks of `lo` … `hi` tokens."""
    per, fill = CHUNKS_PER_FRAME, floor_gangs(gangs)
    return (f"/* tokens per gang for the split-K plan: the smallest power of two in {lo} ... {hi} that\n"
            f" * keeps at most {per} chunks per frame (the combine folds them with lanes over the chunks),\n"
            f" * about {gangs} gangs in all (this target's choice) and at least `fewest` tokens (the plan's:\n"
            " * enough that the chunk's K/V rows outweigh its partial state 16 times, but never so many\n"
            f" * that fewer than {fill} gangs are left) */\n"
            "static inline int64_t moac_chunk(int64_t tokens, int64_t frames, int64_t fewest) {\n"
            f"    int64_t by_chunks = (tokens + {per - 1}) / {per}, by_gangs = (tokens * frames + {gangs - 1}) / {gangs};\n"
            f"    int64_t want = by_chunks > by_gangs ? by_chunks : by_gangs, c = {lo};\n"
            f"    int64_t fill = tokens * frames / {fill};   /* the floor leaves {fill} gangs */\n"
            "    if (fewest > fill) fewest = fill;\n"
            "    if (want < fewest) want = fewest;\n"
            f"    while (c < want && c < {hi}) c *= 2;\n"
            "    return c;\n"
            "}")


# C's fmax and fmin as selects, for targets whose compiler calls libm for them
# (Target.c_calls): the other operand where one is NaN, as C's rule; the sign of a zero
# result unspecified, as C's
_MINMAX = {f"moac_{op}{sfx}": f"static inline {ty} moac_{op}{sfx}({ty} a, {ty} b) {{ return a {cmp} b ? a : (b != b ? a : b); }}"
           for op, cmp in (("fmax", ">"), ("fmin", "<")) for sfx, ty in (("f", "float"), ("", "double"))}
_MINMAX["moac_fmaxf"] = "/* C's fmax and fmin as selects (NaN: the other operand), inlined where libm's are calls */\n" + _MINMAX["moac_fmaxf"]

# helpers printed only where the kernels call them
OPTIONAL_HELPERS = {
    **_MINMAX,
    simd.HELPER: simd.HELPER_TEXT,
    "moac_word": "/* one 8-byte word of an array (a packed load); the empty asm keeps the compiler from\n"
    " * splitting it into narrower loads of the parts the caller unpacks */\n"
    "static inline uint64_t moac_word(const void *p, int64_t i) { uint64_t w = ((const uint64_t *)p)[i]; "
    "__asm__(\"\" : \"+r\"(w)); return w; }",
    "moac_sword": "/* one 8-byte word of a scratch array the same kernel writes (a packed load, never through\n"
    " * a read-only path); the empty asm as for moac_word */\n"
    "static inline uint64_t moac_sword(const void *p, int64_t i) { uint64_t w = ((const uint64_t *)p)[i]; "
    "__asm__(\"\" : \"+r\"(w)); return w; }",
    "moac_word4": "/* one 4-byte word of an array (a packed load of four one-byte elements) */\n"
    "static inline uint32_t moac_word4(const void *p, int64_t i) { uint32_t w = ((const uint32_t *)p)[i]; "
    "__asm__(\"\" : \"+r\"(w)); return w; }",
    "moac_bits_to_f32": "/* an f32 from its bits (packed loads) */\n"
    "static inline float moac_bits_to_f32(uint32_t b) { union { uint32_t u; float f; } v; v.u = b; return v.f; }",
    # 8-bit storage, widened exactly and without branches (selects only, no table: nothing a
    # device region must map, SIMD lanes need no gather; no f32 subnormal is formed, so
    # flush-to-zero builds give the same values; no int -> float conversion, which NVIDIA GPUs
    # issue at a quarter or less of the rate of a float add)
    "moac_f8e4m3_to_f32": "/* OCP FP8 E4M3FN storage (bias 7, no infinities, S.1111.111 NaN), widened to f32 on load:\n"
    " * a normal pattern's exponent and mantissa moved into place and rebiased (+120); a subnormal\n"
    " * m·2^-9 as 2^-6·(1 + m/8) − 2^-6 (exact); the NaN patterns the quiet NaN; then the sign */\n"
    "static inline float moac_f8e4m3_to_f32(uint8_t b) {\n"
    "    uint32_t em = b & 0x7fu, u = (em << 20) + (120u << 23);\n"
    "    union { uint32_t u; float f; } v, s; s.u = u + (1u << 23);\n"
    "    v.u = u; v.f = em < 0x08u ? s.f - 0x1p-6f : v.f;\n"
    "    v.u = em == 0x7fu ? 0x7fc00000u : v.u;\n"
    "    v.u |= (uint32_t)(b & 0x80u) << 24; return v.f;\n"
    "}",
    "moac_f8e5m2_to_f32": "/* OCP FP8 E5M2 storage (bias 15, ±inf, NaNs), widened to f32 on load: a normal pattern\n"
    " * rebiased (+112); a subnormal m·2^-16 as 2^-14·(1 + m/4) − 2^-14 (exact); inf, and the NaNs as\n"
    " * the quiet NaN; then the sign */\n"
    "static inline float moac_f8e5m2_to_f32(uint8_t b) {\n"
    "    uint32_t em = b & 0x7fu, u = (em << 21) + (112u << 23);\n"
    "    union { uint32_t u; float f; } v, s; s.u = u + (1u << 23);\n"
    "    v.u = u; v.f = em < 0x04u ? s.f - 0x1p-14f : v.f;\n"
    "    v.u = em >= 0x7cu ? (em == 0x7cu ? 0x7f800000u : 0x7fc00000u) : v.u;\n"
    "    v.u |= (uint32_t)(b & 0x80u) << 24; return v.f;\n"
    "}",
    "moac_f8e4m3x2_to_f32": "/* element k (0: the low byte) of two packed E4M3 patterns, widened (a GPU converts the pair at once) */\n"
    "static inline float moac_f8e4m3x2_to_f32(uint16_t two, int k) { return moac_f8e4m3_to_f32((uint8_t)(two >> (8 * k))); }",
    "moac_f8e5m2x2_to_f32": "/* element k (0: the low byte) of two packed E5M2 patterns, widened */\n"
    "static inline float moac_f8e5m2x2_to_f32(uint16_t two, int k) { return moac_f8e5m2_to_f32((uint8_t)(two >> (8 * k))); }",
    "moac_ragged_pick_i32": "/* a ragged batch's chunks enumerated densely: gang w is chunk g of sequence b, where "
        "w = Σ_{b' < b} ⌈lens[b'] ÷ chunk⌉ + g;\n"
        " * returns g·(B + 1) + b (b = B past the last chunk)\n"
        " * (in 32 bits: the lengths are checked to lie in 0 … N < 2^31 and the chunk is at most 1024) */\n"
        "static inline int64_t moac_ragged_pick_i32(int64_t w, const int32_t *lens, int64_t B, int64_t chunk) { "
        "const uint32_t c32 = (uint32_t)chunk; int64_t b = 0; "
        "for (; b < B; ++b) { int64_t c = (int64_t)(((uint32_t)lens[b] + c32 - 1u) / c32); "
        "if (w < c) break; w -= c; } return w * (B + 1) + b; }",
    "moac_ragged_pick_i64": "/* a ragged batch's chunks enumerated densely: gang w is chunk g of sequence b, where "
        "w = Σ_{b' < b} ⌈lens[b'] ÷ chunk⌉ + g;\n"
        " * returns g·(B + 1) + b (b = B past the last chunk) */\n"
        "static inline int64_t moac_ragged_pick_i64(int64_t w, const int64_t *lens, int64_t B, int64_t chunk) { "
        "int64_t b = 0; for (; b < B; ++b) { int64_t c = ((int64_t)lens[b] + chunk - 1) / chunk; "
        "if (w < c) break; w -= c; } return w * (B + 1) + b; }",
    "moac_i8_to_f32": "/* int8 storage, its value as is */\n"
    "static inline float moac_i8_to_f32(int8_t b) { return (float)b; }",
    # 16-bit outputs (`output out : bf16`): rounded to nearest even when stored
    "moac_f32_to_bf16": "/* an f32 rounded to bf16 (to nearest even: add 0x7fff plus the lowest kept bit, then\n"
    " * truncate; overflow becomes inf), every NaN the one pattern 0x7fc0 */\n"
    "static inline uint16_t moac_f32_to_bf16(float f) {\n"
    "    union { float f; uint32_t u; } v; v.f = f;\n"
    "    uint32_t r = (v.u + 0x7fffu + ((v.u >> 16) & 1u)) >> 16;\n"
    "    return (uint16_t)((v.u & 0x7fffffffu) > 0x7f800000u ? 0x7fc0u : r);\n"
    "}",
    "moac_f32_to_f16": "/* an f32 rounded to IEEE f16 (to nearest even, subnormals kept; from 65520 on inf), a NaN\n"
    " * the quiet NaN of its sign; integer arithmetic only (the same under flush-to-zero) */\n"
    "static inline uint16_t moac_f32_to_f16(float f) {\n"
    "    union { float f; uint32_t u; } v; v.f = f;\n"
    "    uint32_t sign = (v.u >> 16) & 0x8000u, a = v.u & 0x7fffffffu, e = a >> 23;\n"
    "    if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);\n"
    "    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);          /* rounds to 65536 or more, or inf */\n"
    "    if (e >= 113u) {                                                   /* normal: at least 2^-14 */\n"
    "        uint32_t r = a + 0x0fffu + ((a >> 13) & 1u);\n"
    "        return (uint16_t)(sign | ((r - (112u << 23)) >> 13));\n"
    "    }\n"
    "    if (e < 102u) return (uint16_t)sign;                               /* below 2^-25: ±0 */\n"
    "    uint32_t m = (a & 0x7fffffu) | 0x800000u, sh = 126u - e;          /* a subnormal f16, k·2^-24 */\n"
    "    uint32_t k = m >> sh, rest = m & ((1u << sh) - 1u), half = 1u << (sh - 1u);\n"
    "    k += rest > half || (rest == half && (k & 1u));\n"
    "    return (uint16_t)(sign | k);\n"
    "}",
    "moac_tile": "",   # device code only: the CUDA printer adds moac.emit.tiles.HELPERS
    "moac_tile_even": "",   # a marker: a tile's chunks all hold the same tokens (Target.gang_target)
    "moac_tile_out": "",    # device code only: moac.emit.tiles.TILE_OUT (a frame of one gang's outputs)
}


@dataclass(frozen=True, slots=True)
class Param:
    name: str        # the source name
    cname: str       # the C identifier
    kind: str        # input | output | size
    ctype: str
    shape: tuple = ()
    dtype: str = ""  # an array's storage dtype (moac.dtypes: f32, bf16, f8e4m3, ...)


@dataclass(frozen=True, slots=True)
class Signature:
    fname: str
    params: tuple
    ctype: str
    workspace: bool = False      # a host entry `fname_with_workspace(…, void *workspace)` exists too

    def c_params(self) -> str:
        out = []
        for p in self.params:
            if p.kind == "size":
                out.append(f"int64_t {p.cname}")
            elif p.kind == "input":
                out.append(f"const {p.ctype} *restrict {p.cname}")
            else:
                out.append(f"{p.ctype} *restrict {p.cname}")
        return ", ".join(out)

    def cdef(self) -> str:
        params = re.sub(r"\brestrict\b ?", "", self.c_params())
        out = f"int {self.fname}({params});"
        if self.workspace:
            sizes = ", ".join(f"int64_t {p.cname}" for p in self.params if p.kind == "size") or "void"
            out += (f"\nint {self.fname}_with_workspace({params}, void *workspace);"
                    f"\nsize_t {self.fname}_workspace_bytes({sizes});")
        return out


def function_name(filename: str) -> str:
    stem = Path(filename).stem if filename and not filename.startswith("<") else "program"
    stem = re.sub(r"[^A-Za-z0-9_]", "_", stem)
    return f"moac_{stem}"


def signature(s) -> Signature:
    """The C entry's parameters, from a Schedule: inputs (updated ones in place), outputs,
    and the sizes passed at run time."""
    prog = s.dnf.program
    bufs = {b.name: b for b in s.buffers}
    ctype = CTYPE[s.dtype]
    params = []
    updated = {name for name, _ in prog.updates}
    for i in prog.inputs:
        kind = "inout" if i.name in updated else "input"
        params.append(Param(i.name, mangle(i.name), kind, CTYPE[i.dtype], bufs[i.name].shape, i.dtype))
    for name, _ in prog.outputs:
        dtype = bufs[name].dtype                    # the arithmetic type, or the declared storage
        params.append(Param(name, mangle(name), "output", CTYPE[dtype], bufs[name].shape, dtype))
    for p in s.params:
        params.append(Param(p, mangle(p), "size", "int64_t"))
    from ..targets import get_target
    return Signature(function_name(prog.source.filename), tuple(params), ctype,
                     workspace=not get_target(s.target).device_entry)


def _template_text(name: str) -> str:
    try:
        return resources.files("moac.templates").joinpath(name).read_text(encoding="utf-8")
    except (ModuleNotFoundError, FileNotFoundError, OSError):
        return (Path(__file__).resolve().parents[2] / "templates" / name).read_text(encoding="utf-8")


@cache
def template(name: str) -> jinja2.Template:
    env = jinja2.Environment(loader=jinja2.FunctionLoader(_template_text), undefined=jinja2.StrictUndefined,
                             trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True, autoescape=False)
    return env.get_template(name)


def _helpers32() -> tuple:
    """32-bit versions of the integer helpers (freeze.INT_HELPERS), for kernels built with
    32-bit indices; the 64-bit ones stay for the host-side size arithmetic."""
    out = []
    for h in HELPERS:
        name = re.match(r"static inline int64_t (\w+)\(", h)
        if name and name.group(1) in INT_HELPERS:
            h = re.sub(r"(?<![u\w])int64_t", "int32_t", h)
            out.append(re.sub(r"\b(" + "|".join(INT_HELPERS) + r")\(", r"\g<1>32(", h))
    return tuple(out)


def kernels_text(unit: CUnit, indent: int, kernels: tuple | None = None) -> str:
    """The unit's kernels (or `kernels`) as C statements at `indent`, each under its comment."""
    lines: list[str] = []
    for k in unit.kernels if kernels is None else kernels:
        lines.append(f"{'    ' * indent}/* kernel {k.name}: {k.comment} */")
        for ln in cir.stmts(k.code, unit.ctype, indent=indent):
            lines.append(ln.rstrip())
    return "\n".join(lines)


def context(unit: CUnit, sig: Signature, target, helper_prefix: str | None = None) -> dict:
    """The slots of a kernel file's template shared by the C and the CUDA printers (each
    prints the kernels, `body` and `body32`, its own way)."""
    from ..version import __version__
    dev_arrays = [dict(cname=p.cname, dname=f"{p.cname}d", bytes=f"sizeof({p.ctype}) * (size_t)({unit.sizes[p.name]})",
                       to=p.kind in ("input", "inout"), back=p.kind in ("inout", "output"))
                  for p in sig.params if p.kind != "size"]
    dev_args = ", ".join(f"{p.cname}d" if p.kind != "size" else p.cname for p in sig.params)
    prologue = "\n".join(cir.stmts(unit.prologue, unit.ctype, indent=1))
    return dict(
        version=__version__, filename=unit.filename, target=unit.target, plan=unit.plan,
        summary=unit.summary, device_entry=target.device_entry, helpers=HELPERS + ((SIMD_MATH,) if target.lanes == "simd" else ()) + (_chunk_choice(unit, target),) + (_helpers32() if unit.index_bits in (0, 32) else ())
        + tuple(OPTIONAL_HELPERS[h] for h in unit.helpers), helper_prefix=helper_prefix or target.helper_prefix,
        model_macro=target.model_macro, header=target.header, device_malloc=target.device_malloc,
        device_free=target.device_free,
        fname=sig.fname, params=sig.c_params(), ctype=unit.ctype,
        size_params=", ".join(f"int64_t {p.cname}" for p in sig.params if p.kind == "size") or "void",
        size_args=", ".join(p.cname for p in sig.params if p.kind == "size"),
        args=", ".join(p.cname for p in sig.params), scratch=[dict(name=x.cname, count=x.count) for x in unit.scratch],
        dev_arrays=dev_arrays, dev_args=dev_args, on_device=target.on_device,
        copy_to_device=target.copy_to_device, copy_from_device=target.copy_from_device,
        prologue=prologue, prologue_vars=[d.name for d in unit.prologue if isinstance(d, cir.Decl)],
        aligned=unit.aligned, aligned16=unit.aligned16, dual=unit.index_bits == 0,
        conditions=[dict(test=t, message=m) for t, m in unit.conditions],
        returns=lambda first: _returns(first, unit),
        narrow=([p.cname for p in sig.params if p.kind == "size"] + [d.name for d in unit.prologue
                                                                      if isinstance(d, cir.Decl)])
        if unit.index_bits in (0, 32) else [],
        counts=list(unit.sizes.values()), linkage="",
    )


def _returns(first: str, unit: CUnit) -> str:
    """An entry's comment line(s) " * Returns 0 on success, `first`, …" with the return codes
    of the checks (entry.j2) this unit has: 2 alignment, 3 32-bit sizes, 6 the conditions."""
    import textwrap
    text = f"Returns 0 on success, {first}{_refusals(unit)}."
    return "\n".join(textwrap.wrap(text, 92, initial_indent=" * ", subsequent_indent=" * "))


def _refusals(unit: CUnit) -> str:
    out = ""
    if unit.aligned or unit.aligned16:
        out += ", 2 if an input is not aligned for its packed loads"
    if unit.index_bits == 32:
        out += ", 3 if the sizes are too large for 32-bit indices"
    if unit.conditions:
        out += ", 6 if the sizes break a condition of the program (the entry's first lines)"
    return out


def to_c(unit: CUnit, sig: Signature, target) -> str:
    dual = unit.index_bits == 0          # the 32-bit kernels nest one block deeper (kernels.j2)
    ctx = dict(context(unit, sig, target), body=kernels_text(unit, 2 if dual else 1),
               body32=kernels_text(unit, 3, unit.kernels32) if dual else "")
    rest = template("kernel.c.j2").render(**dict(ctx, helpers=()))
    return template("kernel.c.j2").render(**dict(ctx, helpers=used_helpers(ctx["helpers"], rest)))


_DEFINES = re.compile(r"^static\b[^(=;{]*?\b(\w+)\(", re.M)


def used_helpers(helpers: tuple, rest: str) -> tuple:
    """The helpers (in their order) that the rest of the file calls, or that a helper it
    calls does: clang's -Wall warns of an unused static inline function in a .c file, as
    GCC's does not.  A helper that defines no function (a declaration) is kept."""
    defs = [set(_DEFINES.findall(h)) for h in helpers]
    keep = [not d for d in defs]
    text = rest
    changed = True
    while changed:
        changed = False
        for k, d in enumerate(defs):
            if not keep[k] and any(re.search(rf"\b{n}\b", text) for n in d):
                keep[k], changed = True, True
                text += "\n" + helpers[k]
    return tuple(h for h, k in zip(helpers, keep) if k)
