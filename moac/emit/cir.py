"""moac's own small C IR and its precedence-aware printer.

The ONF is frozen into this IR (no sympy past this point).  Integer index
arithmetic is int64_t; floor division and modulo of possibly negative operands go
through helpers (`moac_floordiv`, `moac_mod`), never C's truncating `/` and `%`.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

# --------------------------------------------------------------------------- expressions


@dataclass(frozen=True, slots=True)
class Var:
    name: str


@dataclass(frozen=True, slots=True)
class Int:
    value: int


@dataclass(frozen=True, slots=True)
class Num:
    value: float


@dataclass(frozen=True, slots=True)
class Bin:
    op: str        # + - * / < <= == != && ||  (on ints or floats)
    a: object
    b: object


@dataclass(frozen=True, slots=True)
class Neg:
    a: object


@dataclass(frozen=True, slots=True)
class Call:
    fn: str
    args: tuple


@dataclass(frozen=True, slots=True)
class Load:
    array: str
    index: object


@dataclass(frozen=True, slots=True)
class Cond:
    cond: object
    a: object
    b: object


@dataclass(frozen=True, slots=True)
class Cast:
    ctype: str
    a: object


# --------------------------------------------------------------------------- statements


@dataclass(frozen=True, slots=True)
class Decl:
    ctype: str
    name: str
    init: object = None


@dataclass(frozen=True, slots=True)
class Assign:
    name: str
    value: object


@dataclass(frozen=True, slots=True)
class Store:
    array: str
    index: object
    value: object


@dataclass(frozen=True, slots=True)
class For:
    var: str
    extent: object
    body: tuple
    pragma: str | None = None
    comment: str | None = None
    start: object = Int(0)
    itype: str = "int64_t"     # the loop variable's type
    level: str | None = None   # the Schedule level it came from (gang, vector, seq, ...)
    reduce: tuple = ()         # a vector loop's reductions: ((op, (names...)),)
    step: object = None        # None: ++var
    iterations: object = None  # extent − start, simplified (set by freeze)


@dataclass(frozen=True, slots=True)
class If:
    cond: object
    then: tuple
    other: tuple = ()


@dataclass(frozen=True, slots=True)
class Block:
    body: tuple
    pragma: str | None = None
    comment: str | None = None
    level: str | None = None   # "serial": a single-gang region; None: a scope


@dataclass(frozen=True, slots=True)
class Comment:
    text: str


@dataclass(frozen=True, slots=True)
class Prefetch:
    """A hint that `nbytes` bytes from the address `base` (C text, a `const char *`) are read
    soon: one `hint` (the target's spelling, with {addr}) per 64-byte line, printed as a
    loop over the lines."""
    base: str
    nbytes: int
    hint: str


@dataclass(frozen=True, slots=True)
class Raw:
    """Statement text a target prints as it is (a CUDA launch, a barrier)."""
    text: str


@dataclass(frozen=True, slots=True)
class LastGang:
    """A gang's end where the last gang of its frame folds the frame's partials
    (moac.schedule.ir.LastGang, frozen): printed by targets with device-wide atomics
    (Target.last_gang), never given to the others.  `counter` is a scratch array of `size`
    elements, slot `index` the frame's; `count` gangs arrive where `when` holds; the arrays of
    `zero`, (name, elements) pairs, are zero-filled before the kernel where it holds."""
    counter: str
    index: object
    count: object
    when: object
    size: object
    body: tuple
    comment: str = ""
    zero: tuple = ()
    direct: bool = False     # a frame of one gang stored its outputs from its tile (Tile.direct): no fold
    counted: object = None   # where gangs count on `counter` (zeroed before the kernel there); None: `when`


@dataclass(frozen=True, slots=True)
class Tile:
    """A gang's chunk as tensor-core tiles (moac.schedule.ir.TensorTile, frozen): what a
    target with tile instructions prints (moac.emit.tiles); the other printers never see
    one (the freezer gives them the tile's lane passes).  Offsets in elements: q_at of the
    lane's query row (the variable `row`), k_at and v_at of the K and V rows of token
    `moac_tok`; m_at, z_at, o_at of the row's partials; `score` the score of the dot
    product `moac_sv` for the token variable `tok`."""
    shape: str
    rows: int
    dk: int
    dv: int
    q: str
    k: str
    v: str
    parts: tuple
    q_at: object
    k_at: object
    v_at: object
    start: object
    count: object
    score: object
    row: str
    tok: str
    m_at: object
    z_at: object
    o_at: object
    storage: str = "bf16"    # K's and V's element type (bf16, f16, f8e4m3, f8e5m2)
    weight: object = None    # a factor of each token's values (a dequantisation scale), or None
    blocks: tuple | None = None   # ((k base, stride), (v base, stride)) in `moac_blk`, or None
    warps: int = 1           # warps of the gang, sharing its steps (TensorTile.warps)
    out: str = ""            # the output a frame of one gang stores from the tile where `direct` holds
    out_at: object = 0
    direct: object = None


# --------------------------------------------------------------------------- printer

_PREC = {"||": 1, "&&": 2, "&": 2.5, "==": 3, "!=": 3, "<": 4, "<=": 4, ">": 4, ">=": 4,
         ">>": 4.5, "+": 5, "-": 5, "*": 6, "/": 6, "%": 6}


def fmt_float(v: float, ctype: str) -> str:
    import math
    if math.isinf(v):
        return "INFINITY" if v > 0 else "-INFINITY"
    if math.isnan(v):
        return "NAN"
    s = repr(float(v))
    if "e" not in s and "." not in s:
        s += ".0"
    return s + ("f" if ctype == "float" else "")


_CMP = {"==", "!=", "<", "<=", ">", ">="}


def expr(e, ctype: str = "float", prec: int = 0) -> str:
    """Print an expression; `ctype` decides float literal suffixes."""
    match e:
        case Var(name=n):
            return n
        case Int(value=v):
            return str(v) if v >= 0 or prec == 0 else f"({v})"
        case Num(value=v):
            s = fmt_float(v, ctype)
            return f"({s})" if (s.startswith("-") and prec > 0) else s
        case Bin(op=op, a=a, b=b):
            p = _PREC[op]
            left, right = expr(a, ctype, p), expr(b, ctype, p + 1)
            # what gcc's -Wparentheses asks for: && inside ||, a comparison inside == or !=
            for side, child in (("l", a), ("r", b)):
                text = left if side == "l" else right
                need = isinstance(child, Bin) and not text.startswith("(") and (
                    (op == "||" and child.op == "&&") or (op in ("==", "!=") and child.op in _CMP))
                if need and side == "l":
                    left = f"({left})"
                elif need:
                    right = f"({right})"
            s = f"{left} {op} {right}"
            return f"({s})" if p < prec else s
        case Neg(a=a):
            inner = expr(a, ctype, 7)
            return f"-({inner})" if inner.startswith("-") else f"-{inner}"   # never `--x`
        case Call(fn=fn, args=args):
            return f"{fn}({', '.join(expr(x, ctype) for x in args)})"
        case Load(array=arr, index=i):
            return f"{arr}[{expr(i, ctype)}]"
        case Cond(cond=c, a=a, b=b):
            s = f"{expr(c, ctype, 1)} ? {expr(a, ctype, 1)} : {expr(b, ctype, 1)}"
            return f"({s})" if prec > 0 else s
        case Cast(ctype=t, a=a):
            return f"({t}){expr(a, ctype, 7)}"
    raise TypeError(e)


def stmts(body, ctype: str = "float", indent: int = 1) -> list[str]:
    pad = "    " * indent
    out: list[str] = []
    for s in body:
        match s:
            case Decl(ctype=t, name=n, init=init):
                out.append(f"{pad}{t} {n}" + (f" = {expr(init, ctype)};" if init is not None else ";"))
            case Assign(name=n, value=v):
                out.append(f"{pad}{n} = {expr(v, ctype)};")
            case Store(array=a, index=i, value=v):
                out.append(f"{pad}{a}[{expr(i, ctype)}] = {expr(v, ctype)};")
            case For(var=v, extent=ext, body=b, pragma=pr, comment=cm, start=st, itype=it, step=step):
                if pr:
                    out.append(f"{pad}{pr}")
                inc = f"++{v}" if step is None else f"{v} += {expr(step, ctype)}"
                head = f"{pad}for ({it} {v} = {expr(st, ctype)}; {v} < {expr(ext, ctype)}; {inc}) {{"
                out.append(head + (f"  /* {cm} */" if cm else ""))
                out += stmts(b, ctype, indent + 1)
                out.append(f"{pad}}}")
            case If(cond=c, then=t, other=o):
                out.append(f"{pad}if ({expr(c, ctype)}) {{")
                out += stmts(t, ctype, indent + 1)
                if o:
                    out.append(f"{pad}}} else {{")
                    out += stmts(o, ctype, indent + 1)
                out.append(f"{pad}}}")
            case Block(body=b, pragma=pr, comment=cm):
                if cm:
                    out.append(f"{pad}/* {cm} */")
                if pr:
                    out.append(f"{pad}{pr}")
                out.append(f"{pad}{{")
                out += stmts(b, ctype, indent + 1)
                out.append(f"{pad}}}")
            case Comment(text=t):
                out.append(f"{pad}/* {t} */")
            case Prefetch(base=b, nbytes=nb, hint=h):
                out += [f"{pad}for (int moac_pf = 0; moac_pf < {nb}; moac_pf += 64)   /* prefetch {nb} bytes */",
                        f"{pad}    {h.format(addr=b + ' + moac_pf')};"]
            case Raw(text=t):
                out += [pad + ln for ln in t.splitlines()]
            case _:
                raise TypeError(s)
    return out


def names_in(x, out: set) -> set:
    """Every string in a C IR tree (the variables and arrays it names, among other text)."""
    if isinstance(x, str):
        out.add(x)
    elif isinstance(x, (tuple, list)):
        for y in x:
            names_in(y, out)
    elif dataclasses.is_dataclass(x) and not isinstance(x, type):
        for fld in dataclasses.fields(x):
            names_in(getattr(x, fld.name), out)
    return out


# --------------------------------------------------------------------------- small builders


def add(a, b):
    if isinstance(a, Int) and a.value == 0:
        return b
    if isinstance(b, Int) and b.value == 0:
        return a
    if isinstance(b, Int) and b.value < 0:
        return Bin("-", a, Int(-b.value))
    return Bin("+", a, b)


def mul(a, b):
    if isinstance(a, Int) and a.value == 1:
        return b
    if isinstance(b, Int) and b.value == 1:
        return a
    return Bin("*", a, b)
