"""Direct evaluation of a DNF, element by element in plain Python: the tests check the
ψ-reduction against the reference interpreter with it on small shapes."""
from __future__ import annotations

import sympy as sp

from .ir import DNF, DConst, DIndex, DOp, DRead, DReduce, DSelect


def evaluate_dnf(d: DNF, arrays: dict, sizes: dict | None = None) -> dict:
    """Evaluate the DNF element by element (plain Python): used by the tests to check the
    ψ-reduction against the reference interpreter on small shapes."""
    import itertools
    import math

    import numpy as np

    from ..front.interp import bind_sizes

    env = bind_sizes(d.program, arrays, sizes)
    store = {k: np.asarray(v, dtype=np.float64) for k, v in arrays.items()}
    fns2 = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
            "div": lambda a, b: a / b if b != 0 else math.copysign(math.inf, a) if a != 0 else math.nan,
            "max": max, "min": min, "pow": lambda a, b: a ** b}
    fns1 = {"neg": lambda a: -a, "exp": math.exp, "log": math.log, "sqrt": math.sqrt, "abs": abs,
            "recip": lambda a: 1.0 / a}
    ident = {"add": 0.0, "mul": 1.0, "max": -math.inf, "min": math.inf}

    def ival(x, ienv) -> int:
        v = sp.sympify(x).xreplace(ienv)
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
            case DOp(op=op, args=(a,)):
                return fns1[op](ev(a, ienv))
            case DOp(op=op, args=(a, b)):
                return fns2[op](ev(a, ienv), ev(b, ienv))
            case DReduce(op=op, var=v, extent=ext, body=b):
                acc = ident[op]
                for i in range(ival(ext, ienv)):
                    acc = fns2[op](acc, ev(b, {**ienv, v: sp.Integer(i)}))
                return acc
            case DSelect(cond=c, then=t, other=o):
                return ev(t, ienv) if bool(sp.sympify(c).xreplace(ienv)) else ev(o, ienv)
        raise TypeError(e)

    out = {}
    base = dict(env)
    for st in d.stmts:
        shape = tuple(ival(s, base) for s in st.shape)
        res = np.empty(shape, dtype=np.float64)
        for ix in itertools.product(*(range(s) for s in shape)):
            ienv = {**base, **{v: sp.Integer(i) for v, i in zip(st.vars, ix)}}
            res[ix] = ev(st.body, ienv)
        if st.role == "update":                     # the buffer keeps its rows beyond the update's
            res = np.concatenate([res, store[st.name][res.shape[0]:]], axis=0)
        store[st.name] = res
        if st.role in ("output", "update"):
            out[st.name] = res
    return out
