"""Direct evaluation of a DNF, element by element in plain Python: the tests check the
ψ-reduction against the reference interpreter with it on small shapes."""
from __future__ import annotations

import itertools

import numpy as np
import sympy as sp

from ..dtypes import as_float64
from ..front.data import INDEX_DTYPES, evaluate as evaluate_data
from ..front.interp import bind_sizes
from ..ops import OPS
from .form import DNF
from .ir import DConst, DIndex, DOp, DRead, DReduce, DSelect


def evaluate_dnf(d: DNF, arrays: dict, sizes: dict | None = None) -> dict:
    """Evaluate the DNF element by element (plain Python): used by the tests to check the
    ψ-reduction against the reference interpreter on small shapes."""
    env = bind_sizes(d.program, arrays, sizes)
    decl = {i.name: i.dtype for i in d.program.inputs}
    store = {k: as_float64(decl.get(k, "f64"), v) for k, v in arrays.items()}   # bf16, fp8: their values
    ints = {i.name: np.asarray(arrays[i.name]) for i in d.program.inputs if i.dtype in INDEX_DTYPES}

    def ival(x, ienv) -> int:
        v = evaluate_data(x, ienv, ints)
        if not v.is_Integer:
            raise ValueError(f"index {x} did not evaluate to an integer: {v}")
        return int(v)

    def ev(e, ienv):
        match e:
            case DRead(array=a, index=idx):
                ix = tuple(ival(i, ienv) for i in idx)
                arr = store[a]
                for k, i in enumerate(ix):
                    if not 0 <= i < arr.shape[k]:
                        raise IndexError(f"DNF reads {a}{list(ix)} outside shape {arr.shape}")
                return float(arr[ix])
            case DConst(value=v):
                return float(v)
            case DIndex(expr=x):
                return float(ival(x, ienv))
            case DOp(op=op, args=args):
                return OPS[op].python(*(ev(a, ienv) for a in args))
            case DReduce(op=op, var=v, extent=ext, body=b):
                fn, acc = OPS[op].python, OPS[op].identity
                for i in range(ival(ext, ienv)):
                    acc = fn(acc, ev(b, {**ienv, v: sp.Integer(i)}))
                return acc
            case DSelect(cond=c, then=t, other=o):
                return ev(t, ienv) if bool(evaluate_data(c, ienv, ints)) else ev(o, ienv)
        raise TypeError(e)

    out = {}
    base = dict(env)
    for st in d.stmts:
        shape = tuple(ival(s, base) for s in st.shape)
        res = np.empty(shape, dtype=np.float64) if not st.at else store[st.name].copy()
        for ix in itertools.product(*(range(s) for s in shape)):
            ienv = {**base, **{v: sp.Integer(i) for v, i in zip(st.vars, ix)}}
            res[tuple(ival(a, ienv) for a in st.at) if st.at else ix] = ev(st.body, ienv)
        if st.role == "update" and not st.at:       # the buffer keeps its rows beyond the update's
            res = np.concatenate([res, store[st.name][res.shape[0]:]], axis=0)
        store[st.name] = res
        if st.role in ("output", "update"):
            out[st.name] = res
    return out
