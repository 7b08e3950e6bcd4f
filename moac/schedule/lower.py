"""What every plan shares: the sizes fixed at compile time, the buffers, and the lowering
of a DNF expression into Schedule statements and a scalar expression.  Nothing is
counted here: the Schedule's counts are derived from the finished tree."""
from __future__ import annotations

import sympy as sp

from .. import ops
from ..dnf import DConst, DIndex, DOp, DRead, DReduce, DSelect, fmt_index
from ..dnf import substitute
from ..dnf.walk import replace_sizes
from ..front.sizes import resolve
from .index import logical
from .ir import Buffer, Const, Guard, IndexValue, Let, Local, Loop, Op, Read, Set


class Context:
    """The state a plan builds a Schedule with (buffers, kernels, liftings, notes); the
    plan returns a frozen Schedule made from it."""

    def __init__(self, dnf, target, sizes: dict, storage: dict | None = None):
        self.dnf = dnf
        self.target = target
        prog = dnf.program
        self.subs = resolve(prog, sizes)                  # symbol -> Integer, derived sizes solved
        self.fixed = {s.name: int(v) for s, v in self.subs.items()}
        dtypes = {i.dtype for i in prog.inputs}
        # arithmetic in f64 if any input is f64, else in f32 (narrower storage is widened on load)
        self.dtype = "f64" if "f64" in dtypes else "f32"
        self.buffers: dict = {}
        for i in prog.inputs:
            self.buffers[i.name] = Buffer(i.name, "input", (storage or {}).get(i.name, i.dtype), self.spec(i.shape),
                                          "DRAM")
        self.kernels: list = []
        self.choices: list = []
        self.lifts: list = []
        self.notes: list = []

    def spec(self, x):
        """Substitute the fixed sizes (replace_sizes: a mod or ⌊/⌋ by an extent they make 0 is 0)."""
        if isinstance(x, tuple):
            return tuple(self.spec(i) for i in x)
        return replace_sizes(x, self.subs) if self.subs else sp.sympify(x)

    def spec_expr(self, e):
        """Substitute the fixed sizes into a DNF expression."""
        return substitute(e, self.subs) if self.subs else e

    def add_buffer(self, name: str, role: str, shape: tuple, placement: str = "DRAM", tile: tuple = ()):
        """A buffer in the arithmetic type, or an output in its declared storage (`output out : bf16`)."""
        dtype = self.dnf.program.output_dtypes.get(name, self.dtype) if role == "output" else self.dtype
        self.buffers[name] = Buffer(name, role, dtype, self.spec(tuple(shape)), placement,
                                    tuple((sp.sympify(b), self.spec(e)) for b, e in tile))


class Names:
    """Fresh names for a kernel's scalar locals: acc1, sel2, …"""

    def __init__(self):
        self.counter = 0

    def fresh(self, base: str) -> str:
        self.counter += 1
        return f"{base}{self.counter}"


def read(array: str, index: tuple, subst: dict | None = None) -> Read:
    return Read(array, tuple(index), logical(index, subst or {}))


def lower(e, names: Names, vector_var: sp.Symbol | None = None, subst: dict | None = None,
          reads: dict | None = None, packed: tuple | None = None):
    """DNF expression -> (statements, scalar expression).  A reduction over `vector_var`
    becomes a vector loop with a lane reduction (with packed loads where `packed` =
    (ctx, (w, R), opts) says so), every other reduction a seq loop.  `reads` maps reads already
    loaded (unpacked) to their locals."""
    match e:
        case DRead(array=a, index=idx):
            key = (a, tuple(sp.expand(sp.sympify(i)) for i in idx))
            if reads and key in reads:
                return [], Local(reads[key])
            return [], read(a, idx, subst)
        case DConst(value=v):
            return [], Const(float(v))
        case DIndex(expr=x):
            return [], IndexValue(x)
        case DOp(op=op, args=args):
            pre, xs = [], []
            for a in args:
                p, x = lower(a, names, vector_var, subst, reads, packed)
                pre += p
                xs.append(x)
            return pre, Op(op, tuple(xs))
        case DReduce(op=op, var=v, extent=ext, body=b):
            vec = vector_var is not None and v == vector_var
            if vec and packed is not None:
                from .packing import packed_reduction
                done = packed_reduction(packed[0], e, names, packed[1], packed[2], lower, subst or {})
                if done is not None:
                    return done
            acc = names.fresh("acc")
            pre, x = lower(b, names, vector_var, subst, reads, packed)
            loop = Loop(v, ext, "vector" if vec else "seq", tuple(pre) + (Set(acc, Op(op, (Local(acc), x))),),
                        note=f"{'vector ' if vec else ''}reduction over DNF axis {v.name} < {fmt_index(ext)}",
                        reduce=((op, (acc,)),) if vec else (), binds=((v, ext),))
            return [Let(acc, Const(ops.identity(op))), loop], Local(acc)
        case DSelect(cond=c, then=t, other=o):
            tmp = names.fresh("sel")
            pt, xt = lower(t, names, vector_var, subst, reads, packed)
            po, xo = lower(o, names, vector_var, subst, reads, packed)
            return [Let(tmp), Guard(c, tuple(pt) + (Set(tmp, xt),), tuple(po) + (Set(tmp, xo),))], Local(tmp)
    raise TypeError(e)
