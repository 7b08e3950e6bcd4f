"""The `moac` command line.  Exit codes: 0 success, 1 a user error in the program
(parse, name, shape, build, check), 2 a usage error (bad flags, unreadable file, a Python
without moac's dependencies), 3 an internal error (a bug in moac)."""
from __future__ import annotations

import argparse
import errno
import json
import os
import sys

from .errors import MoacError
from .targets import TARGETS


def _count(least: int):
    """An argparse type: an integer ≥ least."""
    def parse(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if v < least:
            raise argparse.ArgumentTypeError(f"must be at least {least}, got {v}")
        return v
    return parse


SIZE_LIMIT = 2**63          # a size is a C int64_t, as a literal in a program is


class _Parser(argparse.ArgumentParser):
    """argparse with moac's usage errors: exit status 2, and with --json anywhere on the
    command line, the error as JSON on standard error (docs/cli.md)."""
    json_errors = False

    def error(self, message: str, usage: bool = True):
        if _Parser.json_errors:
            _print_json_error("usage", "UsageError", f"moac: error: {message}", message)
            self.exit(2)
        if usage:
            self.print_usage(sys.stderr)
        self.exit(2, f"moac: error: {message}\n")


def _print_json_error(kind: str, cls: str, rendered: str, message: str | None = None) -> None:
    """An error that is not at a place in a program (a usage, file or internal error) as the
    JSON object of --json."""
    print(json.dumps({"schema": 1, "error": {"kind": kind, "class": cls, "message": message or rendered, "file": None,
                                             "span": None, "source_line": None, "notes": [], "rendered": rendered}},
                     ensure_ascii=False, indent=2), file=sys.stderr)


def _sizes(pairs: list[str] | None, parser: argparse.ArgumentParser) -> dict:
    out = {}
    for p in pairs or []:
        name, sep, value = p.partition("=")
        if not sep or not name.isidentifier():
            parser.error(f"-D expects name=value, got {p!r}")
        try:
            v = int(value)
        except ValueError:
            parser.error(f"-D {name}: {value!r} is not an integer")
        if v < 0:
            parser.error(f"-D {name}: sizes are non-negative, got {value}")
        if v >= SIZE_LIMIT:
            parser.error(f"-D {name}: {value} does not fit in 64 bits (sizes are below 2^63)")
        if name in out and out[name] != v:
            parser.error(f"-D {name} is given twice, as {out[name]} and as {v}")
        out[name] = v
    return out


def _check_sizes(prog, sizes: dict, parser, cmd: str = ""):
    known = set(prog.core.size_names())
    if cmd == "cost":           # -D lens=4096: every element of an integer input, for the estimates
        from .front.data import INDEX_DTYPES
        known |= {i.name for i in prog.inputs if i.dtype in INDEX_DTYPES}
    for k in sizes:
        if k not in known:
            parser.error(f"-D {k}: the program declares no size '{k}' (sizes: {', '.join(sorted(known)) or 'none'})")


def main(argv: list[str] | None = None) -> int:
    from .version import __version__
    ap = _Parser(prog="moac", description="A symbolic compiler for the Mathematics of Arrays.")
    ap.add_argument("--version", action="version", version=f"moac {__version__}")
    sub = ap.sub = ap.add_subparsers(dest="cmd", required=True, metavar="COMMAND")

    def common(p, target=True):
        p.add_argument("file", help="MoA source file (- reads standard input)")
        p.add_argument("-v", "--verbose", action="store_true",
                       help="print each stage's time, the compiler commands and cache hits to stderr")
        p.add_argument("--time", action="store_true", help="print each stage's time to stderr")
        p.add_argument("--json", action="store_true",
                       help="machine-readable output (dnf, onf, cost, check) and errors, as JSON (docs/cli.md)")
        p.add_argument("--color", choices=("auto", "always", "never"), default="auto",
                       help="colour diagnostics (auto: when stderr is a terminal and NO_COLOR is unset)")
        p.add_argument("-D", dest="defs", action="append", metavar="NAME=VALUE",
                       help="fix a size at compile time (repeatable)")
        if target:
            p.add_argument("--target", choices=tuple(TARGETS), default="openacc", help="code generation target")
            p.add_argument("--unroll", type=_count(0), default=0, metavar="U",
                           help="tokens per vector pass in the split-K plan (default 0: derived, 4, or 8 packed "
                                "words in flight per lane)")
            p.add_argument("--mapping", choices=("auto", "naive"), default="auto",
                           help="loop-to-hardware mapping (naive: vector lanes over reduction axes)")
            p.add_argument("--share-kv", action=argparse.BooleanOptionalAction, default=True,
                           help="split-K: query heads that read the same K/V rows (GQA) share a gang, so each "
                                "row is loaded once (default; --no-share-kv: one gang per query head)")
            p.add_argument("--pack", choices=("auto", "none"), default="auto",
                           help="packed 8-byte loads where the register-stride lifting allows (default auto)")
            p.add_argument("--index-bits", type=int, choices=(0, 64, 32), default=0,
                           help="width of index arithmetic: 0 (default) 32-bit kernels where every buffer has "
                                "fewer than 2^31 elements, checked at run time, else 64-bit ones; 32 or 64 only "
                                "that width (32 refuses sizes that do not fit)")
            p.add_argument("--unroll-wsum", type=_count(0), default=0, metavar="T",
                           help="tokens per iteration of the weighted sum in the split-K plan (0, the default, "
                                "derives it: 1 on GPU lanes, 4 on SIMD lanes)")

    p = sub.add_parser("dnf", help="print the Denotational Normal Form")
    common(p, target=False)
    p.add_argument("--trace", action="store_true", help="print each rewrite with the rule that fired")
    p.add_argument("--latex", action="store_true",
                   help="print a standalone LaTeX document (pdflatex, amsmath) of the DNF and its ψ-reduction trace")

    p = sub.add_parser("onf", help="print the Operational Normal Form")
    common(p)
    p.add_argument("--latex", action="store_true",
                   help="print a standalone LaTeX document (pdflatex, amsmath) of the ONF's summary")

    p = sub.add_parser("compile", help="emit C")
    common(p)
    p.add_argument("-o", dest="out", help="output C file (default: stdout)")
    p.add_argument("--offload", choices=("none", "nvptx"), default="none",
                   help="also build a GPU bundle (shared library + runner) next to -o")

    p = sub.add_parser("check", help="compile, run on random data, compare with the reference")
    common(p)
    p.add_argument("--seed", type=_count(0), default=0, help="the inputs' random seed (an integer ≥ 0)")
    p.add_argument("--cc", help="the C compiler (default: $CC, else the target's: gcc or nvcc); "
                   "$MOAC_CFLAGS adds flags")

    p = sub.add_parser("cost", help="DRAM bytes, flops, KV bytes per token, intensity and roofline")
    common(p)
    p.add_argument("--hardware", action="append", default=[], metavar="NAME",
                   help="H100, H200, A100, B200, MI300X, cpu (measured now) or all (default: the GPUs)")
    p.add_argument("--layers", type=int, help="layers of the model, for KV bytes per token of the whole model")
    p.add_argument("--kv-dtype", choices=("f32", "f16", "bf16", "f64", "f8e4m3", "f8e5m2", "i8"),
                   help="count the inputs that have the token axis as stored in this dtype")
    p.add_argument("--tokens", metavar="SIZE", help="the size that counts tokens (default n, where the program has it)")
    p.add_argument("--plot", metavar="OUT.png|OUT.svg", help="also draw the roofline into this file (needs matplotlib)")

    p = sub.add_parser("cache", help="the build cache: where it is and what it holds, or empty it")
    p.add_argument("action", choices=("info", "clear"))

    p = sub.add_parser("examples", help="list the example programs that ship with moac, or print one")
    p.add_argument("name", nargs="?", help="the example to print (without it: every name and its first comment line)")
    p.add_argument("--path", action="store_true", help="print the example's path (without a name: their folder)")

    p = sub.add_parser("run", add_help=False, help="run GPU bundles on random CUDA tensors, check and time them "
                       "(python -m moac.gpu; needs torch and a GPU)")
    p.add_argument("args", nargs=argparse.REMAINDER, help="BUNDLE.json [-D NAME=VALUE ...] [--reps N] [--rounds R] [--seed S] [--cold] [--json OUT]")

    argv = sys.argv[1:] if argv is None else list(argv)
    if sys.stdout is None:              # started with standard output closed (`moac … >&-`)
        sys.stdout = _Closed()
    _Parser.json_errors = "--json" in argv[:argv.index("--")] if "--" in argv else "--json" in argv
    if argv[:1] == ["run"]:              # the rest is moac.gpu's command line
        from .gpu.run import main as run_main
        return run_main(argv[1:], prog="moac run")
    args = ap.parse_args(argv)
    if args.cmd == "cache":
        from .cache import cache_clear, cache_info
        try:
            print(cache_info() if args.action == "info" else cache_clear())
        except OSError as e:
            print(f"moac: error: {e.strerror or e}{': ' + e.filename if e.filename else ''}", file=sys.stderr)
            return 1
        return 0
    from . import timing
    for flag, default in (("verbose", False), ("time", False), ("json", False), ("color", "auto")):
        if not hasattr(args, flag):        # subcommands without a source file (moac examples)
            setattr(args, flag, default)
    if args.verbose or args.time:
        timing.start()
    try:
        try:
            return _run(args, ap)
        finally:
            if args.verbose or args.time:
                log = timing.take()
                if not args.verbose:
                    log = [(n, t) for n, t in log if t is not None]
                print(timing.render(log), file=sys.stderr)
    except MoacError as e:
        prog = getattr(e, "_program", None)
        if prog is not None and e.source is None:
            e.source = prog.source
        if args.json:
            print(json.dumps({"schema": 1, "error": e.to_json()}, ensure_ascii=False, indent=2), file=sys.stderr)
        else:
            print(e.render(color=_color(args.color)), file=sys.stderr)
        return 1
    except BrokenPipeError:           # the reader went away (`moac onf … | head`): not an error
        try:
            sys.stdout = open(os.devnull, "w")   # so that the interpreter's final flush is quiet
        except OSError:
            pass
        return 0
    except OSError as e:
        text = f"moac: error: {e.strerror or e}{': ' + e.filename if e.filename else ''}"
        _print_json_error("io", "OSError", text, text.removeprefix("moac: error: ")) if args.json else print(text, file=sys.stderr)
        return 1
    except Exception as e:  # a bug in moac, not in the user's program
        if os.environ.get("MOAC_TRACEBACK"):
            raise
        missing = getattr(e, "name", None) if isinstance(e, ModuleNotFoundError) else None
        if missing and missing.split(".")[0] != "moac":    # a Python moac's dependencies are not installed in
            text = (f"moac: error: this Python ({sys.executable}) has no module {missing!r}, which moac needs here; "
                    "install moac into it (pip install -e . in a checkout) or run the moac of the environment "
                    "it is installed in")
            _print_json_error("usage", "ModuleNotFoundError", text, text.removeprefix("moac: error: ")) if args.json else print(text, file=sys.stderr)
            return 2
        where = f" while processing {args.file}" if getattr(args, "file", None) else ""
        text = (f"moac: internal error{where}: {type(e).__name__}: {e}\n"
                "This is a bug in moac; set MOAC_TRACEBACK=1 for the Python traceback and report it.")
        _print_json_error("internal", type(e).__name__, text, f"{type(e).__name__}: {e}") if args.json else print(text, file=sys.stderr)
        return 3


def _same_file(out: str, src: str) -> bool:
    """Whether -o names the file the program is read from (standard input too, where it is
    redirected from a file)."""
    try:
        if src == "-":
            return os.path.samestat(os.fstat(sys.stdin.fileno()), os.stat(out))
        return os.path.exists(src) and os.path.samefile(out, src)
    except (OSError, ValueError, AttributeError):
        return False


class _Closed:
    """Standard output when the process has none: a write is an OSError, reported as such."""
    def write(self, text: str) -> int:
        raise OSError(errno.EBADF, "cannot write the output: standard output is closed")

    def flush(self) -> None:
        pass


def _color(choice: str) -> bool:
    if choice != "auto":
        return choice == "always"
    return (not os.environ.get("NO_COLOR") and os.environ.get("TERM") != "dumb"
            and hasattr(sys.stderr, "isatty") and sys.stderr.isatty())


def _read(path: str, parser: argparse.ArgumentParser) -> bytes:
    from .timing import stage
    try:
        with stage("read"):
            return sys.stdin.buffer.read() if path == "-" else open(path, "rb").read()
    except OSError as e:
        parser.error(f"cannot read {path}: {e.strerror}", usage=False)


def _output_key(args, data: bytes, sizes: dict) -> tuple:
    """What `moac compile`'s C depends on besides moac itself: the source's bytes and name,
    every option, and the MOAC_* settings that reach the code generator."""
    env = tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith("MOAC_")
                       and k not in ("MOAC_CACHE_DIR", "MOAC_NO_CACHE", "MOAC_TRACEBACK", "MOAC_NATIVE")))
    opts = tuple(sorted((k, v) for k, v in vars(args).items()
                        if k not in ("file", "out", "verbose", "time", "json", "color", "defs", "cmd")))
    return ("compile", "<stdin>" if args.file == "-" else args.file, data, opts, tuple(sorted(sizes.items())), env)


def _run(args, ap) -> int:
    from . import timing
    if args.cmd == "examples":
        from .examples_index import command
        return command(args.name, show_path=args.path)
    ap = ap.sub.choices[args.cmd]       # usage errors from here on show the subcommand's usage
    out = getattr(args, "out", None)
    if out not in (None, "-") and _same_file(out, args.file):
        ap.error(f"-o {out} is the source file itself: the C would overwrite the program", usage=False)
    data = _read(args.file, ap)
    sizes = _sizes(args.defs, ap)
    from . import cache
    cached = (args.cmd == "compile" and args.offload == "none" and os.environ.get("MOAC_VERIFY") != "1"
              and cache.enabled())
    if cached:
        with timing.stage("output cache lookup"):
            key = _output_key(args, data, sizes)
            text = cache.get_text(key)
        if text is not None:
            timing.note("C from the output cache (same source, options and moac)")
            _write_c(args.out, text)
            return 0
    with timing.stage("import the compiler"):
        from .program import from_bytes
    prog = from_bytes(data, "<stdin>" if args.file == "-" else args.file)
    try:
        return _command(prog, args, sizes, ap, key if cached else None)
    except MoacError as e:
        e._program = prog
        raise


def _write_c(out: str | None, src: str) -> None:
    from .cache import write_atomic
    if out and out != "-":
        write_atomic(out, src)
    else:                               # no -o, or -o -: standard output
        sys.stdout.write(src)


def _command(prog, args, sizes: dict, ap, key) -> int:
    from . import timing
    _check_sizes(prog, sizes, ap, args.cmd)
    if getattr(args, "latex", False) and args.json:
        ap.error("--latex and --json exclude each other")
    if args.cmd == "dnf":
        from .dnf import format_trace
        d = prog.dnf()
        if args.latex:
            from .latex import dnf_document
            sys.stdout.write(dnf_document(d, sizes))
            return 0
        if args.json:
            from . import as_json
            print(json.dumps(as_json.dnf(prog, d, sizes, args.trace), ensure_ascii=False, indent=2))
            return 0
        if args.trace:
            print(format_trace(d))
            print()
        print(_specialise_text(d, sizes))
        return 0
    if args.cmd == "onf":
        from .commands import options
        o = prog.onf(**options(args, sizes))
        if args.latex:
            from .latex_onf import onf_document
            sys.stdout.write(onf_document(o))
            return 0
        if args.json:
            from . import as_json
            print(json.dumps(as_json.onf(prog, o), ensure_ascii=False, indent=2))
        else:
            print(o)
        return 0
    if args.cmd == "compile":
        from .commands import compile_command
        src = compile_command(prog, args, sizes)
        if src is None:                 # --offload: a bundle, written beside -o
            return 0
        _write_c(args.out, src)
        if key is not None:
            from . import cache
            cache.put_text(key, src)
            timing.note("C stored in the output cache")
        return 0
    if args.cmd == "cost":
        from .cost import hardware_list, plot, report
        try:
            hw = hardware_list(args.hardware)
        except MoacError as e:                  # an unknown name, as an unknown example's: a usage error
            ap.error(e.message)
        if args.tokens is None:
            args.tokens = "n"
        elif args.tokens not in prog.core.size_names():
            ap.error(f"--tokens {args.tokens}: the program declares no size '{args.tokens}' "
                     f"(sizes: {', '.join(prog.core.size_names()) or 'none'})")
        if args.json:
            from . import as_json
            text = json.dumps(as_json.cost(prog, sizes, hw, args.layers, args.kv_dtype, args.tokens, args.target),
                              ensure_ascii=False, indent=2)
        else:
            text = report(prog, sizes, hw, args.layers, args.kv_dtype, args.tokens, args.target)
        if args.plot:          # drawn before anything is printed: a missing matplotlib prints only its error
            wrote = plot(prog, sizes, hw, args.plot, args.kv_dtype, args.tokens, args.target)
            if not args.json:
                text += "\n" + wrote
        print(text)
        return 0
    if args.cmd == "check":
        from .commands import check_command
        return check_command(prog, args, sizes)
    return 0  # pragma: no cover


def _specialise_text(d, sizes: dict) -> str:
    text = str(d)
    if sizes:
        text += "\n-- with " + ", ".join(f"{k} = {v}" for k, v in sizes.items())
    return text


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
