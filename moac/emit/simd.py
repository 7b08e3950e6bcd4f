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

Lane loops without a reduction (the weighted sum's `o[d] = o[d] + p·w(d) + …`) are printed in
the same vectors where every statement is a float local or a store contiguous in the loop
variable; a prefetch just before a vectorised loop is spread over its steps; and the
scores' tail after a transposed reduction is printed on the vector (moac.emit.simd_tail).

Only loops of at least MIN_ACCS accumulators whose body is a list of `acc_i = acc_i + e_i` with every e_i built from loads
contiguous in the loop variable (a vector load), loads and values invariant in it (a
scalar, broadcast), +, −, × and the bf16 widening, of an extent that is a multiple of W,
are printed so; any other loop is left as it is.  The sums are reassociated (lanes first,
then the tree), as the target's -fassociative-math already allows its reductions.
"""
from __future__ import annotations

from dataclasses import replace

from . import cir
from .simd_tail import hoisted_max, lane_stores, scaled

W = 16                    # floats per vector (64 bytes: one AVX-512 register, two AVX2 ones)
MIN_ACCS = 8              # the fewest accumulators printed so: each is one chain of dependent FMAs, and
                          # fewer than about latency × FMAs per cycle (4 × 2) leave the FMA units waiting.
                          # Measured (bench/cpu_ab.py, 51 rounds, 2026-12-02): MHA bf16 (4 accumulators)
                          # 6–10 % slower than GCC's own vectorisation, which splits each sum in two
                          # chains; GQA bf16 n = 32768 (16 accumulators) 3–5 % faster
HELPER = "moac_v16"       # the optional helper (codegen.OPTIONAL_HELPERS) holding the types below
GUARD = "defined(__AVX512F__)"   # where a vector of W floats is one register.  Elsewhere GCC keeps each
                          # such vector in memory: without AVX-512 (x86-64 and x86-64-v3 builds, any
                          # other CPU) GQA ran 1.7–2.6× slower than its scalar loops under GCC's own
                          # vectorisation (docs/cpu.md), so a lowered kernel is printed beside its
                          # original under #if GUARD … #else … #endif
OPEN = f"#if {GUARD}   /* explicit vectors ({HELPER}) */"           # the lines around a lowered kernel
ELSE = "#else           /* the loops as scheduled, for the compiler's own vectorisation */"

HELPER_TEXT = (
    "/* explicit SIMD vectors of 16 floats (GCC vector extensions) for the jammed lane reductions:\n"
    " * unaligned loads (f32, bf16 widened), and the levels of a transposed reduction, each adding\n"
    " * the halves of two vectors' lane blocks so that one vector holds the partial sums of both;\n"
    " * only where a vector is one register (GUARD: the kernels keep their scalar loops elsewhere) */\n"
    f"#if {GUARD}\n"
    "#include <immintrin.h>\n"
    "typedef float moac_f32x16 __attribute__((vector_size(64), aligned(4)));\n"
    "typedef int32_t moac_i32x16 __attribute__((vector_size(64)));\n"
    "static inline moac_f32x16 moac_v16_zero(void) { moac_f32x16 v = {0}; return v; }\n"
    "static inline moac_f32x16 moac_v16_ld(const float *p) { moac_f32x16 v; __builtin_memcpy(&v, p, 64); return v; }\n"
    "static inline void moac_v16_st(float *p, moac_f32x16 v) { __builtin_memcpy(p, &v, 64); }\n"
    "static inline moac_f32x16 moac_v16_dup(float x) { moac_f32x16 v = {0}; return v + x; }\n"
    "static inline moac_f32x16 moac_v16_max(moac_f32x16 a, moac_f32x16 b) {   /* moac_fmaxf lane by lane */\n"
    "    moac_i32x16 take = (a > b) | (b != b), x, y;\n"
    "    __builtin_memcpy(&x, &a, 64); __builtin_memcpy(&y, &b, 64); x = (x & take) | (y & ~take);\n"
    "    __builtin_memcpy(&a, &x, 64); return a;\n"
    "}\n"
    "static inline moac_f32x16 moac_v16_fma(moac_f32x16 acc, float s, moac_f32x16 w) {   /* acc + s·w: one FMA, not reassociated */\n"
    "    __m512 a, x; __builtin_memcpy(&a, &acc, 64); __builtin_memcpy(&x, &w, 64);\n"
    "    a = _mm512_fmadd_ps(_mm512_set1_ps(s), x, a); __builtin_memcpy(&acc, &a, 64); return acc;\n"
    "}\n"
    "static inline moac_f32x16 moac_v16_ld_bf16(const uint16_t *p) {   /* zero-extend and shift: 2 instructions */\n"
    "    __m512i w = _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p)), 16);\n"
    "    moac_f32x16 f; __builtin_memcpy(&f, &w, 64); return f;\n"
    "}\n"
    "#if defined(__clang__) || __GNUC__ >= 12   /* two-source shuffles: clang's builtin, GCC's from 12 on */\n"
    "#define MOAC_V16_SH(a, b, ...) __builtin_shufflevector(a, b, __VA_ARGS__)\n"
    "#else\n"
    "#define MOAC_V16_SH(a, b, ...) __builtin_shuffle(a, b, (moac_i32x16){__VA_ARGS__})\n"
    "#endif\n"
    + "".join(
        f"static inline moac_f32x16 moac_v16_tr{lv}(moac_f32x16 a, moac_f32x16 b) {{\n"
        f"    return MOAC_V16_SH(a, b, {lo}) + MOAC_V16_SH(a, b, {hi});\n}}\n"
        for lv, lo, hi in (
            (lv, ", ".join(str(i) for i in _idx), ", ".join(str(i + (8 >> (lv - 1))) for i in _idx))
            for lv in (1, 2, 3, 4)
            for _idx in [[blk * (16 >> (lv - 1)) + e for blk in range(2 << (lv - 1)) for e in range(8 >> (lv - 1))]]
        )
    )
    + "#endif"
)


def lower(kernels, arrays: frozenset = frozenset()) -> tuple:
    """The kernels with their eligible lane loops printed in explicit vectors, and the
    optional helpers they now call.  `arrays`: the C names of the arrays of floats (the
    only ones whose plain loads and stores become vector loads and stores)."""
    used: set = set()
    out = []
    for k in kernels:
        mine: set = set()
        code = _stmts(k.code, mine, arrays)
        if mine:                                  # the vectors where they are registers, the loops elsewhere
            used |= mine
            code = (cir.Raw(OPEN), *code, cir.Raw(ELSE), *k.code, cir.Raw("#endif"))
        out.append(replace(k, code=code))
    return tuple(out), (HELPER,) if used else ()


def _stmts(body: tuple, used: set, arrays: frozenset) -> tuple:
    out: list = []
    floats = set()              # float scalars declared so far in this statement list
    later: dict = {}            # statements after a vectorised reduction rewritten to read its lanes
    for at, st in enumerate(body):
        st = later.get(at, st)
        if isinstance(st, cir.Decl) and st.ctype == "float":
            floats.add(st.name)
        if isinstance(st, cir.For) and st.level == "vector":
            got = _vectorise(st, floats, arrays) or _vectorise_map(st, arrays)
            if got is not None:
                used.add(HELPER)
                if st.reduce:
                    got = scaled(got, out, body, at + 1, later)
                out += _spread(out, got)
                continue
        st = _children(st, used, arrays)
        if isinstance(st, cir.For) and st.level not in ("vector", "gang"):
            out += hoisted_max(st, out)
        else:
            out.append(st)
    return tuple(lane_stores(out, arrays, W))


def _spread(out: list, got: list) -> list:
    """`got` (a vectorised loop with its declarations) with the prefetches that `out` issues
    just before it (only scalar declarations and assignments between) moved into the loop,
    a slice of the lines in each iteration, so that the misses are not issued in one burst:
    on the 2-core host the GQA bf16 kernel's K pass and weighted sum ran 7 % and a further
    5 % faster so (docs/benchmarks.md, 2026-12-04)."""
    at = len(out)
    while at and isinstance(out[at - 1], (cir.Decl, cir.Assign, cir.Prefetch)):
        at -= 1
    pfs = [st for st in out[at:] if isinstance(st, cir.Prefetch)]
    k = next(i for i, st in enumerate(got) if isinstance(st, cir.For))
    lp = got[k]
    steps = lp.extent.value // W
    hints = []
    for pf in pfs:
        per = pf.nbytes // steps
        if pf.nbytes % steps or per % 64 or per % W:
            continue                            # not an even slice of whole lines: left where it was
        hints += [cir.Raw(pf.hint.format(addr=f"{pf.base} + {per // W} * {lp.var}" + (f" + {64 * i}" if i else "")) + ";")
                  for i in range(per // 64)]
        out.remove(pf)
    if hints:
        got = got[:k] + [replace(lp, body=tuple(hints) + lp.body)] + got[k + 1:]
    return got


def _children(st, used: set, arrays: frozenset):
    match st:
        case cir.For(body=b):
            return replace(st, body=_stmts(b, used, arrays))
        case cir.If(then=t, other=o):
            return replace(st, then=_stmts(t, used, arrays), other=_stmts(o, used, arrays))
        case cir.Block(body=b):
            return replace(st, body=_stmts(b, used, arrays))
        case cir.LastGang(body=b):
            return replace(st, body=_stmts(b, used, arrays))
    return st


def _vectorise_map(lp: cir.For, arrays: frozenset):
    """A lane loop without reductions — float locals and stores contiguous in its variable
    (the weighted sum's `o[d] = o[d] + p·w(d) + …`, a row's zeroing) — in explicit vectors,
    W lanes a step; None where any statement is not of that form."""
    if lp.reduce or lp.step is not None or lp.start != cir.Int(0):
        return None
    if not isinstance(lp.extent, cir.Int) or lp.extent.value < W or lp.extent.value % W:
        return None
    j, vecs, body = lp.var, set(), []
    for st in lp.body:
        match st:
            case cir.Decl(ctype="float", name=n, init=init) if init is not None:
                v = _vec(init, j, arrays, vecs)
                if v is None:
                    return None
                if v[0] == "v":
                    vecs.add(n)
                    body.append(cir.Decl("moac_f32x16", n, v[1]))
                else:
                    body.append(st)
            case cir.Store(array=a, index=i, value=x) if a in arrays and _coef(i, j) == 1:
                v = _vec(x, j, arrays, vecs)
                if v is None:
                    return None
                val = v[1] if v[0] == "v" else cir.Call("moac_v16_dup", (x,))
                body.append(cir.Raw(f"moac_v16_st({cir.expr(cir.Bin('+', cir.Var(a), i))}, {cir.expr(val)});"))
            case _:
                return None
    if not any(isinstance(st, cir.Raw) for st in body):
        return None
    return [replace(lp, body=tuple(body), step=cir.Int(W), pragma=None,
                    comment=(lp.comment + ": " if lp.comment else "") + f"{W}-float vectors")]


def _vectorise(lp: cir.For, floats: set, arrays: frozenset):
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
        v = _vec(st.value.b, j, arrays)
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


def _vec(e, j: str, arrays: frozenset, vecs: set = frozenset()):
    """("s", e) where e does not depend on j (a scalar, broadcast by the vector operations),
    ("v", the vector of e at j … j + W − 1), or None where e cannot be printed so.  `vecs`:
    the vector locals already declared in the loop."""
    if not _uses(e, j, vecs):
        return ("s", e)
    match e:
        case cir.Var(name=n) if n in vecs:
            return ("v", e)
        case cir.Load(array=a, index=i) if a in arrays and _coef(i, j) == 1:
            return ("v", cir.Call("moac_v16_ld", (cir.Bin("+", cir.Var(a), i),)))
        case cir.Call(fn="moac_bf16_to_f32", args=(cir.Load(array=a, index=i),)) if _coef(i, j) == 1:
            return ("v", cir.Call("moac_v16_ld_bf16", (cir.Bin("+", cir.Var(a), i),)))
        case cir.Bin(op="+", a=a, b=cir.Bin(op="*", a=x, b=y)) if (f := _fma(a, x, y, j, arrays, vecs)) is not None:
            return ("v", f)
        case cir.Bin(op=op, a=a, b=b) if op in ("+", "-", "*"):
            va, vb = _vec(a, j, arrays, vecs), _vec(b, j, arrays, vecs)
            if va is None or vb is None:
                return None
            return ("v", cir.Bin(op, va[1], vb[1]))
        case cir.Neg(a=a):
            va = _vec(a, j, arrays, vecs)
            return None if va is None else ("v", cir.Neg(va[1]))
    return None


def _fma(a, x, y, j: str, arrays: frozenset, vecs: set):
    """`a + x·y` with a a vector and one factor a scalar as one explicit fused multiply-add
    (moac_v16_fma), None otherwise.  A chain o + p0·w0 + p1·w1 + … (the weighted sum's
    update) printed with `+` and `*` is reassociated by GCC under -fassociative-math into a
    tree of multiplies, FMAs and adds: 24 port operations for 16 FMAs of 4 tokens × 4 heads.
    Measured (bench/cpu_ab.py, 2026-12-04, bench/probes/wsum_fma_chain_edit.py): GQA bf16
    n = 1024 in cache 7–10 % faster, n = 32768 cold 5–7 %; MHA bf16 5 % (best)."""
    va, vx, vy = _vec(a, j, arrays, vecs), _vec(x, j, arrays, vecs), _vec(y, j, arrays, vecs)
    if va is None or vx is None or vy is None or va[0] != "v" or {vx[0], vy[0]} != {"s", "v"}:
        return None
    s, v = (vx[1], vy[1]) if vx[0] == "s" else (vy[1], vx[1])
    return cir.Call("moac_v16_fma", (va[1], s, v))


def _uses(e, j: str, vecs: set = frozenset()) -> bool:
    match e:
        case cir.Var(name=n):
            return n == j or n in vecs
        case cir.Int() | cir.Num():
            return False
        case cir.Bin(a=a, b=b):
            return _uses(a, j, vecs) or _uses(b, j, vecs)
        case cir.Neg(a=a) | cir.Cast(a=a):
            return _uses(a, j, vecs)
        case cir.Call(args=args):
            return any(_uses(x, j, vecs) for x in args)
        case cir.Load(index=i):
            return _uses(i, j, vecs)
        case cir.Cond(cond=c, a=a, b=b):
            return _uses(c, j, vecs) or _uses(a, j, vecs) or _uses(b, j, vecs)
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
