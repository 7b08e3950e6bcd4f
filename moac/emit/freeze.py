"""Schedule -> C IR (stage 5a): the one place where sympy becomes C.

Every integer index expression is printed here (64-bit arithmetic; floor division and mod
through helpers where an operand can be negative), every level is spelled by the target, and
the C unit that comes out holds no sympy: codegen, build and the call path work on it alone.
"""
from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass, fields, is_dataclass

import sympy as sp
from sympy.core.function import AppliedUndef

from .. import ops
from ..errors import RewriteError
from ..dtypes import BYTES, CTYPE, OUTPUT_STORAGE, WIDENED
from ..dnf.walk import divmod_pair
from ..front.data import INDEX_DTYPES
from ..schedule.index import gamma
from ..schedule.ir import (Const, Guard, IndexValue, LastGang, Let, LetIndex, Local, Loop, Op, Read, Schedule, Scope,
                           Select, Serial, Set, Store, TensorTile, Unpack, arrays_touched, gang_chain, Prefetch)
from ..schedule.packing import WORD, word_bytes

PAIRED = ("f8e4m3", "f8e5m2")   # unpacked in pairs: a GPU converts two fp8 to two f16 in one instruction
from . import cir
from .placement import on_chip_buffers, stored, unused_scratch

def gamma_c(index: tuple, shape: tuple):
    """γ(index; shape) as C, in the same order as gamma_text; a reshape's pair (⌊x ÷ n⌋, x mod n)
    over an axis of extent n is printed as x on the second component (γ of γ′ is the identity)."""
    index = [sp.sympify(i) for i in index]
    for k in range(len(index) - 1):
        pair = divmod_pair(index[k], index[k + 1])
        if pair is not None and sp.sympify(pair[1]) == sp.sympify(shape[k + 1]):
            index[k], index[k + 1] = sp.Integer(0), pair[0]
    out = None
    for k, i in enumerate(index):
        i = sp.sympify(i)
        if i == 0:
            continue
        term = freeze(i)
        for s in shape[k + 1:]:
            if s != 1:
                term = cir.mul(term, freeze(s))
        out = term if out is None else cir.Bin("+", out, term)
    return out if out is not None else cir.Int(0)


def mangle(name: str) -> str:
    """User identifiers reach C only with a trailing underscore (never a keyword or one of
    ours); moac's own buffers ('@p', '@m_part') become moac_p, moac_m_part, which no
    mangled user name can equal."""
    if name.startswith("@"):
        return "moac_" + name[1:]
    return name + "_"


# per thread, the unit to_cunit freezes: integer input -> (shape, i32 or i64); helpers freeze called
_UNIT: ContextVar = ContextVar("moac_freeze_unit")


def freeze(e) -> object:
    """sympy integer expression -> cir (int64 arithmetic)."""
    e = sp.sympify(e)
    if e.has(sp.zoo, sp.oo, -sp.oo, sp.nan):
        raise RewriteError("a size fixed at compile time divides an index expression by zero (it became "
                           f"{e}); give that size a positive value, or leave it to run time")
    return _freeze(e)


def _freeze(e) -> object:
    """freeze, for an expression already checked to be finite (its subterms are too)."""
    e = sp.sympify(e)
    if e.is_Integer:
        return cir.Int(int(e))
    if isinstance(e, sp.Symbol):
        return cir.Var(e.name if isinstance(e, sp.Dummy) else mangle(e.name))
    if isinstance(e, sp.Add):
        terms = sorted(e.args, key=lambda t: (t.is_Number, sp.default_sort_key(t)))
        out = _freeze(terms[0])
        for t in terms[1:]:
            if t.is_Number and t < 0:
                out = cir.Bin("-", out, cir.Int(int(-t)))
            elif isinstance(t, sp.Mul) and t.args[0].is_Number and t.args[0] < 0:
                out = cir.Bin("-", out, _freeze(-t))
            else:
                out = cir.Bin("+", out, _freeze(t))
        return out
    if isinstance(e, sp.Mul):
        c, rest = e.as_coeff_Mul()
        if c == -1:
            return cir.Neg(_freeze(rest))
        factors = sorted(sp.Mul.make_args(e), key=lambda t: (not t.is_Number, sp.default_sort_key(t)))
        out = _freeze(factors[0])
        for f in factors[1:]:
            out = cir.Bin("*", out, _freeze(f))
        return out
    if isinstance(e, sp.Pow) and e.exp.is_Integer and e.exp > 0:
        out = _freeze(e.base)
        for _ in range(int(e.exp) - 1):
            out = cir.Bin("*", out, _freeze(e.base))
        return out
    if isinstance(e, sp.floor):
        num, den = sp.fraction(sp.together(e.args[0]))
        if num.is_nonnegative and den.is_nonnegative and den != 0:   # C truncation is the floor here
            return cir.Bin("/", _freeze(num), _freeze(den))
        return cir.Call("moac_floordiv", (_freeze(num), _freeze(den)))
    if isinstance(e, sp.ceiling):
        num, den = sp.fraction(sp.together(e.args[0]))
        if num.is_nonnegative and den.is_nonnegative and den != 0:     # no branch (a vectorised loop keeps plain loads)
            n, d = _freeze(num), _freeze(den)
            return cir.Bin("+", cir.Bin("/", n, d), cir.Bin("!=", cir.Bin("%", n, d), cir.Int(0)))
        return cir.Call("moac_ceildiv", (_freeze(num), _freeze(den)))
    if isinstance(e, sp.Mod):
        if e.args[0].is_nonnegative and e.args[1].is_nonnegative and e.args[1] != 0:
            return cir.Bin("%", _freeze(e.args[0]), _freeze(e.args[1]))
        return cir.Call("moac_mod", (_freeze(e.args[0]), _freeze(e.args[1])))
    if isinstance(e, AppliedUndef) and "@" in e.func.__name__:     # schedule/index.ragged_pick
        helper, name = e.func.__name__.split("@")
        fn = f"{helper}_{_UNIT.get()[0][name][1]}"
        _UNIT.get()[1].add(fn)
        w, n, chunk = e.args
        return cir.Call(fn, (_freeze(w), cir.Var(mangle(name)), _freeze(n), _freeze(chunk)))
    if isinstance(e, AppliedUndef):               # an element of an integer input (front/data.py)
        name = e.func.__name__
        if name not in _UNIT.get()[0]:
            raise RewriteError(f"cannot generate C for the read {e} of an integer input it does not know")
        return cir.Cast("int64_t", cir.Load(mangle(name), gamma_c(e.args, _UNIT.get()[0][name][0])))
    if isinstance(e, (sp.Max, sp.Min)):
        fn = "moac_imax" if isinstance(e, sp.Max) else "moac_imin"
        args = list(e.args)
        out = _freeze(args[0])
        for a in args[1:]:
            out = cir.Call(fn, (out, _freeze(a)))
        return out
    raise RewriteError(f"cannot generate C for the index expression {e}")


def freeze_cond(c) -> object:
    c = sp.sympify(c)
    if c is sp.true:
        return cir.Int(1)
    if c is sp.false:
        return cir.Int(0)
    if isinstance(c, sp.And):
        out = freeze_cond(c.args[0])
        for a in c.args[1:]:
            out = cir.Bin("&&", out, freeze_cond(a))
        return out
    if isinstance(c, sp.Or):
        out = freeze_cond(c.args[0])
        for a in c.args[1:]:
            out = cir.Bin("||", out, freeze_cond(a))
        return out
    ops = {sp.StrictLessThan: "<", sp.LessThan: "<=", sp.StrictGreaterThan: ">", sp.GreaterThan: ">=",
           sp.Equality: "==", sp.Unequality: "!="}
    for cls, op in ops.items():
        if isinstance(c, cls):
            return cir.Bin(op, freeze(c.lhs), freeze(c.rhs))
    raise RewriteError(f"cannot generate C for the condition {c}")


def var_name(v) -> str:
    """A loop or index variable in C: moac's own (sympy Dummy) as they are, the DNF's mangled."""
    return v.name if isinstance(v, sp.Dummy) else mangle(v.name)


# --------------------------------------------------------------------------- the C unit


@dataclass(frozen=True, slots=True)
class CKernel:
    name: str
    comment: str
    code: tuple          # cir statements: the parallel region and what surrounds it
    arrays: tuple        # C names of the arrays it touches


@dataclass(frozen=True, slots=True)
class Scratch:
    cname: str
    count: str           # elements, as a C expression


@dataclass(frozen=True, slots=True)
class CUnit:
    """A Schedule frozen into C IR: everything codegen prints, nothing symbolic."""
    target: str
    plan: str
    filename: str
    ctype: str
    kernels: tuple       # CKernel
    scratch: tuple       # Scratch
    prologue: tuple      # cir declarations of the run-time choices
    summary: tuple       # header comment lines
    sizes: dict          # array name -> element count as a C expression (data regions)
    helpers: tuple = ()  # names of the optional helpers the kernels call (codegen.OPTIONAL_HELPERS)
    aligned: tuple = ()  # C names of the arrays read in packed words (their addresses must be 8-byte aligned)
    index_bits: int = 64 # 32: the kernels index with int32_t; the entry checks every buffer fits;
                         # 0: `kernels` are the 64-bit ones and `kernels32` the 32-bit ones, the
                         # entry runs the 32-bit ones where every buffer fits
    kernels32: tuple = ()
    shared: tuple = ()   # Scratch entries of the gang-placed buffers the target keeps on chip (sizes per gang)
    aligned16: tuple = ()  # C names of the arrays read in 16-byte words (tensor-core tiles)
    conditions: tuple = ()  # (C test, message): the program's conditions on the run-time sizes alone,
                            # which the entry checks first (return 6), as a Python call does


class _Freezer:
    def __init__(self, s: Schedule, target, index_bits: int = 64):
        self.t = target
        self.itype = f"int{index_bits}_t"     # loop and index variables
        self.bufs = {b.name: b for b in s.buffers}
        self.ctype = "double" if s.dtype == "f64" else "float"
        self.suffix = "f" if self.ctype == "float" else ""
        self.calls = dict(target.c_calls)   # C functions the target replaces by helpers
        self.helpers: set = set()     # helpers beyond the standard ones the C uses
        self.aligned: set = set()     # arrays read in packed words
        self.aligned16: set = set()   # arrays read in 16-byte words (tensor-core tiles)
        self.stored: set = set()      # the buffers the kernel being frozen stores to
        self.on_chip: set = set()     # the gang buffers kept in the gang's on-chip memory
        self.skipped: set = set()     # scratch buffers only a statement the target skips uses (LastGang counters)

    def _at(self, buf, idx):
        """An access's offset: into the whole buffer, or into the gang's tile where the target
        keeps a gang-placed buffer on chip (index − the tile's base, laid out by its extents)."""
        if buf.name in self.on_chip:
            local = tuple(sp.expand(sp.sympify(i) - b) for i, (b, _) in zip(idx, buf.tile))
            return gamma_c(local, tuple(e for _, e in buf.tile))
        return gamma_c(idx, buf.shape)

    def expr(self, e):
        match e:
            case Read(array=a, index=idx):
                buf = self.bufs[a]
                load = cir.Load(mangle(a), self._at(buf, idx))
                return self.widen(buf.dtype, load)
            case Const(value=v):
                return cir.Num(float(v))
            case IndexValue(expr=x):
                return cir.Cast(self.ctype, freeze(x))
            case Local(name=n):
                return cir.Var(n)
            case Select(test=t, a=a, b=b):
                return cir.Cond(self.expr(t), self.expr(a), self.expr(b))
            case Op(op=op, args=args):
                xs = [self.expr(a) for a in args]
                o = ops.OPS[op]
                if o.c_infix:
                    return cir.Bin(o.c_infix, xs[0], xs[1])
                if op == "neg":
                    return cir.Neg(xs[0])
                if op == "recip":
                    return cir.Bin("/", cir.Num(1.0), xs[0])
                if o.c_fn:
                    fn = o.c_fn + self.suffix
                    alias = self.calls.get(fn)
                    if alias:
                        self.helpers.add(alias)
                    return cir.Call(alias or fn, tuple(xs))
                raise RewriteError(f"no C for the scalar function {op}")
        raise TypeError(e)

    def widen(self, dtype: str, x):
        """A loaded element as the arithmetic type: narrow storage through its helper, an
        integer input's element converted."""
        if dtype in INDEX_DTYPES:
            return cir.Cast(self.ctype, x)
        if dtype not in WIDENED:
            return x
        if dtype not in ("f16", "bf16"):              # the always-printed helpers (HELPERS)
            self.helpers.add(f"moac_{dtype}_to_f32")
        return cir.Call(f"moac_{dtype}_to_f32", (x,))

    def stmts(self, body, arrays: tuple) -> tuple:
        out = []
        for st in body:
            x = self.stmt(st, arrays)
            out += x if isinstance(x, list) else [x]
        return tuple(out)

    def unpack(self, st: Unpack) -> list:
        """Whole 8-byte words (or one 4-byte word), each split into its elements (narrow
        storage widened: 4 bf16/f16 or 8 one-byte elements per 8-byte word, 4 one-byte
        elements per 4-byte word; f32 by its bits)."""
        buf = self.bufs[st.array]
        self.aligned.add(mangle(st.array) if buf.role != "scratch" else "workspace")   # scratch: 256-byte offsets
        esize = BYTES[buf.dtype]
        wb = word_bytes(st.width, esize)                 # 8-byte words, or one 4-byte word
        per = wb // esize
        first = sp.expand(gamma(st.index, buf.shape) / per)
        load, wtype = ("moac_word", "uint64_t") if wb == WORD else ("moac_word4", "uint32_t")
        if st.array in self.stored and wb == WORD:     # written by the same kernel: no read-only path
            load = "moac_sword"
        out = []
        for wi in range(st.width * esize // wb):
            word = f"{st.names[wi * per]}w"
            self.helpers.add(load)
            out.append(cir.Decl(wtype, word, cir.Call(load, (cir.Var(mangle(st.array)), freeze(first + wi)))))
            for e in range(per):
                bits = cir.Var(word) if e == 0 else cir.Bin(">>", cir.Var(word), cir.Int(8 * esize * e))
                if buf.dtype in PAIRED:          # fp8 two at a time: the 16 bits of a pair, this half
                    pair = cir.Var(word) if e < 2 else cir.Bin(">>", cir.Var(word), cir.Int(16 * (e // 2)))
                    self.helpers.update({f"moac_{buf.dtype}_to_f32", f"moac_{buf.dtype}x2_to_f32"})
                    val = cir.Call(f"moac_{buf.dtype}x2_to_f32", (cir.Cast("uint16_t", pair), cir.Int(e % 2)))
                elif buf.dtype in WIDENED:
                    part = cir.Cast(f"uint{8 * esize}_t", bits)
                    val = self.widen(buf.dtype, part if CTYPE[buf.dtype].startswith("u") else
                                     cir.Cast(CTYPE[buf.dtype], part))
                else:
                    self.helpers.add("moac_bits_to_f32")
                    val = cir.Call("moac_bits_to_f32", (cir.Cast("uint32_t", bits),))
                out.append(cir.Decl(self.ctype, st.names[wi * per + e], val))
        return out

    def stmt(self, st, arrays: tuple):
        match st:
            case Let(name=n, value=v):
                return cir.Decl(self.ctype, n, None if v is None else self.expr(v))
            case LetIndex(var=v, value=x):
                return cir.Decl(self.itype, var_name(v), freeze(x))
            case Set(name=n, value=v):
                return cir.Assign(n, self.expr(v))
            case Unpack():
                return self.unpack(st)
            case Prefetch(array=a, index=idx, nbytes=nb):
                if self.t.prefetch is None:
                    return []
                at = cir.expr(self._at(self.bufs[a], idx), self.ctype)
                return cir.Prefetch(f"(const char *)&{mangle(a)}[{at}]", nb, self.t.prefetch)
            case Store(array=a, index=idx, value=v):
                buf = self.bufs[a]
                value = self.expr(v)
                if buf.dtype in OUTPUT_STORAGE:           # a narrow output: rounded when stored
                    self.helpers.add(f"moac_f32_to_{buf.dtype}")
                    value = cir.Call(f"moac_f32_to_{buf.dtype}", (value,))
                return cir.Store(mangle(a), self._at(buf, idx), value)
            case Guard(cond=c, then=t, other=o):
                return cir.If(freeze_cond(c), self.stmts(t, arrays), self.stmts(o, arrays))
            case Serial(body=b):
                return cir.Block(self.stmts(b, arrays), self.t.serial_pragma(arrays), level="serial")
            case LastGang() if self.t.last_gang:
                b = self.bufs[st.counter]
                return cir.LastGang(mangle(st.counter), gamma_c(st.index, b.shape), freeze(st.count), freeze_cond(st.when),
                                    freeze(b.size), self.stmts(st.body, arrays), st.note,
                                    tuple((mangle(z), freeze(self.bufs[z].size)) for z in st.zero),
                                    st.direct and self.t.tensor_tiles,
                                    None if st.counted is None else freeze_cond(st.counted))
            case LastGang():              # the target runs the combine kernel instead, with no counter
                return self.skipped.add(st.counter) or []
            case TensorTile() if self.t.tensor_tiles:
                return self.tile(st)
            case Scope(body=b):           # a TensorTile included: its lane passes, where tiles are not printed
                return cir.Block(self.stmts(b, arrays))
            case Loop():
                return self.loop(st, arrays, outermost_gang=True)
        raise TypeError(st)

    def tile(self, st: TensorTile) -> cir.Tile:
        self.helpers.add("moac_tile")
        if st.even:
            self.helpers.add("moac_tile_even")
        self.aligned16.update(mangle(a) for a in (st.q, st.k, st.v))
        if st.direct is not None:     # a frame of one gang's outputs (LastGang.direct: it skips such frames)
            self.helpers.add("moac_tile_out")
        m, z, o = (mangle(p) for p in st.parts)
        return cir.Tile(st.shape, st.rows, st.dk, st.dv, mangle(st.q), mangle(st.k), mangle(st.v), (m, z, o),
                        freeze(st.q_at), freeze(st.k_at), freeze(st.v_at), freeze(st.start),
                        freeze(st.count), self.expr(st.score), var_name(st.row), var_name(st.tok_var),
                        freeze(st.m_at), freeze(st.z_at), freeze(st.o_at), st.storage,
                        None if st.weight is None else self.expr(st.weight),
                        None if st.blocks is None else tuple((freeze(b), k) for b, k in st.blocks), st.warps,
                        *((mangle(st.out), freeze(st.out_at), freeze_cond(st.direct)) if st.direct is not None else ()))

    def loop(self, lp: Loop, arrays: tuple, outermost_gang: bool):
        if lp.level == "gang":
            pragma = self.t.gang_pragma(len(gang_chain((lp,))), arrays) if outermost_gang else None
            if len(lp.body) == 1 and isinstance(lp.body[0], Loop) and lp.body[0].level == "gang":
                body = (self.loop(lp.body[0], arrays, outermost_gang=False),)
            else:
                body = self.stmts(lp.body, arrays)
        else:
            pragma = self.t.vector_pragma(lp.reduce) if lp.level == "vector" else \
                self.t.seq if lp.level == "seq" else None
            body = self.stmts(lp.body, arrays)
        return cir.For(var_name(lp.var), freeze(lp.extent), body, pragma, lp.note or None, freeze(lp.start),
                       self.itype, lp.level, lp.reduce if lp.level == "vector" else (),
                       iterations=freeze(sp.expand(sp.sympify(lp.extent) - sp.sympify(lp.start))))


INT_HELPERS = ("moac_floordiv", "moac_ceildiv", "moac_mod", "moac_imin", "moac_imax")


def _narrow_calls(x):
    """The kernels' integer helpers in their 32-bit versions (moac_imin -> moac_imin32)."""
    if isinstance(x, cir.Call) and x.fn in INT_HELPERS:
        return cir.Call(x.fn + "32", tuple(_narrow_calls(a) for a in x.args))
    if isinstance(x, tuple):
        return tuple(_narrow_calls(y) for y in x)
    if is_dataclass(x) and not isinstance(x, type):
        return type(x)(**{f.name: _narrow_calls(getattr(x, f.name)) for f in fields(x)})
    return x


def index_width(s: Schedule, target, index_bits: int, dropped: set = frozenset()) -> int:
    """The index width a unit is built with: 32 or 64 as asked; for 0 (auto) 32 where the
    fixed sizes prove every buffer has fewer than 2^31 elements, 64 where they prove the
    opposite, and otherwise 0 — both kernels, chosen at run time — on device targets (64
    on host targets).  `dropped`: scratch buffers the code does not use."""
    live = [b for b in s.buffers if b.name not in dropped]
    sizes = [sp.sympify(b.size) for b in live]
    if index_bits == 32:
        big = next(((b, x) for b, x in zip(live, sizes) if x.is_number and int(x) >= 2**31 - 1), None)
        if big is not None:      # the entry would refuse every call (return 3)
            raise RewriteError(f"32-bit indices (--index-bits 32) cannot address '{big[0].name}': the fixed sizes give "
                               f"it {int(big[1]):,} elements, 2^31 − 1 or more; use --index-bits 0 or 64")
    if index_bits:
        return index_bits
    if all(x.is_number for x in sizes):
        return 32 if all(int(x) < 2**31 - 1 for x in sizes) else 64
    return 0 if target.device_entry else 64


def _kernels(s: Schedule, target, bits: int) -> tuple:
    f = _Freezer(s, target, bits)
    f.on_chip = on_chip_buffers(s, target)
    kernels = []
    for k in s.kernels:
        arrays = tuple(mangle(a) for a in sorted(arrays_touched(k.body, set())))
        f.stored = stored(k.body, set())
        code = f.stmts(k.body, arrays)
        if k.unfolded is not None and target.last_gang:    # another kernel's last gangs fold where it fails
            code = (cir.If(freeze_cond(k.unfolded), code),)
        kernels.append(CKernel(k.name, k.comment, _narrow_calls(code) if bits == 32 else code, arrays))
    if target.lower is not None:                      # a target's C IR -> C IR lowering, and the helpers it calls
        floats = frozenset(mangle(b.name) for b in s.buffers if b.dtype == "f32") if f.ctype == "float" else frozenset()
        kernels, extra = target.lower(kernels, floats)
        f.helpers.update(extra)
    return tuple(kernels), f


def to_cunit(s: Schedule, counts, target, index_bits: int = 64) -> CUnit:
    """Freeze a Schedule (and its counts, for the header) into a C unit."""
    token = _UNIT.set(({b.name: (tuple(b.shape), b.dtype) for b in s.buffers
                        if b.role == "input" and b.dtype in INDEX_DTYPES}, set()))
    try:
        return _to_cunit(s, counts, target, index_bits)
    finally:
        _UNIT.reset(token)


def _to_cunit(s: Schedule, counts, target, index_bits: int) -> CUnit:
    # a scratch buffer only lane passes use that the target's tiles replace is neither
    # allocated nor counted in the 32-bit check: frozen kernels say which the code uses (an
    # explicit width is frozen once; the automatic one looks at the 64-bit kernels first)
    first = index_bits or 64
    kernels, f = _kernels(s, target, first)
    dropped = unused_scratch(s, kernels, mangle)
    bits = index_width(s, target, index_bits, dropped)
    if bits == 32 and first != 32:
        _UNIT.get()[1].clear()
        kernels, f = _kernels(s, target, 32)
    kernels32 = _kernels(s, target, 32)[0] if bits == 0 else ()
    on_chip = on_chip_buffers(s, target)
    scratch = tuple(Scratch(mangle(b.name), cir.expr(freeze(b.size))) for b in s.buffers
                    if b.role == "scratch" and b.name not in on_chip and b.name not in f.skipped
                    and b.name not in dropped)
    shared = tuple(Scratch(mangle(b.name), cir.expr(freeze(b.tile_size))) for b in s.buffers if b.name in on_chip)
    prologue = tuple(cir.Decl("int64_t", var_name(c.var), cir.Call(c.rule, tuple(freeze(a) for a in c.args)))
                     for c in s.choices)
    summary = [f"traffic {str(counts.traffic)} bytes (minimum {str(counts.minimum)})"]
    if s.fixed:
        summary.append("fixed sizes: " + ", ".join(f"{k} = {v}" for k, v in s.fixed.items()))
    summary.append({0: "index arithmetic: 32-bit kernels where every buffer has fewer than 2^31 elements "
                       "(checked at run time), 64-bit ones otherwise",
                    32: "index arithmetic: 32-bit (the entry checks that every buffer has fewer than 2^31 elements)",
                    64: "index arithmetic: 64-bit"}[bits])
    sizes = {b.name: cir.expr(freeze(b.size)) for b in s.buffers if b.name not in dropped}
    f.helpers.update(_UNIT.get()[1])
    return CUnit(target.name, s.description, s.dnf.program.source.filename, f.ctype, kernels, scratch,
                 prologue, tuple(summary), sizes, tuple(sorted(f.helpers)), tuple(sorted(f.aligned)),
                 bits, kernels32, shared, tuple(sorted(f.aligned16)), entry_conditions(s))


def entry_conditions(s: Schedule) -> tuple:
    """(C test, message) for each condition on the sizes alone that the fixed ones leave open
    (a △ count within its axis, room in a cache), each once and none that another implies:
    the entry returns 6 where one fails (a C caller's wrong sizes refused, not read past an
    array's end)."""
    from ..front.sizes import implied, size_conditions
    prog = s.dnf.program
    fixed = {x: sp.Integer(s.fixed[x.name]) for x in prog.sizes if x.name in s.fixed}
    open_ = [(c, cond) for c, cond in size_conditions(prog, fixed) if cond not in (sp.true, sp.false)]  # false: sizes.py
    weaker = implied([cond for _, cond in open_])
    return tuple((cir.expr(freeze_cond(cond)), c.message.replace("*/", "* /"))
                 for k, (c, cond) in enumerate(open_) if k not in weaker)
