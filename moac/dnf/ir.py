"""The Denotational Normal Form (stage 3's output) and how it prints.

A DNF statement gives every element of one output (or temporary) as a closed
expression over ψ-selections of stored arrays: reads, constants, index values,
scalar operators, reductions with an explicit bound variable and extent, and
selections on an index condition.  Nodes are frozen; index expressions are sympy.
"""
from __future__ import annotations

from dataclasses import dataclass

import sympy as sp

from ..front import core as C
from ..ops import OPS



@dataclass(frozen=True, slots=True)
class DRead:
    array: str
    index: tuple


@dataclass(frozen=True, slots=True)
class DConst:
    value: float


@dataclass(frozen=True, slots=True)
class DIndex:
    """An integer expression of indices and sizes used as a value."""
    expr: sp.Expr


@dataclass(frozen=True, slots=True)
class DOp:
    op: str
    args: tuple


@dataclass(frozen=True, slots=True)
class DReduce:
    op: str
    var: sp.Symbol
    extent: sp.Expr
    body: object


@dataclass(frozen=True, slots=True)
class DSelect:
    cond: sp.Basic
    then: object
    other: object


@dataclass(frozen=True, slots=True)
class DStmt:
    name: str
    vars: tuple           # index symbols, one per axis
    shape: tuple
    body: object
    role: str             # "temp", "output" or "update"
    at: tuple = ()        # an update's scatter: the element ⟨at⟩ψname that ⟨vars⟩ writes (empty: ⟨vars⟩ itself)

    @property
    def target(self) -> tuple:
        """The index of the element that ⟨vars⟩ writes."""
        return self.at or tuple(self.vars)


@dataclass(frozen=True, slots=True)
class TraceStep:
    rule: str
    before: str
    after: str


def index_var(name: str) -> sp.Symbol:
    """An index variable: the same kind of symbol as a size (integer, non-negative), so an
    index and the size that bounds it live in one sympy assumption set."""
    return C.size_symbol(name)


# --------------------------------------------------------------------------- printing


def fmt_num(v: float) -> str:
    return str(int(v)) if float(v).is_integer() else repr(float(v))


def fmt_index(e) -> str:
    e = sp.sympify(e)
    if isinstance(e, sp.Eq):          # sympy prints Eq(a, b)
        return f"{fmt_index(e.lhs)} = {fmt_index(e.rhs)}"
    return C.show_expr(e)


def fmt_vec(idx) -> str:
    # components are separated by spaces, so a sum is parenthesised: ⟨(n - i - 1) j⟩
    def comp(i):
        s = fmt_index(i)
        return f"({s})" if isinstance(sp.sympify(i), sp.Add) else s
    return "⟨" + " ".join(comp(i) for i in idx) + "⟩"


_PREC = {"add": 1, "sub": 1, "mul": 2, "div": 2}   # how tightly the infix operators bind as printed


def format_expr(e, prec: int = 0) -> str:
    match e:
        case DRead(array=a, index=idx):
            return f"{fmt_vec(idx)}ψ{a}" if idx else a
        case DConst(value=v):
            return fmt_num(v)
        case DIndex(expr=x):
            s = fmt_index(x)
            return s if (sp.sympify(x).is_Atom or prec == 0) else f"({s})"
        case DOp(op=op, args=(a, b)) if op in _PREC:
            p = _PREC[op]
            right_p = p + 1 if op in ("sub", "div") else p
            s = f"{format_expr(a, p)} {OPS[op].dnf_text} {format_expr(b, right_p)}"
            return f"({s})" if p < prec else s
        case DOp(op="pow", args=(a, b)):
            return f"{format_expr(a, 3)}^{format_expr(b, 3)}"
        case DOp(op=op, args=(a, b)):
            return f"{op}({format_expr(a)}, {format_expr(b)})"
        case DOp(op="neg", args=(a,)):
            return f"−{format_expr(a, 3)}"
        case DOp(op="recip", args=(a,)):
            return f"(1 ÷ {format_expr(a, 3)})" if prec > 0 else f"1 ÷ {format_expr(a, 3)}"
        case DOp(op="sqrt", args=(a,)):
            inner = format_expr(a, 3)
            return f"√{inner}"
        case DOp(op="abs", args=(a,)):
            return f"|{format_expr(a)}|"
        case DOp(op=op, args=(a,)):
            return f"{op}({format_expr(a)})"
        case DReduce(op=op, var=v, extent=ext, body=b):
            s = f"{OPS[op].red_symbol}_{{{v}<{fmt_index(ext)}}} {format_expr(b, 3 if op != 'add' else 2)}"
            return f"({s})" if prec > 0 else s
        case DSelect(cond=c, then=t, other=o):
            return f"({format_expr(t)} if {fmt_index(c)} else {format_expr(o)})"
    raise TypeError(e)  # pragma: no cover


def format_stmt(s: DStmt) -> str:
    lhs = f"{fmt_vec(s.target)}ψ{s.name}" if s.target else s.name
    dom = ""
    if s.vars:
        dom = "    for " + ", ".join(f"{v} < {fmt_index(n)}" for v, n in zip(s.vars, s.shape))
    return f"{lhs} = {format_expr(s.body)}{dom}"
