"""The reference interpreter: evaluates the core program with numpy, operation by
operation, straight from the semantics of DESIGN.md §3 (not from the DNF), in
float64, so that it can check every later stage."""
from __future__ import annotations

import numpy as np

from . import core as C
from .sizes import bind
from ..errors import ArgumentError
from ..ops import OPS, RIGHT_FOLDS
from .data import INDEX_DTYPES, evaluate as evaluate_data
import sympy as sp



def bind_sizes(program: C.CoreProgram, arrays: dict, sizes: dict | None = None) -> dict:
    """Bind the size symbols from the given sizes and the input arrays' shapes."""
    return bind(program, {k: np.shape(v) for k, v in arrays.items()}, sizes)


def evaluate(program: C.CoreProgram, arrays: dict, sizes: dict | None = None, dtype=np.float64,
             scale: float | None = None) -> dict:
    """The outputs (and updated inputs) of the program on these arrays, evaluated in float64;
    `dtype` np.float32 evaluates every operation in float32 instead, and `scale` multiplies
    every floating input first (moac check measures with them what rounding to float32
    moves this program's results on these inputs: commands.rounding_allowance)."""
    names = [i.name for i in program.inputs]
    extra, missing = sorted(set(arrays) - set(names)), [n for n in names if n not in arrays]
    if extra or missing:
        what = "; ".join(x for x in (extra and f"unexpected argument(s) {', '.join(extra)}",
                                     missing and f"missing input(s) {', '.join(missing)}") if x)
        raise ArgumentError(f"{what}: the program's inputs are {', '.join(names) or 'none'} (sizes go in sizes=)")
    env = bind_sizes(program, arrays, sizes)
    from ..dtypes import as_float64
    inputs = {i.name: as_float64(i.dtype, arrays[i.name]).astype(dtype, copy=False) for i in program.inputs}
    if scale is not None:
        inputs = {i.name: inputs[i.name] * dtype(scale) if i.dtype not in INDEX_DTYPES else inputs[i.name]
                  for i in program.inputs}
    ints = {i.name: np.asarray(arrays[i.name]) for i in program.inputs if i.dtype in INDEX_DTYPES}
    check_data(program, env, ints)
    ev = _Eval(env, inputs, ints, dtype)
    out = {name: ev.eval(node, {}) for name, node in program.outputs}
    for name, node in program.updates:          # the buffer as the call leaves it (a new array)
        if isinstance(node.arg, C.CScatter):
            out[name] = _scatter(node.arg, env, inputs, ints, ev)
            continue
        rows = ev.eval(node, {})
        out[name] = np.concatenate([rows, inputs[name][rows.shape[0]:]], axis=0)
    return out


def _scatter(sc: C.CScatter, env: dict, inputs: dict, ints: dict, ev: "_Eval") -> np.ndarray:
    """`update S ← e`: the selection evaluated on the input's own element numbers says
    which elements S picks; they are set to e's elements (each picked at most once: the
    program's conditions, checked before, require it)."""
    x = inputs[sc.target]
    numbers = np.arange(x.size, dtype=np.float64).reshape(x.shape)      # exact below 2^53
    where = np.asarray(_Eval(env, {**inputs, sc.target: numbers}, ints).eval(sc.sel, {}), dtype=np.float64)
    value = np.broadcast_to(np.asarray(ev.eval(sc.value, {}), dtype=np.float64), where.shape)
    flat = where.astype(np.int64).ravel()
    assert len(np.unique(flat)) == flat.size, "a scatter names an element twice (its condition was not checked)"
    out = x.copy()
    out.reshape(-1)[flat] = value.ravel()
    return out


class Ragged:
    """An array whose shape depends on data (front/data.py), as the reference evaluates
    it: an object array over the frame of the Ω that made it, each entry a cell."""

    def __init__(self, cells: np.ndarray):
        self.cells = cells

    def __getitem__(self, ix: tuple):
        n = self.cells.ndim
        if len(ix) < n:
            sub = self.cells[ix]
            shapes = {np.shape(c) for c in sub.flat}
            if len(shapes) == 1:            # the index fixed what the shapes depend on: an array again
                (inner,) = shapes
                out = np.empty(sub.shape + inner, dtype=np.result_type(*(np.asarray(c) for c in sub.flat)))
                for fi in np.ndindex(*sub.shape):
                    out[fi] = sub[fi]
                return out
            return Ragged(sub)
        cell = self.cells[ix[:n]]
        return cell[ix[n:]] if len(ix) > n else cell


class _Eval:
    def __init__(self, env, inputs, ints=None, ft=np.float64):
        self.env = env
        self.inputs = inputs
        self.ints = ints or {}
        self.memo = {}
        self.ft = ft            # the floating type of every value (float64; float32 for moac check's estimate)

    def size(self, e, cells: dict | None = None) -> int:
        env = self.env
        if cells and _PHIS in cells:
            env = {**env, **cells[_PHIS]}
        v = evaluate_data(sp.sympify(e), env, self.ints)
        return int(v)

    def eval(self, node: C.Core, cells: dict):
        key = (id(node), id(cells))
        if key in self.memo:
            return self.memo[key][1]
        val = self._eval(node, cells)
        self.memo[key] = (cells, val)   # keep `cells` alive so its id is not reused
        return val

    def _eval(self, node: C.Core, cells: dict):
        ev = self.eval
        match node:
            case C.CInput(name=name):
                return self.inputs[name]
            case C.CConst(value=v):
                return self.ft(v)
            case C.CSize(expr=e):
                return self.ft(self.size(e, cells))
            case C.CVec(items=items):
                return np.array([float(ev(i, cells)) for i in items], dtype=self.ft)
            case C.CIota(n=n):
                return np.arange(self.size(n, cells), dtype=self.ft)
            case C.CIndices(dims=dims):
                axes = [np.arange(self.size(d, cells), dtype=self.ft) for d in dims]
                return np.stack(np.meshgrid(*axes, indexing="ij"), axis=-1) if axes else np.zeros(0)
            case C.CNamed(arg=a):
                return ev(a, cells)
            case C.CMap(op=op, args=args):
                vals = [ev(a, cells) for a in args]
                if any(isinstance(v, Ragged) for v in vals):
                    return _map_ragged(OPS[op].numpy, vals)
                with np.errstate(all="ignore"):
                    return OPS[op].numpy(*vals)
            case C.CPsi(index=idx, arg=a):
                arr = ev(a, cells)
                ix = tuple(self.size(i, cells) for i in idx)
                if isinstance(arr, Ragged):
                    return arr[ix]
                for k, i in enumerate(ix):
                    if not 0 <= i < arr.shape[k]:
                        raise ArgumentError(f"ψ index {ix} out of range for shape {arr.shape}")
                return arr[ix]
            case C.CTranspose(perm=perm, arg=a):
                arr = ev(a, cells)
                # axis k of arr becomes axis perm[k] of the result
                axes = [0] * len(perm)
                for k, p in enumerate(perm):
                    axes[p] = k
                return np.transpose(arr, axes)
            case C.CReshape(arg=a):
                return np.reshape(ev(a, cells), tuple(self.size(s, cells) for s in node.shape))
            case C.CCat(left=a, right=b, item=item):
                x, y = ev(a, cells), ev(b, cells)
                if item:
                    y = y[None, ...]
                return np.concatenate([x, y], axis=0)
            case C.CTake(count=k, arg=a):
                arr, k = ev(a, cells), self.size(node.count, cells)
                return arr[:k] if k >= 0 else arr[arr.shape[0] + k:]
            case C.CDrop(count=k, arg=a):
                arr, k = ev(a, cells), self.size(node.count, cells)
                return arr[k:] if k >= 0 else arr[:arr.shape[0] + k]
            case C.CReverse(arg=a):
                return ev(a, cells)[::-1]
            case C.CRed(op=op, arg=a):
                return _reduce(op, ev(a, cells), 0)
            case C.CInner(f=f, g=g, left=a, right=b):
                x, y = ev(a, cells), ev(b, cells)
                if f == "add" and g == "mul":
                    return np.tensordot(x, y, axes=([x.ndim - 1], [0]))
                n = x.shape[-1]
                xe = x.reshape(x.shape[:-1] + (n,) + (1,) * (y.ndim - 1))
                ye = y.reshape((1,) * (x.ndim - 1) + y.shape)
                with np.errstate(all="ignore"):
                    prod = OPS[g].numpy(xe, ye)
                return _reduce(f, prod, x.ndim - 1)
            case C.COuter(g=g, left=a, right=b):
                x, y = ev(a, cells), ev(b, cells)
                with np.errstate(all="ignore"):
                    return OPS[g].numpy(x.reshape(x.shape + (1,) * y.ndim), y.reshape((1,) * x.ndim + y.shape))
            case C.CCell(id=cid):
                return cells[cid]
            case C.COmega(frame=frame, args=args, cells=cs, frames=frames, body=body, phis=phis):
                vals = [ev(a, cells) for a in args]
                fshape = tuple(self.size(s, cells) for s in frame)
                ragged = bool(phis) and any(sp.sympify(s).has(*phis) for s in body.shape)
                if ragged:                            # each cell's shape depends on its frame index
                    out = np.empty(fshape, dtype=object)
                else:
                    out = np.empty(fshape + tuple(self.size(s, cells) for s in body.shape), dtype=self.ft)
                for fi in np.ndindex(*fshape):
                    inner = dict(cells)
                    inner[_PHIS] = {**cells.get(_PHIS, {}), **{p: sp.Integer(i) for p, i in zip(phis, fi)}}
                    for v, c, fr in zip(vals, cs, frames):
                        inner[c.id] = v[fi] if fr else v
                    out[fi] = ev(body, inner)
                return Ragged(out) if ragged else out
        raise TypeError(type(node).__name__)  # pragma: no cover


_PHIS = "@phis"            # the cells dict's entry binding the enclosing Ω frames' placeholders


def _map_ragged(fn, vals: list):
    """An elementwise function of ragged operands (equal frames) and scalars."""
    frame = next(v.cells for v in vals if isinstance(v, Ragged))
    out = np.empty(frame.shape, dtype=object)
    for fi in np.ndindex(*frame.shape):
        parts = [v.cells[fi] if isinstance(v, Ragged) else (v if np.ndim(v) == 0 else v[fi]) for v in vals]
        with np.errstate(all="ignore"):
            out[fi] = fn(*parts)
    return Ragged(out)


def check_data(program: C.CoreProgram, env: dict, ints: dict) -> None:
    """The conditions on integer data (Constraint.over: every element of `lens` within the
    cache, every page number below P): a positioned ArgumentError naming the first element
    that breaks one."""
    from .data import on_data, violation
    for c in program.constraints:
        if on_data(c):
            bad = violation(c.cond, c.over, env, ints)
            if bad is not None:
                raise ArgumentError(f"{c.message}, but {bad}", c.span, program.source)


def _reduce(op: str, arr: np.ndarray, axis: int) -> np.ndarray:
    """op-reduction along an axis: numpy's for the monoids; − and ÷ as the right folds
    MoA/APL define, a0 − (a1 − (… − a_{n−1})), evaluated literally from the right (the
    independent reference for the DNF's alternating form).  No terms: the identity (0 for
    + and −, 1 for × and ÷)."""
    if op in RIGHT_FOLDS:
        partner = RIGHT_FOLDS[op][0]
        if arr.shape[axis] == 0:
            return np.full(arr.shape[:axis] + arr.shape[axis + 1:], OPS[partner].identity)
        terms = np.moveaxis(arr, axis, 0)
        acc = terms[-1]
        with np.errstate(all="ignore"):
            for t in terms[-2::-1]:
                acc = OPS[op].numpy(t, acc)
        return acc
    if arr.shape[axis] == 0:
        return np.full(arr.shape[:axis] + arr.shape[axis + 1:], OPS[op].identity)
    if op in ("max", "min"):         # from the identity, as the kernels: only NaNs give ∓∞ (fmax, fmin)
        return OPS[op].numpy.reduce(arr, axis=axis, initial=OPS[op].identity)
    return OPS[op].numpy.reduce(arr, axis=axis)
