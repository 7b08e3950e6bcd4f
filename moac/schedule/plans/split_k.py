"""The split-K plan for a softmax contraction (flash-decoding).

The contracted axis l (the tokens) is lifted ⟨N⟩ → ⟨⌈N/chunk⌉ chunk⟩ over gangs: each
gang computes the partial state (m_g, z_g, o_g) of its chunk — the lse monoid of
moac.schedule.monoids — and a combine kernel folds the states with the monoid's merge,
Σ_l exp(E_l − m) w_l = Σ_g exp(m_g − m) Σ_{l∈g} exp(E_l − m_g) w_l.  It applies to any
DNF softmax_match recognises; statements it does not compute (a cache update) go to the
generic plan.
"""
from __future__ import annotations

import dataclasses

import itertools
import math
from dataclasses import dataclass

import sympy as sp

from ...dnf import fmt_index, reads, substitute
from ...front.data import INDEX_DTYPES, bounds, has_data, upper_bound
from sympy.core.function import AppliedUndef
from ...dnf.ir import format_expr
from ..index import internal, ragged_pick
from ..ir import Choice, Const, Guard, LoopKernel, LastGang, Let, LetIndex, Lift, Local, Loop, Op, Read, Select, Serial, Set, Store, Unpack
from ..choices import CHUNK, CHUNKS_PER_FRAME, FLOOR_GANGS, MIN_CHUNK
from ..lower import Names, lower, read
from ..monoids import _exp_diff, lse_fold_lanes, lse_weight
from . import generic
from . import tiles
from .generic import VECTOR, gang_nest, outer_reductions
from .softmax_match import SoftmaxContraction, match_softmax
from .split_sizes import COMBINE_GANGS, combine_regs, split_floor
from .split_k_passes import exp_sum, max_init, midx, scores, seq_over, simd_lanes, token_factors, weighted_sum

FOLD_MAX = 32        # partials per frame up to which the frame's last gang folds them (one lane each)
FOLD_MIN_FRAMES = 32 # frames from which it does: a frame's fold is one gang's, a few memory round trips at
                     # the kernel's end, where the combine kernel spreads it over ⌈dv/8⌉ gangs (measured
                     # on the H200: 1 frame, 19 partials 4.9 → 6.1 µs; 256 frames, 16 partials 145.4 → 139.3 µs)
FOLD_REGS = 32       # accumulators per lane the last gang's fold may keep (heads × ⌈dv/32⌉)

NAME = "split-K"


@dataclass(frozen=True)
class Match:
    stmts: tuple        # the statements the kernels compute
    attn: SoftmaxContraction
    updates: tuple      # statements left to the generic plan, after the contraction
    before: tuple = ()  # stored temporaries the contraction reads (a projection q = Wq +.× x): generic, first


def match(stmts: tuple, ctx, opts):
    if opts.mapping != "auto":
        return f"mapping {opts.mapping!r} asks for the generic plan"
    core = tuple(st for st in stmts if st.role != "update")
    attn, before = match_softmax(core), ()
    temps = [st for st in core if st.role == "temp"]
    if isinstance(attn, str) and len(temps) > 2:
        # the maximum and the sum are two of the temporaries; the others, which read neither,
        # are computed before the contraction by the generic plan
        for m, z in itertools.permutations(temps, 2):
            rest = tuple(t for t in temps if t is not m and t is not z)
            if any(r.array in (m.name, z.name) for t in rest for r in reads(t.body)):
                continue
            got = match_softmax(tuple(st for st in core if st not in rest))
            if not isinstance(got, str):
                attn, before = got, rest
                break
    if isinstance(attn, str):
        return attn
    if has_data(attn.N) and upper_bound(attn.N, bounds(ctx.dnf.program)) is None:
        return (f"the token axis's extent {fmt_index(attn.N)} is read from data with no bound the program states "
                "(a take count within an axis gives one), so the chunks cannot be laid out")
    return Match(stmts, attn, tuple(st for st in stmts if st.role == "update"), before)


def describe(m: Match) -> str:
    return "split-K softmax contraction (token axis lifted into gang chunks, log-sum-exp combine)"


def kv_group(W, frame: list, frame_ext: tuple):
    """A frame axis v that W (the weighted values) reads only through ⌊v ÷ c⌋, c a literal
    ≤ 8 that divides v's extent: GQA's query heads of one KV head.  Returns (v, c) or None.
    The c heads of a group then share one gang, so every K and V element is loaded once
    and used c times."""
    uses: dict = {}
    for r in reads(W):
        for ix in r.index:
            ix = sp.sympify(ix)
            for v in frame:
                if v not in ix.free_symbols:
                    continue
                floors = [f for f in ix.atoms(sp.floor) if v in f.free_symbols]
                if ix.xreplace({f: sp.Symbol("_") for f in floors}).has(v):
                    uses[v] = None                          # v used outside a floor
                    continue
                for f in floors:
                    num, den = sp.fraction(sp.together(f.args[0]))
                    ok = num == v and den.is_Integer and 2 <= den <= 8
                    uses[v] = den if ok and uses.get(v, den) == den else None
    for v, n in zip(frame, frame_ext):
        c = uses.get(v)
        if c is not None and sp.fraction(sp.cancel(n / c))[1] == 1:
            return v, int(c)
    return None


def schedule(ctx, m: Match, opts) -> None:
    at = m.attn
    generic.statements(ctx, m.before)
    _partials_and_combine(ctx, at, opts)
    generic.statements(ctx, m.updates)
    for t in (at.m, at.z):
        ctx.notes.append(f"temporary {t.name} lives per chunk in registers (as m_g / z_g) and is never stored whole")


def _partials_and_combine(ctx, at: SoftmaxContraction, opts):
    C = internal("chunk")          # tokens per gang, chosen at run time (moac_chunk)
    N = ctx.spec(at.N)
    # an extent read from data (⟨b⟩ψlens): the chunks are laid out over its bound (the
    # capacity), and each gang runs the tokens of its chunk below the extent (none beyond)
    Nd, N = N, ctx.spec(upper_bound(N, bounds(ctx.dnf.program))) if has_data(N) else N
    E, W = ctx.spec_expr(at.E), ctx.spec_expr(at.W)
    frame_ext = ctx.spec(tuple(at.out.shape[:len(at.frame)]))
    rest_ext = ctx.spec(tuple(at.out.shape[len(at.frame):]))
    G = sp.ceiling(N / C)
    fsize = sp.Mul(*frame_ext) if frame_ext else sp.Integer(1)
    g, cn = internal("g"), internal("cn")
    l = at.l
    frame = list(at.frame)
    grp = kv_group(W, frame, frame_ext) if opts.share_kv else None
    gang_frames = sp.cancel(fsize / grp[1]) if grp is not None else fsize     # gangs per chunk index
    # a length read from data is, for the chunk size, taken at half its bound: the gangs a
    # chunk size gives are those of the chunks that hold tokens, and a cache filled to half
    # on average has half of them (measured on the H200: sized by the whole bound, a ragged
    # batch filled to half ran at 64 % of the dense kernel's bandwidth)
    sized = N if Nd is N else sp.ceiling(N / 2)
    fewest, why = split_floor(ctx, at.l, E, W, 1 if grp is None else grp[1], rest_ext)
    ctx.choices.append(Choice(C, "moac_chunk", (sized, gang_frames, sp.Integer(fewest))))
    ctx.notes.append(f"chunk = moac_chunk({fmt_index(sized)}, {fmt_index(gang_frames)}, {fewest}): tokens per gang, a power "
                     f"of two in {MIN_CHUNK} … {CHUNK} chosen at run time: at most {CHUNKS_PER_FRAME} chunks per frame, about "
                     f"the target's gang count in all ({fmt_index(gang_frames)} gangs per chunk index), at least {fewest} "
                     f"tokens ({why}) where that leaves the target's gangs ÷ {FLOOR_GANGS}")
    ctx.add_buffer(at.out.name, "output", ctx.spec(tuple(at.out.shape)))
    ctx.add_buffer("@m_part", "scratch", frame_ext + (G,))
    ctx.add_buffer("@z_part", "scratch", frame_ext + (G,))
    ctx.add_buffer("@o_part", "scratch", frame_ext + (G,) + rest_ext)
    guarded = not (sp.Eq(sp.Mod(N, C), 0) is sp.true)
    if Nd is not N:
        guarded = True
        ctx.notes.append(f"the token axis {l.name} < {fmt_index(Nd)} is read from data: its chunks are laid out over "
                         f"its bound {fmt_index(N)}; a gang whose chunk starts at or past {fmt_index(Nd)} does nothing, "
                         f"and the combine folds the ⌈{fmt_index(Nd)}/chunk⌉ partials that exist"
                         )
    ctx.lifts.append(Lift(l.name, Nd, C, "g", "c", guarded, "gang (chunks of tokens) × seq/vector"))
    rest = list(at.rest)
    red_vars = [r.var for r in outer_reductions(E, [])]
    ev = red_vars[0] if red_vars else None

    # ---- kernel 1: partials
    if grp is not None:
        gv, gc = grp
        a = internal("a")
        members = [{sp.floor(gv / gc): a, sp.Mod(gv, gc): sp.Integer(mi), gv: a * gc + mi} for mi in range(gc)]
        gang_frame = [a if f == gv else f for f in frame]
        gang_ext = tuple(sp.cancel(n / gc) if f == gv else n for f, n in zip(frame, frame_ext))
        ctx.notes.append(f"the {gc} values of {gv.name} that read the same rows of the weighted values "
                         f"({gv.name} = {gc}·a + m, m < {gc}) share one gang: every such row is loaded once and "
                         f"used {gc} times")
    else:
        gv, members, gang_frame, gang_ext = None, [{}], list(frame), tuple(frame_ext)
    M = len(members)
    # the scores of a chunk: gang g of frame (…, a, …) owns p[(…, M·a … M·a + M − 1, …), g·C … g·C + C − 1]
    tile = tuple((a * M, M) if f == gv else (f, 1) for f in frame) + ((g * C, C),)
    ctx.add_buffer("@p", "scratch", frame_ext + (G * C,), placement="gang", tile=tile)
    ctx.notes.append(f"the scores p of a chunk live with its gang ({M}·chunk values: gang-shared memory where the "
                     "target has it, else the gang's tile of a scratch buffer, which stays in cache)")
    names = Names()
    pidx = tuple(frame) + (l,)   # p is indexed (frame, g·C + c) = (frame, l)
    pass1 = scores(ctx, names, E, ev, l, pidx, C, opts.unroll, members, opts)
    Wt, W = token_factors(W, rest)
    if Wt is not None:
        ctx.notes.append(f"the factor {format_expr(Wt)} of the weights does not depend on "
                         f"{', '.join(x.name for x in rest)}: pass 2 multiplies p by it, once per token")
    pass2 = exp_sum(l, pidx, C, members, Wt, names, ctx.dtype)
    pass3 = weighted_sum(ctx, names, W, l, pidx, frame, rest, rest_ext, C, members, opts)
    stores = []
    for mi, mem in enumerate(members):
        fidx = tuple(midx(f, mem) for f in frame) + (g,)
        stores += [Store("@m_part", fidx, fidx, Local("mg" if M == 1 else f"mg{mi}")),
                   Store("@z_part", fidx, fidx, Local("zg" if M == 1 else f"zg{mi}"))]
    passes = max_init(members) + pass1 + pass2 + pass3 + tuple(stores)
    fi = tuple(frame) + (g,)
    tile = tiles.derive(ctx, E, W, Wt, ev, l, members, None if grp is None else (gv, gc, a), rest, rest_ext, g * C, cn,
                        passes, (("@m_part", fi), ("@z_part", fi), ("@o_part", fi + (0,) * len(rest))),
                        (at.out.name, tuple(at.out.vars)))
    if isinstance(tile, str):
        ctx.notes.append(f"no tensor-core tile: {tile}")
    else:
        passes = (dataclasses.replace(tile, even=Nd is N),)
        ctx.notes.append(f"tensor-core tile {tile.shape} derived for the chunk (moac.schedule.plans.tiles); the "
                         "targets with tile instructions run it, the others the passes it holds")
    G2 = G if Nd is N else sp.ceiling(Nd / C)        # the partials that exist
    lastg = _last_gang_fold(ctx, at, Nd, N, gang_frame, gang_ext, members, frame, rest, rest_ext, G, G2,
                            len(ctx.kernels) + 2)
    if isinstance(lastg, str) and lastg.startswith("fewer frames"):   # a fold that only the frame count declines
        ctx.notes.append(f"combine: a kernel of its own on every target ({lastg})")
    if not isinstance(tile, str) and tile.out:
        t, lastg = _direct(ctx, passes[0], lastg, G2)
        passes = (t,)
    gang_body = (LetIndex(cn, sp.Min(C, Nd - g * C)),) + passes + (() if isinstance(lastg, str) else (lastg,))
    if Nd is not N:                 # a chunk at or past the data extent: no tokens, no partial
        gang_body = (Guard(sp.StrictLessThan(g * C, Nd), gang_body),)
    # GPU lanes: the chunk loop is outermost, so gangs that share rows of the inputs (the
    # rows of a query block, say) are launched next to each other.  SIMD lanes (CPU
    # threads, statically scheduled): innermost, so a thread's consecutive gangs read
    # consecutive rows and its streams (and their prefetches) run on across gangs
    chunk_loop = [(g, G, f"lifted token axis: ⟨{fmt_index(N)}⟩ → ⟨⌈{fmt_index(N)}/chunk⌉ chunk⟩, {l.name} = g·chunk + c",
                   sp.Integer(0), N / C)]      # the chunks count N tokens
    loops = [(v, n, f"DNF frame axis {v.name} < {fmt_index(n)}" if v in frame else f"groups of {M}: {gv.name} = "
              f"{M}·a + m", sp.Integer(0)) for v, n in zip(gang_frame, gang_ext)]
    loops = loops + chunk_loop if ctx.target.lanes == "simd" else chunk_loop + loops
    dense = _dense_chunks(ctx, Nd, N, gang_frame, gang_ext, g, C, G, gang_body)
    if dense is not None:
        loops, gang_body = [dense[0]] + [x for x in loops if x[0] not in (g, dense[1])], dense[2]
    nest = gang_nest(loops, gang_body)
    domain = tuple(zip(gang_frame, gang_ext)) + ((g, G), (l, Nd)) + tuple(zip(rest, rest_ext))
    ctx.kernels.append(LoopKernel(f"k{len(ctx.kernels) + 1}_partials", "per-chunk partials of the softmax contraction (max, sum, weighted sum)"
                              + (f", {M} heads per gang" if M > 1 else ""), domain, nest))

    # ---- kernel 2: the lse fold of the chunk partials, lanes over the partials g and
    # COMBINE_REGS outputs of the last axis per gang (d = R·db + r): the fold of G
    # partials takes ⌈G/32⌉ steps per lane, however many chunks there are
    mf = tuple(frame) + (g,)
    read_m, read_z = (lambda: read("@m_part", mf)), (lambda: read("@z_part", mf))
    loops2 = [(x, n, f"DNF frame axis {x.name} < {fmt_index(n)}", sp.Integer(0)) for x, n in zip(frame, frame_ext)]
    if rest and ctx.target.lanes == "simd":
        body4 = _simd_combine(ctx, at, names, frame, frame_ext, rest, rest_ext, g, G2, read_m, read_z)
    elif rest:
        last, n_last = rest[-1], rest_ext[-1]
        R, R0 = combine_regs(n_last, fsize), combine_regs(n_last)
        if R < R0:
            ctx.notes.append(f"combine: {R} output{'s' if R > 1 else ''} of {last.name} per gang, not {R0}, so that "
                             f"{fmt_index(fsize)} frame{'s give' if fsize != 1 else ' gives'} the combine at least "
                             f"{COMBINE_GANGS} gangs (a gang's lanes walk all the partials of its frame)")
        db = internal("db")
        guarded = not (sp.Eq(sp.Mod(n_last, R), 0) is sp.true)
        outs = [R * db + r for r in range(R)]
        accs = [f"o{r}" for r in range(R)]
        conds = [sp.StrictLessThan(d, n_last) if guarded else True for d in outs]

        def o_read(d):
            idx = tuple(frame) + (g,) + tuple(rest[:-1]) + (d,)
            return lambda gx: Read("@o_part", tuple(sp.sympify(i).xreplace({g: gx}) for i in idx),
                                   tuple(frame) + (g,) + tuple(rest))
        if not guarded and ctx.dtype == "f32" and R % 2 == 0 and opts.pack != "none":
            # a partial's R outputs are adjacent in o_part: one packed load of R/2 8-byte words per
            # lane instead of R loads of 4 bytes (each load of the lanes, one partial each, touches
            # 32 rows of o_part; measured on the H200, the combine took 12.5 → 8.1 µs at 512 partials)
            words = tuple(f"ow{r}" for r in range(R))
            first = tuple(frame) + (g,) + tuple(rest[:-1]) + (R * db,)
            pre = (Unpack("@o_part", first, tuple(frame) + (g,) + tuple(rest), words),)
            fold = lse_fold_lanes(g, G2, [lambda gx, w=w: Local(w) for w in words], read_m, read_z, accs, conds, pre)
        else:
            fold = lse_fold_lanes(g, G2, [o_read(d) for d in outs], read_m, read_z, accs, conds)
        stores = []
        for d, acc, cond in zip(outs, accs, conds):
            out_idx = tuple(sp.sympify(x).xreplace({last: d}) for x in at.out.vars)
            st = Store(at.out.name, out_idx, tuple(at.out.vars), over_z(Local(acc)))
            stores.append(st if cond is True else Guard(cond, (st,)))
        # outputs of M and Z alone (a log-sum-exp) are written once per frame, by the gang db = 0
        # (match_softmax takes them only beside a contraction with one remaining axis)
        row = _row_stores(ctx, at, names)
        row_stores = (Guard(sp.Eq(db, 0), row),) if row else ()
        body4: tuple = fold + tuple(stores) + row_stores
        body4 = seq_over(rest[:-1], rest_ext[:-1], body4)
        blocks = sp.ceiling(n_last / R)
        if at.rows:
            blocks = sp.Max(1, blocks)      # the gang that writes the rows exists even where n_last = 0
        if R == 1:                          # no lifting: a gang per output
            loops2.append((db, blocks, f"output axis {last.name} < {fmt_index(n_last)}: a gang per output, "
                           f"{last.name} = db", sp.Integer(0), n_last))
        else:
            loops2.append((db, blocks, f"lifted output axis {last.name}: ⟨{fmt_index(n_last)}⟩ → "
                           f"⟨⌈{fmt_index(n_last)}/{R}⌉ {R}⟩, {last.name} = {R}·db + r", sp.Integer(0), n_last / R))
            ctx.lifts.append(Lift(last.name, n_last, R, "db", "r", guarded,
                                  f"combine kernel: gang × registers, {last.name} = db·{R} + r; lanes over the partials"))
    else:
        fold = lse_fold_lanes(g, G2, [lambda gx: read("@o_part", tuple(frame) + (gx,))], read_m, read_z, ["o0"])
        body4 = fold + (Store(at.out.name, tuple(at.out.vars), tuple(at.out.vars), over_z(Local("o0"))),) + _row_stores(ctx, at, names)
    nest2 = gang_nest(loops2, body4) if loops2 else (Serial(body4),)
    domain2 = tuple(zip(frame, frame_ext)) + ((g, G),) + tuple(zip(rest, rest_ext))
    ctx.kernels.append(LoopKernel(f"k{len(ctx.kernels) + 1}_combine", "log-sum-exp merge of the chunk partials"
                              + "".join(f", {r.name}" for r in at.rows)
                              + ("" if isinstance(lastg, str) else " (on targets whose partials kernel folds its "
                                 "frames: only where it does not)"),
                              domain2, nest2, None if isinstance(lastg, str) else lastg.otherwise))


def _last_gang_fold(ctx, at: SoftmaxContraction, Nd, N, gang_frame, gang_ext, members, frame, rest, rest_ext, G, G2,
                    k2: int):
    """The combine placed in the partials kernel: the last gang of a frame (a KV group's
    heads) to store its partial folds the frame's partials, where the frame has at most
    FOLD_MAX of them and there are at least FOLD_MIN_FRAMES frames (a run-time condition on
    the chunk and the sizes).  The fold: M = max_g m_g with lanes
    over the partials (one step a lane), then lanes over the output axis d = 32·k + v, the
    partials in sequence, each lane keeping the frame's heads × ⌈dv/32⌉ sums in registers:
    every load of o_part is coalesced (adjacent lanes, adjacent d) and the sums of all heads
    advance in one pass.  Returns the LastGang, or why there is none."""
    if ctx.target.lanes == "simd":
        return "the target's lanes are SIMD slots"
    if at.rows:
        return f"it also writes {', '.join(r.name for r in at.rows)}"
    if len(rest) != 1 or not sp.sympify(rest_ext[0]).is_Integer:
        return "the fold in the partials kernel takes one output axis of fixed extent"
    dv = int(rest_ext[0])
    R = max(1, -(-dv // VECTOR))
    if R * len(members) > FOLD_REGS:
        return f"{len(members)} heads × {R} outputs per lane exceed the fold's {FOLD_REGS} registers"
    frames = sp.Mul(*gang_ext) if gang_frame else sp.Integer(1)
    if (sp.sympify(frames) < FOLD_MIN_FRAMES) is sp.true:
        return f"fewer frames ({fmt_index(frames)}) than the {FOLD_MIN_FRAMES} from which the last gangs fold"
    q, v = internal("gq"), internal("dl")
    ctr_idx = tuple(gang_frame) if gang_frame else (sp.Integer(0),)
    ctx.add_buffer("@done", "scratch", tuple(gang_ext) if gang_frame else (1,))
    heads = [tuple(midx(f, mem) for f in frame) for mem in members]
    M = len(members)

    def m_at(mi):
        return Read("@m_part", heads[mi] + (q,), tuple(frame) + (q,))
    ms = [f"fm{mi}" for mi in range(M)]
    zs = [f"fz{mi}" for mi in range(M)]
    es = [f"fe{mi}" for mi in range(M)]
    outs = [(mi, k, f"fo{mi}_{k}") for mi in range(M) for k in range(R)]
    guarded = dv % VECTOR != 0
    step = []
    for mi in range(M):
        zr = Read("@z_part", heads[mi] + (q,), tuple(frame) + (q,))
        step += [Let(es[mi], _exp_diff(m_at(mi), Local(ms[mi]))),
                 Set(zs[mi], Op("add", (Local(zs[mi]), Op("mul", (Local(es[mi]), zr)))))]
    for mi, k, acc in outs:
        d = VECTOR * k + v
        o = Read("@o_part", heads[mi] + (q, d), tuple(frame) + (q,) + tuple(rest))
        st = Set(acc, Op("add", (Local(acc), Op("mul", (Local(es[mi]), o)))))
        step.append(Guard(sp.StrictLessThan(d, dv), (st,)) if guarded else st)
    stores = []
    for mi, k, acc in outs:
        d = VECTOR * k + v
        idx = tuple(midx(sp.sympify(x).xreplace({rest[0]: d}), members[mi]) for x in at.out.vars)
        val = Select(Op("ne", (Local(zs[mi]), Const(0.0))), Op("div", (Local(acc), Local(zs[mi]))), Const(0.0))
        st = Store(at.out.name, idx, tuple(at.out.vars), val)
        stores.append(Guard(sp.StrictLessThan(d, dv), (st,)) if guarded else st)
    body = tuple(Let(m, Const(-math.inf)) for m in ms) + (
        Loop(q, G2, "vector", tuple(Set(ms[mi], Op("max", (Local(ms[mi]), m_at(mi)))) for mi in range(M)),
             note=f"the frame's maxima M = max_g m_g, lanes over its ≤ {FOLD_MAX} partials",
             reduce=(("max", tuple(ms)),)),
        Loop(v, sp.Integer(VECTOR), "vector",
             tuple(Let(z, Const(0.0)) for z in zs) + tuple(Let(acc, Const(0.0)) for _, _, acc in outs)
             + (Loop(q, G2, "seq", tuple(step), note=f"the partials in sequence: Z and {M}×{R} sums per lane"),)
             + tuple(stores),
             note=f"lanes over the output axis: {rest[0].name} = {VECTOR}·k + v, k < {R} (coalesced reads of o_part)"))
    # G, the chunks of the axis's bound, bounds every frame's partials G2 (G2 = G but where the
    # token axis is read from data), so that the host can decide for all frames at once
    when = sp.And(sp.GreaterThan(G, 1), sp.LessThan(G, FOLD_MAX), sp.GreaterThan(frames, FOLD_MIN_FRAMES))
    otherwise = sp.Or(sp.StrictLessThan(frames, FOLD_MIN_FRAMES), sp.StrictGreaterThan(G, FOLD_MAX),
                      sp.StrictLessThan(G, 1), evaluate=False)      # ¬when, as relations C prints
    ragged = Nd is not N      # a frame's own partials: ⌈Nd/chunk⌉, none where Nd = 0
    if ragged:
        ctx.notes.append(f"the fold of a frame in the partials kernel: its gangs count to its own "
                         f"{fmt_index(G2)} partials, and {at.out.name} is zero-filled before the kernel for the "
                         f"frames with no tokens, which no gang folds")
    ctx.notes.append(f"combine placement: on targets with device-wide atomics and fences (cuda) the last gang of a "
                     f"frame to store its partial folds the frame's partials where {fmt_index(G)} ≤ {FOLD_MAX} and the "
                     f"frames number at least {FOLD_MIN_FRAMES} (the "
                     f"partials kernel's `last` level; a counter per frame in the scratch buffer done, zeroed before "
                     f"the kernel) and kernel k{k2}_combine runs only otherwise; on the others (openacc) k{k2}_combine "
                     "always runs")
    # G bounds every frame's partials: where it is 1, no gang counts and no counter is read
    counted = sp.And(sp.StrictGreaterThan(G, 1), sp.LessThan(G, FOLD_MAX), sp.GreaterThan(frames, FOLD_MIN_FRAMES))
    return LastGang("@done", ctr_idx, G2, when, f"k{k2}_combine", body,
                    note=f"the last of the frame's {fmt_index(G2)} gangs folds its partials where "
                         f"{fmt_index(G)} ≤ {FOLD_MAX} and {fmt_index(frames)} ≥ {FOLD_MIN_FRAMES}: {M} heads × {dv} "
                         f"outputs, lanes over {rest[0].name}" + (f"; {at.out.name} zero-filled first" if ragged else ""),
                    otherwise=otherwise, zero=(at.out.name,) if ragged else (), counted=counted)


def _direct(ctx, tile, lastg, G2) -> tuple:
    """(tile, lastg) with the tile's frame-of-one-gang store: where the frame's fold is in the
    partials kernel (LastGang.when) and the frame has one partial, that fold would be
    M = m, e^{m − M} = 1, Z = z, out = o ÷ z, so the gang stores o ÷ z itself from the tile's
    registers and the fold does not run (no round trip of the partials through memory, two
    dependent loads at the end of every gang).  No fold in the kernel: no such store."""
    # where a frame's partials are the bound's (not read from data), G2 = 1 implies when's 1 ≤ G ≤ 32
    direct = None if isinstance(lastg, str) else \
        sp.And(sp.Eq(G2, 1), *(c for c in sp.And.make_args(lastg.when) if not c.has(G2)))
    if direct is None or direct == sp.false:
        return dataclasses.replace(tile, out="", out_at=0), lastg
    ctx.notes.append(f"a frame of one gang stores {tile.out} = o ÷ z from its tile where its fold is in the "
                     f"partials kernel and it has {fmt_index(G2)} = 1 partial (its fold would be the identity)")
    return dataclasses.replace(tile, direct=direct), dataclasses.replace(lastg, direct=True)


def over_z(o):
    """A folded output's value: o ÷ Z, and 0 where Z = 0 (an empty token axis)."""
    return Select(Op("ne", (Local("Z"), Const(0.0))), Op("div", (o, Local("Z"))), Const(0.0))


def _simd_combine(ctx, at: SoftmaxContraction, names, frame, frame_ext, rest, rest_ext, g, G2, read_m, read_z) -> tuple:
    """The lse fold for SIMD lanes (a CPU): one gang per frame, the partials g in sequence,
    the last output axis d in SIMD lanes.  Each partial's weight e^{m_g − M} is computed
    once, not once per lane block, and its row of o_part is read contiguously into the
    frame's row of the sums o_sum (dv values, in L1)."""
    ctx.add_buffer("@o_sum", "scratch", frame_ext + rest_ext)
    sidx = tuple(frame) + tuple(rest)

    def lanes(body: tuple, note: str) -> tuple:
        return simd_lanes(rest, rest_ext, body, f": {note}")
    add = Op("add", (read("@o_sum", sidx), Op("mul", (Local("e"), read("@o_part", tuple(frame) + (g,) + tuple(rest))))))
    fold = lse_weight(g, G2, read_m, read_z)
    zero = lanes((Store("@o_sum", sidx, sidx, Const(0.0)),), "the sums o_sum start at 0")
    step = Loop(g, G2, "seq", fold[1] + lanes((Store("@o_sum", sidx, sidx, add),),
                                              "o_sum += exp(m_g − M)·o_g, a row of o_part read contiguously"),
                note="Z = Σ_g exp(m_g − M)·z_g and o_sum = Σ_g exp(m_g − M)·o_g, the partials in sequence")
    store = lanes((Store(at.out.name, tuple(at.out.vars), tuple(at.out.vars), over_z(read("@o_sum", sidx))),),
                  "out = o_sum ÷ Z")
    ctx.notes.append(f"combine: one gang per frame, the partials in sequence and {rest[-1].name} in SIMD lanes (the "
                     "target's lanes are SIMD slots): each partial's weight is computed once")
    return fold[0] + zero + (step,) + store + _row_stores(ctx, at, names)


def _dense_chunks(ctx, Nd, N, gang_frame, gang_ext, g, C, G, body):
    """GPU gangs over the chunks that hold tokens, when the token extent is a plain read
    of an integer input by one frame axis b (⟨b⟩ψlens): gang w < G·B is chunk g of sequence
    b in a dense enumeration (w = Σ_{b'<b} ⌈lens[b'] ÷ chunk⌉ + g), so every gang that has a
    chunk comes before every gang that has none.  Measured on the H200 (B = 32, lengths
    1024 … 7168 in a cache of 8192): with the chunks laid out (chunk, b), the empty gangs
    interleaved with the others cost a quarter of the bandwidth (75 % of the dense kernel's;
    98 % with every length 4096, the empty gangs then all last).  Returns (the gang loop,
    b, the body) or None where the target's gangs do not scan (Target.scan_gangs)."""
    if Nd is N or not ctx.target.scan_gangs or not isinstance(Nd, AppliedUndef) or len(Nd.args) != 1:
        return None
    b = Nd.args[0]
    if b not in gang_frame or ctx.buffers[Nd.func.__name__].dtype not in INDEX_DTYPES:
        return None
    nb = gang_ext[gang_frame.index(b)]
    w = internal("w")
    array = Nd.func.__name__
    ctx.notes.append(f"gangs over the chunks that hold tokens: gang w < ⌈{fmt_index(N)}/chunk⌉·{fmt_index(nb)} is "
                     f"chunk g of sequence {b.name}, w = Σ_{{{b.name}′<{b.name}}} ⌈{fmt_index(Nd.func(b))}/chunk⌉ + g "
                     f"(moac_ragged_pick, one scan of {array} per gang): the gangs without a chunk come last")
    inner = body[0].then if len(body) == 1 and isinstance(body[0], Guard) else body
    pick = internal("pick")
    new = (LetIndex(pick, ragged_pick(array, w, nb, C)), LetIndex(b, sp.Mod(pick, nb + 1)),
           LetIndex(g, sp.floor(pick / (nb + 1))), Guard(sp.StrictLessThan(b, nb), inner))
    loop = (w, G * nb, f"the chunks that hold tokens, dense: sequence {b.name} and chunk g of gang w", sp.Integer(0),
            N / C * nb)
    return loop, b, new


def _row_stores(ctx, at: SoftmaxContraction, names) -> tuple:
    """The outputs of the maximum and the sum alone (⟨frame⟩ψlse = ⟨frame⟩ψm + log(⟨frame⟩ψz)),
    from the combine's M = max_l E_l and Z = Σ_l exp(E_l − M): the whole axis's m and z."""
    frame = tuple(at.frame)
    loaded = {(at.m.name, frame): "M", (at.z.name, frame): "Z"}
    out = []
    for r in at.rows:
        ctx.add_buffer(r.name, "output", ctx.spec(tuple(r.shape)))
        body = substitute(ctx.spec_expr(r.body), dict(zip(r.vars, frame)))
        pre, x = lower(body, names, reads=loaded)
        out += list(pre) + [Store(r.name, frame, frame, x)]
        ctx.notes.append(f"output {r.name} is written by the combine from the whole axis's maximum M and sum Z")
    return tuple(out)

