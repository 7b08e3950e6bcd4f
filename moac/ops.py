"""The one table of moac's scalar operators.

Every stage that needs to know something about an operator reads it here: the parser
(token name -> operator), the printers (how it is shown), the interpreter and the DNF
evaluator (its numpy function), the Schedule (identity, monoid, flop cost) and the C
lowering (its C spelling).  An operator is named by its core name ("add", "exp", …).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, slots=True)
class Op:
    name: str
    arity: int
    token: str | None          # the grammar's terminal name, None for operators no one spells
    symbol: str                # how the AST and Core print it
    dnf_text: str              # how the DNF prints it (unary functions carry their space)
    numpy: object              # elementwise numpy function
    c_infix: str | None = None  # C operator for binary arithmetic (+ - * /)
    c_fn: str | None = None     # C function stem: fmax -> fmaxf / fmax; exp -> moac_expf / moac_exp
    identity: float | None = None   # set for the reducible (monoid) operators
    red_symbol: str | None = None   # Σ, Π, max, min
    acc_clause: str | None = None   # the reduction operator of an OpenACC/OpenMP clause
    flops: int = 1             # floating-point operations one application costs


OPS: dict[str, Op] = {o.name: o for o in (
    Op("add", 2, "PLUS", "+", "+", np.add, c_infix="+", identity=0.0, red_symbol="Σ", acc_clause="+"),
    Op("sub", 2, "MINUS", "−", "−", np.subtract, c_infix="-"),
    Op("mul", 2, "TIMES", "×", "×", np.multiply, c_infix="*", identity=1.0, red_symbol="Π", acc_clause="*"),
    Op("div", 2, "DIVIDE", "÷", "÷", np.divide, c_infix="/"),
    Op("max", 2, "MAX", "max", "max", np.maximum, c_fn="fmax", identity=-math.inf, red_symbol="max",
       acc_clause="max"),
    Op("min", 2, "MIN", "min", "min", np.minimum, c_fn="fmin", identity=math.inf, red_symbol="min",
       acc_clause="min"),
    Op("pow", 2, "POW", "⋆", "⋆", np.power, c_fn="pow"),
    Op("neg", 1, None, "−", "−", np.negative),
    Op("recip", 1, None, "÷", "÷", lambda x: 1.0 / x),
    Op("exp", 1, "EXP", "exp", "exp ", np.exp, c_fn="moac_exp"),
    Op("log", 1, "LOG", "log", "log ", np.log, c_fn="log"),
    Op("sqrt", 1, "SQRT", "√", "√", np.sqrt, c_fn="sqrt"),
    Op("abs", 1, "ABS", "abs", "abs ", np.abs, c_fn="fabs"),
    # a float comparison used by the lowering (not a MoA primitive): no flops counted
    Op("gt", 2, None, ">", ">", np.greater, c_infix=">", flops=0),
)}

BINARY = frozenset(n for n, o in OPS.items() if o.arity == 2 and o.token)
UNARY = frozenset(n for n, o in OPS.items() if o.arity == 1)
REDUCIBLE = frozenset(n for n, o in OPS.items() if o.identity is not None)


def identity(op: str) -> float:
    return OPS[op].identity


def red_symbol(op: str) -> str:
    return OPS[op].red_symbol

