"""The three passes of a split-K chunk (moac.schedule.plans.split_k): scores with the
chunk maximum, exp and the chunk sum, and the weighted sum."""
from __future__ import annotations

import math

import sympy as sp

from ...dnf import DConst, DIndex, DOp, DRead, fmt_index, free_index_vars, substitute
from ..index import internal
from ..index import gamma, lane_diff
from ..ir import Const, Let, LetIndex, Lift, Local, Loop, Op, Prefetch, Set, Store
from ..lower import logical, lower, read
from ...dtypes import BYTES
from ..packing import IN_FLIGHT, streams, dedupe_unpacks, lane_words, lifted, note_lift, plan_packing, token_streams, unpacks
from .generic import VECTOR, midx, msub, outer_reductions  # noqa: F401  (midx, msub: split_k and tiles import them from here)
from . import score_parts
from .pages import align_tokens, paged_tokens


UNROLL = 4        # tokens per score pass without packed loads (measured: docs/benchmarks.md)
SIMD_TOKENS = 4   # tokens per iteration of the SIMD weighted sum (one accumulator store per 4 terms)
PREFETCH_AHEAD = 16384  # bytes a SIMD token loop prefetches ahead of the rows it reads (measured on
                        # the 2-core host, docs/benchmarks.md: 16 KB a little ahead of 4 KB, both far
                        # ahead of no prefetch)


def prefetches(ctx, body, l, lane, lane_ext, tok0, U: int) -> tuple:
    """On a target with a prefetch hint: for every stream of `body` along the tokens l
    whose rows are contiguous along the lane axis and adjacent along l (γ-differences 1
    and the row length), a prefetch of the U rows PREFETCH_AHEAD bytes beyond the ones
    that start at token tok0.  A CPU's hardware prefetcher alone left the token loops
    waiting on memory (docs/benchmarks.md)."""
    if ctx.target.prefetch is None or lane is None:
        return ()
    out = []
    for r in streams(ctx, body, l):
        buf = ctx.buffers[r.array]
        off = gamma(ctx.spec(tuple(r.index)), buf.shape)
        row = sp.sympify(lane_diff(off, l))
        if lane_diff(off, lane) != 1 or not row.is_Integer or sp.sympify(row - lane_ext) != 0:
            continue
        rbytes = int(row) * BYTES[buf.dtype]
        if rbytes <= 0:                  # rows of no elements (d = 0): nothing to fetch
            continue
        ahead = max(1, PREFETCH_AHEAD // rbytes)
        idx = tuple(sp.expand(sp.sympify(i).xreplace({l: tok0 + ahead, lane: 0})) for i in r.index)
        out.append(Prefetch(r.array, idx, U * rbytes))
    return tuple(out)


def simd_lanes(rest: list, rest_ext: tuple, body: tuple, note: str) -> tuple:
    """`body` with the last output axis in SIMD lanes, inside sequential loops over the
    others (`note` follows the loop's own words, "SIMD lanes over DNF axis d < dv")."""
    last, n_last = rest[-1], rest_ext[-1]
    return seq_over(rest[:-1], rest_ext[:-1], (Loop(last, n_last, "vector", body, note=f"SIMD lanes over DNF axis "
                                                   f"{last.name} < {fmt_index(n_last)}{note}", lanes=last),))


def seq_over(axes: list, exts: tuple, body: tuple) -> tuple:
    """`body` inside sequential loops over the DNF axes (outermost first)."""
    for x, n in reversed(list(zip(axes, exts))):
        body = (Loop(x, n, "seq", body, note=f"DNF axis {x.name} < {fmt_index(n)}"),)
    return body


def scores(ctx, names, E, ev, l, pidx: tuple, C, U: int, members: list, opts) -> tuple:
    """Pass 1: the score of every token of the chunk into p, and the chunk maximum mg, for
    every group member.  With U > 1 the token loop is unrolled by U and the U × members
    score reductions are jammed into one vector loop with independent accumulators (more
    loads in flight per lane; a K row loaded once serves every member); a remainder loop
    handles cn mod U tokens."""
    M = len(members)
    g, c, cq, cn = internal("g"), internal("c"), internal("cq"), internal("cn")
    packed = None
    reds = outer_reductions(E, [])
    if ev is not None:
        red = reds[0]
        pk = plan_packing(ctx, red.body, ev, red.extent, opts)
        if isinstance(pk, str):
            ctx.notes.append(f"score loads not packed: {pk}")
        else:
            packed = (ctx, pk, opts)

    def mg(mi):
        return "mg" if M == 1 else f"mg{mi}"

    if packed is not None and U == 0:       # derived: the lanes over tokens × parts of d (an --unroll
        parts = score_parts.passes(ctx, names, E, reds[0], ev, l, pidx, C, members, packed[1], mg)  # keeps lanes over d)
        if not isinstance(parts, str):
            return parts
        ctx.notes.append(f"score pass: lanes over {ev.name}, a vector reduction per score ({parts})")
    if packed is not None:
        note_lift(ctx, ev, red.extent, *packed[1], "score reduction, vector × packed")
    if U == 0:          # derived: enough tokens per pass for IN_FLIGHT words per lane
        U = UNROLL
        if packed is not None:
            w, R = packed[1]
            U = max(UNROLL, IN_FLIGHT // lane_words(ctx, token_streams(ctx, red.body, ev, l), R * w))
        ctx.notes.append(f"score pass: {U} tokens per vector pass" + (
            f" ({IN_FLIGHT} packed words in flight per lane)" if packed is not None else ""))

    def one(tok, mi: int, sc: str, subst: dict):
        sub = members[mi]
        Eu = substitute(msub(E, sub), {l: tok}) if tok != l else msub(E, sub)
        pre, sx = lower(Eu, names, vector_var=ev, subst=subst, packed=packed)
        idx = tuple(tok if x == l else midx(x, sub) for x in pidx)
        after = [Let(sc, sx), Store("@p", idx, logical(idx, subst), Local(sc)),
                 Set(mg(mi), Op("max", (Local(mg(mi)), Local(sc))))]
        return pre, after

    def jam(copies, label):
        """Merge the copies' vector reductions into one loop; None if they do not fit."""
        if not all(len(pre) == 2 and isinstance(pre[0], Let) and isinstance(pre[1], Loop) for pre, _ in copies):
            return None
        loops = [pre[1] for pre, _ in copies]
        if ev is None or not all(lp.var == loops[0].var and lp.extent == loops[0].extent for lp in loops):
            return None
        if not reds or reds[0].op != "add":
            return None
        accs = tuple(pre[0].name for pre, _ in copies)
        body = tuple(dedupe_unpacks([st for lp in loops for st in lp.body]))
        loop = Loop(loops[0].var, loops[0].extent, "vector", body, note=f"vector reduction over DNF axis {ev.name}, "
                    f"{label} jammed", reduce=(("add", accs),), binds=loops[0].binds, trip=loops[0].trip)
        return [pre[0] for pre, _ in copies] + [loop] + [st for _, after in copies for st in after]

    def plain(copies):
        return [st for pre, after in copies for st in pre + after]

    main = None
    if U > 1:
        copies, decls = [], []
        for u in range(U):
            tok = internal(f"t{u}")
            decls.append(LetIndex(tok, g * C + cq * U + u))
            copies += [one(tok, mi, f"sc{u}" if M == 1 else f"sc{u}_{mi}", {tok: l}) for mi in range(M)]
        body = jam(copies, f"{U} tokens" + (f" × {M} heads" if M > 1 else ""))
        if body is None:
            U = 1                          # the unrolled copies are not emitted
        else:
            pf = prefetches(ctx, msub(red.body, members[0]), l, ev, red.extent, decls[0].var, U)   # jam needs ev
            main = Loop(cq, sp.floor(cn / U), "seq", align_tokens(ctx, tuple(decls) + pf + tuple(body),
                                                                  [d.var for d in decls], U, g * C + cq * U),
                        trip=C / U, note=f"pass 1: tokens g·chunk + {U}·cq + u, u < {U}: scores and chunk maximum")
    copies = [one(l, mi, "sc" if M == 1 else f"sc_{mi}", {}) for mi in range(M)]
    body = (jam(copies, f"{M} heads") if M > 1 else None) or plain(copies)
    first = (LetIndex(l, g * C + c),)
    if main is None:
        return (Loop(c, cn, "seq", first + tuple(body), trip=C,
                     note=f"pass 1: token {l.name} = g·chunk + c, score and chunk maximum"),)
    # the remainder's tokens are counted with the unrolled loop's (trip 0)
    rest = Loop(c, cn, "seq", first + tuple(body), start=U * sp.floor(cn / U), trip=sp.Integer(0),
                note=f"pass 1 remainder: the last cn mod {U} tokens")
    return main, rest


LOWEST = {"f32": -3.4028234663852886e38, "f64": -1.7976931348623157e308}   # the least finite value


def exp_sum(l, pidx: tuple, C, members: list, Wt=None, names=None, dtype: str = "f32") -> tuple:
    """Pass 2: p = exp(score − max(chunk max, lowest)) and the chunk sum zg, lanes over the
    tokens.  The shift is the chunk maximum clamped to the least finite value: where every
    score of the chunk is −∞ (a mask) the chunk's state is then the lse identity (−∞, 0, 0),
    not exp(−∞ − (−∞)) = NaN, and a NaN score still gives NaN.  With a token factor Wt of the
    weights (see token_factors) p is stored as exp(…) × Wt, the sum still of exp(…): once
    per token, where pass 3 would multiply every element."""
    M = len(members)
    g, c, cn = internal("g"), internal("c"), internal("cn")
    out = []
    for mi, m in enumerate(members):
        zg, mg = ("zg", "mg") if M == 1 else (f"zg{mi}", f"mg{mi}")
        idx = tuple(midx(x, m) for x in pidx)
        p = Local("e")
        scale: tuple = ()
        if Wt is not None:
            pre, wx = lower(msub(Wt, m), names)
            scale, p = tuple(pre) + (Let("wt", wx),), Op("mul", (Local("e"), Local("wt")))
        out.append(Let(zg, Const(0.0)))
        out.append(Loop(c, cn, "vector", (
            LetIndex(l, g * C + c),
            Let("e", Op("exp", (Op("sub", (read("@p", idx), Op("max", (Local(mg), Const(LOWEST[dtype]))))),)))) + scale + (
            Store("@p", idx, idx, p),
            Set(zg, Op("add", (Local(zg), Local("e"))))),
            note="pass 2: p = exp(score − chunk max)" + (" × the token's weight factor" if Wt is not None else "")
            + ", chunk sum", reduce=(("add", (zg,)),), lanes=l, trip=C))
    return tuple(out)


def _plain(e) -> bool:
    """A DNF expression of reads, constants and scalar functions only (no reduction, no guard)."""
    match e:
        case DRead() | DConst() | DIndex():
            return True
        case DOp(args=args):
            return all(_plain(a) for a in args)
    return False


def token_factors(W, rest: list):
    """The weights W of the weighted sum (a product) as (Wt, Wr): Wt the product of the
    factors that do not depend on the output axes `rest` (a dequantisation scale of the
    token's value row, say), None where there is none, and Wr the product of the others.
    Pass 2 multiplies p by Wt once per token (exp_sum), pass 3 sums p·Wr: the same value in
    real arithmetic, where Σ p·(Wt·Wr) would multiply every element by Wt."""
    facs: list = []

    def flat(e):
        if isinstance(e, DOp) and e.op == "mul":
            flat(e.args[0])
            flat(e.args[1])
        else:
            facs.append(e)
    flat(W)
    tok = [f for f in facs if _plain(f) and not free_index_vars(f) & set(rest)]
    row = [f for f in facs if not any(f is t for t in tok)]
    if not rest or not tok or not row:
        return None, W

    def prod(xs):
        out = xs[0]
        for x in xs[1:]:
            out = DOp("mul", (out, x))
        return out
    return prod(tok), prod(row)


def weighted_sum(ctx, names, W, l, pidx, frame, rest, rest_ext, C, members: list, opts) -> tuple:
    """Pass 3: o_part[member, g, rest] = Σ_c p_c · W(l, rest), lanes over the last output
    axis d.  When d's extent is a literal multiple of the vector length (≤ 8 lanes' worth),
    d is lifted ⟨dv⟩ → ⟨dv/32 32⟩, d = r·32 + v: lanes over v (γ-difference 1), r unrolled
    into dv/32 register accumulators per group member, so the token loop runs once per
    lane and each W element is loaded once for all members."""
    M = len(members)
    g, c = internal("g"), internal("c")
    W = msub(W, members[0])                    # the same for every member (see split_k.kv_group)
    tok = (LetIndex(l, g * C + c),)

    def acc(mi, r=None):
        return ("o" if M == 1 else f"o{mi}_") + ("" if r is None else str(r))

    def p_of(mi):
        return "pc" if M == 1 else f"pc{mi}"
    last, n_last = (rest[-1], rest_ext[-1]) if rest else (None, None)
    if last is not None and ctx.target.lanes == "simd":
        body = _simd_weighted_sum(ctx, names, W, l, pidx, frame, rest, rest_ext, C, members,
                                  T=opts.wsum_unroll or SIMD_TOKENS)
        if body is not None:
            return body
    if last is not None:
        pk = plan_packing(ctx, W, last, n_last, opts)
        if isinstance(pk, str):
            ctx.notes.append(f"weighted-sum loads not packed: {pk}")
        else:
            body = _packed_weighted_sum(ctx, names, W, l, pidx, frame, rest, rest_ext, C, members, *pk,
                                        T=opts.wsum_unroll or paged_tokens(ctx, W, l))
            if body is not None:
                return body
    R = int(n_last) // VECTOR if (n_last is not None and sp.sympify(n_last).is_Integer and
                                  int(n_last) % VECTOR == 0) else 0
    if 1 <= R <= 8:
        v = internal("v")
        pws = [read("@p", tuple(midx(x, m) for x in pidx)) for m in members]
        terms, stores = [], []
        for r in range(R):
            subst = {v: last - r * VECTOR}
            pre_w, wx = lower(substitute(W, {last: r * VECTOR + v}), names, subst=subst)
            if pre_w:
                R = 0
                break
            terms.append(Let(f"w{r}", wx))
            for mi, m in enumerate(members):
                terms.append(Set(acc(mi, r), Op("add", (Local(acc(mi, r)), Op("mul", (Local(p_of(mi)),
                                                                                     Local(f"w{r}")))))))
                idx = tuple(midx(f, m) for f in frame) + (g,) + tuple(rest[:-1]) + (r * VECTOR + v,)
                stores.append(Store("@o_part", idx, logical(idx, subst), Local(acc(mi, r))))
    if 1 <= R <= 8:
        ctx.lifts.append(Lift(last.name, n_last, VECTOR, "r", "v", False,
                              f"registers × vector: {last.name} = r·{VECTOR} + v, {R * M} accumulators per lane"))
        loads = tuple(Let(p_of(mi), pw) for mi, pw in enumerate(pws))
        inner = Loop(c, internal("cn"), "seq", tok + loads + tuple(terms), note="Σ over the chunk's tokens", trip=C)
        body = tuple(Let(acc(mi, r), Const(0.0)) for mi in range(M) for r in range(R)) + (inner,) + tuple(stores)
        body = (Loop(v, VECTOR, "vector", body, note=f"vector lanes: {last.name} = r·{VECTOR} + v for r < {R}",
                     trip=sp.Integer(VECTOR)),)
        return seq_over(rest[:-1], rest_ext[:-1], body)
    # general case: one accumulator per lane and member
    pre_w, wx = lower(W, names)
    pws = [read("@p", tuple(midx(x, m) for x in pidx)) for m in members]
    adds = tuple(Set(acc(mi), Op("add", (Local(acc(mi)), Op("mul", (pw, Local("w")))))) for mi, pw in enumerate(pws))
    inner_sum = Loop(c, internal("cn"), "seq", tok + tuple(pre_w) + (Let("w", wx),) + adds,
                     note="Σ over the chunk's tokens", trip=C)
    o_stores = tuple(Store("@o_part", ix, ix, Local(acc(mi))) for mi, m in enumerate(members)
                     for ix in [tuple(midx(f, m) for f in frame) + (g,) + tuple(rest)])
    body3: tuple = tuple(Let(acc(mi), Const(0.0)) for mi in range(M)) + (inner_sum,) + o_stores
    for i, (x, n) in enumerate(reversed(list(zip(rest, rest_ext)))):
        innermost = i == 0
        body3 = (Loop(x, n, "vector" if innermost else "seq", body3,
                      note=f"{'vector lanes over ' if innermost else ''}DNF axis {x.name} < {fmt_index(n)}"),)
    return body3


def max_init(members: list) -> tuple:
    M = len(members)
    return tuple(Let("mg" if M == 1 else f"mg{mi}", Const(-math.inf)) for mi in range(M))


def _packed_weighted_sum(ctx, names, W, l, pidx, frame, rest, rest_ext, C, members: list, w: int, R: int,
                         T: int = 1):
    """Pass 3 with the register-stride lifting d = w·(32·r + v) + k: each lane unpacks w
    consecutive elements of each W row (one 8-byte word of bf16, say) and keeps R·w
    accumulators per group member; adjacent lanes read adjacent words.  With T > 1 each
    iteration of the token loop takes T tokens (T loads of each row in flight per lane),
    a remainder loop the last cn mod T.  None when W needs statements of its own."""
    M = len(members)
    g, c, v, cq, cn = internal("g"), internal("c"), internal("v"), internal("cq"), internal("cn")
    last, n_last = rest[-1], rest_ext[-1]
    W = msub(W, members[0])

    def acc(mi, q):
        return ("o" if M == 1 else f"o{mi}_") + str(q)

    def token(tok, tag: str):
        """The statements of one token `tok` (l in the DNF): p, the unpacked W row, the sums."""
        subst = {tok: l} if tok != l else {}
        Wt = substitute(W, {l: tok}) if tok != l else W
        out = []
        for mi, m in enumerate(members):
            idx = tuple(tok if x == l else midx(x, m) for x in pidx)
            out.append(Let(f"pc{tag}" if M == 1 else f"pc{mi}{tag}", read("@p", idx, subst)))
        for r in range(R):
            base = w * (VECTOR * r + v)
            loads, locs = unpacks(ctx, Wt, last, base, w, names, f"{r}{tag}", subst)
            out += loads
            for k in range(w):
                q = r * w + k
                pre_w, wx = lower(substitute(Wt, {last: base + k}), names, subst=subst, reads=locs)
                if pre_w:
                    return None
                out.append(Let(f"w{q}{tag}", wx))
                for mi in range(M):
                    pc = f"pc{tag}" if M == 1 else f"pc{mi}{tag}"
                    out.append(Set(acc(mi, q), Op("add", (Local(acc(mi, q)), Op("mul", (Local(pc),
                                                                                       Local(f"w{q}{tag}")))))))
        return out

    if T > 1:
        toks = [internal(f"u{t}") for t in range(T)]
        bodies = [token(tk, f"_{t}") for t, tk in enumerate(toks)]
        if any(b is None for b in bodies):
            return None
        main = Loop(cq, sp.floor(cn / T), "seq", align_tokens(ctx, tuple(
            st for t, tk in enumerate(toks) for st in [LetIndex(tk, g * C + cq * T + t)] + bodies[t]), toks, T,
            g * C + cq * T), note=f"Σ over the chunk's tokens, {T} per iteration", trip=C / T)
        one = token(l, "")
        rest_loop = Loop(c, cn, "seq", (LetIndex(l, g * C + c),) + tuple(one), start=T * sp.floor(cn / T),
                         trip=sp.Integer(0), note=f"the last cn mod {T} tokens")
        inner: tuple = (main, rest_loop)
    else:
        one = token(l, "")
        if one is None:
            return None
        inner = (Loop(c, cn, "seq", (LetIndex(l, g * C + c),) + tuple(one), note="Σ over the chunk's tokens",
                      trip=C),)
    stores = []
    for r in range(R):
        for k in range(w):
            for mi, m in enumerate(members):
                head = tuple(midx(f, m) for f in frame) + (g,) + tuple(rest[:-1])
                stores.append(Store("@o_part", head + (w * (VECTOR * r + v) + k,), head + (last,),
                                    Local(acc(mi, r * w + k))))
    note_lift(ctx, last, n_last, w, R, f"weighted sum, registers × vector × packed, {R * w * M} accumulators per lane")
    body = tuple(Let(acc(mi, q), Const(0.0)) for mi in range(M) for q in range(R * w)) + inner + tuple(stores)
    body = (Loop(v, VECTOR, "vector", body, note=f"vector lanes: {last.name} = {lifted(w, R)}, k < {w}",
                 trip=sp.Integer(VECTOR)),)
    return seq_over(rest[:-1], rest_ext[:-1], body)


def _simd_weighted_sum(ctx, names, W, l, pidx, frame, rest, rest_ext, C, members: list, T: int = SIMD_TOKENS):
    """Pass 3 for SIMD lanes (a CPU): tokens outer, the last output axis d innermost as
    the vector loop, so each row of W is read once, contiguously, and serves every group
    member; the accumulators are the gang's rows of o_part (M·dv values, in L1), zeroed
    first.  T tokens per iteration add T terms to an accumulator per load and store of
    it (a store per term made the loop store-bound); a remainder loop takes the last
    cn mod T.  None when W needs statements of its own."""
    M = len(members)
    g, c, cq, cn = internal("g"), internal("c"), internal("cq"), internal("cn")
    last, n_last = rest[-1], rest_ext[-1]
    W = msub(W, members[0])
    heads = [tuple(midx(f, m) for f in frame) + (g,) + tuple(rest[:-1]) for m in members]

    def over_rest(body: tuple, note: str) -> tuple:
        return simd_lanes(rest, rest_ext, body, note)

    def tokens(toks: list, tags: list):
        """p of every member for these tokens, and the d loop adding their terms."""
        pcs, ws = [], []
        for tok, tag in zip(toks, tags):
            subst = {tok: l} if tok != l else {}
            for mi, m in enumerate(members):
                idx = tuple(tok if x == l else midx(x, m) for x in pidx)
                pcs.append(Let(f"pc{mi}{tag}", read("@p", idx, subst)))
            pre_w, wx = lower(substitute(W, {l: tok}) if tok != l else W, names, subst=subst)
            if pre_w:
                return None
            ws.append(Let(f"w{tag}", wx))
        adds = []
        for mi, h in enumerate(heads):
            acc = read("@o_part", h + (last,))
            for tag in tags:
                acc = Op("add", (acc, Op("mul", (Local(f"pc{mi}{tag}"), Local(f"w{tag}")))))
            adds.append(Store("@o_part", h + (last,), h + (last,), acc))
        rows = f"{len(toks)} row{'s' if len(toks) > 1 else ''} of the weighted values read once for {M} accumulator row" + (
            "s" if M > 1 else "")
        return tuple(pcs) + over_rest(tuple(ws) + tuple(adds), f": {rows}")
    zero = over_rest(tuple(Store("@o_part", h + (last,), h + (last,), Const(0.0)) for h in heads),
                     ": the accumulators o_part start at 0")
    toks = [internal(f"u{t}") for t in range(T)]
    main = tokens(toks, [f"_{t}" for t in range(T)]) if T > 1 else None
    one = tokens([l], [""])
    if one is None or (T > 1 and main is None):
        return None
    if T > 1:
        pf = prefetches(ctx, W, l, last, n_last, toks[0], T)
        loops = (Loop(cq, sp.floor(cn / T), "seq", align_tokens(ctx, tuple(LetIndex(tk, g * C + cq * T + t)
                                                                           for t, tk in enumerate(toks)) + pf + main,
                                                                     toks, T, g * C + cq * T),
                      note=f"Σ over the chunk's tokens, tokens outer, {T} per iteration", trip=C / T),
                 Loop(c, cn, "seq", (LetIndex(l, g * C + c),) + one, start=T * sp.floor(cn / T), trip=sp.Integer(0),
                      note=f"the last cn mod {T} tokens"))
    else:
        loops = (Loop(c, cn, "seq", (LetIndex(l, g * C + c),) + one, note="Σ over the chunk's tokens, tokens outer",
                      trip=C),)
    ctx.notes.append(f"weighted sum: tokens outer ({T} per iteration) and {last.name} innermost in SIMD lanes (the "
                     "target's lanes are SIMD slots); its accumulators are the gang's rows of o_part")
    return zero + loops
