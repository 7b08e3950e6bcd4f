"""The elaborator's part for Ω and for integer data and the shapes that depend on it
(front/data.py): Ω's frames and cells (each cell's shape in the frame's placeholders),
elements of integer inputs as static integers, axis placeholders that follow transposes,
operations that need rectangular operands, and conditions quantified over Ω frames."""
from __future__ import annotations

import itertools

import sympy as sp

from . import data as D
from . import syntax as S
from .core import (CCell, CConst, CSize, CIndices, CIota, CInput, CMap, CNamed, COmega, Constraint, Core, CPsi, CTranspose,
                   CVec, provably, same_shape, show_shape)
from ..errors import ShapeError

_cell_ids = itertools.count()

ARITH = frozenset({"add", "sub", "mul", "neg", "max", "min", "div"})


def arith(op: str, vals: list):
    """Static integer arithmetic: None where a quotient is not an integer."""
    if op == "add":
        return vals[0] + vals[1]
    if op == "sub":
        return vals[0] - vals[1]
    if op == "mul":
        return vals[0] * vals[1]
    if op == "neg":
        return -vals[0]
    if op == "max":
        return sp.Max(*vals)
    if op == "min":
        return sp.Min(*vals)
    q = vals[0] / vals[1]
    return q if q.is_integer else None


class DataShapes:
    """Mixed into Elab (front/elaborate.py): it supplies err, text, core_static,
    constraints, cell_info, index_hints and phi_extents."""

    def no_data(self, v, node) -> None:
        if any(D.has_data(x) for x in (v if isinstance(v, tuple) else (v,))):
            raise self.err(ShapeError, f"{self.text(node)!r} is read from an integer array; only a take or drop "
                           "count and a ψ index may be (a shape, a size or ι's argument must be static)", node)

    def data_at(self, c: Core, idx: tuple):
        """The sympy term for element `idx` of an integer input seen through ψ, Ω cells,
        names and transposes (front/data.py), or of an index array (ι n, ι s, a vector of
        static integers) at an index that may hold an Ω's frame placeholders; None if `c`
        is no such view."""
        match c:
            case CInput(dtype=dt, name=n) if dt in D.INDEX_DTYPES and len(idx) == c.rank:
                return D.read_term(n, tuple(idx))
            case CIota() if len(idx) == 1:
                return idx[0]
            case CIndices(dims=dims) if len(idx) == len(dims) + 1 and sp.sympify(idx[-1]).is_Integer:
                return idx[int(idx[-1])]
            case CVec(items=items) if len(idx) == 1 and sp.sympify(idx[0]).is_Integer:
                return self.core_static(items[int(idx[0])])
            case CMap(op=op, args=args) if op in ARITH and len(idx) == c.rank:
                vals = [self.data_at(a, idx) if a.rank else self.core_static(a) for a in args]
                return None if any(v is None for v in vals) else arith(op, vals)
            case CPsi(index=pre, arg=a):
                return self.data_at(a, tuple(pre) + tuple(idx))
            case CCell(id=i) if i in self.cell_info:
                arg, fs = self.cell_info[i]
                return self.data_at(arg, tuple(fs) + tuple(idx))
            case CNamed(arg=a):
                return self.data_at(a, idx)
            case CConst(value=v) if c.rank == 0 and not idx and float(v).is_integer():   # an Ω's scalar left
                return sp.Integer(int(v))                                                  # cell: 1 (△ Ω⟨0 1⟩) T
            case CSize(expr=e) if c.rank == 0 and not idx:
                return e
            case CTranspose(perm=p, arg=a):
                return self.data_at(a, tuple(idx[p[k]] for k in range(a.rank)))
        return None

    def frame_range(self, i):
        """The least and greatest value of an index affine in Ω frame placeholders (and in
        no data) as the placeholders run over their frames, with the condition that the
        frames are not empty; None for any other index (a constant, data, non-affine)."""
        e = sp.sympify(i)
        phis = [p for p in e.free_symbols if p in self.phi_extents]
        if not phis or D.has_data(e):
            return None
        if not e.is_polynomial(*phis) or sp.Poly(e, *phis).total_degree() > 1:
            return None                                  # not affine in the frame indices
        lo = hi = e.xreplace({p: 0 for p in phis})
        for p in phis:
            c = sp.expand(sp.diff(e, p))
            top = c * (self.phi_extents[p] - 1)
            if provably(sp.Ge(c, 0)):
                hi += top
            elif provably(sp.Le(c, 0)):
                lo += top
            else:
                return None
        return (sp.expand(lo), sp.expand(hi)), sp.And(*(sp.Ge(self.phi_extents[p], 1) for p in phis))

    def transpose(self, span, perm: tuple, a: Core) -> Core:
        """Axis k of `a` becomes axis perm[k] (`a` not ragged: see cells_only)."""
        self.cells_only(a, span, "⍉")
        shape = [None] * a.rank
        for k, p in enumerate(perm):
            shape[p] = a.shape[k]
        return CTranspose(span, tuple(shape), tuple(perm), a)

    def cells_only(self, a: Core, node, what: str) -> None:
        """A ragged array (an Ω's result whose axis lengths depend on another axis's index,
        ⟨B ⟨@0⟩ψlens⟩) is a cell of another Ω, an operand of an elementwise function or
        ψ-selected; any other function applies to its cells with Ω."""
        if any(D.axes_in(x) for x in a.shape):
            raise self.err(ShapeError, f"{what} of an array whose axis lengths depend on another axis "
                           f"({show_shape(a.shape)}) is not supported: apply it to each cell with Ω, as in "
                           f"`({what}) Ω⟨1⟩`", node)

    def rectangular(self, a: Core, node, what: str) -> None:
        """Refuse an operand whose shape depends on data (ragged) where `what` needs a
        rectangular one."""
        if D.dependent(a.shape):
            raise self.err(ShapeError, f"{what} needs an array of rectangular shape; {self.text(node)!r} has shape "
                           f"{show_shape(a.shape)}, which depends on integer data (apply {what} to each cell with "
                           "Ω, or before the take that makes it ragged)", node)

    def quantify(self, first: int, phis: tuple, frame: tuple) -> None:
        """A condition found in an Ω body that mentions the frame's placeholders (a take
        count read from `lens` within its axis) must hold in every frame: it becomes a
        condition `for b < B` (Constraint.over)."""
        for n, c in enumerate(self.constraints[first:], start=first):
            used = [j for j, p in enumerate(phis) if sp.sympify(c.cond).has(p)]
            if not used:
                continue
            sub, over = {}, []
            for j in used:
                taken = {v.name for v, _ in c.over} | {s.name for s in sp.sympify(c.cond).free_symbols}
                q = D.quantifier(frame[j], self.index_hints, taken)
                sub[phis[j]] = q
                over.append((q, frame[j]))
            message = c.message
            for p, q in sub.items():
                message = message.replace(p.name, q.name)
            self.constraints[n] = Constraint(sp.sympify(c.cond).xreplace(sub), message, c.span,
                                             tuple(over) + tuple((v, sp.sympify(e).xreplace(sub)) for v, e in c.over))

    def omega(self, fn: S.Node, vec: S.Vector, args: tuple, arg_nodes: tuple, node, scope) -> Core:
        sigmas = self.static_vector(vec, scope, "Ω's ranks")
        if len(sigmas) != len(args):
            what = "monadic" if len(args) == 1 else "dyadic"
            raise self.err(ShapeError, f"a {what} Ω needs {len(args)} rank(s), got {show_shape(sigmas)}", vec)
        frames, ks = [], []
        for s, a, an in zip(sigmas, args, arg_nodes):
            if not (s.is_Integer and 0 <= int(s) <= a.rank):
                raise self.err(ShapeError, f"Ω cell rank {s} is not within 0 … {a.rank} (the rank of "
                               f"{self.text(an)!r})", vec)
            k = a.rank - int(s)
            frames.append(a.shape[:k])
            ks.append(k)
            if D.dependent(a.shape[:k]):
                raise self.err(ShapeError, f"Ω's frame {show_shape(a.shape[:k])} of {self.text(an)!r} depends on "
                               "integer data; only a cell's shape may", an)
        frame = frames[0]
        if len(frames) == 2:
            fl, fr = frames
            if fl and fr and not same_shape(fl, fr):
                raise self.err(ShapeError, f"Ω frames must be equal or one empty: the left frame is "
                               f"{show_shape(fl)}, the right frame {show_shape(fr)}", node)
            frame = fl if fl else fr
        # each cell's shape in terms of this Ω's frame placeholders (front/data.py)
        self.omegas += 1
        phis = D.frame_placeholders(len(frame), self.omegas)
        self.phi_extents.update(zip(phis, frame))
        cells = []
        for a, k in zip(args, ks):
            shape = D.shift_axes(a.shape[k:], {**{j: phis[j] for j in range(k)},
                                               **{j: j - k for j in range(k, a.rank)}})
            cell = CCell(a.span, shape, next(_cell_ids))
            self.cell_info[cell.id] = (a, phis[:k])
            cells.append(cell)
        first = len(self.constraints)
        body = self.apply(fn, tuple(cells), arg_nodes, node, scope)
        self.quantify(first, phis, frame)
        back = {p: D.axis(j) for j, p in enumerate(phis)}
        shape = D.shift_axes(body.shape, {k: k + len(frame) for k in range(body.rank)})
        shape = tuple(sp.sympify(x).xreplace(back) for x in shape)
        return COmega(node.span, tuple(frame) + shape, tuple(frame), tuple(args), tuple(cells),
                      tuple(tuple(f) for f in frames), body, phis)
