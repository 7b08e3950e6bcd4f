"""Expressions -> core nodes: the elaborator of stage 2.

It resolves names, inlines user functions (the prelude's `softmax` among them), turns every
operator into one core node, and infers each node's shape.  Every shape rule of DESIGN.md §3
is checked here; a violation is a ShapeError at the offending expression.  Shape conditions
that only the run-time sizes decide are collected as constraints.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import sympy as sp
from sympy.core.function import AppliedUndef

from . import syntax as S
from .core import (CCat, CCell, CConst, CIndices, CInput, CIota, CMap, CNamed, COuter, Constraint,
                   Core, CPsi, CRed, CReshape, CReverse, CSize, CVec, provably, same, same_shape,
                   show_expr, show_shape)
from . import data as D
from .agreement import Agreement
from .data_shapes import ARITH, DataShapes, arith
from ..errors import MoacError, NameError_, ParseError, ShapeError, Source, Span
from ..ops import BINARY, FOLDABLE, MONADIC_ONLY, STATIC_LEFT, STRUCTURAL, UNARY, monadic



@dataclass
class Scope:
    names: dict
    parent: "Scope | None" = None

    def lookup(self, name):
        s = self
        while s is not None:
            if name in s.names:
                return s.names[name]
            s = s.parent
        return None


@dataclass
class Elab(DataShapes, Agreement):
    source: Source
    sizes: dict = field(default_factory=dict)
    fns: dict = field(default_factory=dict)         # name -> (FnDef, Source)
    constraints: list = field(default_factory=list)
    call_stack: list = field(default_factory=list)
    current_source: Source | None = None
    cell_info: dict = field(default_factory=dict)   # cell id -> (operand, its frame placeholders)
    index_hints: dict = field(default_factory=dict)  # size name -> index variable name (for `require … for b < B`)
    phi_extents: dict = field(default_factory=dict)  # Ω frame placeholder -> the frame's extent along it
    omegas: int = 0                                  # the Ω elaborated so far (their placeholders' numbers)

    # ---- errors
    def err(self, cls, msg: str, node_or_span, notes=()):
        span = node_or_span if isinstance(node_or_span, Span) else node_or_span.span
        return cls(msg, span, self.current_source or self.source, notes=tuple(notes))

    def text(self, node) -> str:
        return (self.current_source or self.source).excerpt(node.span)

    # ---- static values
    def static_int(self, node: S.Node, scope: Scope, data: bool = False) -> sp.Expr:
        """A static integer expression (numbers, sizes, + − × ÷ on them); with `data`, also
        an element of an integer input (a size per Ω frame: a take count, a ψ index)."""
        return self.static_int_of(self.expr(node, scope), node, data)

    def static_int_of(self, core: Core, node: S.Node, data: bool = False) -> sp.Expr:
        v = self.core_static(core)
        if v is None or core.rank != 0:
            also = ", or an element of an integer input (i32, i64)" if data else ""
            raise self.err(ShapeError, f"expected a static integer (numbers and sizes{also}), got {self.text(node)!r}",
                           node)
        if not data:
            self.no_data(v, node)
        return v

    def core_static(self, c: Core):
        match c:
            case CConst(value=v) if float(v).is_integer():
                return sp.Integer(int(v))
            case CSize(expr=e):
                return e
            case CNamed(arg=a):
                return self.core_static(a)
            case CMap(op=op, args=args) if op in ARITH:
                vals = [self.core_static(a) for a in args]
                return None if any(v is None for v in vals) else arith(op, vals)
        if c.rank == 0:
            return self.data_at(c, ())
        return None

    def static_vector(self, node: S.Node, scope: Scope, what: str, data: bool = False) -> tuple:
        return self.static_vector_of(self.expr(node, scope), node, what, data)

    def static_vector_of(self, core: Core, node: S.Node, what: str, data: bool = False) -> tuple:
        vec = self.core_static_vector(core)
        if vec is None:
            also = ", or elements of an integer input" if data else ""
            raise self.err(ShapeError, f"{what} must be a static vector (numbers and sizes{also}), "
                           f"got {self.text(node)!r}", node)
        if not data:
            self.no_data(vec, node)
        return vec

    def core_static_vector(self, c: Core):
        """The items of a static vector: a vector of static integers, ι n, ρA, elementwise
        arithmetic on static vectors and scalars (`ρA − 1`), or a vector whose items are
        read from an integer input or from ι s (an Ω cell: a computed ψ index)."""
        match c:
            case CVec(items=items):
                vals = [self.core_static(i) for i in items]
                return None if any(v is None for v in vals) else tuple(vals)
            case CNamed(arg=a):
                return self.core_static_vector(a)
            case CIota(n=n) if n.is_Integer:
                return tuple(sp.Integer(i) for i in range(int(n)))
        if c.rank == 0:
            v = self.core_static(c)
            return None if v is None else (v,)
        if c.rank == 1 and sp.sympify(c.shape[0]).is_Integer:   # item by item (data_at): data, ι s, arithmetic
            vals = [self.data_at(c, (sp.Integer(k),)) for k in range(int(c.shape[0]))]
            return None if any(v is None for v in vals) else tuple(vals)
        return None

    # ---- expressions
    def expr(self, node: S.Node, scope: Scope) -> Core:
        match node:
            case S.Number(value=v):
                return CConst(node.span, (), float(v))
            case S.Name(id=name):
                found = scope.lookup(name)
                if found is not None:
                    return found
                if name in self.sizes:
                    return CSize(node.span, (), self.sizes[name])
                if name in self.fns:
                    raise self.err(NameError_, f"'{name}' is a function; apply it to an argument", node)
                raise self.err(NameError_, f"undefined name '{name}'", node)
            case S.Vector(items=items):
                cores = tuple(self.expr(i, scope) for i in items)
                for i, c in zip(items, cores):
                    if c.rank != 0:
                        raise self.err(ShapeError, f"vector items must be scalars; {self.text(i)!r} has shape "
                                       f"{show_shape(c.shape)}", i)
                return CVec(node.span, (sp.Integer(len(cores)),), cores)
            case S.Monad(fn=fn, arg=arg):
                return self.apply(fn, (self.expr(arg, scope),), (arg,), node, scope)
            case S.Dyad(fn=fn, left=left, right=right):
                if isinstance(fn, S.Prim) and fn.op in STATIC_LEFT:
                    a = self.expr(right, scope)
                    return self.structural(fn, self.expr(left, scope), a, left, right, node)
                return self.apply(fn, (self.expr(left, scope), self.expr(right, scope)), (left, right), node, scope)
        raise self.err(ParseError, "not an expression", node)  # pragma: no cover

    # ---- structural dyads whose left operand is static
    def structural(self, fn: S.Prim, lc: Core, a: Core, left: S.Node, right: S.Node, node: S.Node) -> Core:
        """A structural dyad (γ, γ′, ψ, ρ, ⍉, △, ▽) whose left operand `lc` is static (or,
        for ψ, △ and ▽, read from integer data); also applied to Ω's cells."""
        op = fn.op
        if op in ("gamma", "gammacol"):
            idx = self.static_vector_of(lc, left, "the index of γ")
            shp = self.static_vector_of(a, right, "the shape of γ")
            if len(idx) != len(shp):
                raise self.err(ShapeError, f"γ needs an index and a shape of the same length, got "
                               f"{len(idx)} and {len(shp)}", node)
            order = range(len(idx)) if op == "gamma" else reversed(range(len(idx)))
            off = sp.Integer(0)
            for k in order:
                off = off * shp[k] + idx[k]
            return CSize(node.span, (), sp.expand(off))
        if op == "gammainv":                     # o γ′ s: the row-major index whose γ is o
            off = self.static_int_of(lc, left)
            shp = self.static_vector_of(a, right, "the shape of γ′")
            if not shp:
                raise self.err(ShapeError, "γ′ needs a shape of length ≥ 1", right)
            total = sp.Mul(*shp)
            inside = sp.And(sp.Ge(off, 0), sp.Lt(off, total))
            if provably(sp.Not(inside)):
                raise self.err(ShapeError, f"γ′ offset {show_expr(off)} is outside 0 ≤ o < {show_expr(total)}", left)
            if not provably(inside):
                self.constraints.append(Constraint(inside, f"γ′ offset {show_expr(off)} must lie in "
                                                   f"[0, {show_expr(total)})", left.span))
            comps, rest = [], off
            for k in reversed(range(len(shp))):
                comps.append(sp.Mod(rest, shp[k]) if k > 0 else rest)
                rest = sp.floor(rest / shp[k])
            return CVec(node.span, (sp.Integer(len(shp)),),
                        tuple(CSize(node.span, (), sp.expand(c)) for c in reversed(comps)))
        if op == "psi":
            idx = self.static_vector_of(lc, left, "a ψ index", data=True)
            return self.psi(idx, a, node, left)
        if op == "rho":
            new = self.static_vector_of(lc, left, "the new shape of ρ")
            self.rectangular(a, right, "ρ")
            for k, d in enumerate(new):
                self.length_item(d, f"the new shape of ρ has a negative item {show_expr(d)} (item {k})",
                                 f"item {k} of ρ's new shape ({show_expr(d)}) must be ≥ 0", left)
            if not same(sp.Mul(*new), sp.Mul(*a.shape)):
                raise self.err(ShapeError, f"reshape to {show_shape(new)} must keep the number of elements: "
                               f"π{show_shape(new)} = {show_expr(sp.Mul(*new))} but τ{self.text(right)} = "
                               f"{show_expr(sp.Mul(*a.shape))}", node)
            return CReshape(node.span, tuple(new), a)
        if op == "transpose":
            perm = self.static_vector_of(lc, left, "the permutation of ⍉")
            if not all(p.is_Integer for p in perm) or sorted(int(p) for p in perm) != list(range(a.rank)):
                raise self.err(ShapeError, f"dyadic ⍉ needs a permutation of ⟨0 … {a.rank - 1}⟩ for an operand of "
                               f"rank {a.rank}; got {show_shape(perm)}", left)
            perm = tuple(int(p) for p in perm)
            return self.transpose(node.span, perm, a)
        if op in ("take", "drop"):
            if lc.rank == 1:                      # a vector count: one count per leading axis
                counts = self.core_static_vector(lc)
                if counts is None:
                    raise self.err(ShapeError, f"the counts of {STRUCTURAL[op].symbol} must be a static vector "
                                   f"(numbers and sizes, or elements of an integer input), got "
                                   f"{self.text(left)!r}", left)
                if len(counts) > a.rank:
                    raise self.err(ShapeError, f"{len(counts)} counts for {STRUCTURAL[op].symbol} but the array has "
                                   f"rank {a.rank}", left)
                return self.take_drop_axes(op, counts, a, fn, left, right, node)
            return self.take_drop(op, self.static_int_of(lc, left, data=True), a, fn, left, right, node)
        raise AssertionError(op)  # pragma: no cover

    def take_drop_axes(self, op, counts: tuple, a: Core, fn, left, right, node) -> Core:
        """⟨k0 k1 …⟩ △ A: k_j taken along axis j, as MoA defines the vector take (and ▽).
        Axis j is brought to the front with a transpose, cut, and put back; the transposes
        vanish in the ψ-reduction, so the DNF reads A at shifted indices only."""
        for j, k in enumerate(counts):
            if j == 0:
                a = self.take_drop(op, k, a, fn, left, right, node)
                continue
            perm = (j,) + tuple(x for x in range(a.rank) if x != j)        # axis j first
            front = self.transpose(node.span, _inverse(perm), a)
            cut = self.take_drop(op, k, front, fn, left, right, node)
            a = self.transpose(node.span, perm, cut)
        return a

    def iota(self, a: Core, arg_node, node) -> Core:
        """ι n (⟨0 1 … n−1⟩), or ι s of a shape vector s: the array of its index vectors."""
        if a.rank == 1:
            dims = self.core_static_vector(a)
            if dims is None:
                raise self.err(ShapeError, f"ι needs a static integer or a static shape vector, got "
                               f"{self.text(arg_node)!r}", arg_node)
            self.no_data(dims, arg_node)
            for k, d in enumerate(dims):
                self.length_item(d, f"ι's shape vector has a negative item {d} (item {k})",
                                f"ι's shape vector item {k} ({show_expr(d)}) must be ≥ 0", arg_node)
            return CIndices(node.span, tuple(dims) + (sp.Integer(len(dims)),), tuple(dims))
        n = self.core_static(a)
        if n is None or a.rank != 0:
            raise self.err(ShapeError, f"ι needs a static integer or a static shape vector, got "
                           f"{self.text(arg_node)!r}", arg_node)
        self.no_data(n, arg_node)
        self.length_item(n, f"ι count {show_expr(n)} is negative", f"ι count {show_expr(n)} must be ≥ 0", arg_node)
        return CIota(node.span, (n,), n)

    def psi(self, idx: tuple, a: Core, node, idx_node) -> Core:
        if len(idx) > a.rank:
            raise self.err(ShapeError, f"ψ index {show_shape(idx)} has {len(idx)} components but the array has rank "
                           f"{a.rank}", node)
        for k, (i, n) in enumerate(zip(idx, a.shape)):
            n = D.at_index(n, idx)
            span = self.frame_range(i)
            where = f"ψ index component {k}" + ("" if span else f" ({show_expr(i)})")
            if span is not None:                        # i runs over an Ω frame (ι s under Ω): decided here
                (lo, hi), nonempty = span
                if provably(sp.Lt(lo, 0)) or provably(sp.Ge(hi, n)):    # out of range unless the frame is empty
                    raise self.err(ShapeError, f"{where} runs over [{show_expr(lo)}, {show_expr(hi)}] in the Ω "
                                   f"frame, outside 0 ≤ i < {show_expr(n)}", idx_node)
                cond = sp.And(sp.Ge(lo, 0), sp.Lt(hi, n))
                if not provably(cond):
                    self.constraints.append(Constraint(sp.Or(sp.Not(nonempty), cond),
                                                       f"{where} must lie in [0, {show_expr(n)})", idx_node.span))
                continue
            if provably(sp.Lt(i, 0)) or provably(sp.Ge(i, n)):
                raise self.err(ShapeError, f"ψ index component {k} is {i}, outside 0 ≤ i < {n}", idx_node)
            cond = sp.And(sp.Ge(i, 0), sp.Lt(i, n))
            if not provably(cond) or D.has_data(i):     # an index read from data: checked when the kernel runs
                if isinstance(i, AppliedUndef):          # a plain read: ≥ 0 by the input's own condition
                    cond = sp.Lt(i, n)
                self.constraints.append(Constraint(cond, f"{where} must lie in [0, {show_expr(n)})", idx_node.span))
        shape = D.shift_axes(a.shape[len(idx):], {**{j: idx[j] for j in range(len(idx))},
                                                  **{j: j - len(idx) for j in range(len(idx), a.rank)}})
        return CPsi(node.span, shape, tuple(idx), a)

    # ---- function application
    def apply(self, fn: S.Node, args: tuple, arg_nodes: tuple, node: S.Node, scope: Scope) -> Core:
        match fn:
            case S.Prim(op=op):
                return self.prim(op, fn, args, arg_nodes, node)
            case S.InnerFn(f=f, g=g):
                if len(args) != 2:
                    raise self.err(ShapeError, f"inner product {self.text(fn)} needs a left and a right operand", fn)
                self.check_scalar_fn(f, 2)
                self.check_scalar_fn(g, 2)
                if f.op not in FOLDABLE:
                    raise self.err(ShapeError, f"{f.text} cannot reduce; use +, −, ×, ÷, max or min", f)
                return self.inner(f.op, g.op, args[0], args[1], arg_nodes, node, fn)
            case S.OuterFn(g=g):
                if len(args) != 2:
                    raise self.err(ShapeError, "an outer product needs a left and a right operand", fn)
                self.check_scalar_fn(g, 2)
                a, b = args
                for x, xn in zip(args, arg_nodes):
                    self.cells_only(x, xn, self.text(fn))
                return COuter(node.span, a.shape + b.shape, g.op, a, b)
            case S.RedFn(fn=inner):
                if len(args) != 1:
                    raise self.err(ShapeError, f"{self.text(fn)} is monadic", fn)
                if not (isinstance(inner, S.Prim) and inner.op in FOLDABLE):
                    raise self.err(ShapeError, "red reduces with +, −, ×, ÷, max or min", inner)
                (a,) = args
                if a.rank == 0:
                    raise self.err(ShapeError, f"{self.text(fn)} needs an array of rank ≥ 1, got a scalar", arg_nodes[0])
                self.cells_only(a, arg_nodes[0], self.text(fn))
                return CRed(node.span, a.shape[1:], inner.op, a)
            case S.UserFn(name=name):
                return self.call_user(name, fn, args, arg_nodes, node)
            case S.OmegaFn(fn=inner, sigmas=vec):
                return self.omega(inner, vec, args, arg_nodes, node, scope)
        raise self.err(ParseError, "not a function", fn)  # pragma: no cover

    def check_scalar_fn(self, p: S.Prim, arity: int):
        ok = BINARY if arity == 2 else UNARY
        if p.op not in ok:
            raise self.err(ShapeError, f"{p.text} is not a scalar function here", p)

    def prim(self, op: str, fn: S.Prim, args: tuple, arg_nodes: tuple, node) -> Core:
        if len(args) == 1:
            (a,) = args
            mono = monadic(op)
            if mono:
                return CMap(node.span, a.shape, mono, (a,))
            if op in ("rho", "rav", "tau"):
                self.rectangular(a, arg_nodes[0], fn.text)
            if op == "rho":
                return CVec(node.span, (sp.Integer(a.rank),), tuple(CSize(node.span, (), s) for s in a.shape))
            if op == "iota":
                return self.iota(a, arg_nodes[0], node)
            if op == "transpose":
                return self.transpose(node.span, tuple(reversed(range(a.rank))), a)
            if op == "reverse":
                if a.rank == 0:
                    raise self.err(ShapeError, "Φ needs an array of rank ≥ 1", arg_nodes[0])
                self.cells_only(a, arg_nodes[0], "Φ")
                return CReverse(node.span, a.shape, a)
            if op == "rav":                         # ⟨τA⟩ ρ A
                total = sp.expand(sp.Mul(*a.shape))
                return CReshape(node.span, (total,), a)
            if op == "tau":
                return CSize(node.span, (), sp.expand(sp.Mul(*a.shape)))
            if op == "delta":
                return CSize(node.span, (), sp.Integer(a.rank))
            raise self.err(ShapeError, f"{fn.text} has no monadic meaning", fn)
        a, b = args
        if op in BINARY:
            if a.rank == 0:
                shape = b.shape
            elif b.rank == 0 or same_shape(a.shape, b.shape) or self.unify(fn, a, b, arg_nodes, node):
                shape = a.shape
            else:
                raise self.err(ShapeError, f"{fn.text} needs operands of equal shape or a scalar; got "
                               f"{show_shape(a.shape)} and {show_shape(b.shape)}", node)
            return CMap(node.span, shape, op, (a, b))
        if op == "cat":
            self.cells_only(a, arg_nodes[0], "#")      # a cell ⟨⟨b⟩ψlens d⟩ of an Ω may grow: its length is one number
            self.cells_only(b, arg_nodes[1], "#")
            if a.rank == 0:
                raise self.err(ShapeError, "# needs a left operand of rank ≥ 1", arg_nodes[0])
            if b.rank == a.rank and same_shape(a.shape[1:], b.shape[1:]):
                return CCat(node.span, (a.shape[0] + b.shape[0],) + a.shape[1:], a, b, False)
            if b.rank == a.rank - 1 and same_shape(a.shape[1:], b.shape):
                return CCat(node.span, (a.shape[0] + 1,) + a.shape[1:], a, b, True)
            raise self.err(ShapeError, f"# needs items of the same shape: {show_shape(a.shape)} # "
                           f"{show_shape(b.shape)} (1 ▽ ρ of each side, or an item of shape "
                           f"{show_shape(a.shape[1:])})", node)
        if op in MONADIC_ONLY:
            raise self.err(ShapeError, f"{fn.text} is monadic", fn)
        if op in STATIC_LEFT:                       # under Ω: the cells are the operands
            return self.structural(fn, a, b, arg_nodes[0], arg_nodes[1], node)
        raise self.err(ShapeError, f"{fn.text} has no dyadic meaning", fn)  # pragma: no cover

    def call_user(self, name: str, fn: S.Node, args: tuple, arg_nodes: tuple, node) -> Core:
        fdef, fsource = self.fns[name]
        if len(fdef.params) != len(args):
            want = "monadic" if len(fdef.params) == 1 else "dyadic"
            raise self.err(ShapeError, f"'{name}' is {want} (takes {len(fdef.params)} argument(s)), "
                           f"given {len(args)}", fn)
        if name in self.call_stack:
            raise self.err(NameError_, f"'{name}' calls itself; recursive functions are not supported", fn)
        local = Scope({p.id: a for p, a in zip(fdef.params, args)})
        saved = self.current_source
        self.call_stack.append(name)
        self.current_source = fsource
        try:
            for let in fdef.lets:
                local.names[let.name.id] = self.named(let.name.id, self.expr(let.expr, local), let.span)
            result = self.expr(fdef.result, local)
        except MoacError as e:
            if fsource is not self.source and not e.notes:
                # the error is the user's call: point there, the prelude's line a note
                where = f"{fsource.filename}:{e.span.line}:{e.span.col}" if e.span else fsource.filename
                line = f": {fsource.line(e.span.line).strip()}" if e.span else ""
                owner = "the prelude" if fsource.filename == "<prelude>" else fsource.filename
                e.message = f"in '{name}' ({owner}'s): {e.message}"
                e.notes = (f"at {where}{line}",)
                e.span, e.source = node.span, (saved or self.source)
                if fsource.filename == "<prelude>" and len(args) == 1 and args[0].rank >= 2:
                    e.notes += (f"the prelude's '{name}' works along axis 0 of a vector; for each row of a "
                                f"rank-{args[0].rank} array apply it to the cells with Ω: `{name} Ω⟨1⟩ "
                                f"{(saved or self.source).excerpt(arg_nodes[0].span)}`",)
            raise
        finally:
            self.call_stack.pop()
            self.current_source = saved
        return result

    @staticmethod
    def named(name: str, value: Core, span: Span) -> Core:
        if isinstance(value, (CInput, CCell)):
            return value
        return CNamed(span, value.shape, name, value)


def _inverse(perm: tuple) -> tuple:
    out = [0] * len(perm)
    for i, p in enumerate(perm):
        out[p] = i
    return tuple(out)
