"""The lowering behind the ONF: DNF rewrites that decide what is stored (guard
hoisting, materialisation), the per-kernel lowering context that turns DNF expressions
into moac's C IR while recording every access, its γ offset, lane difference and
footprint, and the two plans:

  * generic: one kernel per statement; lanes over the axis that coalesces best;
    scalar reductions lifted into per-gang partials and a combine step;
  * split-K softmax contraction: when the DNF has the shape of attention
    (m = max_l E, z = Σ_l exp(E − m), out = Σ_l exp(E − m) ÷ z × W) the token axis l
    is lifted into chunks; each gang computes a partial (m_g, z_g, o_g) and a combine
    kernel merges them with the log-sum-exp rule
    Σ_l exp(E_l − m) w_l = Σ_g exp(m_g − m) Σ_{l∈g} exp(E_l − m_g) w_l.

`onf.to_onf` is the driver; this module is its implementation.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import sympy as sp

from . import cir
from .dnf import (DNF, DConst, DIndex, DOp, DRead, DReduce, DSelect, DStmt, canonical_key,
                  fmt_index, free_index_vars)
from .errors import RewriteError
from .onf import (CHUNK, CTYPE, DTYPE_BYTES, REDUCE_GANGS, Access, Buffer, Kernel, Lift, Loop, _size_key,
                  chunk_size, footprint, freeze, freeze_cond, gamma, gamma_c, gamma_text, internal, lane_diff,
                  mangle, narrow_update)
from .targets import VECTOR_LENGTH, get_target

_IDENT = {"add": 0.0, "mul": 1.0, "max": float("-inf"), "min": float("inf")}


# --------------------------------------------------------------------------- materialisation


def hoist_selects(e):
    """Move a guard out of a reduction it does not depend on:
    Σ_j f(a if c else b) = (Σ_j f(a)) if c else (Σ_j f(b)) when c does not mention j.
    (Appending to a cache makes the score of the new row a guarded read; hoisted, the
    guard is tested once per row instead of once per element of the row.)"""
    match e:
        case DReduce(op=op, var=v, extent=ext, body=b):
            b = hoist_selects(b)
            c = _find_guard(b, {v})
            if c is not None:
                return DSelect(c, hoist_selects(DReduce(op, v, ext, _choose(b, c, True))),
                               hoist_selects(DReduce(op, v, ext, _choose(b, c, False))))
            return DReduce(op, v, ext, b)
        case DOp(op=op, args=args):
            return DOp(op, tuple(hoist_selects(a) for a in args))
        case DSelect(cond=c, then=t, other=o):
            return DSelect(c, hoist_selects(t), hoist_selects(o))
    return e


def _find_guard(e, bound: set):
    """A guard inside e that mentions none of the `bound` variables, if any."""
    match e:
        case DSelect(cond=c, then=t, other=o):
            if not (sp.sympify(c).free_symbols & bound):
                return c
            return _find_guard(t, bound) or _find_guard(o, bound)
        case DOp(args=args):
            for a in args:
                g = _find_guard(a, bound)
                if g is not None:
                    return g
        case DReduce(var=v, body=b):
            return _find_guard(b, bound | {v})
    return None


def _choose(e, cond, value: bool):
    """e with every guard `cond` decided."""
    match e:
        case DSelect(cond=c, then=t, other=o):
            if c == cond:
                return _choose(t if value else o, cond, value)
            return DSelect(c, _choose(t, cond, value), _choose(o, cond, value))
        case DOp(op=op, args=args):
            return DOp(op, tuple(_choose(a, cond, value) for a in args))
        case DReduce(op=op, var=v, extent=ext, body=b):
            return DReduce(op, v, ext, _choose(b, cond, value))
    return e


def materialise(stmts: list[DStmt], avoid: tuple = ()) -> list[DStmt]:
    """Hoist reductions an enclosing loop would recompute into scratch temporaries.

    A reduction R inside a statement is invariant in an enclosing variable v when v
    is not free in R; evaluated in place it would be recomputed for every v.  It is
    computed once into a temporary indexed by its free variables, and every occurrence
    of the same reduction (up to bound-variable names) then reads the temporary.
    Nothing is hoisted out of a guarded branch (catenation, take/drop): outside its
    guard the branch may index out of bounds.
    """
    hoisted: dict = {}        # canonical key -> temporary name
    found: dict = {}          # temporary name -> DStmt
    names = {s.name for s in stmts} | set(avoid)

    def rewrite(e, enclosing: dict, may_hoist: bool, top: bool = False):
        match e:
            case DReduce(op=op, var=v, extent=ext, body=b):
                free = [x for x in enclosing if x in free_index_vars(e)]
                key = (canonical_key(e, {x: sp.Symbol(f"_f{k}") for k, x in enumerate(free)}), len(free))
                if key in hoisted and not top:
                    return DRead(hoisted[key], tuple(free))
                new = DReduce(op, v, ext, rewrite(b, {**enclosing, v: ext}, may_hoist))
                if may_hoist and not top and any(x not in free for x in enclosing):
                    name, k = "s", 1
                    while name in names:
                        k += 1
                        name = f"s{k}"
                    names.add(name)
                    hoisted[key] = name
                    found[name] = DStmt(name, tuple(free), tuple(enclosing[x] for x in free), new, "temp")
                    return DRead(name, tuple(free))
                return new
            case DOp(op=op, args=args):
                return DOp(op, tuple(rewrite(a, enclosing, may_hoist) for a in args))
            case DSelect(cond=c, then=t, other=o):
                return DSelect(c, rewrite(t, enclosing, False), rewrite(o, enclosing, False))
        return e

    def domain(st: DStmt) -> dict:
        return {v: n for v, n in zip(st.vars, st.shape)}

    for st in stmts:                                   # discover what to hoist
        rewrite(st.body, domain(st), True)
    for name, t in list(found.items()):                # temporaries reuse each other
        found[name] = DStmt(t.name, t.vars, t.shape, rewrite(t.body, domain(t), False, top=True), "temp")
    result: list[DStmt] = []
    emitted: set = set()

    def emit_deps(e):                                  # each temporary right before its first user
        match e:
            case DRead(array=a) if a in found and a not in emitted:
                emitted.add(a)
                emit_deps(found[a].body)
                result.append(found[a])
            case DOp(args=args):
                for x in args:
                    emit_deps(x)
            case DReduce(body=b):
                emit_deps(b)
            case DSelect(then=t, other=o):
                emit_deps(t)
                emit_deps(o)

    for st in stmts:
        body = rewrite(st.body, domain(st), False, top=st.role == "temp")
        emit_deps(body)
        result.append(DStmt(st.name, st.vars, st.shape, body, st.role))
    return result


# --------------------------------------------------------------------------- lowering context


@dataclass
class _Kern:
    """Per-kernel lowering state."""
    name: str
    onf: "Builder"
    lanes: sp.Symbol | None = None
    trip: sp.Expr = sp.Integer(1)
    scope: dict = field(default_factory=dict)        # logical var -> extent
    accesses: list = field(default_factory=list)
    flops: sp.Expr = sp.Integer(0)
    loops: list = field(default_factory=list)
    counter: int = 0
    all_vars: dict = field(default_factory=dict)      # every logical variable bound in the kernel
    subst: dict = field(default_factory=dict)         # code variable -> DNF expression (unroll copies)

    def logical(self, index) -> tuple:
        return tuple(sp.expand(sp.sympify(i).xreplace(self.subst)) for i in index) if self.subst else tuple(index)

    def local(self, base: str) -> str:
        self.counter += 1
        return f"{base}{self.counter}"

    def read(self, array: str, index: tuple) -> object:
        buf = self.onf.buffers[array]
        off = gamma(index, buf.shape)
        diff = lane_diff(off, self.lanes) if self.lanes is not None else None
        self.accesses.append(Access(self.name, array, off, tuple(index), self.logical(index),
                                    gamma_text(index, buf.shape), False,
                                    self.lanes.name if self.lanes is not None else None, diff,
                                    tuple(self.all_vars.items())))
        load = cir.Load(mangle(array), gamma_c(index, buf.shape))
        if buf.dtype in ("f16", "bf16"):
            return cir.Call(f"moac_{buf.dtype}_to_f32", (load,))
        return load

    def write(self, array: str, index: tuple, value) -> object:
        buf = self.onf.buffers[array]
        off = gamma(index, buf.shape)
        diff = lane_diff(off, self.lanes) if self.lanes is not None else None
        self.accesses.append(Access(self.name, array, off, tuple(index), self.logical(index),
                                    gamma_text(index, buf.shape), True,
                                    self.lanes.name if self.lanes is not None else None, diff,
                                    tuple(self.all_vars.items())))
        return cir.Store(mangle(array), gamma_c(index, buf.shape), value)

    def loop(self, var: str, extent, level: str, meaning: str):
        self.loops.append(Loop(self.name, var, sp.sympify(extent), level, meaning))


_F2 = {"add": "+", "sub": "-", "mul": "*", "div": "/"}


class Builder:
    def __init__(self, dnf: DNF, target: str, sizes: dict, mapping: str, unroll: int = 4, storage: dict | None = None,
                 share_kv: bool = False):
        self.dnf = dnf
        self.target = get_target(target)
        self.mapping = mapping
        prog = dnf.program
        from .front.sizes import resolve
        self.subs = resolve(prog, sizes)                  # symbol -> Integer, derived sizes solved
        self.fixed = {s.name: int(v) for s, v in self.subs.items()}
        dtypes = {i.dtype for i in prog.inputs}
        # arithmetic in f64 if any input is f64, else in f32 (f16 and bf16 are widened on load)
        self.dtype = "f64" if "f64" in dtypes else "f32"
        self.ctype = CTYPE[self.dtype]
        self.fsuffix = "f" if self.ctype == "float" else ""
        self.buffers: dict = {}
        for i in prog.inputs:
            self.buffers[i.name] = Buffer(i.name, "input", (storage or {}).get(i.name, i.dtype), self.spec(i.shape),
                                          "DRAM")
        self.kernels: list = []
        self.prologue: list = []
        self.run_time: list = []
        self.unroll = unroll
        self.share_kv = share_kv
        self.lifts: list = []
        self.notes: list = []

    def spec(self, x):
        if isinstance(x, tuple):
            return tuple(self.spec(i) for i in x)
        return sp.sympify(x).xreplace(self.subs) if self.subs else sp.sympify(x)

    def spec_expr(self, e):
        """Substitute the fixed sizes into a DNF expression."""
        if not self.subs:
            return e
        s = self.spec
        match e:
            case DRead(array=a, index=idx):
                return DRead(a, s(tuple(idx)))
            case DIndex(expr=x):
                return DIndex(s(x))
            case DOp(op=op, args=args):
                return DOp(op, tuple(self.spec_expr(a) for a in args))
            case DReduce(op=op, var=v, extent=ext, body=b):
                return DReduce(op, v, s(ext), self.spec_expr(b))
            case DSelect(cond=c, then=t, other=o):
                return DSelect(s(c), self.spec_expr(t), self.spec_expr(o))
        return e

    # ---- float expressions
    def fnum(self, v: float):
        return cir.Num(float(v))

    def combine(self, op: str, acc, x):
        if op in ("add", "mul"):
            return cir.Bin(_F2[op], acc, x)
        return cir.Call(("fmax" if op == "max" else "fmin") + self.fsuffix, (acc, x))

    def lower(self, e, k: _Kern, vector_var: sp.Symbol | None = None):
        """DNF expression -> (statements, cir expression).  Records accesses and flops."""
        match e:
            case DRead(array=a, index=idx):
                return [], k.read(a, idx)
            case DConst(value=v):
                return [], self.fnum(v)
            case DIndex(expr=x):
                return [], cir.Cast(self.ctype, freeze(x))
            case DOp(op=op, args=args):
                pre, xs = [], []
                for a in args:
                    p, x = self.lower(a, k, vector_var)
                    pre += p
                    xs.append(x)
                k.flops += k.trip
                return pre, self.scalar_op(op, xs)
            case DReduce(op=op, var=v, extent=ext, body=b):
                acc = k.local("acc")
                saved_trip, saved_lanes = k.trip, k.lanes
                k.trip = k.trip * ext
                k.scope[v] = ext
                k.all_vars[v] = ext
                vec = vector_var is not None and v == vector_var
                if vec:
                    k.lanes = v
                pre, x = self.lower(b, k, vector_var)
                k.flops += k.trip
                k.trip, k.lanes = saved_trip, saved_lanes
                del k.scope[v]
                pragma = self.target.vector_pragma((op, acc)) if vec else self.target.seq
                k.loop(v.name, ext, "vector" if vec else "seq", f"reduction {format_red(op)} over {v.name}")
                loop = cir.For(mangle(v.name), freeze(ext), tuple(pre) + (cir.Assign(acc, self.combine(op, cir.Var(acc), x)),),
                               pragma, f"{'vector ' if vec else ''}reduction over DNF axis {v.name} < {fmt_index(ext)}")
                return [cir.Decl(self.ctype, acc, self.fnum(_IDENT[op])), loop], cir.Var(acc)
            case DSelect(cond=c, then=t, other=o):
                tmp = k.local("sel")
                with _guarded(k, c, True):
                    pt, xt = self.lower(t, k, vector_var)
                with _guarded(k, c, False):
                    po, xo = self.lower(o, k, vector_var)
                code = cir.If(freeze_cond(c), tuple(pt) + (cir.Assign(tmp, xt),), tuple(po) + (cir.Assign(tmp, xo),))
                return [cir.Decl(self.ctype, tmp), code], cir.Var(tmp)
        raise TypeError(e)

    def scalar_op(self, op: str, xs: list):
        f = self.fsuffix
        if op in _F2:
            return cir.Bin(_F2[op], xs[0], xs[1])
        if op in ("max", "min"):
            return cir.Call(("fmax" if op == "max" else "fmin") + f, tuple(xs))
        if op == "pow":
            return cir.Call("pow" + f, tuple(xs))
        if op == "neg":
            return cir.Neg(xs[0])
        if op == "recip":
            return cir.Bin("/", self.fnum(1.0), xs[0])
        if op == "exp":
            return cir.Call("moac_exp" + f, (xs[0],))
        if op in ("log", "sqrt"):
            return cir.Call(op + f, (xs[0],))
        if op == "abs":
            return cir.Call("fabs" + f, (xs[0],))
        raise RewriteError(f"no C for the scalar function {op}")

    def add_buffer(self, name: str, role: str, shape: tuple, placement: str = "DRAM"):
        self.buffers[name] = Buffer(name, role, self.dtype, self.spec(tuple(shape)), placement)

    @staticmethod
    def clauses_for(k: "_Kern") -> str:
        """Placeholder for a kernel's data clause; the arrays a kernel touches are known
        only after lowering, and the clause differs per entry point (present/deviceptr),
        so codegen fills it in."""
        return "$ARRAYS"

    def finish_kernel(self, k: _Kern, comment: str, code: list):
        arrays = tuple(sorted({a.array for a in k.accesses}))
        bytes_, scratch = sp.Integer(0), sp.Integer(0)
        for arr in arrays:
            buf = self.buffers[arr]
            if buf.placement != "DRAM":
                continue
            for write in (False, True):
                accs = [a for a in k.accesses if a.array == arr and a.write == write]
                if accs:
                    moved = min(max((self.footprint(a, k) for a in accs), key=_size_key), buf.size,
                                key=_size_key) * DTYPE_BYTES[buf.dtype]
                    bytes_ += moved
                    if buf.role == "scratch":
                        scratch += moved
        self.kernels.append(Kernel(k.name, comment, tuple(code), arrays, sp.expand(k.flops), sp.expand(bytes_),
                                   sp.expand(scratch), tuple(k.loops), tuple(k.accesses)))

    def footprint(self, a: Access, k: _Kern) -> sp.Expr:
        return footprint(a.logical, self.buffers[a.array].shape, dict(a.extents) or k.all_vars)


class _guarded:
    """Inside a branch guarded by `v < a`, v takes at most a values (n − a in the other
    branch): the footprints of the branch's accesses use the narrowed extent."""
    def __init__(self, k: "_Kern", cond, taken: bool):
        self.k, self.cond, self.taken, self.saved = k, sp.sympify(cond), taken, None

    def __enter__(self):
        c, k = self.cond, self.k
        if isinstance(c, sp.StrictLessThan) and c.lhs in k.all_vars:
            v, a = c.lhs, c.rhs
            self.saved = (v, k.all_vars[v])
            k.all_vars[v] = a if self.taken else k.all_vars[v] - a

    def __exit__(self, *exc):
        if self.saved:
            v, n = self.saved
            self.k.all_vars[v] = n




def format_red(op: str) -> str:
    return {"add": "Σ", "mul": "Π", "max": "max", "min": "min"}[op]


# --------------------------------------------------------------------------- plans


def _kern(b: Builder, name: str) -> _Kern:
    return _Kern(name, b)


def _bind(k: _Kern, var: sp.Symbol, extent):
    k.scope[var] = extent
    k.all_vars[var] = extent




def generic(b: Builder, stmts: list[DStmt]):
    for st in stmts:
        body = b.spec_expr(st.body)
        shape = b.spec(tuple(st.shape))
        if st.role == "update":
            old = b.buffers[st.name]
            b.buffers[st.name] = Buffer(old.name, "inout", old.dtype, old.shape, old.placement)
        elif st.role == "output" or st.name not in b.buffers:
            b.add_buffer(st.name, "output" if st.role == "output" else "scratch", shape)
        if shape:
            body, starts = narrow_update(st, body)
            _generic_array(b, st, body, shape, {v: b.spec(x) for v, x in starts.items()})
        elif isinstance(body, DReduce):
            _generic_scalar_reduction(b, st, body)
        else:
            _generic_serial(b, st, body)


def _children(e) -> tuple:
    match e:
        case DOp(args=args):
            return tuple(args)
        case DReduce(body=b):
            return (b,)
        case DSelect(then=t, other=o):
            return (t, o)
    return ()


def _outer_reductions(e, out):
    """The reductions of e that are not inside another reduction."""
    if isinstance(e, DReduce):
        out.append(e)
        return out
    for c in _children(e):
        _outer_reductions(c, out)
    return out


def _reads(e, out):
    """Every ψ-selection in e."""
    if isinstance(e, DRead):
        out.append(e)
    for c in _children(e):
        _reads(c, out)
    return out


def _lane_score(b: Builder, st: DStmt, e, var) -> float:
    """How much data the lanes read contiguously if they run over `var`."""
    score = 0.0
    for r in _reads(e, []):
        off = gamma(r.index, b.buffers[r.array].shape)
        w = _size_key(b.buffers[r.array].size)
        d = lane_diff(off, var)
        score += w if d == 1 else (0.0 if d == 0 else -w)
    if st.vars and var == st.vars[-1]:
        score += _size_key(sp.Mul(*st.shape))
    return score


def _generic_array(b: Builder, st: DStmt, body, shape, starts: dict | None = None):
    starts = starts or {}
    k = _kern(b, f"k{len(b.kernels) + 1}_{st.name}")
    outs = list(st.vars)
    reds = [r.var for r in _outer_reductions(body, [])]
    last = outs[-1]
    if b.mapping == "naive" and reds:
        vector = reds[0]
    else:
        cands = ([last] if last not in starts else []) + reds
        vector = max(cands, key=lambda v: (_lane_score(b, st, body, v), v == last)) if cands else None
    for v, n in zip(st.vars, shape):
        _bind(k, v, n - starts.get(v, 0))
    k.trip = sp.Mul(*[n - starts.get(v, 0) for v, n in zip(st.vars, shape)])
    gang_vars = outs if vector != last else outs[:-1]
    inner: list = []
    lanes_over_output = vector == last
    if lanes_over_output:
        k.lanes = last
    pre, x = b.lower(body, k, vector_var=None if lanes_over_output else vector)
    store = k.write(st.name, tuple(st.vars), x)
    inner = pre + [store]
    k.lanes = None
    if lanes_over_output:
        n_last = shape[-1]
        lift_outer, lift_inner = f"{last.name}_g", f"{last.name}_v"
        guarded = not sp.Eq(sp.Mod(n_last, VECTOR_LENGTH), 0) is sp.true
        b.lifts.append(Lift(last.name, n_last, VECTOR_LENGTH, lift_outer, lift_inner, guarded, "gang × vector"))
        body_code = [cir.Decl("int64_t", mangle(last.name),
                              freeze(internal(lift_outer) * VECTOR_LENGTH + internal(lift_inner)))]
        body_code += [cir.If(freeze_cond(sp.StrictLessThan(last, n_last)), tuple(inner))] if guarded else inner
        lane_loop = cir.For(lift_inner, cir.Int(VECTOR_LENGTH), tuple(body_code), b.target.vector_pragma(),
                            f"vector lanes: {last.name} = {lift_outer}·{VECTOR_LENGTH} + {lift_inner}")
        k.loop(lift_inner, VECTOR_LENGTH, "vector", f"lanes of DNF axis {last.name}")
        loops = [(mangle(v.name), freeze(n), f"DNF axis {v.name} < {fmt_index(n)}") for v, n in zip(gang_vars, shape)]
        loops.append((lift_outer, freeze(sp.ceiling(n_last / VECTOR_LENGTH)),
                      f"lifted DNF axis {last.name}: ⟨{fmt_index(n_last)}⟩ → ⟨⌈{fmt_index(n_last)}/{VECTOR_LENGTH}⌉ {VECTOR_LENGTH}⟩"))
        for v, n in zip(gang_vars, shape):
            k.loop(v.name, n, "gang", f"DNF axis {v.name}" + (f", from {fmt_index(starts[v])}" if v in starts else ""))
        k.loop(lift_outer, sp.ceiling(n_last / VECTOR_LENGTH), "gang", f"lifted DNF axis {last.name}")
        code = [lane_loop]
    else:
        loops = [(mangle(v.name), freeze(n), f"DNF axis {v.name} < {fmt_index(n)}") for v, n in zip(gang_vars, shape)]
    loops = [(var, ext, meaning + (f", from {fmt_index(starts[v])} (rows before are unchanged)"
                                   if v in starts else ""), freeze(starts.get(v, 0)))
             for (var, ext, meaning), v in zip(loops, list(gang_vars) + [None])]
    if not lanes_over_output:
        for v, n in zip(gang_vars, shape):
            k.loop(v.name, n, "gang", f"DNF axis {v.name}" + (f", from {fmt_index(starts[v])}" if v in starts else ""))
        code = inner
    nest = _nest(b, loops, code, k)
    what = "update" if st.role == "update" else ""
    lanes = f"lanes over {vector.name}" if vector is not None else "no vector lanes"
    b.finish_kernel(k, f"{st.name}: {what}{', ' if what else ''}{lanes}", nest)


def _nest(b: Builder, loops: list, code: list, k: _Kern) -> list:
    """Wrap `code` in the gang loops (outermost first), the pragma on the outermost."""
    body = tuple(code)
    for i, (var, ext, meaning, *start) in enumerate(reversed(loops)):
        outermost = i == len(loops) - 1
        pragma = b.target.gang_pragma(len(loops), b.clauses_for(k)) if outermost else None
        body = (cir.For(var, ext, body, pragma, meaning, start[0] if start else cir.Int(0)),)
    if not loops:
        return [cir.Block(body, b.target.serial_pragma(b.clauses_for(k)))]
    return list(body)


def _generic_scalar_reduction(b: Builder, st: DStmt, red: DReduce):
    """A rank-0 reduction over a long axis: per-gang partials, then a combine step."""
    op, v, ext = red.op, red.var, red.extent
    G = REDUCE_GANGS
    part = f"@{st.name}_part"
    b.add_buffer(part, "scratch", (sp.Integer(G),))
    k = _kern(b, f"k{len(b.kernels) + 1}_{st.name}_partials")
    chunk = sp.ceiling(ext / G)
    cname = "chunk"
    _bind(k, v, ext)
    g, c = "g", f"{v.name}_c"
    b.lifts.append(Lift(v.name, ext, G, g, c, True, "gang × vector (partials + combine)"))
    k.lanes = v
    k.trip = ext
    pre, x = b.lower(red.body, k, vector_var=None)
    k.flops += ext
    k.lanes = None
    acc = "acc0"
    lane_body = [cir.Decl("int64_t", mangle(v.name), freeze(internal(g) * internal(cname) + internal(c))),
                 cir.If(freeze_cond(sp.StrictLessThan(v, ext)),
                        tuple(pre) + (cir.Assign(acc, b.combine(op, cir.Var(acc), x)),))]
    lane = cir.For(c, cir.Var(cname), tuple(lane_body), b.target.vector_pragma((op, acc)),
                   f"vector lanes: {v.name} = g·⌈{fmt_index(ext)}/{G}⌉ + {c}, guard {v.name} < {fmt_index(ext)}")
    k.loop("g", G, "gang", f"lifted reduction axis {v.name}: ⟨{fmt_index(ext)}⟩ → ⟨{G} ⌈{fmt_index(ext)}/{G}⌉⟩")
    k.loop(c, chunk, "vector", f"lanes of {v.name}, {format_red(op)} reduction")
    gang_body = (cir.Decl(b.ctype, acc, b.fnum(_IDENT[op])), lane, k.write(part, (internal("g"),), cir.Var(acc)))
    code = [cir.Block((cir.Decl("int64_t", cname, freeze(chunk)),
                       cir.For("g", cir.Int(G), gang_body, b.target.gang_pragma(1, b.clauses_for(k)),
                               f"gang g < {G}: one partial {format_red(op)} per gang")))]
    b.finish_kernel(k, f"{st.name}: per-gang partial {format_red(op)} over {v.name}", code)
    k2 = _kern(b, f"k{len(b.kernels) + 1}_{st.name}_combine")
    gs = internal("g")
    _bind(k2, gs, sp.Integer(G))
    k2.trip = sp.Integer(G)
    load = k2.read(part, (gs,))
    k2.flops += G
    comb = [cir.Decl(b.ctype, "acc0", b.fnum(_IDENT[op])),
            cir.For("g", cir.Int(G), (cir.Assign("acc0", b.combine(op, cir.Var("acc0"), load)),), b.target.seq,
                    f"combine the {G} partials"),
            k2.write(st.name, (), cir.Var("acc0"))]
    k2.loop("g", G, "seq", "combine partials")
    b.finish_kernel(k2, f"{st.name}: combine the per-gang partials", [cir.Block(tuple(comb), b.target.serial_pragma(b.clauses_for(k2)))])


def _generic_serial(b: Builder, st: DStmt, body):
    k = _kern(b, f"k{len(b.kernels) + 1}_{st.name}")
    pre, x = b.lower(body, k)
    code = pre + [k.write(st.name, (), x)]
    b.finish_kernel(k, f"{st.name}: a single scalar", [cir.Block(tuple(code), b.target.serial_pragma(b.clauses_for(k)))])




# --------------------------------------------------------------------------- split-K softmax contraction


@dataclass(frozen=True)
class _Attn:
    m: DStmt
    z: DStmt
    out: DStmt
    frame: tuple          # frame vars of out (those m and z are indexed by)
    rest: tuple           # out's remaining vars
    l: sp.Symbol          # out's token variable
    N: sp.Expr
    E: object             # score expression in terms of l (and out's vars)
    W: object             # weight expression in terms of l and out's vars


def match_attention(stmts: tuple) -> _Attn | None:
    """Recognise m = max_l E, z = Σ_l exp(E − m), out = Σ_l exp(E − m) ÷ z × W."""
    outs = [s for s in stmts if s.role == "output"]
    temps = {s.name: s for s in stmts if s.role == "temp"}
    if len(outs) != 1 or len(temps) != 2:
        return None
    out = outs[0]
    body = out.body
    if not (isinstance(body, DReduce) and body.op == "add" and isinstance(body.body, DOp) and body.body.op == "mul"):
        return None
    l, N = body.var, body.extent
    a, w = body.body.args
    if not (isinstance(a, DOp) and a.op == "div"):
        a, w = w, a
    if not (isinstance(a, DOp) and a.op == "div"):
        return None
    ex, zr = a.args
    if not (isinstance(zr, DRead) and zr.array in temps and isinstance(ex, DOp) and ex.op == "exp"):
        return None
    sub = ex.args[0]
    if not (isinstance(sub, DOp) and sub.op == "sub" and isinstance(sub.args[1], DRead) and sub.args[1].array in temps):
        return None
    E, mr = sub.args
    m, z = temps[mr.array], temps[zr.array]
    if m is z or mr.index != zr.index:
        return None
    frame = tuple(mr.index)
    if not all(isinstance(f, sp.Symbol) and f in out.vars for f in frame):
        return None
    if tuple(out.vars[:len(frame)]) != frame:
        return None
    # m = max_v E[v]
    if not (isinstance(m.body, DReduce) and m.body.op == "max"):
        return None
    ren_m = dict(zip(m.vars, frame))
    if canonical_key(DReduce("max", l, N, E)) != canonical_key(_rename(m.body, ren_m)):
        return None
    # z = Σ_v exp(E[v] − m)
    zb = z.body
    want = DReduce("add", l, N, DOp("exp", (DOp("sub", (E, DRead(m.name, frame))),)))
    if canonical_key(want) != canonical_key(_rename(zb, dict(zip(z.vars, frame)))):
        return None
    if l in free_index_vars(DOp("add", (DRead("_", ()), w))) and False:
        return None
    return _Attn(m, z, out, frame, tuple(out.vars[len(frame):]), l, N, E, w)


def _rename(e, sub: dict):
    if not sub:
        return e
    match e:
        case DRead(array=a, index=idx):
            return DRead(a, tuple(sp.sympify(i).xreplace(sub) for i in idx))
        case DIndex(expr=x):
            return DIndex(sp.sympify(x).xreplace(sub))
        case DOp(op=op, args=args):
            return DOp(op, tuple(_rename(a, sub) for a in args))
        case DReduce(op=op, var=v, extent=ext, body=b):
            return DReduce(op, v, sp.sympify(ext).xreplace(sub), _rename(b, sub))
        case DSelect(cond=c, then=t, other=o):
            return DSelect(sp.sympify(c).xreplace(sub), _rename(t, sub), _rename(o, sub))
    return e


def _kv_group(W, frame: list, frame_ext: tuple):
    """A frame axis v that W (the weighted values) reads only through ⌊v ÷ c⌋, c a literal
    ≤ 8 that divides v's extent: GQA's query heads of one KV head.  Returns (v, c) or None.
    The c heads of a group then share one gang, so every K and V element is loaded once
    and used c times."""
    uses: dict = {}
    for r in _reads(W, []):
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


def _member_subst(grp, a, m: int) -> dict:
    """The substitution that makes the DNF speak of group member m of gang frame index a."""
    v, c = grp
    return {sp.floor(v / c): a, sp.Mod(v, c): sp.Integer(m), v: a * c + m}


def _msub(e, sub: dict):
    """Apply a member substitution to a DNF expression (floors and mods first)."""
    if not sub:
        return e
    first = {k: x for k, x in sub.items() if not isinstance(k, sp.Symbol)}
    rest = {k: x for k, x in sub.items() if isinstance(k, sp.Symbol)}
    return _rename(_rename(e, first), rest) if first else _rename(e, rest)


def _midx(ix, sub: dict):
    ix = sp.sympify(ix)
    first = {k: x for k, x in sub.items() if not isinstance(k, sp.Symbol)}
    rest = {k: x for k, x in sub.items() if isinstance(k, sp.Symbol)}
    return sp.expand(ix.xreplace(first).xreplace(rest)) if sub else ix


def _scores_pass(b: Builder, k: _Kern, E, ev, l, pidx: tuple, C, U: int, members: list) -> tuple:
    """Pass 1 of the split-K plan: the score of every token of the chunk into p, and the
    chunk maximum mg, for every group member.  With U > 1 the token loop is unrolled by U
    and the U × members score reductions are jammed into one vector loop with independent
    accumulators (more loads in flight per lane; a K row loaded once serves every member);
    a remainder loop handles cn mod U tokens."""
    M = len(members)

    def mg(mi):
        return "mg" if M == 1 else f"mg{mi}"

    def one(tok: sp.Symbol, mi: int, sc: str) -> tuple[list, list]:
        sub = members[mi]
        Eu = _rename(_msub(E, sub), {l: tok}) if tok != l else _msub(E, sub)
        pre, sx = b.lower(Eu, k, vector_var=ev)
        idx = tuple(tok if x == l else _midx(x, sub) for x in pidx)
        after = [cir.Decl(b.ctype, sc, sx),
                 k.write("@p", idx, cir.Var(sc)),
                 cir.Assign(mg(mi), b.combine("max", cir.Var(mg(mi)), cir.Var(sc)))]
        return pre, after

    def tok_decl(tok, first):
        return cir.Decl("int64_t", cir.expr(freeze(tok)), first)

    def jam(copies, label):
        """Merge the copies' vector reductions into one loop; None if they do not fit."""
        if not all(len(pre) == 2 and isinstance(pre[0], cir.Decl) and isinstance(pre[1], cir.For)
                   for pre, _ in copies):
            return None
        loops = [pre[1] for pre, _ in copies]
        if ev is None or not all(lp.var == loops[0].var and lp.extent == loops[0].extent for lp in loops):
            return None
        reds = _outer_reductions(E, [])
        if not reds or reds[0].op != "add":
            return None
        accs = [pre[0].name for pre, _ in copies]
        body = tuple(st for lp in loops for st in lp.body)
        loop = cir.For(loops[0].var, loops[0].extent, body, b.target.vector_pragma(("add", ", ".join(accs))),
                       f"vector reduction over DNF axis {ev.name}, {label} jammed")
        return [pre[0] for pre, _ in copies] + [loop] + [st for _, after in copies for st in after]

    def plain(copies):
        return [st for pre, after in copies for st in pre + after]

    gs, cs, cqs, cns = internal("g"), internal("c"), internal("cq"), internal("cn")
    single_first = freeze(gs * C + cs)
    mark = (len(k.accesses), k.flops)
    main = None
    if U > 1:
        saved_trip = k.trip
        k.trip = k.trip / (U * M)
        copies, decls = [], []
        for u in range(U):
            tok = internal(f"t{u}")
            decls.append(tok_decl(tok, freeze(gs * C + cqs * U + u)))
            k.subst = {tok: l}
            copies += [one(tok, mi, f"sc{u}" if M == 1 else f"sc{u}_{mi}") for mi in range(M)]
        k.subst = {}
        k.trip = saved_trip
        body = jam(copies, f"{U} tokens" + (f" × {M} heads" if M > 1 else ""))
        if body is None:
            U = 1
            del k.accesses[mark[0]:]       # the unrolled copies are not emitted
            k.flops = mark[1]
        else:
            main = cir.For("cq", freeze(sp.floor(cns / U)), tuple(decls + body), b.target.seq,
                           f"pass 1: tokens g·chunk + {U}·cq + u, u < {U}: scores and chunk maximum")
    saved_trip = k.trip
    k.trip = sp.Integer(0) if main is not None else k.trip / M   # the remainder's work is counted above
    copies = [one(l, mi, "sc" if M == 1 else f"sc_{mi}") for mi in range(M)]
    k.trip = saved_trip
    body = (jam(copies, f"{M} heads") if M > 1 else None) or plain(copies)
    if main is None:
        return cir.For("c", cir.Var("cn"), tuple([tok_decl(l, single_first)] + body), b.target.seq,
                       f"pass 1: token {l.name} = g·chunk + c, score and chunk maximum"),
    rest = cir.For("c", cir.Var("cn"), tuple([tok_decl(l, single_first)] + body), b.target.seq,
                   f"pass 1 remainder: the last cn mod {U} tokens",
                   start=freeze(U * sp.floor(cns / U)))
    return main, rest


def _weighted_sum_pass(b: Builder, k: _Kern, W, l, lval, pidx, frame, gsym, rest, rest_ext, trip,
                       members: list) -> tuple:
    """Pass 3 of the split-K plan: o_g[member, rest] = Σ_c p_c · W(l, rest), lanes over the
    last output axis d.  When d's extent is a literal multiple of the vector length (≤ 8
    lanes' worth), d is lifted ⟨dv⟩ → ⟨dv/32 32⟩, d = r·32 + v: lanes over v
    (γ-difference 1), r unrolled into dv/32 register accumulators per group member, so
    the token loop runs once per lane, each W element loaded once for all members."""
    M = len(members)
    W = _msub(W, members[0])                    # the same for every member (see _kv_group)

    def acc(mi, r=None):
        return ("o" if M == 1 else f"o{mi}_") + ("" if r is None else str(r))

    def p_of(mi):
        return "pc" if M == 1 else f"pc{mi}"
    last, n_last = (rest[-1], rest_ext[-1]) if rest else (None, None)
    R = int(n_last) // VECTOR_LENGTH if (n_last is not None and sp.sympify(n_last).is_Integer and
                                        int(n_last) % VECTOR_LENGTH == 0) else 0
    k.trip = trip
    if 1 <= R <= 8:
        vsym = internal("v")
        k.lanes = vsym
        pws = [k.read("@p", tuple(_midx(x, m) for x in pidx)) for m in members]
        k.flops += 2 * trip
        k.trip = trip / R / M
        terms, stores = [], []
        for r in range(R):
            Wr = _rename(W, {last: r * VECTOR_LENGTH + vsym})
            k.subst = {vsym: last - r * VECTOR_LENGTH}
            pre_w, wx = b.lower(Wr, k)
            if pre_w:
                R = 0
                break
            terms.append(cir.Decl(b.ctype, f"w{r}", wx))
            for mi, m in enumerate(members):
                terms.append(cir.Assign(acc(mi, r), cir.Bin("+", cir.Var(acc(mi, r)),
                                                           cir.Bin("*", cir.Var(p_of(mi)), cir.Var(f"w{r}")))))
                idx = tuple(_midx(f, m) for f in frame) + (gsym,) + tuple(rest[:-1]) + (r * VECTOR_LENGTH + vsym,)
                stores.append(k.write("@o_part", idx, cir.Var(acc(mi, r))))
        k.subst = {}
        k.trip = trip
        k.lanes = None
    if 1 <= R <= 8:
        b.lifts.append(Lift(last.name, n_last, VECTOR_LENGTH, "r", "v", False,
                            f"registers × vector: {last.name} = r·{VECTOR_LENGTH} + v, {R * M} accumulators per lane"))
        loads = tuple(cir.Decl(b.ctype, p_of(mi), pw) for mi, pw in enumerate(pws))
        inner = cir.For("c", cir.Var("cn"), (cir.Decl("int64_t", mangle(l.name), lval),) + loads + tuple(terms),
                        b.target.seq, "Σ over the chunk's tokens")
        body: tuple = tuple(cir.Decl(b.ctype, acc(mi, r), b.fnum(0.0)) for mi in range(M) for r in range(R)) \
            + (inner,) + tuple(stores)
        body = (cir.For("v", cir.Int(VECTOR_LENGTH), body, b.target.vector_pragma(),
                        f"vector lanes: {last.name} = r·{VECTOR_LENGTH} + v for r < {R}"),)
        k.loop("v", VECTOR_LENGTH, "vector", f"lanes of output axis {last.name} (pass 3: weighted sum)")
        k.loop("r", R, "registers", f"{R * M} accumulators per lane")
        for v, n in reversed(list(zip(rest[:-1], rest_ext[:-1]))):
            body = (cir.For(mangle(v.name), freeze(n), body, b.target.seq, f"DNF axis {v.name} < {fmt_index(n)}"),)
            k.loop(v.name, n, "seq", f"output axis {v.name}")
        return body
    # general case: one accumulator per lane and member
    k.lanes = last
    pre_w, wx = b.lower(W, k)
    pws = [k.read("@p", tuple(_midx(x, m) for x in pidx)) for m in members]
    k.flops += 2 * trip
    k.trip = trip
    adds = tuple(cir.Assign(acc(mi), cir.Bin("+", cir.Var(acc(mi)), cir.Bin("*", pw, cir.Var("w"))))
                 for mi, pw in enumerate(pws))
    inner_sum = cir.For("c", cir.Var("cn"), (cir.Decl("int64_t", mangle(l.name), lval),) + tuple(pre_w)
                        + (cir.Decl(b.ctype, "w", wx),) + adds, b.target.seq, "Σ over the chunk's tokens")
    o_stores = tuple(k.write("@o_part", tuple(_midx(f, m) for f in frame) + (gsym,) + tuple(rest), cir.Var(acc(mi)))
                     for mi, m in enumerate(members))
    k.lanes = None
    body3: tuple = tuple(cir.Decl(b.ctype, acc(mi), b.fnum(0.0)) for mi in range(M)) + (inner_sum,) + o_stores
    for i, (v, n) in enumerate(reversed(list(zip(rest, rest_ext)))):
        innermost = i == 0
        body3 = (cir.For(mangle(v.name), freeze(n), body3, b.target.vector_pragma() if innermost else b.target.seq,
                         f"{'vector lanes over ' if innermost else ''}DNF axis {v.name} < {fmt_index(n)}"),)
        k.loop(v.name, n, "vector" if innermost else "seq", f"output axis {v.name} (pass 3: weighted sum)")
    return body3


def split_k(b: Builder, at: _Attn):
    """Two kernels: per-(frame, chunk) partials and the log-sum-exp combine."""
    C = internal("chunk")          # tokens per gang, chosen at run time (moac_chunk)
    N = b.spec(at.N)
    E, W = b.spec_expr(at.E), b.spec_expr(at.W)
    frame_ext = b.spec(tuple(at.out.shape[:len(at.frame)]))
    rest_ext = b.spec(tuple(at.out.shape[len(at.frame):]))
    G = sp.ceiling(N / C)
    fsize = sp.Mul(*frame_ext) if frame_ext else sp.Integer(1)
    rsize = sp.Mul(*rest_ext) if rest_ext else sp.Integer(1)
    gsym = internal("g")
    l = at.l
    b.prologue.append(cir.Decl("int64_t", "chunk", cir.Call("moac_chunk", (freeze(N), freeze(fsize)))))
    b.run_time.append((C, chunk_size, (N, fsize)))
    b.notes.append(f"chunk = moac_chunk({fmt_index(N)}, {fmt_index(fsize)}): tokens per gang, a power of two in "
                   f"16 … {CHUNK} chosen at run time: at most 64 chunks per frame, at most about 8192 gangs")
    b.add_buffer(at.out.name, "output", b.spec(tuple(at.out.shape)))
    b.add_buffer("@m_part", "scratch", frame_ext + (G,))
    b.add_buffer("@z_part", "scratch", frame_ext + (G,))
    b.add_buffer("@o_part", "scratch", frame_ext + (G,) + rest_ext)
    b.add_buffer("@p", "scratch", frame_ext + (G * C,))
    guarded = not (sp.Eq(sp.Mod(N, C), 0) is sp.true)
    b.lifts.append(Lift(l.name, N, C, "g", "c", guarded, "gang (chunks of tokens) × seq/vector"))
    frame = list(at.frame)
    rest = list(at.rest)
    red_vars = [r.var for r in _outer_reductions(E, [])]
    ev = red_vars[0] if red_vars else None

    # ---- kernel 1: partials
    grp = _kv_group(W, frame, frame_ext) if b.share_kv else None
    if grp is not None:
        gv, gc = grp
        a = internal("a")
        members = [_member_subst(grp, a, m) for m in range(gc)]
        gang_frame = [a if f == gv else f for f in frame]
        gang_ext = tuple(sp.cancel(n / gc) if f == gv else n for f, n in zip(frame, frame_ext))
        b.notes.append(f"the {gc} values of {gv.name} that read the same rows of the weighted values "
                       f"({gv.name} = {gc}·a + m, m < {gc}) share one gang: every such row is loaded once and "
                       f"used {gc} times")
    else:
        members, gang_frame, gang_ext = [{}], list(frame), tuple(frame_ext)
    M = len(members)

    def mname(base, mi):
        return base if M == 1 else f"{base}{mi}"

    k = _kern(b, "k1_partials")
    for v, n in zip(gang_frame, gang_ext):
        _bind(k, v, n)
    _bind(k, gsym, G)
    _bind(k, l, N)
    pidx = tuple(frame) + (l,)   # p is indexed (frame, g·C + c) = (frame, l)
    lval = freeze(gsym * C + internal("c"))
    span = freeze(sp.Min(C, N - gsym * C))
    # pass 1: scores (lanes over E's reduction axis), chunk max; U tokens per pass
    k.trip = fsize * N
    pass1 = _scores_pass(b, k, E, ev, l, pidx, C, b.unroll, members)
    k.flops += k.trip
    k.loop("c", C, "seq", f"tokens of the chunk (pass 1: scores, {b.unroll} per vector pass)")
    if ev is not None:
        k.loop(ev.name, k.all_vars.get(ev, sp.Symbol("?")), "vector", "score reduction")
    # pass 2: p = exp(score − mg), chunk sum (lanes over tokens), for every member
    k.lanes = l
    k.flops += 3 * fsize * N
    pass2 = []
    for mi, m in enumerate(members):
        midx = tuple(_midx(x, m) for x in pidx)
        pl = k.read("@p", midx)
        pass2.append(cir.Decl(b.ctype, mname("zg", mi), b.fnum(0.0)))
        pass2.append(cir.For("c", cir.Var("cn"), (
            cir.Decl("int64_t", mangle(l.name), lval),
            cir.Decl(b.ctype, "e", b.scalar_op("exp", [cir.Bin("-", pl, cir.Var(mname("mg", mi)))])),
            k.write("@p", midx, cir.Var("e")),
            cir.Assign(mname("zg", mi), cir.Bin("+", cir.Var(mname("zg", mi)), cir.Var("e")))),
            b.target.vector_pragma(("add", mname("zg", mi))), "pass 2: p = exp(score − chunk max), chunk sum"))
    k.loop("c", C, "vector", "tokens of the chunk (pass 2: exp and sum)")
    k.lanes = None
    # pass 3: o_part[frame, g, rest] = Σ_c p · W   (lanes over the last output axis)
    for v, n in zip(rest, rest_ext):
        _bind(k, v, n)
    body3 = _weighted_sum_pass(b, k, W, l, lval, pidx, frame, gsym, rest, rest_ext, fsize * N * rsize, members)
    stores = []
    for mi, m in enumerate(members):
        fidx = tuple(_midx(f, m) for f in frame) + (gsym,)
        stores += [k.write("@m_part", fidx, cir.Var(mname("mg", mi))),
                   k.write("@z_part", fidx, cir.Var(mname("zg", mi)))]
    gang_body = (cir.Decl("int64_t", "cn", span),) \
        + tuple(cir.Decl(b.ctype, mname("mg", mi), b.fnum(_IDENT["max"])) for mi in range(M)) \
        + tuple(pass1) + tuple(pass2) + body3 + tuple(stores)
    # the chunk loop is outermost, so gangs that share rows of the inputs (the rows of a
    # query block, say) are launched next to each other
    loops = [("g", freeze(G), f"lifted token axis: ⟨{fmt_index(N)}⟩ → ⟨⌈{fmt_index(N)}/chunk⌉ chunk⟩, "
                              f"{l.name} = g·chunk + c")]
    loops += [(cir.expr(freeze(v)), freeze(n), f"DNF frame axis {v.name} < {fmt_index(n)}" if v in frame else
               f"groups of {M}: {gv.name} = {M}·a + m") for v, n in zip(gang_frame, gang_ext)]
    k.loop("g", G, "gang", "chunk of tokens")
    for v, n in zip(gang_frame, gang_ext):
        k.loop(v.name, n, "gang", f"frame axis {v.name}" if v in frame else f"groups of {M} {gv.name}")
    k.all_vars[gsym] = G
    b.finish_kernel(k, "per-chunk partials of the softmax contraction (max, sum, weighted sum)"
                    + (f", {M} heads per gang" if M > 1 else ""), _nest(b, loops, list(gang_body), k))

    # ---- kernel 2: combine
    k2 = _kern(b, "k2_combine")
    for v, n in zip(frame, frame_ext):
        _bind(k2, v, n)
    _bind(k2, gsym, G)
    k2.trip = fsize * G
    k2.lanes = gsym
    mp = k2.read("@m_part", tuple(frame) + (gsym,))
    c1 = cir.For("g", freeze(G), (cir.Assign("M", b.combine("max", cir.Var("M"), mp)),),
                 b.target.vector_pragma(("max", "M")), "global maximum M = max_g m_g")
    mp = k2.read("@m_part", tuple(frame) + (gsym,))
    zp = k2.read("@z_part", tuple(frame) + (gsym,))
    k2.flops += 5 * fsize * G
    c2 = cir.For("g", freeze(G), (
        cir.Assign("Z", cir.Bin("+", cir.Var("Z"), cir.Bin(
            "*", b.scalar_op("exp", [cir.Bin("-", mp, cir.Var("M"))]), zp))),),
        b.target.vector_pragma(("add", "Z")), "Z = Σ_g exp(m_g − M)·z_g")
    k2.loop("g", G, "vector", "chunks (maximum, weights, rescaled sum)")
    k2.lanes = None
    for v, n in zip(rest, rest_ext):
        _bind(k2, v, n)
    # the output axis is lifted over gangs too, d = db·32 + v: every gang recomputes the
    # (cheap) M and Z of its frame and merges 32 output elements, one per lane
    last, n_last = (rest[-1], rest_ext[-1]) if rest else (None, None)
    vsym, dbsym = internal("v"), internal("db")
    sub = {last: dbsym * VECTOR_LENGTH + vsym} if rest else {}
    out_idx = tuple(sp.sympify(x).xreplace(sub) for x in at.out.vars)
    o_idx = tuple(frame) + (gsym,) + tuple(sp.sympify(x).xreplace(sub) for x in rest)
    if rest:
        k2.all_vars[last] = n_last
        k2.subst = {vsym: last, dbsym: 0}
    k2.lanes = vsym if rest else None
    k2.trip = fsize * G * rsize
    op_ = k2.read("@o_part", o_idx)
    mp2 = k2.read("@m_part", tuple(frame) + (gsym,))
    k2.flops += 4 * fsize * G * rsize + fsize * rsize
    acc = cir.For("g", freeze(G), (cir.Assign("o", cir.Bin("+", cir.Var("o"), cir.Bin(
        "*", op_, b.scalar_op("exp", [cir.Bin("-", mp2, cir.Var("M"))])))),), b.target.seq,
        "Σ_g exp(m_g − M)·o_g")
    # Σ over no tokens is 0 (n = 0 leaves Z = 0); otherwise Z ≥ 1 (the maximum contributes exp 0)
    store = k2.write(at.out.name, out_idx,
                     cir.Cond(cir.Bin(">", cir.Var("Z"), b.fnum(0.0)), cir.Bin("/", cir.Var("o"), cir.Var("Z")), b.fnum(0.0)))
    k2.lanes = None
    k2.subst = {}
    body4: tuple = (cir.Decl(b.ctype, "o", b.fnum(0.0)), acc, store)
    loops2 = [(mangle(v.name), freeze(n), f"DNF frame axis {v.name} < {fmt_index(n)}") for v, n in zip(frame, frame_ext)]
    for v, n in zip(frame, frame_ext):
        k2.loop(v.name, n, "gang", f"frame axis {v.name}")
    if rest:
        guarded = not (sp.Eq(sp.Mod(n_last, VECTOR_LENGTH), 0) is sp.true)
        lane_body = (cir.If(freeze_cond(sp.StrictLessThan(dbsym * VECTOR_LENGTH + vsym, n_last)), body4),) \
            if guarded else body4
        body4 = (cir.For("v", cir.Int(VECTOR_LENGTH), lane_body, b.target.vector_pragma(),
                         f"vector lanes: {last.name} = db·{VECTOR_LENGTH} + v"),)
        for v, n in reversed(list(zip(rest[:-1], rest_ext[:-1]))):
            body4 = (cir.For(mangle(v.name), freeze(n), body4, b.target.seq, f"DNF axis {v.name} < {fmt_index(n)}"),)
            k2.loop(v.name, n, "seq", f"output axis {v.name}")
        loops2.append(("db", freeze(sp.ceiling(n_last / VECTOR_LENGTH)),
                       f"lifted output axis {last.name}: ⟨{fmt_index(n_last)}⟩ → ⟨⌈{fmt_index(n_last)}/{VECTOR_LENGTH}⌉ {VECTOR_LENGTH}⟩"))
        k2.loop("db", sp.ceiling(n_last / VECTOR_LENGTH), "gang", f"blocks of {VECTOR_LENGTH} of output axis {last.name}")
        k2.loop("v", VECTOR_LENGTH, "vector", f"lanes of output axis {last.name}")
        b.lifts.append(Lift(last.name, n_last, VECTOR_LENGTH, "db", "v", guarded,
                            f"combine kernel: gang × vector, {last.name} = db·{VECTOR_LENGTH} + v"))
    gang2 = (cir.Decl(b.ctype, "M", b.fnum(_IDENT["max"])), c1, cir.Decl(b.ctype, "Z", b.fnum(0.0)), c2) + body4
    k2.all_vars[gsym] = G
    b.finish_kernel(k2, "log-sum-exp merge of the chunk partials", _nest(b, loops2, list(gang2), k2))

