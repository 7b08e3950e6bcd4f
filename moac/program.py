"""The driver: one line per stage, each stage a pure function named for its transition.

    text --parse--> Module --to_core--> CoreProgram --to_dnf--> DNF
         --driver.lower--> Schedule, Counts, C unit, C source --build--> Kernel

`Program` keeps every intermediate so that tests and the CLI can inspect any stage.
"""
from __future__ import annotations

import contextlib
import functools
import os
import re
from html import escape
from pathlib import Path

from . import dnf, driver
from .timing import stage
from .driver import Artifacts
from .errors import MoacError, NameError_, ParseError, Source, Span
from .front import interp, lower, syntax
from .options import Options


@contextlib.contextmanager
def _not_too_deep(source: Source):
    """A program nested deeper than moac's recursive stages go (hundreds of operators in one
    expression) is a user-facing error, not an internal one."""
    try:
        yield
    except RecursionError:
        raise MoacError("the program nests its expressions too deeply for moac (several hundred levels: a long "
                        "chain of operators, or of definitions each built on the one before); split it into "
                        "fewer levels", _busiest_statement(source), source) from None


def _busiest_statement(source: Source) -> Span | None:
    """Where a chain too deep to follow most likely is: the statement (its lines joined
    where they end in a backslash) with the most tokens outside comments, where one has 100
    or more; else the last line of code (a chain of definitions ends there)."""
    best, where, last, start = 0, None, None, None
    count = 0
    for k, line in enumerate(source.lines(), 1):
        code = line.split("--", 1)[0]
        if not code.strip():
            continue
        if start is None:
            start, count = (k, len(code) - len(code.lstrip()) + 1), 0
        count += len(re.findall(r"\w+|[^\w\s\\]", code))
        last = Span(k, len(code) - len(code.lstrip()) + 1, k, len(code.rstrip()))
        if code.rstrip().endswith("\\"):
            continue                            # the statement goes on
        if count > best:
            best, where = count, Span(start[0], start[1], k, len(code.rstrip()))
        start = None
    return where if best >= 100 else last


class Program:
    """A parsed and shape-checked MoA program, and every stage compiled from it.

    Made by `moac.parse(text)` or `moac.load(path)`; construction parses the text and
    infers every shape, raising ParseError, NameError_ or ShapeError (all MoacError, each
    pointing at the source) for a program that is not well formed.  The later stages are
    computed on demand and cached per set of options: `dnf()`, `onf(...)`, `c_source(...)`,
    `compile(...)`; `evaluate(...)` runs the independent numpy reference.

    Attributes: `source` (the text and file name errors are reported under), `module` (the
    syntax tree), `core` (the typed program with symbolic shapes), `artifacts` and
    `kernels` (the caches of the lowered stages and of the built kernels).
    """

    def __init__(self, text: str, filename: str = "<input>"):
        """Parse `text` and check its shapes; `filename` names it in messages and gives the
        C entry point its name (moac_<stem>; moac_program for a name such as '<input>')."""
        self.source = Source(text, filename)
        try:
            with _not_too_deep(self.source):
                with stage("parse"):
                    self.module = syntax.parse(text, filename, lower.prelude_fnames())      # stage 1: text -> AST
                with stage("to_core (names, shapes)"):
                    self.core = lower.to_core(self.module, self.source)     # stage 2: AST -> core + shapes
        except (ParseError, NameError_) as e:
            lower.comment_note(e)
            raise
        self.artifacts: dict = {}                                   # Options -> Artifacts (stages 4-5)
        self.kernels: dict = {}                                     # (Options, build options) -> Kernel

    @functools.cached_property
    def _dnf(self) -> dnf.DNF:
        with _not_too_deep(self.source), stage("to_dnf (ψ-reduction)"):
            return dnf.to_dnf(self.core)                            # stage 3: core -> DNF

    def dnf(self) -> dnf.DNF:
        """The Denotational Normal Form (computed once): each output as one closed expression
        over ψ-selections of the inputs; `str()` is the dump `moac dnf` prints, and
        moac.dnf.format_trace lists its rewrites with the rule that fired."""
        return self._dnf

    def lower(self, opts: Options) -> Artifacts:
        """Stages 4 and 5 for these options (cached: every intermediate is kept): the
        Artifacts holding the Schedule, the counts, the ONF, the C unit, the signature and
        the C source.  A program the lowering cannot handle is a RewriteError."""
        if opts not in self.artifacts:
            dnf_ = self._dnf
            with _not_too_deep(self.source):
                self.artifacts[opts] = driver.lower(dnf_, opts)
        return self.artifacts[opts]

    def onf(self, **options):
        """The Operational Normal Form for these options: target ('openacc', the default,
        'openmp', 'c', 'cuda'), sizes (a dict of sizes fixed at compile time), mapping,
        unroll, storage, share_kv, pack, wsum_unroll, index_bits (moac.options.Options.make;
        docs/cli.md describes each).  `str()` is the dump `moac onf` prints."""
        return self.lower(Options.make(**options)).onf

    def c_source(self, **options) -> str:
        """The C (CUDA C for target='cuda') that `compile` builds for these options (those of
        `onf`): the text `moac compile` writes."""
        return self.lower(Options.make(**options)).c_source

    def compile(self, cc: str | None = None, werror: bool = False, extra_flags: tuple = (),
                native: bool | None = None, **options):
        """Build and load the kernel for these options (those of `onf`), cached like every
        stage; returns a moac.jit.kernel.Kernel, called with the inputs by name.  `cc`: the
        C compiler (default: $CC for the gcc targets, else the target's, gcc or nvcc);
        `werror`: warnings are errors; `extra_flags`: more compiler flags (a list, or a string
        split as a shell would); `native`: build
        for this machine's CPU where the target has flags for it (openmp: -march=native;
        None: on unless MOAC_NATIVE=0).  A failed compilation is a BuildError carrying the
        command and the compiler's output."""
        from .jit import build
        opts = Options.make(**options)
        if isinstance(extra_flags, str):            # "-O0 -g": words, not characters
            import shlex
            extra_flags = shlex.split(extra_flags)
        # the environment the build reads (CC, MOAC_CFLAGS, MOAC_NATIVE) is part of the key: a
        # changed setting builds anew instead of returning the kernel built under the old one
        env = tuple(os.environ.get(k) for k in ("CC", "MOAC_CFLAGS", "MOAC_NATIVE"))
        key = (opts, cc, werror, tuple(extra_flags), native, env)
        if key not in self.kernels:
            self.kernels[key] = build.build(self.lower(opts), cc=cc, werror=werror,
                                            extra_flags=tuple(extra_flags), native=native)  # stage 6: C -> kernel
        return self.kernels[key]

    def evaluate(self, sizes: dict | None = None, **arrays) -> dict:
        """Evaluate the source program with numpy in float64, the independent reference the
        kernels are checked against: inputs by name (bf16 as uint16 bit patterns, as for a
        kernel), `sizes` for those no input's shape determines; a dict of output name -> array
        (and, for an input the program updates in place, the buffer as the call leaves it).
        Numpy arrays, CPU torch tensors and DLPack objects are read as for a kernel; an input
        stored narrow (bf16, f16, fp8, i8) must come in its storage dtype, as for a kernel
        (f32 values would be read unrounded, uint16 bits as integers); f32 and f64 inputs
        take any real array, by value."""
        import numpy as np
        from . import dtypes
        from .errors import ArgumentError
        from .front.data import INDEX_DTYPES
        from .jit.arrays import as_array, wrong_dtype
        for i in self.core.inputs:
            if i.name not in arrays:
                continue                            # interp.evaluate names what is missing
            arrays[i.name] = as_array(i.name, arrays[i.name], i.dtype)[0]
            a = np.asarray(arrays[i.name])
            if i.dtype in dtypes.WIDENED and not dtypes.accepts(i.dtype, a):
                raise wrong_dtype(f"input '{i.name}'", i.dtype, a.dtype)
            if i.dtype in INDEX_DTYPES and a.dtype.kind not in "iu":    # 2.5 was read as 2
                raise ArgumentError(f"input '{i.name}' holds sizes and indices ({i.dtype}): it must be an "
                                    f"integer array, got {a.dtype}")
        return interp.evaluate(self.core, arrays, sizes)

    @property
    def inputs(self):
        """The declared inputs in order, each with its name, dtype and symbolic shape."""
        return self.core.inputs

    @property
    def outputs(self):
        """The names of the declared outputs, in order."""
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
    """A Program from source text; `filename` is the name messages report it under."""
    return Program(text, filename)


def load(path: str | Path) -> Program:
    """A Program from a source file (UTF-8), reported under the path as given; an
    unreadable file is an OSError, bytes that are not UTF-8 a ParseError."""
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
