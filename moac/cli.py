"""The `moac` command line.  Exit codes: 0 success, 1 a user error in the program
(parse, name, shape, build, check), 2 a usage error (bad flags, unreadable file),
3 an internal error (a bug in moac)."""
from __future__ import annotations

import argparse
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


def _sizes(pairs: list[str] | None, parser: argparse.ArgumentParser) -> dict:
    out = {}
    for p in pairs or []:
        name, sep, value = p.partition("=")
        if not sep or not name.isidentifier():
            parser.error(f"-D expects name=value, got {p!r}")
        try:
            out[name] = int(value)
        except ValueError:
            parser.error(f"-D {name}: {value!r} is not an integer")
        if out[name] < 0:
            parser.error(f"-D {name}: sizes are non-negative, got {value}")
    return out


def _load(path: str, parser: argparse.ArgumentParser):
    from .program import from_bytes, load
    try:
        return from_bytes(sys.stdin.buffer.read(), "<stdin>") if path == "-" else load(path)
    except OSError as e:
        parser.exit(2, f"moac: error: cannot read {path}: {e.strerror}\n")




def _check_sizes(prog, sizes: dict, parser):
    known = set(prog.core.size_names())
    for k in sizes:
        if k not in known:
            parser.error(f"-D {k}: the program declares no size '{k}' (sizes: {', '.join(sorted(known)) or 'none'})")


def main(argv: list[str] | None = None) -> int:
    from .version import __version__
    ap = argparse.ArgumentParser(prog="moac", description="A symbolic compiler for the Mathematics of Arrays.")
    ap.add_argument("--version", action="version", version=f"moac {__version__}")
    sub = ap.add_subparsers(dest="cmd", required=True)

    def common(p, target=True):
        p.add_argument("file", help="MoA source file (- reads standard input)")
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

    p = sub.add_parser("onf", help="print the Operational Normal Form")
    common(p)

    p = sub.add_parser("compile", help="emit C")
    common(p)
    p.add_argument("-o", dest="out", help="output C file (default: stdout)")
    p.add_argument("--offload", choices=("none", "nvptx"), default="none",
                   help="also build a GPU bundle (shared library + runner) next to -o")

    p = sub.add_parser("check", help="compile, run on random data, compare with the reference")
    common(p)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--cc", help="the C compiler (default: $CC, else the target's: gcc or nvcc); "
                   "$MOAC_CFLAGS adds flags")

    p = sub.add_parser("cost", help="DRAM bytes, flops, KV bytes per token, intensity and roofline")
    common(p)
    p.add_argument("--hardware", action="append", default=[], metavar="NAME",
                   help="H100, H200, A100, B200, MI300X, cpu (measured now) or all (default: the GPUs)")
    p.add_argument("--layers", type=int, help="layers of the model, for KV bytes per token of the whole model")
    p.add_argument("--kv-dtype", choices=("f32", "f16", "bf16", "f64"),
                   help="count the inputs that have the token axis as stored in this dtype")
    p.add_argument("--tokens", default="n", metavar="SIZE", help="the size that counts tokens (default n)")

    p = sub.add_parser("cache", help="the build cache: where it is and what it holds, or empty it")
    p.add_argument("action", choices=("info", "clear"))

    p = sub.add_parser("run", add_help=False, help="run GPU bundles on random CUDA tensors, check and time them "
                       "(python -m moac.gpu; needs torch and a GPU)")
    p.add_argument("args", nargs=argparse.REMAINDER, help="BUNDLE.json [-D NAME=VALUE ...] [--reps N] [--json OUT]")

    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["run"]:              # the rest is moac.gpu's command line
        from .gpu.run import main as run_main
        return run_main(argv[1:], prog="moac run")
    args = ap.parse_args(argv)
    if args.cmd == "cache":
        from .jit.build import cache_clear, cache_info
        try:
            print(cache_info() if args.action == "info" else cache_clear())
        except OSError as e:
            print(f"moac: error: {e.strerror or e}{': ' + e.filename if e.filename else ''}", file=sys.stderr)
            return 1
        return 0
    prog = None
    try:
        prog = _load(args.file, ap)
        sizes = _sizes(args.defs, ap)
        _check_sizes(prog, sizes, ap)
        if args.cmd == "dnf":
            from .dnf import format_trace
            d = prog.dnf()
            if args.trace:
                print(format_trace(d))
                print()
            print(_specialise_text(d, sizes))
            return 0
        if args.cmd == "onf":
            from .commands import options
            print(prog.onf(**options(args, sizes)))
            return 0
        if args.cmd == "compile":
            from .commands import compile_command
            return compile_command(prog, args, sizes)
        if args.cmd == "cost":
            from .cost import hardware_list, report
            print(report(prog, sizes, hardware_list(args.hardware), args.layers, args.kv_dtype, args.tokens,
                         args.target))
            return 0
        if args.cmd == "check":
            from .commands import check_command
            return check_command(prog, args, sizes)
    except MoacError as e:
        if prog is not None and e.source is None:
            e.source = prog.source
        print(e.render(), file=sys.stderr)
        return 1
    except BrokenPipeError:           # the reader went away (`moac onf … | head`): not an error
        try:
            sys.stdout = open(os.devnull, "w")   # so that the interpreter's final flush is quiet
        except OSError:
            pass
        return 0
    except OSError as e:
        print(f"moac: error: {e.strerror or e}{': ' + e.filename if e.filename else ''}", file=sys.stderr)
        return 1
    except Exception as e:  # a bug in moac, not in the user's program
        if os.environ.get("MOAC_TRACEBACK"):
            raise
        where = f" while processing {args.file}" if getattr(args, "file", None) else ""
        print(f"moac: internal error{where}: {type(e).__name__}: {e}\n"
              "This is a bug in moac; set MOAC_TRACEBACK=1 for the Python traceback and report it.",
              file=sys.stderr)
        return 3
    return 0  # pragma: no cover


def _specialise_text(d, sizes: dict) -> str:
    text = str(d)
    if sizes:
        text += "\n-- with " + ", ".join(f"{k} = {v}" for k, v in sizes.items())
    return text


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
