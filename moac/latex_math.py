"""The math of moac's LaTeX (moac.latex lays it out): text and names escaped for TeX,
sympy index expressions, DNF expressions and the dumps' text, each as amsmath/amssymb math
that plain pdflatex and a notebook's MathJax both read.

The DNF is printed from its IR (DRead, DOp, DReduce, …) and the index expressions inside
from sympy by the printer here, in MoA notation: ⌊a ÷ b⌋, a mod b, min(a, b), never
sympy's words.  The ψ-reduction trace is text (the rules log it so), transliterated glyph
by glyph into math.  The output is ASCII: no glyph reaches the TeX engine raw.
"""
from __future__ import annotations

import re
import unicodedata

import sympy as sp
from sympy.core.function import AppliedUndef

from .dnf.ir import DConst, DIndex, DOp, DRead, DReduce, DSelect, fmt_num, format_expr
from .front.data import Distinct

MARK = "\x01"       # where a long display may break: before an operator at brace depth 0


# --------------------------------------------------------------------------- text and names

# the glyphs of the dumps as math (each ends where a letter may follow: see _join)
GLYPH = {
    "ψ": r"\psi", "ρ": r"\rho", "ι": r"\iota", "γ": r"\gamma", "τ": r"\tau", "δ": r"\delta",
    "Ω": r"\Omega", "Σ": r"\sum", "Π": r"\prod", "Φ": r"\Phi", "⌽": r"\Phi", "φ": r"\varphi",
    "⍉": r"\mathord{\bigcirc\mkern-13.5mu\backslash\mkern4.5mu}", "△": r"\vartriangle", "↑": r"\vartriangle",
    "▽": r"\triangledown", "↓": r"\triangledown", "∘": r"\circ", "⟨": r"\langle", "⟩": r"\rangle",
    "×": r"\times", "÷": r"\div", "−": "-", "¯": "-", "·": r"\cdot", "⋆": r"\star", "√": r"\surd",
    "⌊": r"\lfloor", "⌋": r"\rfloor", "⌈": r"\lceil", "⌉": r"\rceil", "⇒": r"\Rightarrow",
    "→": r"\to", "←": r"\leftarrow", "∈": r"\in", "∤": r"\nmid", "∣": r"\mid", "…": r"\dots",
    "≥": r"\ge", "≤": r"\le", "≠": r"\ne", "∧": r"\wedge", "∨": r"\vee", "¬": r"\neg",
    "✓": r"\checkmark", "′": "'", "∞": r"\infty", "≈": r"\approx",
}
_TEXT = {"\\": r"\textbackslash{}", "{": r"\{", "}": r"\}", "_": r"\_", "^": r"\textasciicircum{}",
         "~": r"\textasciitilde{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "<": r"\ensuremath{<}",
         ">": r"\ensuremath{>}", "|": r"\ensuremath{|}", "…": r"\ldots{}", "—": "---", "–": "--",
         "’": "'", "‘": "`", "“": "``", "”": "''", "\u00a0": "~"}
_ACCENT = {"\u0301": "'", "\u0300": "`", "\u0302": "^", "\u0308": '"', "\u0303": "~", "\u0327": "c"}


def text(s: str) -> str:
    """Text for a paragraph or \\text{}: TeX's special characters escaped, every glyph of
    the dumps as math, accented letters as accents, anything else by its code point."""
    out = []
    for ch in str(s):
        if ch in _TEXT:
            out.append(_TEXT[ch])
        elif ch in GLYPH:
            out.append(r"\ensuremath{" + GLYPH[ch] + "}")
        elif ord(ch) < 128:
            out.append(ch if ch.isprintable() else " ")
        else:
            base, *marks = unicodedata.normalize("NFD", ch)
            if ord(base) < 128 and len(marks) == 1 and marks[0] in _ACCENT:
                out.append("\\" + _ACCENT[marks[0]] + "{" + base + "}")
            else:
                out.append(r"\texttt{U+%04X}" % ord(ch))
    return "".join(out).replace("--", "-{}-").replace("''", "'{}'").replace("``", "`{}`")


_CALL = re.compile(r"\b(?:Min|Max|Mod|floor|ceiling)\(")


def prose(s: str) -> str:
    """text(s), with the sympy calls older dumps leave in their prose (Min(n, w),
    floor(i/g)) set as math in MoA notation."""
    out, k = [], 0
    for m in _CALL.finditer(s):
        if m.start() < k:
            continue
        depth, end = 0, None
        for e in range(m.end() - 1, len(s)):
            depth += {"(": 1, ")": -1}.get(s[e], 0)
            if depth == 0:
                end = e + 1
                break
        if end is None:
            break
        out += [text(s[k:m.start()]), r"\ensuremath{" + moa(s[m.start():end]) + "}"]
        k = end
    return "".join(out) + text(s[k:])


def tt(s: str) -> str:
    return r"\texttt{" + text(s) + "}"


def name(s: str) -> str:
    """A name in math: one letter as it is, a longer one upright-italic as one word
    (\\mathit{m\\_part}), TeX's specials escaped."""
    s = str(s).lstrip("@")
    if len(s) == 1 and s.isascii() and s.isalpha():
        return s
    return r"\mathit{" + text(s) + "}"


def _join(parts) -> str:
    """Concatenate TeX, keeping a control word apart from a letter that follows it."""
    out = ""
    for p in parts:
        if p and out and p[0].isalpha() and re.search(r"\\[A-Za-z]+$", out[-24:]):
            out += " "
        out += p
    return out


# --------------------------------------------------------------------------- index expressions (sympy)

_REL = {sp.Eq: "=", sp.Ne: r"\ne", sp.StrictLessThan: "<", sp.LessThan: r"\le", sp.StrictGreaterThan: ">",
        sp.GreaterThan: r"\ge"}


def _par(s: str, wrap: bool) -> str:
    return f"({s})" if wrap else s


def _fraction(e):
    """A product as (sign, numerator factors, denominator factors)."""
    c, rest = e.as_coeff_Mul()
    sign = bool(c < 0)
    c = abs(c)
    if c.is_Rational:
        num, den = ([sp.Integer(c.p)] if c.p != 1 else []), ([sp.Integer(c.q)] if c.q != 1 else [])
    else:
        num, den = [c], []
    for f in sp.Mul.make_args(rest):
        if f.is_Pow and f.exp.is_negative:
            den.append(f.base ** -f.exp)
        else:
            num.append(f)
    return sign, num, den


def _product(fs, prec: int = 2) -> str:
    return r" \cdot ".join(index(f, prec) for f in fs) if fs else "1"


def index(e, prec: int = 0) -> str:
    """An integer expression in MoA notation; prec: 0 alone, 1 a term, 2 a factor or a
    vector component, 3 a power's base."""
    e = sp.sympify(e)
    if isinstance(e, (sp.Symbol, sp.Dummy)):
        return name(e.name)
    if e.is_Integer:
        return _par(str(int(e)), e < 0 and prec >= 2)
    if e.is_Rational:
        frac = rf"\frac{{{abs(e.p)}}}{{{e.q}}}"
        return _par(frac, prec >= 3) if e > 0 else _par("-" + frac, prec >= 2)
    if e.is_Float:
        return fmt_num(float(e))
    if e is sp.oo:
        return r"\infty"
    if isinstance(e, sp.Add):
        terms = e.as_ordered_terms()
        out = index(terms[0], 1)
        for t in terms[1:]:
            out += f" - {index(-t, 1)}" if t.could_extract_minus_sign() else f" + {index(t, 1)}"
        return _par(out, prec >= 2)
    if isinstance(e, sp.Mul):
        sign, num, den = _fraction(e)
        body = rf"\frac{{{_product(num, 1 if len(num) == 1 else 2)}}}{{{_product(den, 1 if len(den) == 1 else 2)}}}" \
            if den else _product(num)
        return _par("-" + body, prec >= 2) if sign else _par(body, prec >= 3)
    if isinstance(e, sp.Pow):
        if e.exp.is_negative:
            return _par(rf"\frac{{1}}{{{index(e.base ** -e.exp)}}}", prec >= 3)
        return f"{index(e.base, 3)}^{{{index(e.exp)}}}"
    if isinstance(e, (sp.floor, sp.ceiling)):
        lo, hi = (r"\lfloor ", r"\rfloor") if isinstance(e, sp.floor) else (r"\lceil ", r"\rceil")
        x = e.args[0]
        if isinstance(x, (sp.Mul, sp.Pow)) and _fraction(x)[2]:     # ⌊a ÷ b⌋ as the dumps print it
            sign, num, den = _fraction(x)
            a = ("-" if sign else "") + _product(num, 2)
            return _join([lo, a, r" \div ", _product(den, 2) if len(den) == 1 else f"({_product(den)})", hi])
        return _join([lo, index(x), hi])
    if isinstance(e, sp.Mod):
        return _par(rf"{index(e.args[0], 2)} \bmod {index(e.args[1], 2)}", prec >= 1)
    if isinstance(e, (sp.Min, sp.Max)):
        return _join([r"\min" if isinstance(e, sp.Min) else r"\max", "(", ", ".join(index(a) for a in e.args), ")"])
    if isinstance(e, Distinct):                         # a scatter's keys pairwise distinct: distinct⟨k₀ k₁⟩
        return r"\operatorname{distinct}" + vec(e.args)
    if isinstance(e, AppliedUndef):                     # an element of an integer input: ⟨b⟩ψlens
        return read(e.func.__name__, e.args)
    if isinstance(e, sp.Sum):
        (v, lo, hi), = e.limits
        start = "" if lo == 0 else f"{index(lo)} \\le "
        return _par(_join([rf"\sum_{{{start}{index(v)}<{index(hi + 1)}}} ", index(e.function, 2)]), prec >= 1)
    if type(e) in _REL:
        return f"{index(e.lhs, 1)} {_REL[type(e)]} {index(e.rhs, 1)}"
    if isinstance(e, sp.And):
        lows = [a for a in e.args if isinstance(a, sp.GreaterThan)]
        highs = [a for a in e.args if isinstance(a, sp.StrictLessThan)]
        if len(e.args) == 2 and len(lows) == len(highs) == 1 and lows[0].lhs == highs[0].lhs:
            return rf"{index(lows[0].rhs, 1)} \le {index(lows[0].lhs, 1)} < {index(highs[0].rhs, 1)}"
        return r" \wedge ".join(_par(index(a), True) for a in e.args)
    if isinstance(e, sp.Or):
        return r" \vee ".join(_par(index(a), True) for a in e.args)
    if isinstance(e, sp.Not):
        return r"\neg " + _par(index(e.args[0]), True)
    if e is sp.true or e is sp.false:
        return rf"\text{{{str(e).lower()}}}"
    fn = getattr(getattr(e, "func", None), "__name__", type(e).__name__)
    return rf"\operatorname{{{text(fn)}}}(" + ", ".join(index(a) for a in e.args) + ")"


def vec(idx) -> str:
    return r"\langle " + r"\;".join(index(i, 2) for i in idx) + r"\rangle"


def read(array: str, idx) -> str:
    return _join([vec(idx), r"\psi ", name(array)]) if idx else name(array)


def shape(sh) -> str:
    return vec(sh)


def _terms(e) -> str:
    """A sum with a place to break before each term."""
    terms = e.as_ordered_terms()
    out = index(terms[0], 1)
    for t in terms[1:]:
        out += f"{MARK} - {index(-t, 1)}" if t.could_extract_minus_sign() else f"{MARK} + {index(t, 1)}"
    return out


def count(e) -> str:
    """A count (bytes, flops), usually sympy's factored form, with places to break between
    the terms of a sum and inside a long factor: ¼·n·(a + b + c) rather than (n·(a + b + c))/4."""
    e = sp.sympify(e)
    if isinstance(e, sp.Add):
        return _terms(e)
    if isinstance(e, sp.Mul):
        sign, num, den = _fraction(e)
        long = [f for f in num if isinstance(f, sp.Add) and len(f.args) >= 3]
        if long:
            rest = [f for f in num if f not in long]
            pre = rf"\frac{{{_product(rest)}}}{{{_product(den)}}}" if den else _product(rest) if rest else ""
            body = r" \cdot ".join(f"({_terms(f)})" for f in long)
            return ("-" if sign else "") + (pre + r" \cdot " if pre else "") + body
    return index(e)


# --------------------------------------------------------------------------- DNF expressions (moac's IR)

_INFIX = {"add": (1, "+"), "sub": (1, "-"), "mul": (2, r"\times"), "div": (2, r"\div")}
_FUNC = {"exp": r"\exp", "log": r"\log", "tanh": r"\tanh", "max": r"\max", "min": r"\min"}
_REDUCE = {"add": r"\sum", "mul": r"\prod", "max": r"\max", "min": r"\min"}
_COMPARE = {"gt": ">", "ne": r"\ne"}


def expr(e, prec: int = 0) -> str:
    """A DNF expression as math, with format_expr's parentheses (moac.dnf.ir)."""
    match e:
        case DRead(array=a, index=idx):
            return read(a, idx)
        case DConst(value=v):
            return _par(fmt_num(v), v < 0 and prec > 0)
        case DIndex(expr=x):
            x = sp.sympify(x)
            bare = prec == 0 or x.is_Atom and not (x.is_number and x < 0)
            return index(x) if bare else f"({index(x)})"
        case DOp(op=op, args=(a, b)) if op in _INFIX:
            p, sym = _INFIX[op]
            right = p + 1 if op in ("sub", "div") else p
            return _par(f"{expr(a, p)}{MARK} {sym} {expr(b, right)}", p < prec)
        case DOp(op="pow", args=(a, b)):
            return f"{{{expr(a, 3)}}}^{{{expr(b)}}}"
        case DOp(op=op, args=(a, b)) if op in _COMPARE:
            return f"({expr(a, 1)} {_COMPARE[op]} {expr(b, 1)})"
        case DOp(op=op, args=(a, b)):
            fn = _FUNC.get(op, rf"\operatorname{{{text(op)}}}")
            return _join([fn, f"({expr(a)}, {expr(b)})"])
        case DOp(op="neg", args=(a,)):
            return _par(f"-{expr(a, 3)}", prec > 0)
        case DOp(op="recip", args=(a,)):
            return _par(rf"1 \div {expr(a, 3)}", prec > 0)
        case DOp(op="sqrt", args=(a,)):
            return rf"\sqrt{{{expr(a)}}}"
        case DOp(op="abs", args=(a,)):
            return rf"\lvert {expr(a)}\rvert"
        case DOp(op=op, args=(a,)):
            return _join([_FUNC.get(op, rf"\operatorname{{{text(op)}}}"), f"({expr(a)})"])
        case DReduce(op=op, var=v, extent=ext, body=b) if op in _REDUCE:
            s = _join([rf"{_REDUCE[op]}_{{{index(v)}<{index(ext)}}} ", expr(b, 3 if op != "add" else 2)])
            return _par(s, prec > 0)
        case DSelect(cond=c, then=t, other=o):
            if prec == 0:                               # a whole statement: the cases, one per line
                rows = []
                while isinstance(e, DSelect):
                    rows.append(rf"{expr(e.then)} & \text{{if }} {index(e.cond)}")
                    e = e.other
                rows.append(rf"{expr(e)} & \text{{otherwise}}")
                return (r"\begin{cases}" + r" \\ ".join(rows) + r"\end{cases}").replace(MARK, "")
            return rf"({expr(t)}{MARK} \ \text{{if}}\ {index(c)}{MARK} \ \text{{else}}\ {expr(o)})"
    return moa(format_expr(e))                          # a node this printer does not know: its dump


def for_clause(vars_, extents) -> str:
    return r"\quad\text{for } " + r",\ ".join(f"{index(v)} < {index(n)}" for v, n in zip(vars_, extents))


# --------------------------------------------------------------------------- the dumps' text as math

_TOKEN = re.compile(r"\s+|(?:[-+−×÷⋆∘⌈⌊]|max|min)\.(?:[-+−×÷⋆⌈⌊]|max|min)|φ\d+(?:_\d+)*|"   # +.×, φ3_0
                    r"[A-Za-z](?:[A-Za-z0-9]|_(?!\{))*|_(?:[A-Za-z0-9]|_(?!\{))+|"            # names, not max_{
                    r"\d+(?:\.\d+)?(?:[eE][+-]?\d+)?|<=|>=|!=|==|_\{|.", re.S)
_WORDS = {"if", "else", "with", "cells", "for", "otherwise", "where"}
_NAMES = {"exp": r"\exp", "log": r"\log", "tanh": r"\tanh", "max": r"\max", "min": r"\min", "Min": r"\min",
          "Max": r"\max", "abs": r"\operatorname{abs}", "mod": r"\bmod", "rav": r"\operatorname{rav}",
          "red": r"\mathrm{red}", "maxred": r"\max\mathrm{red}", "minred": r"\min\mathrm{red}", "sqrt": r"\surd"}
_ASCII = {"<=": r"\le", ">=": r"\ge", "!=": r"\ne", "==": "=", "{": r"\{", "}": r"\}", "&": r"\&", "%": r"\%",
          "$": r"\$", "#": r"\mathbin{\#}", "~": r"\sim", "\\": r"\backslash", "|": r"\vert", '"': "''",
          "^": r"\hat{}", "_": r"\_", "@": r"\text{@}"}


def moa(s: str) -> str:
    """Text in the dumps' notation (the trace's before and after) as math."""
    toks = _TOKEN.findall(str(s))
    out, _ = _seq(toks, 0, None, False)
    return out


def _kind(tok: str) -> str:
    if tok.isspace():
        return "space"
    if tok in _WORDS:
        return "word"
    if tok == "mod":
        return "op"
    if re.match(r"[A-Za-z_φ]|\d", tok):
        return "atom"
    if tok in ("(", "⟨", "[", "√") or tok in "ψριγτδΩΣΠΦ⌽⍉△▽↑↓⌊⌈":
        return "open"
    if tok in (")", "⟩", "]", "⌋", "⌉"):
        return "close"
    return "op"


def _seq(toks, i, stop, in_vec):
    """The tokens from i up to `stop` (None: to the end) as math: (math, index after the stop)."""
    parts, prev = [], "op"
    while i < len(toks):
        t = toks[i]
        if t == stop:
            return _join(parts), i + 1
        i += 1
        nxt = toks[i] if i < len(toks) else ""
        if t.isspace():
            if prev in ("atom", "close") and _kind(nxt) in ("atom", "open"):
                parts.append(r"\;\allowbreak " if in_vec else r"\ \allowbreak ")
            continue
        kind = _kind(t)
        if t == "(" and _remark(toks, i):
            j = toks.index(")", i)
            gap = "" if parts and parts[-1].startswith(r"\ ") else " "
            parts.append(r"\text{" + gap + text("(" + "".join(toks[i:j]) + ")") + "}")
            i, kind = j + 1, "close"
        elif t in ("floor", "ceiling", "Mod") and nxt == "(":
            inner, i = _seq(toks, i + 1, ")", False)
            if t == "Mod":
                a, b = (f"({x})" if re.search(r"[-+]", x) else x for x in _split_comma(inner))
                parts.append(rf"({a} \bmod {b})")
            else:
                parts.append(_join([r"\lfloor " if t == "floor" else r"\lceil ", inner,
                                    r"\rfloor" if t == "floor" else r"\rceil"]))
            kind = "close"
        elif t == "√":
            if nxt == "(":
                inner, i = _seq(toks, i + 1, ")", False)
            elif _kind(nxt) == "atom":
                inner, i = _atom(nxt), i + 1
            else:
                parts.append(r"\surd")
                continue
            parts.append(rf"\sqrt{{{inner}}}")
            kind = "close"
        elif t == "_{":
            inner, i = _seq(toks, i, "}", False)
            parts.append("_{" + inner + "}")
            kind = "close"
        elif t == "^" and _kind(nxt) == "atom":
            parts.append("^{" + _atom(nxt) + "}")
            i, kind = i + 1, "close"
        elif t == "⟨":
            inner, i = _seq(toks, i, "⟩", True)
            parts.append(r"\langle " + inner + r"\rangle")
            kind = "close"
        elif t == "(":
            inner, i = _seq(toks, i, ")", False)
            parts.append("(" + inner + ")")
            kind = "close"
        elif "." in t and not t[0].isdigit():          # an inner or outer product: +.×, ∘.max
            sides = (_atom(x) if x.isalpha() else GLYPH.get(x, x) for x in t.partition("."))
            parts.append(r"\mathbin{" + _join(sides) + "}")
            kind = "op"
        elif kind == "word":
            parts.append(r"\ \text{" + t + r"}\ ")
        elif kind == "atom" or t == "mod":
            parts.append(_atom(t))
        else:
            parts.append(GLYPH.get(t) or _ASCII.get(t) or (t if t.isascii() and t.isprintable()
                                                         else r"\text{" + text(t) + "}"))
            if t == ",":
                parts.append(r"\allowbreak ")
        prev = kind
    return _join(parts), i


def _atom(t: str) -> str:
    if t[0].isdigit():
        return t
    if t.startswith("φ"):
        return r"\varphi_{" + ",".join(t[1:].split("_")) + "}"
    return _NAMES.get(t) or name(t)


def _remark(toks, i) -> bool:
    """Whether the parenthesis before toks[i] holds English words (a rule's remark)."""
    words = 0
    for t in toks[i:]:
        if t == ")":
            return words >= 4
        if t.isspace() or t in ",;:":
            continue
        if not (t.isascii() and t.isalpha() and t.islower()) or t in _WORDS or t == "mod":
            return False
        words += 1
    return False


def _split_comma(inner: str) -> tuple:
    """Mod(a, b): its two printed arguments (at the comma outside any bracket)."""
    depth, cut = 0, None
    for k, ch in enumerate(inner):
        depth += 1 if ch in "({[" else -1 if ch in ")}]" else 0
        if ch == "," and depth == 0:
            cut = k
    if cut is None:
        return inner, ""
    return inner[:cut].strip(), re.sub(r"^\\allowbreak\s*", "", inner[cut + 1:].strip())
