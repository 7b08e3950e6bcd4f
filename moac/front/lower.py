"""Surface AST -> core program with symbolic shapes (stage 2: `to_core`).

The statements of a module in order: size declarations and derived sizes, index
hints, inputs, assignments, outputs and in-place updates; each expression is
elaborated by `elaborate.Elab`.  The prelude's functions are available unless the
module defines its own of the same name.
"""
from __future__ import annotations

import re
from dataclasses import replace

from importlib import resources
from pathlib import Path

import sympy as sp

from . import syntax as S
from . import core as C
from .core import (CInput, CNamed, Constraint, CoreProgram, InputInfo, provably, provably_false, same_shape,
                   show_expr, show_shape, size_symbol)
from .data import INDEX_DTYPES, dependent, quantifier
from .elaborate import Elab, Scope
from ..errors import MoacError, NameError_, ShapeError, Source, Span


def _prelude_text() -> str:
    try:
        return resources.files("moac").joinpath("prelude.moa").read_text(encoding="utf-8")
    except (FileNotFoundError, OSError):  # pragma: no cover
        return (Path(__file__).resolve().parent.parent / "prelude.moa").read_text(encoding="utf-8")


def prelude_fnames() -> frozenset:
    """Names of the functions the prelude defines (the parser treats them as functions)."""
    return S.defined_fnames(_prelude_text())


def comment_note(e) -> None:
    """A note on a parse or name error after `#` or `//` on its line: another language's
    comment (in MoA `#` catenates and `/` divides; a comment starts with --)."""
    if e.notes or e.source is None or e.span is None:
        return
    before = e.source.line(e.span.line)[:e.span.col - 1]
    mark = next((m for m in ("//", "#") if m in before), None)
    if mark is not None:
        e.notes = (f"if `{mark} …` is meant as a comment: a comment starts with -- ({mark} is "
                   f"{'catenation' if mark == '#' else 'division'} in MoA, and what follows it is read as names)",)


def to_core(module: S.Module, source: Source, prelude: bool = True) -> CoreProgram:
    """Elaborate a parsed module: resolve names, inline functions, infer and check shapes."""
    el = Elab(source)
    if prelude:
        psrc = Source(_prelude_text(), "<prelude>")
        user_defs = {st.name.id for st in module.stmts if isinstance(st, (S.Assign, S.FnDef))}
        for st in S.parse(psrc.text, psrc.filename).stmts:
            if isinstance(st, S.FnDef) and st.name.id not in user_defs:
                el.fns[st.name.id] = (st, psrc)
    glob = Scope({})
    inputs: list[InputInfo] = []
    outputs: list = []
    hints: dict = {}
    el.index_hints = hints
    defined_at: dict = {}
    el.current_source = source

    used_sizes: set = set()
    output_dtypes: dict = {}
    derived: dict = {}
    updates: list = []
    size_spans: dict = {}

    def define(name: S.Name, kind: str):
        if name.id in defined_at or name.id in el.sizes:
            raise el.err(NameError_, f"'{name.id}' is already defined (line {defined_at.get(name.id, '?')})", name)
        if name.id in S.KEYWORDS:
            raise el.err(NameError_, f"'{name.id}' is a reserved word", name)
        defined_at[name.id] = name.span.line

    for st in module.stmts:
        if isinstance(st, S.FnDef):
            if st.name.id in el.fns and el.fns[st.name.id][1] is source:
                raise el.err(NameError_, f"function '{st.name.id}' is already defined", st.name)
            el.fns[st.name.id] = (st, source)
    for st in module.stmts:
        match st:
            case S.SizeDecl(names=names):
                for nm in names:
                    size_spans[nm.id] = st.span
                    define(nm, "size")
                    el.sizes[nm.id] = size_symbol(nm.id)
            case S.SizeDef(name=nm, expr=e):
                before = set(derived)
                _size_def(el, nm, e, glob, used_sizes, derived, define)
                for a in {nm.id} | (set(derived) - before):     # where each size got its meaning
                    size_spans[a] = st.span
            case S.IndexDecl(hints=pairs):
                for var, size in pairs:
                    if size.id not in el.sizes:
                        raise el.err(NameError_, f"'{size.id}' is not a declared size", size)
                    hints[size.id] = var.id
            case S.InputDecl(name=nm, dtype=dt, shape=vec):
                try:
                    shape = el.static_vector(vec, glob, "an input's shape")
                except NameError_ as e:
                    m = re.match(r"undefined name '(\w+)'", e.message)
                    if m and not e.notes:
                        e.notes = (f"an input's shape is made of sizes: declare it first with `size {m[1]}` "
                                   f"(or add it to an existing `size` line)",)
                    raise
                for item, extent in zip(vec.items, shape):
                    if sp.sympify(extent).is_negative:
                        raise el.err(ShapeError, f"input '{nm.id}': a length must be ≥ 0, got {show_expr(extent)}",
                                     item)
                used_sizes.update(s for e in shape for s in sp.sympify(e).free_symbols)
                define(nm, "input")
                glob.names[nm.id] = CInput(nm.span, tuple(shape), nm.id, dt)
                inputs.append(InputInfo(nm.id, dt, tuple(shape), nm.span))
                if dt in INDEX_DTYPES:               # sizes and indices: every element ≥ 0
                    _nonnegative(el, nm, tuple(shape), hints)
            case S.Assign(name=nm, expr=e):
                value = el.expr(e, glob)
                define(nm, "def")
                glob.names[nm.id] = Elab.named(nm.id, value, st.span)
            case S.OutputDecl(names=names, dtypes=dts):
                for nm, dt in zip(names, dts or (None,) * len(names)):
                    v = glob.lookup(nm.id)
                    if v is None:
                        later = next((x.name.span.line for x in module.stmts
                                      if isinstance(x, S.Assign) and x.name.id == nm.id), None)
                        if later is not None:
                            raise el.err(NameError_, f"output '{nm.id}' is defined only later, on line {later}; "
                                         "list it after its definition", nm)
                        raise el.err(NameError_, f"output '{nm.id}' is not defined", nm)
                    if any(o[0] == nm.id for o in outputs):
                        raise el.err(NameError_, f"output '{nm.id}' is listed twice", nm)
                    if isinstance(v, CInput):
                        raise el.err(NameError_, f"output '{nm.id}' is an input; outputs must be computed", nm)
                    outputs.append((nm.id, v))
                    if dt is not None:
                        output_dtypes[nm.id] = _output_dtype(el, nm, dt)
            case S.UpdateDecl(name=nm, expr=e, target=t):
                if nm is not None and not isinstance(glob.lookup(nm.id), (CNamed, C.CCell)):
                    _update(el, nm, e, glob, updates, st.span)
                else:                               # a selection (or the name of one): a scatter
                    _scatter(el, t if t is not None else nm, e, glob, updates)
            case S.FnDef():
                pass
    if not outputs and not updates:
        assigns = [st for st in module.stmts if isinstance(st, S.Assign)]
        if not assigns:
            raise MoacError("the program computes nothing: no assignment and no output", Span(1, 1, 1, 1), source)
        last = assigns[-1].name.id
        outputs.append((last, glob.lookup(last)))
    outputs = [(n, v if isinstance(v, CNamed) else CNamed(v.span, v.shape, n, v)) for n, v in outputs]
    for n, v in outputs + list(updates):
        if dependent(v.shape):
            raise MoacError(f"'{n}' has shape {show_shape(v.shape)}, which depends on integer data: a result "
                            "must be rectangular (reduce the ragged axis, as attention does, inside the program)",
                            v.span, source)
    constraints: dict = {}
    for c in el.constraints:                  # one per condition, the first one found
        constraints.setdefault(_key(c), c)
    independent = tuple(dict.fromkeys(v for v in el.sizes.values() if isinstance(v, sp.Symbol)))   # size m = n: once
    program = CoreProgram(source, independent, hints, tuple(inputs), tuple(outputs),
                          tuple(constraints.values()), tuple(derived.items()), tuple(updates), size_spans, output_dtypes)
    if any(isinstance(v.arg, C.CScatter) for _, v in updates):
        from ..dnf.program import scatter_conditions      # the selections ψ-reduced (dnf builds on core)
        program = replace(program, constraints=program.constraints + scatter_conditions(program))
    return program


def _key(c: Constraint):
    """A condition up to the names of its quantified indices (two takes of `lens` within
    the same capacity are one condition)."""
    if not c.over:
        return c.cond
    sub = {v: sp.Symbol(f"_q{k}") for k, (v, _) in enumerate(c.over)}
    return (sp.sympify(c.cond).xreplace(sub), tuple(sp.sympify(e).xreplace(sub) for _, e in c.over))


def _nonnegative(el: Elab, nm: S.Name, shape: tuple, hints: dict) -> None:
    """An integer input holds sizes and indices: its elements must be ≥ 0 (checked when the
    program runs; the later stages rely on it)."""
    over = []
    for ext in shape:
        over.append((quantifier(ext, hints, {v.name for v, _ in over}), ext))
    term = sp.Function(nm.id)(*(v for v, _ in over))        # no assumptions: the condition is not trivial
    el.constraints.append(Constraint(sp.Ge(term, 0), f"the elements of integer input '{nm.id}' must be ≥ 0 (sizes and "
                                     "indices)", nm.span, tuple(over)))


def _output_dtype(el: Elab, nm: S.Name, dt: S.Name) -> str:
    """`output out : bf16`: the storage an output is rounded to when stored."""
    from ..dtypes import OUTPUT_STORAGE
    if dt.id not in OUTPUT_STORAGE:
        raise el.err(MoacError, f"output '{nm.id}' cannot be stored as {dt.id}: an output is declared "
                     f"{' or '.join(OUTPUT_STORAGE)} (rounded to nearest even when stored), or has no dtype and is "
                     "in the kernel's arithmetic type (f32, or f64 where an input is f64)", dt)
    return dt.id


def _update(el: Elab, nm: S.Name, e: S.Node, glob: Scope, updates: list, span: Span) -> None:
    """`update K ← e`: K is an input (a buffer the caller owns); e has K's rank and cell
    shape and at most as many rows.  Rows of K beyond e's are left as they were."""
    target = glob.lookup(nm.id)
    if not isinstance(target, CInput):
        raise el.err(NameError_, f"only an input can be updated; '{nm.id}' is "
                     f"{'not defined' if target is None else 'computed'}", nm)
    if target.name != nm.id:              # r = v, then update r ← …: r is a value, v the buffer
        raise el.err(NameError_, f"only an input can be updated; '{nm.id}' is a name for input "
                     f"'{target.name}'", nm, [f"update the input itself: `update {target.name} ← …`"])
    if any(u[0] == nm.id for u in updates):
        raise el.err(NameError_, f"'{nm.id}' is updated twice", nm)
    if target.rank == 0:
        raise el.err(ShapeError, f"'{nm.id}' is a scalar: an update writes rows of an input of rank ≥ 1", nm)
    value = el.expr(e, glob)
    if value.rank != target.rank or value.rank == 0:
        raise el.err(ShapeError, f"update of '{nm.id}' {show_shape(target.shape)} needs an array of rank "
                     f"{target.rank} (rows of shape {show_shape(target.shape[1:])}); got rank {value.rank}, "
                     f"{show_shape(value.shape)}", e,
                     [f"one row: write ⟨1 {' '.join(show_expr(x) for x in value.shape)}⟩ ρ (…)"]
                     if value.rank == target.rank - 1 and same_shape(value.shape, target.shape[1:]) else [])
    if not same_shape(value.shape[1:], target.shape[1:]):
        raise el.err(ShapeError, f"update of '{nm.id}' {show_shape(target.shape)} needs rows of shape "
                     f"{show_shape(target.shape[1:])}; got {show_shape(value.shape)}", e)
    rows, cap = value.shape[0], target.shape[0]
    fits = sp.Le(rows, cap)
    if provably_false(fits):
        raise el.err(ShapeError, f"the update writes {rows} rows into '{nm.id}', which holds {cap}", e)
    if not provably(fits):
        el.constraints.append(Constraint(fits, f"'{nm.id}' is full: the update needs {rows} rows, it holds {cap}", span))
    updates.append((nm.id, CNamed(value.span, value.shape, nm.id, value)))


_SELECTIONS = (C.CPsi, C.CTranspose, C.CReshape, C.CTake, C.CDrop, C.CReverse, C.CNamed)


def selected_input(c: C.Core, cells: dict | None = None):
    """The input whose elements a selection picks (ψ, ρ, ⍉, △, ▽, Φ and Ω of one input;
    indices and counts may be read from integer inputs), or the first node that computes
    values instead: (input name, None) or (None, offending core node)."""
    cells = cells or {}
    while isinstance(c, _SELECTIONS):
        c = c.arg
    match c:
        case CInput(name=name):
            return name, None
        case C.CCell(id=i) if i in cells:
            return selected_input(cells[i], cells)
        case C.COmega(args=args, cells=cs, body=body):
            return selected_input(body, {**cells, **{cell.id: a for cell, a in zip(cs, args)}})
    return None, c


def _scatter(el: Elab, sel_node: S.Node, e: S.Node, glob: Scope, updates: list) -> None:
    """`update S ← e`: S selects elements of an input X (ψ, ρ, ⍉, △, ▽, Φ and Ω of X); after
    the call those elements of X hold e's.  Each element may be selected once (a condition
    on the data where the selection reads it: moac.dnf.program.scatter_conditions)."""
    sel = el.expr(sel_node, glob)
    name, bad = selected_input(sel)
    if name is None:
        what = type(bad).__name__.removeprefix("C").lower()
        raise el.err(ShapeError, "the left side of an update must select elements of one input (ψ, ρ, ⍉, △, ▽, "
                     f"Φ and Ω of it); this one computes values ({what})", sel_node,
                     notes=("`update K ← e` with K an input writes e into K's leading rows",))
    if any(u[0] == name for u in updates):
        raise el.err(NameError_, f"'{name}' is updated twice", sel_node)
    info = glob.lookup(name)
    if info.dtype in INDEX_DTYPES:
        raise el.err(ShapeError, f"'{name}' holds sizes and indices ({info.dtype}); an update writes float data",
                     sel_node)
    value = el.expr(e, glob)
    if dependent(sel.shape) or not same_shape(value.shape, sel.shape):
        raise el.err(ShapeError, f"the update writes {show_shape(value.shape)} into a selection of '{name}' of "
                     f"shape {show_shape(sel.shape)}; the two must have the same shape", e)
    scatter = C.CScatter(sel_node.span, sel.shape, name, sel, value)
    updates.append((name, CNamed(sel_node.span, sel.shape, name, scatter)))


def _size_def(el: Elab, nm: S.Name, e: S.Node, glob: Scope, used: set, derived: dict, define) -> None:
    """`size g = expr`.  A static expression of declared sizes is an alias.  An exact
    division `size g = a ÷ b` of a declared size a makes g a size of its own and a the
    product g·b everywhere (so a is a multiple of b by construction; the inputs' shapes
    or -D must agree); a must not have been used by an input yet."""
    core = el.expr(e, glob)
    value = el.core_static(core)
    if value is not None and core.rank == 0:
        define(nm, "size")
        el.sizes[nm.id] = value
        derived[nm.id] = value
        return
    if isinstance(e, S.Dyad) and isinstance(e.fn, S.Prim) and e.fn.op == "div" and isinstance(e.left, S.Name) \
            and e.left.id in el.sizes and isinstance(el.sizes[e.left.id], sp.Symbol):
        a = el.sizes[e.left.id]
        b = sp.expand(el.static_int(e.right, glob))
        if b == 0 or provably(sp.Lt(b, 0)):
            raise el.err(ShapeError, f"size {nm.id} = {a.name} ÷ {show_expr(b)}: the divisor must be positive "
                         f"(it would make {a.name} = {nm.id}·{show_expr(b)})", e.right)
        if a in used:
            raise el.err(ShapeError, f"declare 'size {nm.id} = …' before any input uses '{a.name}'", nm)
        define(nm, "size")
        g = size_symbol(nm.id)
        del el.sizes[a.name]
        el.sizes[nm.id] = g
        el.sizes[a.name] = g * b
        derived[a.name] = g * b
        return
    raise el.err(ShapeError, f"a size must be a static integer expression of declared sizes, or an exact "
                 f"division 'a ÷ b' of a declared size; got {el.text(e)!r}", e)
