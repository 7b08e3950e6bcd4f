"""A whole program's ψ-reduction (`to_dnf`): its outputs, then its in-place updates, with
what an update needs beyond the rules: a scatter's target index (`update S ← e`, S a
selection of an input), the condition that it names each element once, and the check that
no update reads an element another write may already have changed."""
from __future__ import annotations

import os
from dataclasses import replace

import sympy as sp

from ..errors import RewriteError
from ..front import core as C
from ..front.data import Distinct, has_data
from .form import DNF
from .ir import DRead, DStmt, TraceStep, fmt_vec, format_expr
from .passes import pull_factors
from .walk import divmod_pair
from .rules import _Ctx, _share_temporaries, _whole, psi_reduce
from .verify import verify_dnf
from .walk import reads


def check_update_reads(program: C.CoreProgram, stmts: tuple) -> None:
    """The kernels write an update's elements in parallel and run the updates one after
    another, while the reference reads every input as the call found it.  So an update may
    read its own buffer only at the element it writes, and no buffer an update before it
    rewrote; anything else is refused here (it would be a silent wrong answer)."""
    spans = {name: node.span for name, node in program.updates}
    written: set = set()
    for st in stmts:
        if st.role != "update":
            continue
        for r in reads(st.body):
            if r.array in written:
                raise RewriteError(f"the update of '{st.name}' reads '{r.array}', which an update before it rewrites: "
                                   f"the kernels would read the new '{r.array}', the program means the one the call "
                                   f"was given (update '{st.name}' first)", spans[st.name], program.source)
            if r.array == st.name and any(sp.expand(sp.sympify(a) - sp.sympify(b)) != 0
                                          for a, b in zip(r.index, st.target)):
                raise RewriteError(f"the update of '{st.name}' reads {format_expr(r)} where it writes "
                                   f"{fmt_vec(st.target)}ψ{st.name}: the elements are written in parallel, so that "
                                   "read could see a new value (read another element only through a copy, another "
                                   "input)", spans[st.name], program.source)
        written.add(st.name)


def scatter_index(program: C.CoreProgram, sc: C.CScatter, vars_: tuple) -> tuple:
    """The element of the updated input that element ⟨vars⟩ of a scatter's selection is:
    the selection ψ-reduced on its own, which must give one read of the input."""
    ctx = _Ctx(program)
    ctx.used, ctx.scope, ctx.stmt_vars = {v.name for v in vars_}, dict(zip(vars_, sc.shape)), set(vars_)
    e = psi_reduce(sc.sel, tuple(vars_), ctx)
    if not isinstance(e, DRead) or e.array != sc.target or ctx.stmts:
        raise RewriteError(f"the left side of an update must select elements of '{sc.target}' one by one; this "
                           f"one gives {format_expr(e)}", sc.span, program.source)
    return e.index


def scatter_conditions(program: C.CoreProgram) -> tuple:
    """For each scatter, the condition that it names every element at most once: the
    components of its index that are not a variable of their own, distinct over the
    variables they depend on (and those no component uses) — checked on every call where
    data decides them.  () where the index is a permutation of the variables."""
    out = []
    for name, node in program.updates:
        if not isinstance(node.arg, C.CScatter):
            continue
        ctx = _Ctx(program)
        vars_ = tuple(ctx.fresh(n) for n in node.shape)
        at = scatter_index(program, node.arg, vars_)
        syms = [sp.sympify(a).free_symbols & set(vars_) for a in at]
        own = {}                     # component -> its variable, where it is one-to-one in a variable of its own

        def one_to_one(ks: tuple, a) -> bool:
            """Whether a, the value of components ks, is one-to-one in a variable no other component uses."""
            if len(syms[ks[0]]) != 1 or has_data(a):
                return False
            (v,) = syms[ks[0]]
            if any(v in f for j, f in enumerate(syms) if j not in ks):
                return False
            slope = sp.expand(a).coeff(v)
            return sp.expand(a - slope * v).free_symbols.isdisjoint(vars_) and slope.is_nonzero is True
        for k, a in enumerate(at):
            if one_to_one((k,), a):          # i, n − 1 − i (a reverse), i + n (a drop)
                own[k] = next(iter(syms[k]))
        for k in range(len(at) - 1):         # (⌊x ÷ n⌋, x mod n), a reshape: one-to-one where x is
            pair = divmod_pair(at[k], at[k + 1])
            if pair is not None and k not in own and one_to_one((k, k + 1), pair[0]):
                own[k] = own[k + 1] = next(iter(syms[k + 1]))
        key = tuple(a for k, a in enumerate(at) if k not in own)
        over = tuple((v, n) for v, n in zip(vars_, node.shape) if v not in own.values())
        if over:
            out.append(C.Constraint(Distinct(*key), f"the update of '{name}' must name each of its elements at most "
                                    "once", node.span, over))
    return tuple(out)


def to_dnf(program: C.CoreProgram) -> DNF:
    """ψ-reduce every output of a core program to its DNF (verified when MOAC_VERIFY=1)."""
    ctx = _Ctx(program)
    # the updates last: they overwrite buffers the others read
    for role, named in (("output", program.outputs), ("update", program.updates)):
        for name, node in named:
            if isinstance(node.arg, C.CScatter):        # update S ← e: the elements S selects hold e
                vars_, body = _whole(ctx, C.CNamed(node.span, node.shape, name, node.arg.value))
                at = scatter_index(program, node.arg, vars_)
                ctx.stmts.append(DStmt(name, vars_, node.shape, body, role, at))
                continue
            vars_, body = _whole(ctx, node)
            ctx.stmts.append(DStmt(name, vars_, node.shape, body, role))
    stmts = _share_temporaries(ctx)
    check_update_reads(program, stmts)
    sizes = frozenset(program.sizes) | frozenset(C.size_symbol(n) for n, _ in program.derived)
    log = lambda before, after: ctx.trace.append(TraceStep("Σ-factor", format_expr(before), format_expr(after)))  # noqa: E731
    stmts = tuple(replace(s, body=pull_factors(s.body, sizes, log)) for s in stmts)
    d = DNF(program, stmts, tuple(ctx.trace), tuple(ctx.notes.items()))
    if os.environ.get("MOAC_VERIFY") == "1":
        verify_dnf(d)
    return d
