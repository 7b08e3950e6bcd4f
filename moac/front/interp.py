"""The reference interpreter: evaluates the core program with numpy, operation by
operation, straight from the semantics of DESIGN.md §3 (not from the DNF), in
float64, so that it can check every later stage."""
from __future__ import annotations

import numpy as np

from . import core as C
from .sizes import bind
from ..errors import ArgumentError
from ..ops import OPS, RIGHT_FOLDS



def bind_sizes(program: C.CoreProgram, arrays: dict, sizes: dict | None = None) -> dict:
    """Bind the size symbols from the given sizes and the input arrays' shapes."""
    return bind(program, {k: np.shape(v) for k, v in arrays.items()}, sizes)


def evaluate(program: C.CoreProgram, arrays: dict, sizes: dict | None = None) -> dict:
    env = bind_sizes(program, arrays, sizes)
    from ..dtypes import as_float64
    inputs = {i.name: as_float64(i.dtype, arrays[i.name]) for i in program.inputs}
    ev = _Eval(env, inputs)
    out = {name: ev.eval(node, {}) for name, node in program.outputs}
    for name, node in program.updates:          # the buffer as the call leaves it (a new array)
        rows = ev.eval(node, {})
        out[name] = np.concatenate([rows, inputs[name][rows.shape[0]:]], axis=0)
    return out


class _Eval:
    def __init__(self, env, inputs):
        self.env = env
        self.inputs = inputs
        self.memo = {}

    def size(self, e) -> int:
        import sympy as sp
        v = sp.sympify(e).xreplace(self.env)
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
                return np.float64(v)
            case C.CSize(expr=e):
                return np.float64(self.size(e))
            case C.CVec(items=items):
                return np.array([float(ev(i, cells)) for i in items], dtype=np.float64)
            case C.CIota(n=n):
                return np.arange(self.size(n), dtype=np.float64)
            case C.CNamed(arg=a):
                return ev(a, cells)
            case C.CMap(op=op, args=args):
                with np.errstate(all="ignore"):
                    return OPS[op].numpy(*(ev(a, cells) for a in args))
            case C.CPsi(index=idx, arg=a):
                arr = ev(a, cells)
                ix = tuple(self.size(i) for i in idx)
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
                return np.reshape(ev(a, cells), tuple(self.size(s) for s in node.shape))
            case C.CCat(left=a, right=b, item=item):
                x, y = ev(a, cells), ev(b, cells)
                if item:
                    y = y[None, ...]
                return np.concatenate([x, y], axis=0)
            case C.CTake(count=k, arg=a):
                arr, k = ev(a, cells), self.size(node.count)
                return arr[:k] if k >= 0 else arr[arr.shape[0] + k:]
            case C.CDrop(count=k, arg=a):
                arr, k = ev(a, cells), self.size(node.count)
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
            case C.COmega(frame=frame, args=args, cells=cs, frames=frames, body=body):
                vals = [ev(a, cells) for a in args]
                fshape = tuple(self.size(s) for s in frame)
                out = np.empty(fshape + tuple(self.size(s) for s in body.shape), dtype=np.float64)
                for fi in np.ndindex(*fshape):
                    inner = dict(cells)
                    for v, c, fr in zip(vals, cs, frames):
                        inner[c.id] = v[fi] if fr else v
                    out[fi] = ev(body, inner)
                return out
        raise TypeError(type(node).__name__)  # pragma: no cover


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
    return OPS[op].numpy.reduce(arr, axis=axis)
