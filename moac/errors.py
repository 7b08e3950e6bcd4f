"""The error family.  Every user-facing error points at the source it is about.

All of them derive from MoacError, so `except moac.MoacError` catches every error moac
reports about a program or a call; `str(e)` (or `e.render()`) is the positioned message.
"""
from __future__ import annotations

import re

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Span:
    """A source region: 1-based line and column of the first and last character."""

    line: int
    col: int
    end_line: int
    end_col: int

    def join(self, other: "Span | None") -> "Span":
        """The smallest span covering both (self if other is None)."""
        if other is None:
            return self
        start = min((self.line, self.col), (other.line, other.col))
        end = max((self.end_line, self.end_col), (other.end_line, other.end_col))
        return Span(start[0], start[1], end[0], end[1])


def source_lines(text: str) -> list[str]:
    """The lines of a source text: a line ends at LF, CR LF or a lone CR, nothing else (not
    at U+2028, NEL, VT or FF, which Python's splitlines also splits at), as in the parser;
    a leading byte-order mark is not part of the first line (nor a column of it)."""
    return re.split(r"\r\n|\r|\n", text.removeprefix("\ufeff"))


@dataclass(frozen=True, slots=True)
class Source:
    """The text of one file and the name it is reported under."""

    text: str
    filename: str = "<input>"

    def lines(self) -> list[str]:
        """The lines of the text (see source_lines)."""
        return source_lines(self.text)

    def line(self, n: int) -> str:
        """Line n (1-based), or '' past the end."""
        lines = self.lines()
        return lines[n - 1] if 0 < n <= len(lines) else ""

    def excerpt(self, span: Span) -> str:
        """The text a span covers."""
        lines = self.lines()
        if span.line == span.end_line:
            return lines[span.line - 1][span.col - 1 : span.end_col] if span.line <= len(lines) else ""
        first = lines[span.line - 1][span.col - 1 :]
        middle = lines[span.line : span.end_line - 1]
        last = lines[span.end_line - 1][: span.end_col]
        return "\n".join([first, *middle, last])


class MoacError(Exception):
    """Base of all errors moac reports to a user.

    `message` is the bare message, `span` where in the source it points (or None), `source`
    the Source it is about (or None: the CLI fills in the program's), `notes` further lines
    printed after it.
    """

    kind = "error"

    def __init__(self, message: str, span: Span | None = None, source: Source | None = None,
                 notes: tuple[str, ...] = ()):
        super().__init__(message)
        self.message = message
        self.span = span
        self.source = source
        self.notes = tuple(notes)

    def __str__(self) -> str:
        return self.render()

    def render(self, color: bool = False) -> str:
        """`file:line:col: error: message`, the source line and a caret (with ANSI colours
        when `color`: bold position, red kind, green caret, cyan notes, as gcc shows them)."""
        bold, red, green, cyan, off = (("\033[1m", "\033[1;31m", "\033[1;32m", "\033[1;36m", "\033[0m")
                                       if color else ("",) * 5)
        src = self.source
        kind = f"{red}{self.kind}:{off}"
        notes = [f"{cyan}note:{off} {n}" for n in self.notes]
        if self.span is None or src is None:
            where = f"{bold}{src.filename}:{off} " if src is not None else ""
            return "\n".join([f"{where}{kind} {self.message}", *notes])
        sp = self.span
        head = f"{bold}{src.filename}:{sp.line}:{sp.col}:{off} {kind} {bold}{self.message}{off}"
        text = src.line(sp.line)
        width = (sp.end_col - sp.col + 1) if sp.end_line == sp.line else len(text) - sp.col + 1
        pad = "".join("\t" if c == "\t" else " " for c in text[:sp.col - 1])    # a tab in the line: one here too
        caret = pad + green + "^" + "~" * max(0, width - 1) + off
        return "\n".join([head, f"    {text}", f"    {caret}", *notes])

    def to_json(self) -> dict:
        """The error as data (`moac … --json`): kind, class, message, file, the span (1-based,
        inclusive) or null, the source line, the notes, and the text `render` prints."""
        src, sp = self.source, self.span
        return {"kind": self.kind, "class": type(self).__name__.rstrip("_"), "message": self.message,
                "file": src.filename if src is not None else None,
                "span": None if sp is None else {"line": sp.line, "col": sp.col, "end_line": sp.end_line,
                                                 "end_col": sp.end_col},
                "source_line": src.line(sp.line) if src is not None and sp is not None else None,
                "notes": list(self.notes), "rendered": self.render()}


class ParseError(MoacError):
    """Malformed source text (a syntax error, or a file that is not UTF-8)."""


class NameError_(MoacError):
    """An undefined or doubly defined name."""


class ShapeError(MoacError):
    """Shapes that do not fit the operation."""


class RewriteError(MoacError):
    """A program the ψ-reduction or the ONF lowering cannot handle."""


class BuildError(MoacError):
    """The C compiler failed or could not be run: `argv` is the command, `stderr` its
    output and `c_file` the C source it was given (all three also in the notes)."""

    def __init__(self, message: str, argv: list[str], stderr: str, c_file: str):
        notes = tuple(n for n, v in ((f"command: {' '.join(argv)}", argv), (f"C source: {c_file}", c_file),
                                     (f"compiler output:\n{stderr.rstrip()}", stderr.strip())) if v)
        super().__init__(message, notes=notes)
        self.argv = argv
        self.stderr = stderr
        self.c_file = c_file


class ArgumentError(MoacError, TypeError):
    """A compiled kernel was called with wrong arguments: a missing or unexpected name,
    the wrong dtype, layout, alignment or shape, inconsistent sizes, memory shared where it
    must not be, or sizes its index width cannot address.  Also a TypeError."""


class DeviceError(MoacError):
    """A compiled kernel needs a device (a GPU) that this machine does not show."""


class CheckError(MoacError):
    """A compiled result disagrees with the reference interpreter: raised by `moac check`
    for an output whose shape is not the reference's (values beyond the tolerance are
    reported in its lines and exit status 1, not raised)."""


def return_code_error(fname: str, rc: int, aligned=()) -> Exception:
    """The error for a non-zero return code of a generated entry point (the host Kernel and
    moac.gpu's DeviceKernel report the same): 2 a misaligned packed input (`aligned`: the
    inputs concerned), 3 sizes too large for 32-bit indices, 4 a failed CUDA launch, 5 no
    NVIDIA GPU, 6 sizes that break a condition of the program, anything else scratch memory
    that could not be allocated."""
    if rc == 5:
        return DeviceError(f"{fname}: the kernel runs on an NVIDIA GPU and this machine shows none "
                           "(cudaGetDeviceCount); build a bundle with `moac compile --target cuda --offload "
                           "nvptx -o OUT.cu` and run it where there is one")
    if rc == 3:
        return ArgumentError("these sizes give a buffer of 2^31 elements or more, which a kernel built with "
                             "32-bit indices cannot address; build it with index_bits=64 (--index-bits 64)")
    if rc == 2:
        return ArgumentError(f"{', '.join(aligned) or 'an input'}: the kernel reads these inputs in packed "
                             "8-byte words, so their data must start at an 8-byte aligned address (pass a copy "
                             "of an offset view)")
    if rc == 6:
        return ArgumentError(f"{fname}: the sizes break one of the program's conditions (a △ count within its axis, "
                             "room in a cache, …; the entry's first lines list them)")
    if rc == 4:
        return DeviceError(f"{fname}: a kernel launch failed (cudaGetLastError after the launches)")
    return MemoryError(f"{fname}: scratch memory could not be allocated")
