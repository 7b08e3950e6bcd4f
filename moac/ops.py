"""The one table of moac's scalar operators (and a small one of the structural primitives).

Every stage that needs to know something about an operator reads it here: the parser
(token name -> operator), the elaborator (arity, monadic meaning, reducibility), the
printers (how it is shown), the interpreter (its numpy function), the DNF evaluator
(its plain-Python function), the Schedule (identity, monoid, flop cost) and the C
lowering (its C spelling).  An operator is named by its core name ("add", "exp", …).
"""
from __future__ import annotations

import math
import operator
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
    python: object = None      # the plain-Python float function (the DNF evaluator's)
    monadic: str | None = None  # the unary operator its monadic use means (− x is neg, ÷ x is recip)


def _div(a: float, b: float) -> float:
    """IEEE division of Python floats: x ÷ ±0 is ±inf (the signs of both), 0 ÷ 0 and nan ÷ 0
    are nan (Python raises)."""
    if b != 0:
        return a / b
    return math.nan if a == 0 or a != a else math.copysign(math.inf, a) * math.copysign(1.0, b)


def _fmax(a: float, b: float) -> float:
    """C's fmax on Python floats: a NaN operand gives way to the other."""
    return b if a != a else a if b != b or a >= b else b


def _fmin(a: float, b: float) -> float:
    return b if a != a else a if b != b or a <= b else b


OPS: dict[str, Op] = {o.name: o for o in (
    Op("add", 2, "PLUS", "+", "+", np.add, c_infix="+", identity=0.0, red_symbol="Σ", acc_clause="+",
       python=operator.add),
    Op("sub", 2, "MINUS", "−", "−", np.subtract, c_infix="-", python=operator.sub, monadic="neg"),
    Op("mul", 2, "TIMES", "×", "×", np.multiply, c_infix="*", identity=1.0, red_symbol="Π", acc_clause="*",
       python=operator.mul),
    Op("div", 2, "DIVIDE", "÷", "÷", np.divide, c_infix="/", python=_div, monadic="recip"),
    # max and min are C's fmax and fmin everywhere (the kernels' and the references'): a NaN
    # operand gives way to the other, and a reduction starts from its identity, so max red
    # over NaNs only is −∞ (numpy's maximum would propagate the NaN)
    Op("max", 2, "MAX", "max", "max", np.fmax, c_fn="fmax", identity=-math.inf, red_symbol="max",
       acc_clause="max", python=_fmax),
    Op("min", 2, "MIN", "min", "min", np.fmin, c_fn="fmin", identity=math.inf, red_symbol="min",
       acc_clause="min", python=_fmin),
    Op("pow", 2, "POW", "⋆", "⋆", np.power, c_fn="pow", python=operator.pow),
    Op("neg", 1, None, "−", "−", np.negative, python=operator.neg),
    Op("recip", 1, None, "÷", "÷", lambda x: 1.0 / x, python=lambda x: _div(1.0, x)),
    Op("exp", 1, "EXP", "exp", "exp ", np.exp, c_fn="moac_exp", python=math.exp),
    Op("log", 1, "LOG", "log", "log ", np.log, c_fn="log", python=math.log),
    Op("sqrt", 1, "SQRT", "√", "√", np.sqrt, c_fn="sqrt", python=math.sqrt),
    Op("abs", 1, "ABS", "abs", "abs ", np.abs, c_fn="fabs", python=abs),
    # the hyperbolic tangent (a logit soft-cap c·tanh(s ÷ c)): C's tanhf / tanh, one flop as exp and log
    Op("tanh", 1, "TANH", "tanh", "tanh ", np.tanh, c_fn="tanh", python=math.tanh),
    # a float comparison used by the lowering (not a MoA primitive): no flops counted
    Op("gt", 2, None, ">", ">", np.greater, c_infix=">", flops=0, python=operator.gt),
    Op("ne", 2, None, "≠", "≠", np.not_equal, c_infix="!=", flops=0, python=operator.ne),
)}

BINARY = frozenset(n for n, o in OPS.items() if o.arity == 2 and o.token)
UNARY = frozenset(n for n, o in OPS.items() if o.arity == 1)
REDUCIBLE = frozenset(n for n, o in OPS.items() if o.identity is not None)
# − and ÷ reduce as MoA/APL's right folds, a0 − (a1 − (a2 − …)) and a0 ÷ (a1 ÷ (a2 ÷ …)):
# these are Σ_i (−1)^i a_i and Π_i a_i^((−1)^i), folds of the associative partner over
# terms whose odd members are negated or inverted (moac.dnf.rules), so they reduce in
# parallel like any monoid.  Their value over no terms is the partner's identity.
RIGHT_FOLDS = {"sub": ("add", "neg"), "div": ("mul", "recip")}
FOLDABLE = REDUCIBLE | frozenset(RIGHT_FOLDS)


def identity(op: str) -> float:
    return OPS[op].identity


def red_symbol(op: str) -> str:
    return OPS[op].red_symbol


def monadic(op: str) -> str | None:
    """The unary operator a primitive means when applied to one argument, or None."""
    o = OPS.get(op)
    if o is None:
        return None
    return o.monadic or (op if o.arity == 1 else None)


@dataclass(frozen=True, slots=True)
class Structural:
    """A primitive that rearranges or indexes an array rather than computing on its items."""
    name: str
    token: str
    symbol: str
    static_left: bool = False   # the dyadic use takes a static left operand (index, shape, count, permutation)
    monadic_only: bool = False


STRUCTURAL: dict[str, Structural] = {p.name: p for p in (
    Structural("psi", "PSI", "ψ", static_left=True),
    Structural("rho", "RHO", "ρ", static_left=True),
    Structural("iota", "IOTA", "ι", monadic_only=True),
    Structural("gamma", "GAMMA", "γ", static_left=True),
    Structural("gammacol", "GAMMACOL", "γcol", static_left=True),
    Structural("gammainv", "GAMMAINV", "γ′", static_left=True),   # inverse offset: the index of an offset
    Structural("transpose", "TRANSPOSE", "⍉", static_left=True),
    Structural("take", "TAKE", "△", static_left=True),
    Structural("drop", "DROP", "▽", static_left=True),
    Structural("reverse", "REVERSE", "Φ", monadic_only=True),
    Structural("cat", "CAT", "#"),
    Structural("rav", "RAV", "rav", monadic_only=True),       # ravel: the items in row-major order, ⟨τA⟩ ρ A
    Structural("tau", "TAU", "τ", monadic_only=True),         # total: the number of elements, π ρA
    Structural("delta", "DELTA", "δ", monadic_only=True),     # dimension: the rank, τ ρA
)}

# the grammar's terminal name -> the primitive it spells
BY_TOKEN = {p.token: p.name for p in (*OPS.values(), *STRUCTURAL.values()) if p.token}
STATIC_LEFT = frozenset(n for n, p in STRUCTURAL.items() if p.static_left)
# primitives with no dyadic meaning: the spelled unary operators and ι, Φ
MONADIC_ONLY = frozenset(n for n, o in OPS.items() if o.arity == 1 and o.token) \
    | frozenset(n for n, p in STRUCTURAL.items() if p.monadic_only)

