"""Source text -> surface AST (stage 1).

The grammar lives in `grammar/moa.lark`; a lark Transformer builds the frozen
dataclasses below straight from the parse tree, each node with its source span.
"""
from __future__ import annotations

import contextvars
import hashlib
import math
import re
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path

import lark

from ..errors import ParseError, Source, Span, source_lines
from ..ops import BY_TOKEN

# --------------------------------------------------------------------------- AST


@dataclass(frozen=True, slots=True)
class Node:
    span: Span


@dataclass(frozen=True, slots=True)
class Name(Node):
    id: str


@dataclass(frozen=True, slots=True)
class Number(Node):
    value: int | float


@dataclass(frozen=True, slots=True)
class Vector(Node):
    items: tuple


@dataclass(frozen=True, slots=True)
class Prim(Node):
    op: str          # canonical name (ops.py): add, sub, psi, rho, ...
    text: str        # as written


@dataclass(frozen=True, slots=True)
class InnerFn(Node):
    f: Prim
    g: Prim


@dataclass(frozen=True, slots=True)
class OuterFn(Node):
    g: Prim


@dataclass(frozen=True, slots=True)
class UserFn(Node):
    name: str


@dataclass(frozen=True, slots=True)
class RedFn(Node):
    fn: Node


@dataclass(frozen=True, slots=True)
class OmegaFn(Node):
    fn: Node
    sigmas: Vector


@dataclass(frozen=True, slots=True)
class Monad(Node):
    fn: Node
    arg: Node


@dataclass(frozen=True, slots=True)
class Dyad(Node):
    fn: Node
    left: Node
    right: Node


@dataclass(frozen=True, slots=True)
class SizeDecl(Node):
    names: tuple[Name, ...]


@dataclass(frozen=True, slots=True)
class SizeDef(Node):
    """`size g = hq ÷ hkv`: a size given by the others."""
    name: Name
    expr: Node


@dataclass(frozen=True, slots=True)
class IndexDecl(Node):
    hints: tuple[tuple[Name, Name], ...]   # (index variable, size)


@dataclass(frozen=True, slots=True)
class InputDecl(Node):
    name: Name
    dtype: str
    shape: Vector


@dataclass(frozen=True, slots=True)
class Assign(Node):
    name: Name
    expr: Node


@dataclass(frozen=True, slots=True)
class OutputDecl(Node):
    names: tuple[Name, ...]
    dtypes: tuple = ()       # per name: a Name node spelling its storage dtype (`output out : bf16`), or None


@dataclass(frozen=True, slots=True)
class UpdateDecl(Node):
    """`update K ← e`: after the call the caller's buffer K holds e in its leading rows.
    `update S ← e` with S a selection of an input (ψ, ρ, ⍉, △, ▽, Φ and Ω of it): the
    elements S selects hold e afterwards (a scatter; `target` is S, `name` None)."""
    name: Name | None
    expr: Node
    target: Node | None = None


@dataclass(frozen=True, slots=True)
class FnDef(Node):
    name: Name
    params: tuple[Name, ...]
    lets: tuple[Assign, ...]
    result: Node


@dataclass(frozen=True, slots=True)
class Module(Node):
    stmts: tuple


# --------------------------------------------------------------------------- parser


def _span(meta_or_tok) -> Span:
    if isinstance(meta_or_tok, lark.Token):
        return Span(meta_or_tok.line, meta_or_tok.column, meta_or_tok.end_line, meta_or_tok.end_column - 1)
    m = meta_or_tok
    return Span(m.line, m.column, m.end_line, m.end_column - 1)


@lark.v_args(meta=True)
class _ToAST(lark.Transformer):
    def __init__(self, lines: list[str] = ()):
        super().__init__()
        self._lines = lines                   # the source's lines (what separates two items of ⟨…⟩)
        self._minus_items: set = set()        # ids of the Numbers written `-1` (ASCII for ¯1)

    def _between(self, a: Span, b: Span) -> str:
        """The source text after span a and before span b."""
        if a.end_line == b.line:
            return self._lines[a.end_line - 1][a.end_col:b.col - 1] if a.end_line <= len(self._lines) else ""
        return "\n".join([self._lines[a.end_line - 1][a.end_col:], *self._lines[a.end_line:b.line - 1],
                          self._lines[b.line - 1][:b.col - 1]]) if b.line <= len(self._lines) else ""

    def start(self, meta, items):
        span = _span(meta) if not meta.empty else Span(1, 1, 1, 1)
        return Module(span, tuple(items))

    def size_decl(self, meta, items):
        return SizeDecl(_span(meta), tuple(Name(_span(t), str(t)) for t in items))

    def size_def(self, meta, items):
        name, expr = items
        return SizeDef(_span(meta), Name(_span(name), str(name)), expr)

    def index_hint(self, meta, items):
        var, size = items
        return (Name(_span(var), str(var)), Name(_span(size), str(size)))

    def index_decl(self, meta, items):
        return IndexDecl(_span(meta), tuple(items))

    def input_decl(self, meta, items):
        name, dtype, vec = items
        return InputDecl(_span(meta), Name(_span(name), str(name)), str(dtype), vec)

    def assign(self, meta, items):
        name, expr = items
        return Assign(_span(meta), Name(_span(name), str(name)), expr)

    def output_item(self, meta, items):
        name = Name(_span(items[0]), str(items[0]))
        return name, (Name(_span(items[1]), str(items[1])) if len(items) > 1 else None)

    def output_decl(self, meta, items):
        return OutputDecl(_span(meta), tuple(n for n, _ in items), tuple(d for _, d in items))

    def update_decl(self, meta, items):
        target, expr = items
        if isinstance(target, Name):
            return UpdateDecl(_span(meta), target, expr)
        return UpdateDecl(_span(meta), None, expr, target)

    def fn_def(self, meta, items):
        fname = items[0]
        params = []
        rest = items[1:]
        while rest and isinstance(rest[0], lark.Token):
            params.append(Name(_span(rest[0]), str(rest[0])))
            rest = rest[1:]
        *lets, result = rest
        return FnDef(_span(meta), Name(_span(fname), str(fname)), tuple(params), tuple(lets), result)

    def name(self, meta, items):
        (tok,) = items
        return Name(_span(tok), str(tok))

    def number(self, meta, items):
        (tok,) = items
        return Number(_span(tok), _literal(tok))

    def negnumber(self, meta, items):
        sign, tok = items
        num = Number(_span(sign).join(_span(tok)), -_literal(tok))
        if sign.type == "MINUS":            # `-1` as an item of ⟨…⟩ (the ASCII spelling of ¯1)
            self._minus_items.add(id(num))
        return num

    def vector(self, meta, items):
        for prev, item in zip(items, items[1:]):
            # ⟨n − 1⟩ is two items, n and ¯1: never what it looks like (⟨n, −1⟩ says so with its comma)
            if id(item) in self._minus_items and "," not in self._between(prev.span, item.span):
                text = f"{-item.value}"
                left = prev.id if isinstance(prev, Name) else f"{prev.value}" if isinstance(prev, Number) else "…"
                raise ParseError(f"`− {text}` after an item of ⟨…⟩ reads as a second item, ¯{text}, not a "
                                 "subtraction", item.span,
                                 notes=(f"for the difference write the item in parentheses, `⟨({left} − {text})⟩`; "
                                        f"for a negative item write `¯{text}` or `(-{text})`, or put a comma "
                                        f"before it: `⟨{left}, -{text}⟩`",))
        return Vector(_span(meta), tuple(items))

    def dyad(self, meta, items):
        left, fn, right = items
        return Dyad(_span(meta), fn, left, right)

    def monad(self, meta, items):
        fn, arg = items
        return Monad(_span(meta), fn, arg)

    def prim(self, meta, items):
        if len(items) == 1 and isinstance(items[0], Prim):
            return items[0]
        (tok,) = items
        return Prim(_span(tok), BY_TOKEN[tok.type], str(tok))

    def inner(self, meta, items):
        f, _dot, g = items
        return InnerFn(_span(meta), f, g)

    def outer(self, meta, items):
        _o, _dot, g = items
        return OuterFn(_span(meta), g)

    def userfn(self, meta, items):
        (tok,) = items
        return UserFn(_span(tok), str(tok))

    def omega(self, meta, items):
        fn, _om, vec = items
        return OmegaFn(_span(meta), fn, vec)

    def reduce(self, meta, items):
        fn, _red = items
        return RedFn(_span(meta), fn)


KEYWORDS = {
    "max": "MAX", "min": "MIN", "pow": "POW", "exp": "EXP", "log": "LOG", "sqrt": "SQRT",
    "abs": "ABS", "tanh": "TANH", "psi": "PSI", "rho": "RHO", "iota": "IOTA", "gamma": "GAMMA",
    "gammacol": "GAMMACOL", "transpose": "TRANSPOSE", "tr": "TRANSPOSE", "take": "TAKE",
    "drop": "DROP", "reverse": "REVERSE", "rev": "REVERSE", "cat": "CAT", "red": "RED",
    "omega": "OMEGA", "outer": "OUTER", "f32": "DTYPE", "f64": "DTYPE", "f16": "DTYPE",
    "bf16": "DTYPE", "f8e4m3": "DTYPE", "f8e5m2": "DTYPE", "i8": "DTYPE", "i32": "DTYPE", "i64": "DTYPE", "rav": "RAV", "tau": "TAU", "dim": "DELTA",
    "gammainv": "GAMMAINV",
}

_FN_DEF = re.compile(r"^[ \t]*fn[ \t]+([A-Za-z_][A-Za-z_0-9]*)", re.M)
_ASSIGNED = re.compile(r"^[ \t]*([A-Za-z_][A-Za-z_0-9]*)[ \t]*(?:=|←)", re.M)


def defined_fnames(text: str) -> frozenset[str]:
    """The names a source text defines with `fn` (the lexer spells them FNAME)."""
    return frozenset(_FN_DEF.findall(text))


def grammar_text() -> str:
    """The grammar file: inside the installed package, or beside it in a checkout."""
    try:
        return resources.files("moac.grammar").joinpath("moa.lark").read_text(encoding="utf-8")
    except (ModuleNotFoundError, FileNotFoundError, OSError):
        return (Path(__file__).resolve().parents[2] / "grammar" / "moa.lark").read_text(encoding="utf-8")


_FNAMES: contextvars.ContextVar = contextvars.ContextVar("moac_fnames", default=frozenset())


def _retype(tok: lark.Token) -> lark.Token:
    """A NAME token that is a keyword, or a function this parse knows (the prelude's and the
    source's own `fn` names, in `_FNAMES`), takes that token type."""
    if tok.value in KEYWORDS:
        return tok.update(type=KEYWORDS[tok.value])
    if tok.value in _FNAMES.get():
        return tok.update(type="FNAME")
    return tok


@cache
def _parser() -> lark.Lark:
    """The one LALR parser of the grammar; its tables are kept in moac's cache directory
    (lark's cache, checked against the grammar's hash), so a new process loads them
    instead of computing them."""
    text = grammar_text()
    try:
        from ..cache import cache_dir
        digest = hashlib.sha256((text + lark.__version__).encode()).hexdigest()[:24]
        tables: str | bool = str(cache_dir() / f"moac_parser_{digest}.lark")
    except OSError:                         # no writable cache directory: compute them
        tables = False
    return lark.Lark(text, parser="lalr", lexer="basic", propagate_positions=True,
                     lexer_callbacks={"NAME": _retype}, maybe_placeholders=False, cache=tables)


_EXPECT_WORDS = {
    "_RANGLE": "⟩", "_LANGLE": "⟨", "RPAR": ")", "LPAR": "(", "NAME": "a name", "NUMBER": "a number",
    "_NL": "end of line", "_ASSIGN": "=", "COLON": ":", "DTYPE": "a dtype (f32, f64, f16, bf16, f8e4m3, f8e5m2, i8, i32, i64)",
    "RBRACE": "}", "LBRACE": "{", "$END": "end of input", "FNAME": "a function",
}


def _describe_expected(expected) -> str:
    words = sorted({_EXPECT_WORDS.get(e, None) or e.lower() for e in expected})
    if len(words) > 6:
        return "an expression or statement"
    return ", ".join(words)


INT_LIMIT = 2**63 - 1        # integer literals are sizes, counts and indices: 64-bit at most


def _literal(tok):
    """A number token's value; an integer beyond 64 bits or a real beyond f64 is an error at
    the token (never a silent infinity, never a raw Python exception)."""
    text = str(tok)
    if any(c in text for c in ".eE"):
        value = float(text)
        if math.isinf(value):
            raise ParseError(f"the number {_short(text)} is larger than the largest f64 (about 1.8e308)", _span(tok))
        return value
    digits = text.lstrip("0") or "0"
    if len(digits) > 19 or int(digits) > INT_LIMIT:
        raise ParseError(f"the integer {_short(text)} does not fit in 64 bits (at most {INT_LIMIT})", _span(tok))
    return int(digits)


def _short(text: str) -> str:
    return text if len(text) <= 24 else f"{text[:10]}…{text[-6:]} ({len(text)} characters)"


def _fixit_char(ch: str) -> tuple[str, ...]:
    """A note for a character that newcomers from NumPy or APL reach for first."""
    if ch == "@":
        return ("a matrix or vector product is the inner product: `A +.× B` (ASCII `A +.* B`)",)
    if ch == "[":
        return ("MoA selects with ψ, not brackets: `⟨i⟩ ψ A` (ASCII `<i> psi A`); a whole row is `⟨i⟩ ψ A` "
                "too, and `i take A` / `i drop A` cut prefixes",)
    return ()


def _fixit_token(tok, lines: list[str]) -> tuple[str, ...]:
    """A note for a token where a first program commonly goes wrong."""
    line = lines[tok.line - 1] if tok.line <= len(lines) else ""
    if str(tok) in ("=", "←") and re.match(r"[ \t]*output\b", line):
        name = line.split("output", 1)[1].split(str(tok), 1)[0].strip() or "out"
        return (f"`output` names results defined elsewhere: write `{name} = …` on its own line, then `output {name}`",)
    if str(tok) in KEYWORDS and tok.type != "DTYPE" and re.match(rf"[ \t]*(size|input|index|fn)\b.*\b{tok}\b", line):
        return (f"'{tok}' is a reserved word (a function or operator of the notation); choose another name",)
    return ()


def parse(text: str, filename: str = "<input>", extra_fnames: frozenset[str] = frozenset()) -> Module:
    """Parse one source file into a Module; raise ParseError with position on failure."""
    source = Source(text, filename)
    text = text.removeprefix("\ufeff")    # a UTF-8 byte-order mark: not a column (editors do not count it)
    text = re.sub(r"\r\n?", "\n", text)   # CR LF and a lone CR end a line, as LF does
    assigned = set(_ASSIGNED.findall(text))
    fnames = defined_fnames(text) | (extra_fnames - assigned)
    try:
        token = _FNAMES.set(fnames)
        try:
            tree = _parser().parse(text if text.endswith("\n") else text + "\n")
        finally:
            _FNAMES.reset(token)
        return _ToAST(source.lines()).transform(tree)
    except lark.UnexpectedCharacters as e:
        span = Span(e.line, e.column, e.line, e.column)
        lines = source.lines()
        ch = lines[e.line - 1][e.column - 1] if e.line <= len(lines) and e.column <= len(lines[e.line - 1]) else "?"
        raise ParseError(f"unexpected character {ch!r}", span, source, notes=_fixit_char(ch)) from None
    except lark.UnexpectedToken as e:
        tok = e.token
        if tok.type == "$END":
            lines = source_lines(text.rstrip("\n")) or [""]
            span = Span(len(lines), max(1, len(lines[-1])), len(lines), max(1, len(lines[-1])))
            raise ParseError(f"unexpected end of input; expected {_describe_expected(e.expected)}",
                             span, source) from None
        shown = "end of line" if tok.type == "_NL" else repr(str(tok))
        raise ParseError(f"unexpected {shown}; expected {_describe_expected(e.expected)}",
                         Span(tok.line, tok.column, tok.line, tok.column + max(0, len(str(tok).rstrip()) - 1)),
                         source, notes=_fixit_token(tok, source.lines())) from None
    except lark.UnexpectedEOF as e:
        lines = source_lines(text.rstrip("\n")) or [""]
        raise ParseError(f"unexpected end of input; expected {_describe_expected(e.expected)}",
                         Span(len(lines), 1, len(lines), 1), source) from None
    except lark.exceptions.VisitError as e:     # a literal the transformer refused, or a bug
        if isinstance(e.orig_exc, ParseError) and e.orig_exc.source is None:
            e.orig_exc.source = source
        raise e.orig_exc from None
