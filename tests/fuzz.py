"""Fuzzing moac's front and middle: mutations of the examples and odd-but-valid programs,
run through parse -> DNF -> ONF -> C with a time limit per input.

    from fuzz import inputs, run_one
    for name, data in inputs(seed, count):
        verdict = run_one(data)         # None (accepted or refused cleanly) or a failure text

An input passes when every stage either succeeds or raises an error of moac's family
(moac.errors.MoacError: a positioned user error) within LIMIT seconds of CPU time; a
RecursionError, any other exception, or a stage running past the limit is a failure.  The mutators are
the campaign's: line-ending variants, confusable Unicode, huge literals, deep nesting,
long lines, truncation, byte flips, invalid UTF-8 (fed through the byte loader), plus
splices of two examples and token-level edits.  Deterministic for a seed.
"""
from __future__ import annotations

import random
import signal
import time
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LIMIT = 2.0          # seconds of CPU time per input for all stages together

CONFUSABLE = {"a": "а", "e": "е", "o": "о", "p": "р", "x": "х", "c": "с", "-": "−", "*": "∗", "+": "＋",
              "=": "＝", "(": "（", ")": "）", "<": "‹", ">": "›", "0": "０", "1": "１", "i": "і", " ": "\u00a0"}
BREAKS = ("\r\n", "\r", "\u2028", "\u2029", "\x0b", "\x0c", "\x85", "\n\n", "")
TOKENS = ("+", "−", "×", "÷", "ψ", "ρ", "ι", "⍉", "Ω⟨1⟩", "Ω⟨2 2⟩", "#", "△", "▽", "Φ", "+.×", "red", "softmax",
          "⟨", "⟩", "(", ")", "{", "}", "0", "1", "-1", "99999999999999999999", "1e309", "0.5", "n", "i", "x",
          "size", "index", "input", "output", "fn", "=", ":", "f32", "bf16", "f64", "<", "÷", "√", "exp", "max")


def examples() -> list[tuple[str, str]]:
    return [(p.stem, p.read_text(encoding="utf-8")) for p in sorted((ROOT / "examples").glob("*.moa"))]


def _lines_mutation(rng, text):
    brk = rng.choice(BREAKS)
    lines = text.split("\n")
    if rng.random() < 0.5:                     # every line ending
        return brk.join(lines)
    k = rng.randrange(len(lines))              # one of them
    return "\n".join(lines[:k]) + brk + "\n".join(lines[k:])


def _confusable(rng, text):
    if not text:
        return text
    chars = list(text)
    for _ in range(rng.randint(1, 4)):
        k = rng.randrange(len(chars))
        chars[k] = CONFUSABLE.get(chars[k], rng.choice(list(CONFUSABLE.values())))
    return "".join(chars)


def _huge_literal(rng, text):
    lit = rng.choice(["9" * rng.choice([20, 400, 5000]), "1e" + str(rng.choice([39, 309, 5000])),
                      "0." + "0" * 400 + "1", "-" + "9" * 30, "0x1f", "1_000", "1.", ".5"])
    return _insert_token(rng, text, lit)


def _insert_token(rng, text, tok=None):
    tok = tok if tok is not None else rng.choice(TOKENS)
    k = rng.randrange(len(text) + 1)
    return text[:k] + (" " if rng.random() < 0.5 else "") + tok + (" " if rng.random() < 0.5 else "") + text[k:]


def _delete_span(rng, text):
    if not text:
        return text
    a = rng.randrange(len(text))
    return text[:a] + text[a + rng.randint(1, 12):]


def _deep(rng, text):
    depth = rng.choice([50, 300, 1200])
    kind = rng.choice(["paren", "neg", "plus", "psi"])
    if kind == "paren":
        expr = "(" * depth + "x" + ")" * depth
    elif kind == "neg":
        expr = "− " * depth + "x"
    elif kind == "plus":
        expr = " + ".join(["x"] * depth)
    else:
        expr = "⟨0⟩ ψ " * depth + "x"
    return "size n\ninput x : f32 ⟨n⟩\ny = " + expr + "\noutput y\n" if rng.random() < 0.6 else \
        text.replace(" = ", " = " + expr + " + ", 1)


def _long_line(rng, text):
    return text.replace("\n", " " * rng.choice([1000, 20000]) + "\n", 1)


def _truncate(rng, text):
    return text[:rng.randrange(len(text) + 1)]


def _splice(rng, text, other):
    a, b = text.split("\n"), other.split("\n")
    i, j = rng.randrange(len(a) + 1), rng.randrange(len(b) + 1)
    return "\n".join(a[:i] + b[j:j + rng.randint(1, 6)] + a[i:])


def _swap_lines(rng, text):
    lines = text.split("\n")
    if len(lines) > 2:
        i, j = rng.randrange(len(lines)), rng.randrange(len(lines))
        lines[i], lines[j] = lines[j], lines[i]
    return "\n".join(lines)


def _byte_flip(rng, data: bytes) -> bytes:
    b = bytearray(data)
    for _ in range(rng.randint(1, 3)):
        if b:
            b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
    return bytes(b)


def _bad_utf8(rng, data: bytes) -> bytes:
    k = rng.randrange(len(data) + 1)
    return data[:k] + rng.choice([b"\xff", b"\xc3", b"\xe2\x9f", b"\xed\xa0\x80", b"\x00"]) + data[k:]


TEXT_MUTATORS = (_lines_mutation, _confusable, _huge_literal, _insert_token, _insert_token, _delete_span,
                 _deep, _long_line, _truncate, _swap_lines)


def inputs(seed: int, count: int):
    """`count` (label, bytes) inputs: each a mutation (1–3 steps) of an example."""
    rng = random.Random(seed)
    ex = examples()
    for k in range(count):
        name, text = rng.choice(ex)
        steps = []
        for _ in range(rng.choice([1, 1, 2, 3])):
            r = rng.random()
            if r < 0.1:
                other = rng.choice(ex)[1]
                text = _splice(rng, text, other)
                steps.append("splice")
            else:
                m = rng.choice(TEXT_MUTATORS)
                text = m(rng, text)
                steps.append(m.__name__.strip("_"))
        data = text.encode("utf-8")
        r = rng.random()
        if r < 0.08:
            data = _byte_flip(rng, data)
            steps.append("byte_flip")
        elif r < 0.14:
            data = _bad_utf8(rng, data)
            steps.append("bad_utf8")
        yield f"{k}:{name}:{'+'.join(steps)}", data


class TimeLimit(BaseException):
    """Raised in the main thread when an input runs past LIMIT (not an Exception, so that
    no `except Exception` in moac can swallow it)."""


@contextmanager
def limit(seconds: float):
    """TimeLimit once this process has spent `seconds` of CPU time (ITIMER_PROF: user and
    system time), not of wall time: an input gets the same budget on an idle machine and
    beside other work (the test suite's other xdist worker, a build), where a wall-clock
    limit failed inputs that take a tenth of it alone (docs/reliability.md).  A runaway
    stage spends CPU time, so it is stopped all the same."""
    def fire(signum, frame):
        raise TimeLimit()
    old = signal.signal(signal.SIGPROF, fire)
    signal.setitimer(signal.ITIMER_PROF, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.signal(signal.SIGPROF, old)


def run_one(data: bytes, targets: tuple = ("openacc", "openmp"), seconds: float = LIMIT) -> str | None:
    """None if every stage succeeded or refused with a MoacError in time, else why not."""
    from moac.errors import MoacError
    from moac.program import from_bytes
    stage = "parse"
    t0 = time.process_time()
    try:
        with limit(seconds):
            prog = from_bytes(data, "fuzz.moa")
            stage = "dnf"
            prog.dnf()
            for t in targets:
                stage = f"onf ({t})"
                prog.onf(target=t)
                stage = f"c ({t})"
                prog.c_source(target=t)
    except MoacError:
        return None
    except TimeLimit:
        return f"{stage}: over {seconds:.1f} s"
    except RecursionError:
        return f"{stage}: RecursionError"
    except Exception as e:  # noqa: BLE001 - anything else is the finding
        return f"{stage}: {type(e).__name__}: {e}"[:300]
    if time.process_time() - t0 > seconds:
        return f"over {seconds:.1f} s"
    return None
