"""Verifiers at the back half's stage boundaries (on in the tests: MOAC_VERIFY=1).

verify_schedule: every access names a buffer with an index of its rank, every variable
an index or extent mentions is bound (a size, a run-time choice, the kernel's domain, an
enclosing loop or index local), levels nest as hardware does (gang loops outermost).
verify_cunit: no sympy object survives freezing, and every variable the C reads is
declared before (a parameter, a scratch pointer, a local, a loop variable).
A failure is a moac bug, so it raises AssertionError with what is wrong and where.
"""
from __future__ import annotations

import dataclasses

import sympy as sp

from .emit import cir
from .schedule.ir import Guard, LastGang, Let, LetIndex, Loop, Schedule, Scope, Serial, Set, Store, Unpack, expr_reads, Prefetch


def _fail(where: str, what: str):
    raise AssertionError(f"Schedule verifier: {where}: {what}")


def verify_schedule(s: Schedule) -> None:
    bufs = {b.name: b for b in s.buffers}
    sizes = set(s.dnf.program.sizes) | {c.var for c in s.choices}

    def check_syms(e, bound: set, where: str):
        free = {x for x in sp.sympify(e).free_symbols if x not in sizes}
        if free - bound:
            _fail(where, f"{', '.join(sorted(x.name for x in free - bound))} unbound in {e}")

    def access(a, bound, where):
        if a.array not in bufs:
            _fail(where, f"access to {a.array}, which is no buffer")
        if len(a.index) != len(bufs[a.array].shape):
            _fail(where, f"{a.array} has rank {len(bufs[a.array].shape)}, indexed with {len(a.index)}")
        for i in a.index:
            check_syms(i, bound, f"{where}, {a.array}")

    def expr(e, bound, where):
        for r in expr_reads(e, []):
            access(r, bound, where)

    def walk(body, bound: set, where: str, gang_ok: bool):
        bound = set(bound)
        for st in body:
            match st:
                case Let(value=v) | Set(value=v):
                    if v is not None:
                        expr(v, bound, where)
                case Unpack():
                    access(st, bound, where)
                case Prefetch(index=idx):
                    for i in idx:
                        check_syms(i, bound, where)
                case LetIndex(var=v, value=x):
                    check_syms(x, bound, where)
                    bound.add(v)
                case Store(value=v):
                    expr(v, bound, where)
                    access(st, bound, where)
                case Guard(cond=c, then=t, other=o):
                    check_syms(c, bound, where)
                    walk(t, bound, where, False)
                    walk(o, bound, where, False)
                case Loop(var=v, extent=n, level=lv, body=b):
                    if lv == "gang" and not gang_ok:
                        _fail(where, f"gang loop over {v.name} inside a non-gang level")
                    check_syms(n, bound, where)
                    walk(b, bound | {v}, where, lv == "gang" and len(b) == 1)
                case Serial(body=b):
                    walk(b, bound, where, False)
                case Scope(body=b):
                    walk(b, bound, where, gang_ok)
                case LastGang(index=idx, count=n, when=c, body=b):
                    for x in idx + (n, c):
                        check_syms(x, bound, where)
                    walk(b, bound, where, False)
                case _:
                    _fail(where, f"unknown statement {type(st).__name__}")

    for k in s.kernels:
        walk(k.body, {v for v, _ in k.domain}, f"kernel {k.name}", True)


def _sympy_free(x, where: str):
    if isinstance(x, sp.Basic):
        raise AssertionError(f"C unit verifier: {where}: a sympy object survived freezing: {x!r}")
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        for f in dataclasses.fields(x):
            _sympy_free(getattr(x, f.name), where)
    elif isinstance(x, (tuple, list)):
        for y in x:
            _sympy_free(y, where)
    elif isinstance(x, dict):
        for y in x.values():
            _sympy_free(y, where)


def _uses(e, out: set):
    match e:
        case cir.Var(name=n):
            out.add(n)
        case cir.Bin(a=a, b=b):
            _uses(a, out)
            _uses(b, out)
        case cir.Neg(a=a) | cir.Cast(a=a):
            _uses(a, out)
        case cir.Call(args=args):
            for x in args:
                _uses(x, out)
        case cir.Load(array=arr, index=i):
            out.add(arr)
            _uses(i, out)
        case cir.Cond(cond=c, a=a, b=b):
            for x in (c, a, b):
                _uses(x, out)
    return out


def verify_cunit(unit, params: tuple = ()) -> None:
    _sympy_free(unit, "C unit")
    declared = set(params) | {s.cname for s in unit.scratch + unit.shared} | {d.name for d in unit.prologue}

    def walk(body, names: set, where: str):
        names = set(names)
        for st in body:
            match st:
                case cir.Decl(name=n, init=init):
                    if init is not None:
                        need(init, names, where)
                    names.add(n)
                case cir.Assign(name=n, value=v):
                    need(v, names | {n}, where)
                    if n not in names:
                        raise AssertionError(f"C unit verifier: {where}: {n} assigned, never declared")
                case cir.Store(array=a, index=i, value=v):
                    need(i, names, where)
                    need(v, names, where)
                    if a not in names:
                        raise AssertionError(f"C unit verifier: {where}: store to undeclared {a}")
                case cir.For(var=v, extent=n, body=b, start=st0):
                    need(n, names, where)
                    need(st0, names, where)
                    walk(b, names | {v}, where)
                case cir.If(cond=c, then=t, other=o):
                    need(c, names, where)
                    walk(t, names, where)
                    walk(o, names, where)
                case cir.Block(body=b):
                    walk(b, names, where)
                case cir.LastGang(counter=a, index=i, count=n, when=c, size=sz, body=b):
                    for x in (i, n, c, sz):
                        need(x, names, where)
                    if a not in names:
                        raise AssertionError(f"C unit verifier: {where}: counter {a} undeclared")
                    walk(b, names, where)

    def need(e, names, where):
        missing = _uses(e, set()) - names
        if missing:
            raise AssertionError(f"C unit verifier: {where}: {', '.join(sorted(missing))} used, never declared")

    for k in unit.kernels:
        walk(k.code, declared, f"kernel {k.name}")
