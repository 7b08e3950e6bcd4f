"""The error family.  Every user-facing error points at the source it is about."""
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
        if other is None:
            return self
        start = min((self.line, self.col), (other.line, other.col))
        end = max((self.end_line, self.end_col), (other.end_line, other.end_col))
        return Span(start[0], start[1], end[0], end[1])


def source_lines(text: str) -> list[str]:
    """The lines of a source text: a line ends at LF, CR LF or a lone CR, nothing else (not
    at U+2028, NEL, VT or FF, which Python's splitlines also splits at), as in the parser."""
    return re.split(r"\r\n|\r|\n", text)


@dataclass(frozen=True, slots=True)
class Source:
    """The text of one file and the name it is reported under."""

    text: str
    filename: str = "<input>"

    def lines(self) -> list[str]:
        return source_lines(self.text)

    def line(self, n: int) -> str:
        lines = self.lines()
        return lines[n - 1] if 0 < n <= len(lines) else ""

    def excerpt(self, span: Span) -> str:
        lines = self.lines()
        if span.line == span.end_line:
            return lines[span.line - 1][span.col - 1 : span.end_col] if span.line <= len(lines) else ""
        first = lines[span.line - 1][span.col - 1 :]
        middle = lines[span.line : span.end_line - 1]
        last = lines[span.end_line - 1][: span.end_col]
        return "\n".join([first, *middle, last])


class MoacError(Exception):
    """Base of all errors moac reports to a user."""

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

    def render(self) -> str:
        """`file:line:col: error: message`, the source line and a caret."""
        src = self.source
        if self.span is None or src is None:
            where = f"{src.filename}: " if src is not None else ""
            head = f"{where}{self.kind}: {self.message}"
            return "\n".join([head, *(f"note: {n}" for n in self.notes)])
        sp = self.span
        head = f"{src.filename}:{sp.line}:{sp.col}: {self.kind}: {self.message}"
        text = src.line(sp.line)
        width = (sp.end_col - sp.col + 1) if sp.end_line == sp.line else len(text) - sp.col + 1
        caret = " " * (sp.col - 1) + "^" + "~" * max(0, width - 1)
        lines = [head, f"    {text}", f"    {caret}"]
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines)


class ParseError(MoacError):
    """Malformed source text."""


class NameError_(MoacError):
    """An undefined or doubly defined name."""


class ShapeError(MoacError):
    """Shapes that do not fit the operation."""


class RewriteError(MoacError):
    """A program the ψ-reduction or the ONF lowering cannot handle."""


class BuildError(MoacError):
    """The C compiler failed; carries the command, its stderr and the C file."""

    def __init__(self, message: str, argv: list[str], stderr: str, c_file: str):
        notes = (f"command: {' '.join(argv)}", f"C source: {c_file}", f"compiler output:\n{stderr.rstrip()}")
        super().__init__(message, notes=notes)
        self.argv = argv
        self.stderr = stderr
        self.c_file = c_file


class ArgumentError(MoacError, TypeError):
    """A compiled kernel was called with arrays of the wrong dtype, layout or shape."""


class DeviceError(MoacError):
    """A compiled kernel needs a device (a GPU) that this machine does not show."""


class CheckError(MoacError):
    """A compiled result disagrees with the reference interpreter."""


def return_code_error(fname: str, rc: int, aligned=()) -> Exception:
    """The error for a non-zero return code of a generated entry point (the host Kernel and
    moac.gpu's DeviceKernel report the same): 2 a misaligned packed input (`aligned`: the
    inputs concerned), 3 sizes too large for 32-bit indices, 4 a failed CUDA launch, 5 no
    NVIDIA GPU, anything else scratch memory that could not be allocated."""
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
    if rc == 4:
        return DeviceError(f"{fname}: a kernel launch failed (cudaGetLastError after the launches)")
    return MemoryError(f"{fname}: scratch memory could not be allocated")
