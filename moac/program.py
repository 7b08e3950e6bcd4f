"""The driver: one line per stage, each stage a pure function named for its transition.

    text --parse--> Module --to_core--> CoreProgram --to_dnf--> DNF
         --driver.lower--> Schedule, Counts, C unit, C source --build--> Kernel

`Program` keeps every intermediate so that tests and the CLI can inspect any stage.
"""
from __future__ import annotations

import contextlib
import functools
from html import escape
from pathlib import Path

from . import dnf, driver
from .timing import stage
from .driver import Artifacts
from .errors import MoacError, ParseError, Source, Span
from .front import interp, lower, syntax
from .options import Options


@contextlib.contextmanager
def _not_too_deep(source: Source):
    """A program nested deeper than moac's recursive stages go (hundreds of operators in one
    expression) is a user-facing error, not an internal one."""
    try:
        yield
    except RecursionError:
        raise MoacError("the program nests its expressions too deeply for moac (an operator chain of several "
                        "hundred levels); name intermediate results to split it", source=source) from None


class Program:
    """A parsed and shape-checked MoA program."""

    def __init__(self, text: str, filename: str = "<input>"):
        self.source = Source(text, filename)
        with _not_too_deep(self.source):
            with stage("parse"):
                self.module = syntax.parse(text, filename, lower.prelude_fnames())      # stage 1: text -> AST
            with stage("to_core (names, shapes)"):
                self.core = lower.to_core(self.module, self.source)     # stage 2: AST -> core + shapes
        self.artifacts: dict = {}                                   # Options -> Artifacts (stages 4-5)
        self.kernels: dict = {}                                     # (Options, build options) -> Kernel

    @functools.cached_property
    def _dnf(self) -> dnf.DNF:
        with _not_too_deep(self.source), stage("to_dnf (ψ-reduction)"):
            return dnf.to_dnf(self.core)                            # stage 3: core -> DNF

    def dnf(self) -> dnf.DNF:
        return self._dnf

    def lower(self, opts: Options) -> Artifacts:
        """Stages 4 and 5 for these options (cached: every intermediate is kept)."""
        if opts not in self.artifacts:
            dnf_ = self._dnf
            with _not_too_deep(self.source):
                self.artifacts[opts] = driver.lower(dnf_, opts)
        return self.artifacts[opts]

    def onf(self, **options):
        """The ONF for these options (target, sizes, mapping, unroll, storage, share_kv, pack,
        wsum_unroll, index_bits: moac.options.Options.make)."""
        return self.lower(Options.make(**options)).onf

    def c_source(self, **options) -> str:
        return self.lower(Options.make(**options)).c_source

    def compile(self, cc: str | None = None, werror: bool = False, extra_flags: tuple = (),
                native: bool | None = None, **options):
        """Build and load the kernel for these options (cached like every stage); `native`:
        build for this machine's CPU where the target has flags for it (openmp: -march=native;
        None: on unless MOAC_NATIVE=0)."""
        from .jit import build
        opts = Options.make(**options)
        key = (opts, cc, werror, tuple(extra_flags), native)
        if key not in self.kernels:
            self.kernels[key] = build.build(self.lower(opts), cc=cc, werror=werror,
                                            extra_flags=tuple(extra_flags), native=native)  # stage 6: C -> kernel
        return self.kernels[key]

    def evaluate(self, sizes: dict | None = None, **arrays) -> dict:
        """Evaluate the source program with numpy (float64): the independent reference."""
        return interp.evaluate(self.core, arrays, sizes)

    @property
    def inputs(self):
        return self.core.inputs

    @property
    def outputs(self):
        return tuple(name for name, _ in self.core.outputs)

    def __repr__(self) -> str:
        return f"<moac.Program {self.source.filename}: inputs {[i.name for i in self.inputs]}, outputs {list(self.outputs)}>"

    def _repr_pretty_(self, p, cycle: bool) -> None:       # IPython: the one line and the source text
        from .show import pretty
        pretty(self, p, cycle, f"{self!r}\n{self.source.text.rstrip()}")

    def _repr_html_(self) -> str:                           # Jupyter: sizes, inputs, outputs, the source
        from .front.core import show_shape
        from .show import html, table
        rows = [("input", i.name, i.dtype, show_shape(i.shape)) for i in self.inputs]
        rows += [("output", n, "", show_shape(e.shape)) for n, e in self.core.outputs]
        rows += [("update", u, "", "") for u, _ in self.core.updates]
        sizes = ", ".join(self.core.size_names())
        body = (f"<div>sizes {escape(sizes)}</div>" if sizes else "") + table(("", "name", "dtype", "shape"), rows)
        return html(repr(self), self.source.text, body, "source")


def parse(text: str, filename: str = "<input>") -> Program:
    return Program(text, filename)


def load(path: str | Path) -> Program:
    return from_bytes(Path(path).read_bytes(), str(path))


def from_bytes(data: bytes, filename: str) -> Program:
    """A program from the bytes of a source file (UTF-8; a bad byte is a positioned error)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[:e.start].count(b"\n") + 1
        col = e.start - (data.rfind(b"\n", 0, e.start) + 1) + 1
        raise ParseError(f"the file is not valid UTF-8 (byte 0x{data[e.start]:02x})", Span(line, col, line, col),
                         Source(data.decode("utf-8", "replace"), filename)) from None
    return Program(text, filename)
