"""Explicit SIMD vectors for a host target whose lanes are SIMD slots (openmp): a C IR → C IR
lowering (Target.lower).

A lane loop that reduces several float accumulators by addition (the Schedule's jammed
score reductions: U tokens × g heads, each `acc = acc + e(j)` over the head dimension j)
is auto-vectorised by GCC into one vector accumulator per scalar, but each is then summed
across its lanes on its own: about eight shuffles and adds per score, plus, under
-fassociative-math, a multiply and an add beside every fused multiply-add.  Here the loop
is printed in GCC's generic vector types instead: W = 16 floats per vector, one vector
accumulator per scalar (a fused multiply-add chain each), and after the loop one
*transposed* reduction folds the k vector accumulators together — log2 W levels, each
adding pairs of vectors after a two-source shuffle — so that lane i of the result is the
sum of accumulator i: 3·(k − 1) operations for k ≤ W accumulators in place of 8·k.

Only loops of at least MIN_ACCS accumulators whose body is a list of `acc_i = acc_i + e_i` with every e_i built from loads
contiguous in the loop variable (a vector load), loads and values invariant in it (a
scalar, broadcast), +, −, × and the bf16 widening, of an extent that is a multiple of W,
are printed so; any other loop is left as it is.  The sums are reassociated (lanes first,
then the tree), as the target's -fassociative-math already allows its reductions.
"""
from __future__ import annotations

from dataclasses import replace

from . import cir

W = 16                    # floats per vector (64 bytes: one AVX-512 register, two AVX2 ones)
MIN_ACCS = 8              # the fewest accumulators printed so: each is one chain of dependent FMAs, and
                          # fewer than about latency × FMAs per cycle (4 × 2) leave the FMA units waiting.
                          # Measured (bench/cpu_ab.py, 51 rounds, 2026-12-02): MHA bf16 (4 accumulators)
                          # 6–10 % slower than GCC's own vectorisation, which splits each sum in two
                          # chains; GQA bf16 n = 32768 (16 accumulators) 3–5 % faster
HELPER = "moac_v16"       # the optional helper (codegen.OPTIONAL_HELPERS) holding the types below

HELPER_TEXT = (
    "/* explicit SIMD vectors of 16 floats (GCC vector extensions) for the jammed lane reductions:\n"
    " * unaligned loads (f32, bf16 widened), and the levels of a transposed reduction, each adding\n"
    " * the halves of two vectors' lane blocks so that one vector holds the partial sums of both */\n"
    "typedef float moac_f32x16 __attribute__((vector_size(64), aligned(4)));\n"
    "typedef int32_t moac_i32x16 __attribute__((vector_size(64)));\n"
    "typedef uint16_t moac_u16x16 __attribute__((vector_size(32), aligned(2)));\n"
    "typedef uint32_t moac_u32x16 __attribute__((vector_size(64)));\n"
    "static inline moac_f32x16 moac_v16_zero(void) { moac_f32x16 v = {0}; return v; }\n"
    "static inline moac_f32x16 moac_v16_ld(const float *p) { moac_f32x16 v; __builtin_memcpy(&v, p, 64); return v; }\n"
    "static inline moac_f32x16 moac_v16_ld_bf16(const uint16_t *p) {\n"
    "    moac_u16x16 h; __builtin_memcpy(&h, p, 32);\n"
    "    moac_u32x16 w = __builtin_convertvector(h, moac_u32x16) << 16;\n"
    "    moac_f32x16 f; __builtin_memcpy(&f, &w, 64); return f;\n"
    "}\n"
    "#define MOAC_V16_SH(a, b, ...) __builtin_shuffle(a, b, (moac_i32x16){__VA_ARGS__})\n"
    + "".join(
        f"static inline moac_f32x16 moac_v16_tr{lv}(moac_f32x16 a, moac_f32x16 b) {{\n"
        f"    return MOAC_V16_SH(a, b, {lo}) + MOAC_V16_SH(a, b, {hi});\n}}\n"
        for lv, lo, hi in (
            (lv, ", ".join(str(i) for i in _idx), ", ".join(str(i + (8 >> (lv - 1))) for i in _idx))
            for lv in (1, 2, 3, 4)
            for _idx in [[blk * (16 >> (lv - 1)) + e for blk in range(2 << (lv - 1)) for e in range(8 >> (lv - 1))]]
        )
    )
)


def lower(kernels) -> tuple:
    """The kernels with their eligible lane reductions printed in explicit vectors, and the
    optional helpers they now call."""
    used: set = set()
    out = tuple(replace(k, code=_stmts(k.code, used)) for k in kernels)
    return out, (HELPER,) if used else ()


def _stmts(body: tuple, used: set) -> tuple:
    out: list = []
    floats = set()              # float scalars declared so far in this statement list
    for st in body:
        if isinstance(st, cir.Decl) and st.ctype == "float":
            floats.add(st.name)
        if isinstance(st, cir.For) and st.level == "vector":
            got = _vectorise(st, floats)
            if got is not None:
                used.add(HELPER)
                out += got
                continue
        out.append(_children(st, used))
    return tuple(out)


def _children(st, used: set):
    match st:
        case cir.For(body=b):
            return replace(st, body=_stmts(b, used))
        case cir.If(then=t, other=o):
            return replace(st, then=_stmts(t, used), other=_stmts(o, used))
        case cir.Block(body=b):
            return replace(st, body=_stmts(b, used))
        case cir.LastGang(body=b):
            return replace(st, body=_stmts(b, used))
    return st


def _vectorise(lp: cir.For, floats: set):
    if len(lp.reduce) != 1 or lp.reduce[0][0] != "add" or lp.step is not None or lp.start != cir.Int(0):
        return None
    names = tuple(lp.reduce[0][1])
    if len(names) < MIN_ACCS or not set(names) <= floats or len(set(names)) != len(names):
        return None
    if not isinstance(lp.extent, cir.Int) or lp.extent.value < W or lp.extent.value % W:
        return None
    j = lp.var
    terms: dict = {}
    for st in lp.body:
        if not (isinstance(st, cir.Assign) and st.name in names and st.name not in terms
                and isinstance(st.value, cir.Bin) and st.value.op == "+" and st.value.a == cir.Var(st.name)):
            return None
        v = _vec(st.value.b, j)
        if v is None:
            return None
        terms[st.name] = v[1]
    if set(terms) != set(names):
        return None
    vacc = {n: f"moac_v_{n}" for n in names}
    decls = [cir.Decl("moac_f32x16", vacc[n], cir.Call("moac_v16_zero", ())) for n in names]
    body = tuple(cir.Assign(vacc[n], cir.Bin("+", cir.Var(vacc[n]), terms[n])) for n in names)
    loop = replace(lp, body=body, step=cir.Int(W), pragma=None, reduce=(),
                   comment=(lp.comment + ": " if lp.comment else "") + f"{W}-float vectors, one per accumulator")
    folds = []
    for at in range(0, len(names), W):
        group = names[at:at + W]
        r = f"moac_v_sum{at // W}" if len(names) > W else "moac_v_sum"
        folds.append(cir.Decl("moac_f32x16", r, _tree([cir.Var(vacc[n]) for n in group])))
        folds += [cir.Assign(n, cir.Bin("+", cir.Var(n), cir.Load(r, cir.Int(i)))) for i, n in enumerate(group)]
    fold = cir.Block(tuple(folds), comment=f"transposed reduction: lane i of the sum is accumulator i "
                                            f"({len(names)} accumulators)")
    return decls + [loop, fold]


def _tree(vs: list):
    """The transposed reduction of up to W vectors: lane i holds the lane sum of vs[i]."""
    for level in (1, 2, 3, 4):
        if len(vs) % 2:
            vs = vs + [vs[-1]]              # an odd one out pairs with itself (its lanes come last)
        vs = [cir.Call(f"moac_v16_tr{level}", (vs[i], vs[i + 1])) for i in range(0, len(vs), 2)]
    return vs[0]


def _vec(e, j: str):
    """("s", e) where e does not depend on j (a scalar, broadcast by the vector operations),
    ("v", the vector of e at j … j + W − 1), or None where e cannot be printed so."""
    if not _uses(e, j):
        return ("s", e)
    match e:
        case cir.Load(array=a, index=i) if _coef(i, j) == 1:
            return ("v", cir.Call("moac_v16_ld", (cir.Bin("+", cir.Var(a), i),)))
        case cir.Call(fn="moac_bf16_to_f32", args=(cir.Load(array=a, index=i),)) if _coef(i, j) == 1:
            return ("v", cir.Call("moac_v16_ld_bf16", (cir.Bin("+", cir.Var(a), i),)))
        case cir.Bin(op=op, a=a, b=b) if op in ("+", "-", "*"):
            va, vb = _vec(a, j), _vec(b, j)
            if va is None or vb is None:
                return None
            return ("v", cir.Bin(op, va[1], vb[1]))
        case cir.Neg(a=a):
            va = _vec(a, j)
            return None if va is None else ("v", cir.Neg(va[1]))
    return None


def _uses(e, j: str) -> bool:
    match e:
        case cir.Var(name=n):
            return n == j
        case cir.Int() | cir.Num():
            return False
        case cir.Bin(a=a, b=b):
            return _uses(a, j) or _uses(b, j)
        case cir.Neg(a=a) | cir.Cast(a=a):
            return _uses(a, j)
        case cir.Call(args=args):
            return any(_uses(x, j) for x in args)
        case cir.Load(index=i):
            return _uses(i, j)
        case cir.Cond(cond=c, a=a, b=b):
            return _uses(c, j) or _uses(a, j) or _uses(b, j)
    return True


def _coef(e, j: str):
    """The integer coefficient of j in the index expression e, or None where e is not
    affine in j (j inside a call, a product of two j terms, …)."""
    if not _uses(e, j):
        return 0
    match e:
        case cir.Var(name=n) if n == j:
            return 1
        case cir.Bin(op="+", a=a, b=b):
            ca, cb = _coef(a, j), _coef(b, j)
            return None if ca is None or cb is None else ca + cb
        case cir.Bin(op="-", a=a, b=b):
            ca, cb = _coef(a, j), _coef(b, j)
            return None if ca is None or cb is None else ca - cb
        case cir.Bin(op="*", a=cir.Int(value=c), b=b):
            cb = _coef(b, j)
            return None if cb is None else c * cb
        case cir.Bin(op="*", a=a, b=cir.Int(value=c)):
            ca = _coef(a, j)
            return None if ca is None else c * ca
    return None
