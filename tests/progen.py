"""Random well-shaped MoA programs for property tests (hypothesis).

    from progen import programs
    @given(programs())
    def test_something(case):
        source, sizes = case          # MoA text, {"n": 2, "m": 3, "p": 1}

`programs()` builds each program top-down: it first draws the concrete sizes, then for every
statement a target shape, and then an expression of exactly that shape from elementwise
functions (with scalar extension), transpose (monadic and dyadic), reverse, take/drop
(negative counts too), catenation (with an appended item), reshape, ψ, reductions, inner
and outer products, Ω (monadic and dyadic; equal frames and empty frames), the prelude and
two small user functions.  Spellings are drawn token by token from the Unicode and ASCII
forms; parentheses are either minimal (APL: only a compound *left* operand needs them) or
everywhere.  Every size expression is checked against the concrete sizes while generating,
so every program is valid for the sizes returned with it (run-time `require`s hold).

Each statement's intended shape is written into the source as a comment,
`-- shape NAME ⟨dims⟩`; `expected_shapes(source)` reads them back.
"""
from __future__ import annotations

import re

import hypothesis.strategies as st
import sympy as sp

from moac.front.core import size_symbol

SIZE_NAMES = ("n", "m", "p")
SYMS = tuple(size_symbol(s) for s in SIZE_NAMES)

# canonical op -> spellings (the first is the Unicode one)
SPELL = {
    "add": ("+",), "sub": ("−", "-"), "mul": ("×", "*"), "div": ("÷", "/"),
    "max": ("⌈", "max"), "min": ("⌊", "min"), "neg": ("−", "-"), "abs": ("abs",),
    "exp": ("exp",), "sqrt": ("√", "sqrt"), "log": ("log",),
    "psi": ("ψ", "psi"), "rho": ("ρ", "rho"), "iota": ("ι", "iota"),
    "tr": ("⍉", "tr", "transpose"), "take": ("△", "take", "↑"), "drop": ("▽", "drop", "↓"),
    "rev": ("Φ", "rev", "reverse", "⌽"), "cat": ("#", "cat"), "omega": ("Ω", "omega"),
    "outer": ("∘", "outer"), "red": ("red",), "assign": ("=", "←"),
}
ELEMENTWISE = ("add", "sub", "mul", "max", "min")
REDUCERS = ("add", "sub", "mul", "max", "min")   # − red: the right fold (an alternating sum)

USER_FNS = {
    "sq": "fn sq v { v × v }",
    "dot": "fn dot a b {\n  + red a × b\n}",
}


def expected_shapes(source: str) -> dict:
    """{name: tuple of sympy dims} from the `-- shape NAME ⟨...⟩` comments."""
    out = {}
    for name, dims in re.findall(r"^-- shape (\w+) ⟨([^⟩]*)⟩$", source, re.M):
        out[name] = tuple(sp.sympify(d, locals={s.name: s for s in SYMS}) for d in dims.split(";") if d.strip())
    return out


class _Gen:
    def __init__(self, draw, sizes: dict):
        self.draw = draw
        self.sizes = sizes
        self.env = {size_symbol(k): v for k, v in sizes.items()}
        self.inputs: list = []          # (name, shape)
        self.defs: list = []            # (name, shape) of earlier statements
        self.fns: set = set()
        self.full_parens = draw(st.booleans())
        self.langle, self.rangle = draw(st.sampled_from([("⟨", "⟩"), ("<", ">")]))

    # ---- helpers
    def conc(self, e) -> int:
        return int(sp.sympify(e).xreplace(self.env))

    def sp_(self, op: str) -> str:
        return self.draw(st.sampled_from(SPELL[op]))

    def vec(self, items) -> str:
        sep = self.draw(st.sampled_from([" ", ", "]))
        return self.langle + sep.join(items) + self.rangle

    def num(self, v: int) -> str:
        if v >= 0:
            return str(v)
        return self.draw(st.sampled_from([f"¯{-v}", f"({self.sp_('neg')}{-v})"]))

    def etext(self, e) -> str:
        """A size expression in MoA syntax, fully parenthesised (APL evaluates right to left)."""
        e = sp.expand(sp.sympify(e))
        if e.is_Integer:
            return self.num(int(e)) if int(e) >= 0 else f"({self.sp_('neg')} {-int(e)})"
        if e.is_Symbol:
            return e.name
        if e.is_Pow and e.exp.is_Integer and int(e.exp) > 1:
            return "(" + f" {self.sp_('mul')} ".join([self.etext(e.base)] * int(e.exp)) + ")"
        if e.is_Mul:
            coeff, rest = e.as_coeff_Mul()
            factors = ([str(int(coeff))] if coeff != 1 else []) + [self.etext(f) for f in sp.Mul.make_args(rest)]
            text = "(" + f" {self.sp_('mul')} ".join(factors) + ")"
            return text
        if e.is_Add:
            terms = sorted(sp.Add.make_args(e), key=lambda t: (t.is_Number, str(t)))
            text = self.etext(terms[0])
            for t in terms[1:]:
                if t.could_extract_minus_sign():
                    text = f"({text} {self.sp_('sub')} {self.etext(-t)})"
                else:
                    text = f"({text} + {self.etext(t)})"
            return text
        raise ValueError(e)  # pragma: no cover

    def shape_text(self, shape) -> str:
        return self.vec([self.etext(d) for d in shape])

    def dim(self, allow_one=True):
        choices = list(SYMS) + ([1, 2] if allow_one else [2, 3])
        return sp.sympify(self.draw(st.sampled_from(choices)))

    def shape(self, max_rank=3):
        rank = self.draw(st.integers(0, max_rank))
        return tuple(self.dim() for _ in range(rank))

    # ---- expression text: (text, atomic)
    def left(self, e):
        text, atomic = e
        return text if atomic else f"({text})"

    def right(self, e):
        text, atomic = e
        return text if (atomic or not self.full_parens) else f"({text})"

    def dyad(self, lhs, fn: str, rhs):
        return f"{self.left(lhs)} {fn} {self.right(rhs)}", False

    def monad(self, fn: str, arg):
        return f"{fn} {self.right(arg)}", False

    # ---- generation
    def expr(self, shape: tuple, depth: int):
        shape = tuple(sp.sympify(d) for d in shape)
        rank = len(shape)
        if depth <= 0:
            return self.leaf(shape)
        kinds = ["leaf", "elementwise", "scalar-ext", "monadic", "reduce", "inner", "outer", "psi",
                 "omega1", "omega2", "user"]
        if rank >= 1:
            kinds += ["transpose", "transpose2", "reverse", "take", "drop", "cat", "reshape"]
        kind = self.draw(st.sampled_from(kinds))
        return getattr(self, "g_" + kind.replace("-", "_"))(shape, depth - 1)

    def leaf(self, shape):
        rank = len(shape)
        same = [name for name, s in self.defs + self.inputs
                if len(s) == rank and all(sp.expand(a - b) == 0 for a, b in zip(s, shape))]
        options = ["input"] + (["reuse"] * 2 if same else [])
        if rank == 0:
            options += ["number", "number", "size"]
        if rank == 1:
            options += ["iota"]
            if shape[0].is_Integer and 1 <= int(shape[0]) <= 4:
                options += ["vector"]
        pick = self.draw(st.sampled_from(options))
        if pick == "reuse":
            return self.draw(st.sampled_from(same)), True
        if pick == "number":
            v = self.draw(st.sampled_from([0, 1, 2, 3, 0.5, 1.5, -1, -2]))
            return (self.num(v) if isinstance(v, int) else str(v)), True
        if pick == "size":
            return self.draw(st.sampled_from(SIZE_NAMES)), True
        if pick == "iota":
            return f"{self.sp_('iota')} {self.etext(shape[0])}", False
        if pick == "vector":
            return self.vec([self.num(self.draw(st.integers(-3, 5))) for _ in range(int(shape[0]))]), True
        name = f"a{len(self.inputs)}"
        self.inputs.append((name, shape))
        return name, True

    def g_leaf(self, shape, depth):
        return self.leaf(shape)

    def g_elementwise(self, shape, depth):
        op = self.draw(st.sampled_from(ELEMENTWISE + ("div",)))
        a = self.expr(shape, depth)
        if op == "div":     # divide by something kept away from zero
            if self.draw(st.booleans()):
                b = (self.draw(st.sampled_from(["2", "4", "0.5"])), True)
            else:
                b = self.dyad(("1", True), "+", self.monad("abs", self.expr(shape, depth)))
            return self.dyad(a, self.sp_("div"), b)
        return self.dyad(a, self.sp_(op), self.expr(shape, depth))

    def g_scalar_ext(self, shape, depth):
        op = self.draw(st.sampled_from(ELEMENTWISE))
        a, s = self.expr(shape, depth), self.expr((), depth)
        if self.draw(st.booleans()):
            a, s = s, a
        return self.dyad(a, self.sp_(op), s)

    def g_monadic(self, shape, depth):
        f = self.draw(st.sampled_from(["neg", "abs", "exp", "sqrt", "log"]))
        a = self.expr(shape, depth)
        if f == "exp":      # keep exp bounded (math.exp overflows where numpy gives inf)
            return self.monad("exp", self.dyad(a, self.sp_("min"), ("2", True)))
        if f == "sqrt":
            return self.monad(self.sp_("sqrt"), self.monad("abs", a))
        if f == "log":
            return self.monad("log", self.dyad(("1", True), "+", self.monad("abs", a)))
        return self.monad(self.sp_(f), a)

    def g_user(self, shape, depth):
        if self.draw(st.booleans()):
            self.fns.add("sq")
            return self.monad("sq", self.expr(shape, depth))
        self.fns.add("dot")
        e = self.dim()
        full = (e,) + shape
        return self.dyad(self.expr(full, depth), "dot", self.expr(full, depth))

    def g_reduce(self, shape, depth):
        op = self.draw(st.sampled_from(REDUCERS))
        e = self.dim()
        return self.monad(f"{self.sp_(op)} {self.sp_('red')}", self.expr((e,) + shape, depth))

    def g_inner(self, shape, depth):
        k = self.draw(st.integers(0, len(shape)))
        e = self.dim()
        f = self.draw(st.sampled_from(REDUCERS))
        g = self.draw(st.sampled_from(ELEMENTWISE))
        a = self.expr(shape[:k] + (e,), depth)
        b = self.expr((e,) + shape[k:], depth)
        return self.dyad(a, f"{self.sp_(f)}.{self.sp_(g)}", b)

    def g_outer(self, shape, depth):
        k = self.draw(st.integers(0, len(shape)))
        g = self.draw(st.sampled_from(ELEMENTWISE))
        return self.dyad(self.expr(shape[:k], depth), f"{self.sp_('outer')}.{self.sp_(g)}",
                         self.expr(shape[k:], depth))

    def g_psi(self, shape, depth):
        pre = tuple(self.dim() for _ in range(self.draw(st.integers(1, 2))))
        idx = []
        for d in pre:
            c = self.conc(d)
            if not d.is_Integer and self.draw(st.booleans()):
                idx.append(self.etext(d - 1))
            else:
                idx.append(str(self.draw(st.integers(0, c - 1))))
        return self.dyad((self.vec(idx), True), self.sp_("psi"), self.expr(pre + shape, depth))

    def g_transpose(self, shape, depth):
        return self.monad(self.sp_("tr"), self.expr(tuple(reversed(shape)), depth))

    def g_transpose2(self, shape, depth):
        perm = self.draw(st.permutations(range(len(shape))))
        arg = tuple(shape[perm[k]] for k in range(len(shape)))  # axis k of arg -> axis perm[k]
        return self.dyad((self.vec([str(p) for p in perm]), True), self.sp_("tr"), self.expr(arg, depth))

    def g_reverse(self, shape, depth):
        return self.monad(self.sp_("rev"), self.expr(shape, depth))

    def g_take(self, shape, depth):
        d = shape[0]
        if not d.is_nonnegative:        # e.g. n − 1: moac needs the sign of a count
            return self.g_reverse(shape, depth)
        extra = self.draw(st.sampled_from([0, 1, 2] + list(SYMS)))
        arg = (d + extra,) + shape[1:]
        neg = self.draw(st.booleans())
        count = self.etext(d)
        if neg:
            count = self.num(-int(d)) if d.is_Integer else f"({self.sp_('neg')}{count})"
        return self.dyad((count, True), self.sp_("take"), self.expr(arg, depth))

    def g_drop(self, shape, depth):
        c = self.draw(st.sampled_from([0, 1, 2] + list(SYMS)))
        arg = (shape[0] + c,) + shape[1:]
        neg = self.draw(st.booleans())
        count = self.etext(c)
        if neg:
            count = self.num(-c) if isinstance(c, int) else f"({self.sp_('neg')}{count})"
        return self.dyad((count, True), self.sp_("drop"), self.expr(arg, depth))

    def g_cat(self, shape, depth):
        d, rest = shape[0], shape[1:]
        splits = [b for b in [1, 2, *SYMS] if self.conc(d - b) >= 0]
        if not splits:
            return self.leaf(shape)
        b = self.draw(st.sampled_from(splits))
        a = self.expr((d - b,) + rest, depth)
        if b == 1 and self.draw(st.booleans()):
            right = self.expr(rest, depth)            # append one item
        else:
            right = self.expr((sp.sympify(b),) + rest, depth)
        return self.dyad(a, self.sp_("cat"), right)

    def g_reshape(self, shape, depth):
        options = ["same", "flat"]
        if len(shape) >= 2:
            options += ["reversed", "merge"]
        if len(shape) == 1:
            options += ["split"]
        how = self.draw(st.sampled_from(options))
        if how == "same":
            arg = shape
        elif how == "flat":
            arg = (sp.Mul(*shape),)
        elif how == "reversed":
            arg = tuple(reversed(shape))
        elif how == "merge":
            arg = shape[:-2] + (shape[-2] * shape[-1],)
        else:
            arg = (shape[0], sp.Integer(1)) if self.draw(st.booleans()) else (sp.Integer(1), shape[0])
        return self.dyad((self.shape_text(shape), True), self.sp_("rho"), self.expr(arg, depth))

    def _omega(self, sigmas):
        return f"{self.sp_('omega')}{self.vec([str(s) for s in sigmas])}"

    def g_omega1(self, shape, depth):
        f = self.draw(st.integers(0, len(shape)))
        frame, rc = shape[:f], shape[f:]
        options = ["red", "neg", "sq"]
        if len(rc) >= 1:
            options += ["rev", "tr", "nested"]
        if len(rc) == 1:
            options += ["softmax"]
        if len(rc) <= 1:
            options += ["mean"]
        how = self.draw(st.sampled_from(options))
        e = self.dim()
        if how == "red":
            fn, cell = f"({self.sp_(self.draw(st.sampled_from(REDUCERS)))} {self.sp_('red')})", (e,) + rc
        elif how == "mean":
            fn, cell = "mean", (e,) + rc
        elif how == "neg":
            fn, cell = self.sp_("neg"), rc
        elif how == "sq":
            self.fns.add("sq")
            fn, cell = "sq", rc
        elif how == "rev":
            fn, cell = self.sp_("rev"), rc
        elif how == "tr":
            fn, cell = self.sp_("tr"), tuple(reversed(rc))
        elif how == "softmax":
            fn, cell = "softmax", rc
        else:  # a nested Ω: row sums of each cell
            fn, cell = f"((+ {self.sp_('red')}) {self._omega([1])})", rc + (e,)
        arg = self.expr(frame + cell, depth)
        return self.monad(f"{fn} {self._omega([len(cell)])}", arg)

    def g_omega2(self, shape, depth):
        f = self.draw(st.integers(0, len(shape)))
        frame, rc = shape[:f], shape[f:]
        how = self.draw(st.sampled_from(["elementwise", "scalar", "inner", "outer"]))
        if how == "elementwise":
            fn, lc, rcell = self.sp_(self.draw(st.sampled_from(ELEMENTWISE))), rc, rc
        elif how == "scalar":
            fn = self.sp_(self.draw(st.sampled_from(ELEMENTWISE)))
            lc, rcell = (rc, ()) if self.draw(st.booleans()) else ((), rc)
        elif how == "inner":
            k = self.draw(st.integers(0, len(rc)))
            e = self.dim()
            fn = f"{self.sp_(self.draw(st.sampled_from(REDUCERS)))}.{self.sp_(self.draw(st.sampled_from(ELEMENTWISE)))}"
            lc, rcell = rc[:k] + (e,), (e,) + rc[k:]
        else:
            k = self.draw(st.integers(0, len(rc)))
            fn = f"{self.sp_('outer')}.{self.sp_(self.draw(st.sampled_from(ELEMENTWISE)))}"
            lc, rcell = rc[:k], rc[k:]
        frames = self.draw(st.sampled_from(["both", "left", "right"])) if frame else "both"
        lshape = (frame if frames in ("both", "left") else ()) + lc
        rshape = (frame if frames in ("both", "right") else ()) + rcell
        a, b = self.expr(lshape, depth), self.expr(rshape, depth)
        return self.dyad(a, f"({fn} {self._omega([len(lc), len(rcell)])})", b)


    # ---- an update of a selection (a scatter)
    def selection(self, name: str, shape: tuple, steps: int):
        """A selection of input `name` (ψ with a constant prefix, ⍉ monadic and dyadic, Φ, take
        and drop with constant counts, reshape to one axis): (text, shape).  Each step picks
        every element at most once, so the whole names each element at most once."""
        text, atomic = name, True
        for _ in range(steps):
            kinds = ["psi", "tr", "tr2", "rev", "take", "drop", "flat"] if shape else []
            if not kinds:
                break
            kind = self.draw(st.sampled_from(kinds))
            d0 = self.conc(shape[0])
            if kind == "psi":
                k = self.draw(st.integers(1, len(shape)))
                idx = [str(self.draw(st.integers(0, self.conc(d) - 1))) if self.conc(d) else None for d in shape[:k]]
                if None in idx:
                    continue
                text, atomic, shape = f"{self.vec(idx)} {self.sp_('psi')} {self.right((text, atomic))}", False, shape[k:]
            elif kind == "tr":
                text, atomic, shape = f"{self.sp_('tr')} {self.right((text, atomic))}", False, tuple(reversed(shape))
            elif kind == "tr2":
                perm = self.draw(st.permutations(range(len(shape))))
                new = [None] * len(shape)
                for k, q in enumerate(perm):
                    new[q] = shape[k]
                text = f"{self.vec([str(q) for q in perm])} {self.sp_('tr')} {self.right((text, atomic))}"
                atomic, shape = False, tuple(new)
            elif kind == "rev":
                text, atomic = f"{self.sp_('rev')} {self.right((text, atomic))}", False
            elif kind in ("take", "drop"):
                c = self.draw(st.integers(0, d0))
                neg = self.draw(st.booleans())
                count = self.num(-c) if neg else str(c)
                text = f"{count} {self.sp_(kind)} {self.right((text, atomic))}"
                atomic = False
                shape = ((sp.Integer(c) if kind == "take" else shape[0] - c),) + shape[1:]
            else:
                n = sp.Mul(*shape)
                text, atomic, shape = f"{self.vec([self.etext(n)])} {self.sp_('rho')} {self.right((text, atomic))}", \
                    False, (n,)
        return text, shape


@st.composite
def programs(draw, max_statements: int = 3, max_depth: int = 3, max_size: int = 3, updates: bool = True):
    """A hypothesis strategy of (source_text, sizes): a random well-shaped MoA program and
    concrete sizes for which it is valid (sizes in 1..max_size)."""
    sizes = {s: draw(st.integers(1, max_size)) for s in SIZE_NAMES}
    g = _Gen(draw, sizes)
    body, shapes_ = [], []
    count = draw(st.integers(1, max_statements))
    for k in range(count):
        shape = g.shape()
        text, _ = g.expr(shape, draw(st.integers(1, max_depth)))
        if text in {name for name, _ in g.inputs}:
            text = f"{text} × 1"            # an output must be computed, not an input
        name = f"t{k}"
        comment = draw(st.sampled_from(["", "", "   -- a comment"]))
        body.append(f"{name} {g.sp_('assign')} {text}{comment}")
        shapes_.append(f"-- shape {name} ⟨{'; '.join(str(d) for d in shape)}⟩")
        g.defs.append((name, shape))
    outs = [f"t{k}" for k in range(count) if k == count - 1 or draw(st.booleans())]
    tail = []
    targets = [(name, shape) for name, shape in g.inputs if shape]
    if updates and targets and draw(st.integers(0, 2)) == 0:     # a third of the programs scatter into an input
        name, shape = draw(st.sampled_from(targets))
        sel, sshape = g.selection(name, shape, draw(st.integers(1, 3)))
        g.defs = []                     # the value reads neither the updated input nor what was defined from it
        g.inputs = [(n, s) for n, s in g.inputs if n != name] + [(name, shape)]
        avoid = len(g.inputs)
        value, _ = g.expr(sshape, draw(st.integers(0, 2)))
        if name in value.split() or any(n == name for n, _ in g.inputs[avoid:]):
            value = None
        if value is not None and not re.search(rf"\b{name}\b", value):
            tail.append(f"update {sel} {g.sp_('assign')} {value}")
    lines = ["-- generated by tests/progen.py", *shapes_, "size " + ", ".join(SIZE_NAMES)]
    lines += [USER_FNS[f] for f in sorted(g.fns)]
    lines += [f"input {name} : f32 {g.shape_text(shape)}" for name, shape in g.inputs]
    lines += body + tail
    lines.append("output " + ", ".join(outs))
    return "\n".join(lines) + "\n", sizes
