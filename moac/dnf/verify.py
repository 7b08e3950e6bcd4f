"""The DNF verifier: what every DNF must satisfy when it leaves stage 3.

`to_dnf` runs it when MOAC_VERIFY=1 (the tests set it).  A failure is a bug in moac,
not in the user's program, so it raises AssertionError naming the statement and the
expression, not a positioned MoacError.
"""
from __future__ import annotations

import sympy as sp

from ..front.core import provably
from ..ops import OPS, REDUCIBLE
from .form import DNF
from .ir import DOp, DRead, DReduce, DStmt, fmt_index, fmt_vec, format_expr
from .walk import children, free_index_vars


def verify_dnf(d: DNF) -> None:
    """Check every statement in order: its index variables are bound (by the statement or
    an enclosing reduction, and none bound twice), its extents are sizes, it reads only
    declared inputs and earlier statements with as many index components as they have
    axes, a constant index lies within the array where sympy can decide it and the read can
    run at all (not under an empty domain or reduction), and its
    operators have their arity (reductions a reducible operator)."""
    sizes = set(d.program.sizes)
    shapes = {i.name: tuple(i.shape) for i in d.program.inputs}     # what a read may read, and its extents
    for st in d.stmts:
        _verify_stmt(st, shapes, sizes)
        if st.role == "update":
            if st.name not in shapes or len(shapes[st.name]) != len(st.target):
                _fail(st, f"updates {st.name}, which is not an input of rank {len(st.target)}")
            if st.at and not free_index_vars(DRead(st.name, st.at)) <= set(st.vars) | sizes:
                _fail(st, f"writes ⟨{st.at}⟩ψ{st.name}, an index over variables the statement does not bind")
        elif st.name in shapes:
            _fail(st, f"defines {st.name} again")
        else:
            shapes[st.name] = tuple(st.shape)


def _fail(st: DStmt, msg: str):
    raise AssertionError(f"invalid DNF, statement {st.name}: {msg}")


def _verify_stmt(st: DStmt, shapes: dict, sizes: set) -> None:
    if len(st.vars) != len(st.shape) or len(set(st.vars)) != len(st.vars):
        _fail(st, f"needs one distinct index variable per axis, has {fmt_vec(st.vars)} for {fmt_vec(st.shape)}")
    for n in st.shape:
        if not sp.sympify(n).free_symbols <= sizes:
            _fail(st, f"extent {fmt_index(n)} is not an expression of the sizes")
    unbound = free_index_vars(st.body) - set(st.vars) - sizes
    if unbound:
        names = ", ".join(sorted(v.name for v in unbound))
        _fail(st, f"index variable(s) {names} bound neither by the statement {fmt_vec(st.vars)} nor by an "
                  f"enclosing reduction, in {format_expr(st.body)}")

    def walk(e, bound: set, runs: bool):
        # runs: whether e can be evaluated at all; a read under an empty domain or an empty
        # reduction never is (ψ-reshape of an array with no elements reads index 0 there)
        match e:
            case DRead(array=a, index=idx):
                if a not in shapes:
                    _fail(st, f"reads {a}, which is neither an input nor an earlier statement")
                shape = shapes[a]
                if len(idx) != len(shape):
                    _fail(st, f"reads {format_expr(e)} with {len(idx)} index component(s); {a} has rank {len(shape)}")
                for k, (i, n) in enumerate(zip(idx, shape)):
                    constant = sp.sympify(i).free_symbols <= sizes
                    if runs and constant and (provably(sp.Lt(i, 0)) or provably(sp.Ge(i, n))):
                        _fail(st, f"reads {format_expr(e)}: index component {k} is {fmt_index(i)}, "
                                  f"outside 0 ≤ i < {fmt_index(n)}")
            case DOp(op=op, args=args):
                if op not in OPS or OPS[op].arity != len(args):
                    _fail(st, f"operator {op} applied to {len(args)} argument(s) in {format_expr(e)}")
            case DReduce(op=op, var=v, extent=n):
                if op not in REDUCIBLE:
                    _fail(st, f"reduces with {op}, which has no identity")
                if v in bound:
                    _fail(st, f"a reduction binds {v} again inside its scope")
                bound = bound | {v}
                runs = runs and not provably(sp.Eq(n, 0))
        for c in children(e):
            walk(c, bound, runs)

    walk(st.body, set(st.vars), not any(provably(sp.Eq(n, 0)) for n in st.shape))
