"""The generic plan: one kernel per statement.

Array statements: gangs over the output axes, vector lanes over the axis whose reads
coalesce best (the last output axis, lifted ⟨n⟩ → ⟨⌈n/32⌉ 32⟩ with a guard, or a
reduction axis).  Rank-0 reductions: the axis lifted over 256 gangs into partials and a
combine step.  Every other scalar: a serial region.  It fits every DNF, so it is last.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import sympy as sp

from ... import ops
from ...dnf import DRead, DReduce, DStmt, fmt_index, reads, substitute
from ...dnf import children, map_children
from ...dnf.passes import materialise
from ..index import gamma, internal, lane_diff, narrow_update, size_key
from ..ir import Buffer, Const, LoopKernel, Let, LetIndex, Lift, Local, Loop, Op, Serial, Scope, Set, Store, Guard
from ..lower import Names, lower, read

NAME = "generic"
VECTOR = 32            # lanes of a vector loop
REDUCE_GANGS = 256     # gangs for a lifted scalar reduction
SMALL_REDUCTION = 4096  # a scalar reduction over at most this many steps runs in one gang


@dataclass(frozen=True)
class Match:
    stmts: tuple        # the statements after materialisation
    naive: bool


def match(stmts: tuple, ctx, opts) -> Match:
    prog = ctx.dnf.program
    avoid = tuple(prog.size_names()) + tuple(i.name for i in prog.inputs)
    return Match(tuple(materialise(list(stmts), avoid=avoid)), opts.mapping == "naive")


def describe(m: Match) -> str:
    return "generic (one kernel per statement)" + (", naive lanes over reduction axes" if m.naive else "")


def schedule(ctx, m: Match, opts) -> None:
    statements(ctx, m.stmts, m.naive)


def statements(ctx, stmts, naive: bool = False) -> None:
    """One kernel per statement (also used by other plans for the statements they leave)."""
    for st in stmts:
        if st.at:                               # a scatter's index, at the fixed sizes
            st = replace(st, at=ctx.spec(tuple(st.at)))
        body = ctx.spec_expr(st.body)
        shape = ctx.spec(tuple(st.shape))
        if st.role == "update":
            old = ctx.buffers[st.name]
            ctx.buffers[st.name] = Buffer(old.name, "inout", old.dtype, old.shape, old.placement)
        elif st.role == "output" or st.name not in ctx.buffers:
            ctx.add_buffer(st.name, "output" if st.role == "output" else "scratch", shape)
        if shape:
            body, starts = narrow_update(st, body)
            _array(ctx, st, body, shape, {v: ctx.spec(x) for v, x in starts.items()}, naive)
        elif isinstance(body, DReduce):
            _scalar_reduction(ctx, st, body)
        elif outer_reductions(body, []):        # a scalar of reductions ((Σ x) × 3): each reduced on its own
            done = {}
            for k, r in enumerate(outer_reductions(body, []), start=1):
                part = f"@{st.name}_r{k}"
                ctx.add_buffer(part, "scratch", ())
                _scalar_reduction(ctx, DStmt(part, (), (), r, "temp"), r)
                done[id(r)] = DRead(part, ())
            _serial(ctx, st, _replace(body, done))
        else:
            _serial(ctx, st, body)


def _replace(e, done: dict):
    """e with each node whose id is in `done` replaced by done[id]."""
    if id(e) in done:
        return done[id(e)]
    return map_children(e, lambda c: _replace(c, done))


def outer_reductions(e, out):
    """The reductions of e that are not inside another reduction."""
    if isinstance(e, DReduce):
        out.append(e)
        return out
    for c in children(e):
        outer_reductions(c, out)
    return out


def _lane_score(ctx, st: DStmt, e, var) -> float:
    """How much data the lanes read contiguously if they run over `var`."""
    score = 0.0
    for r in reads(e):
        off = gamma(r.index, ctx.buffers[r.array].shape)
        w = size_key(ctx.buffers[r.array].size)
        d = lane_diff(off, var)
        score += w if d == 1 else (0.0 if d == 0 else -w)
    if st.vars and var == st.vars[-1]:
        score += size_key(sp.Mul(*st.shape))
    return score


def gang_nest(loops: list, body: tuple) -> tuple:
    """Wrap `body` in gang loops (var, extent, note, start[, trip]), outermost first."""
    for var, ext, note, start, *trip in reversed(loops):
        body = (Loop(var, ext, "gang", body, note=note, start=start, trip=trip[0] if trip else None),)
    return body


def _array(ctx, st: DStmt, body, shape, starts: dict, naive: bool):
    names = Names()
    name = f"k{len(ctx.kernels) + 1}_{st.name}"
    outs = list(st.vars)
    reds = [r.var for r in outer_reductions(body, [])]
    last = outs[-1]
    if naive and reds:
        vector = reds[0]
    else:
        cands = ([last] if last not in starts else []) + reds
        vector = max(cands, key=lambda v: (_lane_score(ctx, st, body, v), v == last)) if cands else None
    domain = tuple((v, n - starts.get(v, 0)) for v, n in zip(st.vars, shape))
    lanes_over_output = vector == last
    gang_vars = outs if not lanes_over_output else outs[:-1]
    pre, x = lower(body, names, vector_var=None if lanes_over_output else vector)
    inner = tuple(pre) + (Store(st.name, st.target, st.target, x),)

    def from_(v):
        return f", from {fmt_index(starts[v])} (rows before are unchanged)" if v in starts else ""
    loops = [(v, n, f"DNF axis {v.name} < {fmt_index(n)}" + from_(v), starts.get(v, sp.Integer(0)))
             for v, n in zip(gang_vars, shape)]
    if lanes_over_output:
        n_last = shape[-1]
        outer, lane = internal(f"{last.name}_g"), internal(f"{last.name}_v")
        guarded = not sp.Eq(sp.Mod(n_last, VECTOR), 0) is sp.true
        ctx.lifts.append(Lift(last.name, n_last, VECTOR, outer.name, lane.name, guarded, "gang × vector"))
        code = (LetIndex(last, outer * VECTOR + lane),) + (
            (Guard(sp.StrictLessThan(last, n_last), inner),) if guarded else inner)
        lane_loop = Loop(lane, VECTOR, "vector", code, note=f"vector lanes: {last.name} = {outer.name}·{VECTOR} + "
                         f"{lane.name}", lanes=last, trip=sp.Integer(VECTOR))
        loops.append((outer, sp.ceiling(n_last / VECTOR), f"lifted DNF axis {last.name}: ⟨{fmt_index(n_last)}⟩ → "
                      f"⟨⌈{fmt_index(n_last)}/{VECTOR}⌉ {VECTOR}⟩", sp.Integer(0), n_last / VECTOR))
        nest = gang_nest(loops, (lane_loop,))
    else:
        nest = gang_nest(loops, inner) if loops else (Serial(inner),)
    what = "update" if st.role == "update" else ""
    lanes = f"lanes over {vector.name}" if vector is not None else "no vector lanes"
    ctx.kernels.append(LoopKernel(name, f"{st.name}: {what}{', ' if what else ''}{lanes}", domain, nest))


def _scalar_reduction(ctx, st: DStmt, red: DReduce):
    """A rank-0 reduction over a long axis: per-gang partials, then a combine step; over an
    extent known to be at most SMALL_REDUCTION, one gang whose lanes reduce it (splitting a
    few elements across 256 gangs and combining the partials would cost more than it saves)."""
    op, v, ext = red.op, red.var, red.extent
    base = st.name.lstrip("@")                 # an internal scratch scalar (@y_r1) names its kernels y_r1
    small = sp.sympify(ctx.spec(ext))
    if small.is_Integer and int(small) <= SMALL_REDUCTION:
        names = Names()
        pre, x = lower(red, names, vector_var=v)
        g = internal("g")
        code = gang_nest([(g, sp.Integer(1), f"one gang: the extent {fmt_index(small)} ≤ {SMALL_REDUCTION} is "
                           "too small to split", sp.Integer(0))], tuple(pre) + (Store(st.name, st.target, st.target, x),))
        ctx.kernels.append(LoopKernel(f"k{len(ctx.kernels) + 1}_{base}", f"{base}: {ops.red_symbol(op)} over "
                                  f"{v.name} in one gang, lanes over {v.name}", ((g, sp.Integer(1)),), code))
        return
    G = REDUCE_GANGS
    part = f"@{base}_part"
    ctx.add_buffer(part, "scratch", (sp.Integer(G),))
    names = Names()
    chunk = sp.ceiling(ext / G)
    g, c, cname = internal("g"), internal(f"{v.name}_c"), internal("chunk")
    ctx.lifts.append(Lift(v.name, ext, G, g.name, c.name, True, "gang × vector (partials + combine)"))
    pre, x = lower(red.body, names)
    acc = "acc0"
    lane_body = (LetIndex(v, g * cname + c),
                 Guard(sp.StrictLessThan(v, ext), tuple(pre) + (Set(acc, Op(op, (Local(acc), x))),)))
    sym = ops.red_symbol(op)
    lane = Loop(c, cname, "vector", lane_body, note=f"vector lanes: {v.name} = g·⌈{fmt_index(ext)}/{G}⌉ + "
                f"{c.name}, guard {v.name} < {fmt_index(ext)}", reduce=((op, (acc,)),), lanes=v, trip=ext / G)
    gang_body = (Let(acc, Const(ops.identity(op))), lane, Store(part, (g,), (g,), Local(acc)))
    code = (Scope((LetIndex(cname, chunk),
                   Loop(g, sp.Integer(G), "gang", gang_body, note=f"gang g < {G}: one partial {sym} per gang"))),)
    ctx.kernels.append(LoopKernel(f"k{len(ctx.kernels) + 1}_{base}_partials",
                              f"{base}: per-gang partial {sym} over {v.name}", ((v, ext), (g, sp.Integer(G))), code))
    comb = (Let("acc0", Const(ops.identity(op))),
            Loop(g, sp.Integer(G), "seq", (Set("acc0", Op(op, (Local("acc0"), read(part, (g,))))),),
                 note=f"combine the {G} partials"),
            Store(st.name, st.target, st.target, Local("acc0")))
    ctx.kernels.append(LoopKernel(f"k{len(ctx.kernels) + 1}_{base}_combine",
                              f"{base}: combine the per-gang partials", ((g, sp.Integer(G)),), (Serial(comb),)))


def _serial(ctx, st: DStmt, body):
    names = Names()
    pre, x = lower(body, names)
    code = tuple(pre) + (Store(st.name, st.target, st.target, x),)
    ctx.kernels.append(LoopKernel(f"k{len(ctx.kernels) + 1}_{st.name}", f"{st.name}: a single scalar", (), (Serial(code),)))


def _stages(sub: dict) -> tuple:
    """A group-member substitution in its two stages: floors and mods first, then symbols."""
    return ({k: x for k, x in sub.items() if not isinstance(k, sp.Symbol)},
            {k: x for k, x in sub.items() if isinstance(k, sp.Symbol)})


def msub(e, sub: dict):
    """Apply a group-member substitution to a DNF expression."""
    if not sub:
        return e
    first, rest = _stages(sub)
    return substitute(substitute(e, first), rest) if first else substitute(e, rest)


def midx(ix, sub: dict):
    """Apply a group-member substitution to an index."""
    ix = sp.sympify(ix)
    if not sub:
        return ix
    first, rest = _stages(sub)
    return sp.expand(ix.xreplace(first).xreplace(rest))


def replace_node(e, old, new):
    """The DNF expression e with the sub-expression `old` replaced by `new` (a reduction by a
    placeholder read that lower() then maps to a local: plans.tiles, plans.score_parts)."""
    return new if e == old else map_children(e, lambda c: replace_node(c, old, new))
