"""The scores' tail after a transposed reduction, for openmp's explicit vectors
(moac.emit.simd): what follows the vector of a step's sums in the C IR — `s = acc ÷ X`
for every sum, `p[idx] = s`, `mg = moac_fmaxf(mg, s)` — printed on the vector: one
division, one lane permutation and one store per run of adjacent addresses, and the
running maxima kept lane by lane across the token loop.  On the 2-core host these took
GQA bf16's score tail from 16 scalar divisions, extractions, stores and branchy maxima per
4 tokens to a handful of vector operations (docs/cpu.md)."""
from __future__ import annotations

import re
from dataclasses import replace

from . import cir


def lane_stores(out: list, arrays: frozenset, width: int) -> list:
    """Scalar stores of a vector's lanes (`s = v[i]`, then `a[idx] = s`) whose addresses
    fall into runs of consecutive elements — the GQA scores of 4 tokens × 4 heads, a head's
    4 tokens adjacent in p — as one lane permutation and one store per run, where nothing
    else in the statement list names the array.  The runs are found by comparing the index
    expressions as polynomials over the list's integer locals (`t1 = t0 + 1` …)."""
    assigned = {st.name for st in out if isinstance(st, cir.Assign)}
    ints = {st.name: st.init for st in out if isinstance(st, cir.Decl) and st.ctype in ("int64_t", "int32_t")
            and st.init is not None and st.name not in assigned}     # locals that keep their value
    lanes = _lanes(out)
    named = [words(st) for st in out]
    groups: dict = {}                             # (vector, array) -> [(position, lane, index)]
    for at, st in enumerate(out):
        if isinstance(st, cir.Store) and st.array in arrays and isinstance(st.value, cir.Var) and st.value.name in lanes:
            v, i = lanes[st.value.name]
            groups.setdefault((v, st.array), []).append((at, i, st.index))
    drop, put = set(), {}
    for (v, arr), stores in groups.items():
        if len(stores) < 2 or len({i for _, i, _ in stores}) != len(stores):
            continue
        at_stores = {a for a, _, _ in stores}
        if any(arr in named[at] for at in range(len(out)) if at not in at_stores):
            continue
        first, last = min(at_stores), max(at_stores)
        if any(v in named[at] and not (isinstance(out[at], cir.Decl) and out[at].name in lanes)
               for at in range(first + 1, last) if at not in at_stores):
            continue                              # the vector may change between the stores: left as it is
        polys = [_poly(ix, ints) for _, _, ix in stores]
        if any(pl is None for pl in polys):
            continue
        runs = _runs(stores, polys)
        if runs is None or len(runs) == len(stores):
            continue                              # no two lanes adjacent: nothing gained
        order = [i for run in runs for i, _ in run]
        order += [i for i in range(width) if i not in order]
        perm = f"{v}_{arr}"
        code = [cir.Raw(f"moac_f32x16 {perm} = MOAC_V16_SH({v}, {v}, {', '.join(map(str, order))});")]
        k = 0
        for run in runs:
            code.append(cir.Raw(f"__builtin_memcpy(&{arr}[{cir.expr(run[0][1])}], (const float *)&{perm} + {k}, "
                                f"{4 * len(run)});"))
            k += len(run)
        drop |= at_stores
        put[first] = code
    if not drop:
        return out
    new = []
    for at, st in enumerate(out):
        new += put.get(at, [])
        if at not in drop:
            new.append(st)
    return _unused_lanes_dropped(new)


def _runs(stores: list, polys: list):
    """The stores as runs of consecutive addresses, each [(lane, index)] from its first
    element: stores whose addresses differ by a constant form a class, and a class splits
    where its addresses skip.  None where two stores hit one address."""
    classes: list = []                            # [(base polynomial, [(offset, lane, index)])]
    for (_, i, ix), pl in zip(stores, polys):
        for base, members in classes:
            d = _sub(pl, base)
            if all(k == () for k in d):
                members.append((d.get((), 0), i, ix))
                break
        else:
            classes.append((pl, [(0, i, ix)]))
    runs = []
    for _, members in classes:
        members.sort(key=lambda m: m[0])
        if len({o for o, _, _ in members}) != len(members):
            return None
        cur = [members[0]]
        for m in members[1:]:
            if m[0] == cur[-1][0] + 1:
                cur.append(m)
            else:
                runs.append(cur)
                cur = [m]
        runs.append(cur)
    return [[(i, ix) for _, i, ix in run] for run in runs]


def _poly(e, ints: dict, depth: int = 0):
    """An integer C expression as a polynomial {sorted factors: coefficient}, the list's
    integer locals replaced by their values; factors that are not sums or products (a
    division, a call) are kept whole as their C text.  None past a depth of 8 locals."""
    match e:
        case cir.Int(value=v):
            return {(): v} if v else {}
        case cir.Var(name=n) if n in ints:
            return None if depth > 8 else _poly(ints[n], ints, depth + 1)
        case cir.Bin(op="+", a=a, b=b) | cir.Bin(op="-", a=a, b=b):
            pa, pb = _poly(a, ints, depth), _poly(b, ints, depth)
            if pa is None or pb is None:
                return None
            return _add(pa, pb) if e.op == "+" else _sub(pa, pb)
        case cir.Bin(op="*", a=a, b=b):
            pa, pb = _poly(a, ints, depth), _poly(b, ints, depth)
            if pa is None or pb is None:
                return None
            out: dict = {}
            for ka, ca in pa.items():
                for kb, cb in pb.items():
                    k = tuple(sorted(ka + kb))
                    out[k] = out.get(k, 0) + ca * cb
            return {k: c for k, c in out.items() if c}
        case cir.Neg(a=a):
            pa = _poly(a, ints, depth)
            return None if pa is None else {k: -c for k, c in pa.items()}
    return {(cir.expr(e),): 1}


def _add(a: dict, b: dict) -> dict:
    out = dict(a)
    for k, c in b.items():
        out[k] = out.get(k, 0) + c
    return {k: c for k, c in out.items() if c}


def _sub(a: dict, b: dict) -> dict:
    return _add(a, {k: -c for k, c in b.items()})


def hoisted_max(lp: cir.For, out: list) -> list:
    """A sequential loop whose body takes running maxima of lanes of a vector — `s = v[i]`
    then `mg = moac_fmaxf(mg, s)`, each mg a float of the enclosing scope named nowhere
    else in the loop — with those maxima kept lane by lane in a vector across the loop and
    folded into each mg once after it (the GQA score pass: 16 scalar selects, each a
    compare and a branch, per 4 tokens).  The maximum ignores NaN either way, and is the
    same value in any order but for the sign of a zero (-fno-signed-zeros)."""
    outer = {st.name for st in out if isinstance(st, cir.Decl) and st.ctype == "float"}
    lanes = _lanes(lp.body)
    folds: dict = {}                              # vector -> [(lane, mg)]
    for st in lp.body:
        match st:
            case cir.Assign(name=mg, value=cir.Call(fn="moac_fmaxf", args=(cir.Var(name=a), cir.Var(name=s)))) \
                    if a == mg and mg in outer and s in lanes:
                folds.setdefault(lanes[s][0], []).append((lanes[s][1], mg))
    if not folds:
        return [lp]
    mgs = {mg for fs in folds.values() for _, mg in fs}
    taken = [st for st in lp.body if isinstance(st, cir.Assign) and st.name in mgs]
    if len(taken) != sum(len(fs) for fs in folds.values()) or any(
            mgs & words(st) for st in lp.body if st not in taken):
        return [lp]
    pre, post, body, done = [], [], [], set()
    for st in lp.body:
        if st not in taken:
            body.append(st)
            continue
        v = lanes[st.value.args[1].name][0]
        if v not in done:                         # the running maxima of this vector's lanes
            done.add(v)
            vm = f"{v}_max"
            pre.append(cir.Decl("moac_f32x16", vm, cir.Call("moac_v16_dup", (cir.Num(float("-inf")),))))
            body.append(cir.Assign(vm, cir.Call("moac_v16_max", (cir.Var(vm), cir.Var(v)))))
            post += [cir.Assign(mg, cir.Call("moac_fmaxf", (cir.Var(mg), cir.Load(vm, cir.Int(i))))) for i, mg in folds[v]]
    return pre + [replace(lp, body=tuple(_unused_lanes_dropped(body)))] + post


def _lanes(stmts) -> dict:
    """The list's lane reads `s = v[i]` of the vectors it declares: {s: (v, i)}."""
    vectors = {st.name for st in stmts if isinstance(st, cir.Decl) and st.ctype == "moac_f32x16"}
    return {st.name: (st.init.array, st.init.index.value) for st in stmts
            if isinstance(st, cir.Decl) and st.ctype == "float" and isinstance(st.init, cir.Load)
            and st.init.array in vectors and isinstance(st.init.index, cir.Int)}


def _unused_lanes_dropped(stmts: list) -> list:
    """The list without its `s = v[i]` lane reads that nothing else in it names any more."""
    lanes = _lanes(stmts)
    count: dict = {}                               # statements naming each identifier
    for st in stmts:
        for w in words(st):
            count[w] = count.get(w, 0) + 1
    return [st for st in stmts if not (isinstance(st, cir.Decl) and st.name in lanes and count[st.name] == 1)]


def scaled(got: list, out: list, body: tuple, after: int, later: dict) -> list:
    """Where every sum of a transposed reduction starts at 0 and is used once after it, as
    `s = acc / X` with one constant X (the score's ÷ √dk), the scaling done on the vector of
    sums as one multiplication by 1/X (folded by the compiler: X is constant), one
    instruction for 16, and each `s` a lane of it (0 + x is x as -fno-signed-zeros allows);
    `later` gets the rewritten statements of `body` by position.  16 scalar divisions per 4
    tokens were the largest part of the GQA score pass's tail; the vector division that
    replaced them (vdivps, about 16 cycles of the first FMA port for 16 scores) cost GQA
    bf16 3–4 % more than the multiplication (bench/cpu_ab.py, 2026-12-04, n = 32768 cold
    3.54 → 3.40 ms best).  x·(1/X) is within 1.5 ulp of x/X, far inside the tolerances; the
    scalar remainder loop and the other targets keep the division."""
    fold = got[-1]
    names = [st.name for st in fold.body if isinstance(st, cir.Assign)]
    zero = {st.name for st in out if isinstance(st, cir.Decl) and st.init in (cir.Num(0.0), cir.Int(0))}
    uses: dict = {}
    for at in range(after, len(body)):
        for n in words(body[at]).intersection(names):
            uses.setdefault(n, []).append(at)
    divs = {}
    for n in names:
        if n not in zero or len(uses.get(n, ())) != 1:
            return got
        st = body[uses[n][0]]
        if not (isinstance(st, cir.Decl) and st.ctype == "float" and isinstance(st.init, cir.Bin)
                and st.init.op == "/" and st.init.a == cir.Var(n) and _constant(st.init.b)):
            return got
        divs[n] = st
    if len({d.init.b for d in divs.values()}) != 1:
        return got
    X = next(iter(divs.values())).init.b
    out[:] = [st for st in out if not (isinstance(st, cir.Decl) and st.name in divs)]   # the sums, now unused
    folds, scaled, vname = [], [], None
    for st in fold.body:
        if isinstance(st, cir.Decl):               # a group's vector of sums, scaled into a vector
            vname = None                           # declared before the fold's scope
            folds.append(st)
            continue
        if vname is None:
            vname = f"moac_v_{st.name}_sc"
            scaled.append(cir.Decl("moac_f32x16", vname))
            folds.append(cir.Assign(vname, cir.Bin("*", cir.Var(folds[-1].name), cir.Bin("/", cir.Num(1.0), X))))
        # acc = acc + sum[i]: the scores read lane i of the scaled vector instead
        later[uses[st.name][0]] = cir.Decl("float", divs[st.name].name, cir.Load(vname, st.value.b.index))
    return got[:-1] + scaled + [replace(fold, body=tuple(folds))]


def words(st) -> set:
    """The identifiers a C IR subtree names anywhere, in its expressions or in the text of
    its Raw statements and comments (cir.names_in's strings, split into words)."""
    return {w for s in cir.names_in(st, set()) for w in re.findall(r"[A-Za-z_]\w*", s)}


def _constant(e) -> bool:
    """An expression of literals, casts and calls only (no variable): the same in every lane."""
    match e:
        case cir.Int() | cir.Num():
            return True
        case cir.Cast(a=a) | cir.Neg(a=a):
            return _constant(a)
        case cir.Call(args=args):
            return all(_constant(x) for x in args)
        case cir.Bin(a=a, b=b):
            return _constant(a) and _constant(b)
    return False
