"""The `compile` and `check` subcommands (the CLI module only parses arguments)."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import sympy as sp

from . import dtypes
from .dnf import DRead, DReduce, DOp, DSelect
from .errors import ArgumentError, CheckError, MoacError

DEFAULT_SIZE = 13     # a prime, so every lifting guard is exercised
# the values a size not given may take, in order of preference (primes, DEFAULT_SIZE first,
# then around it): the first that leaves every run-time condition on the sizes true
DEFAULT_CANDIDATES = (13, 11, 17, 7, 19, 5, 23, 3, 29, 2, 31, 1)
CHECK_BYTES = 8 * 2**30      # the most random input moac check draws (float64 bytes)
EPS = {"float": float(np.finfo(np.float32).eps), "double": float(np.finfo(np.float64).eps)}
# half an ulp, relative: a stored output's (or an updated input's) rounding to nearest in its storage
ROUNDING = {"bf16": 2.0 ** -8, "f16": 2.0 ** -11, "f8e4m3": 2.0 ** -4, "f8e5m2": 2.0 ** -3}


def random_inputs(prog, sizes: dict, seed: int = 0) -> tuple[dict, dict]:
    """Seeded standard-normal inputs for every declared input, in its declared storage
    dtype, and every size bound (given ones, the others default_sizes)."""
    from .front.sizes import resolve
    env = default_sizes(prog.core, resolve(prog.core, sizes, strict=False))   # (refused by the compile)
    rng = np.random.default_rng(seed)
    shapes = {info.name: tuple(int(sp.sympify(e).xreplace(env)) for e in info.shape) for info in prog.inputs}
    need = sum(8 * int(np.prod(sh, dtype=object)) for sh in shapes.values())    # float64 draws
    if need > CHECK_BYTES:
        raise MoacError(f"these sizes give inputs of {need / 2**30:.3g} GiB of random float64 draws; moac check "
                        f"generates its inputs in memory and stops at {CHECK_BYTES / 2**30:.0f} GiB "
                        "(compile the kernel for these sizes, check it at smaller ones)")
    from .front.data import INDEX_DTYPES, random_index_inputs
    ints = random_index_inputs(prog.core, shapes, env, rng)    # sizes and indices within the program's conditions
    arrays = {info.name: ints[info.name] if info.dtype in INDEX_DTYPES else dtypes.random(info.dtype, rng, shapes[info.name])
              for info in prog.inputs}
    bound = {k.name: int(v) for k, v in env.items()}
    bound.update({name: int(sp.sympify(e).xreplace(env)) for name, e in prog.core.derived})   # hq of g = hq ÷ hkv
    return arrays, bound


def default_sizes(core, env: dict) -> dict:
    """`env` with every size it does not bind set, in declaration order, to the first of
    DEFAULT_CANDIDATES that keeps true each run-time condition it completes (one whose
    other sizes are bound already: a cache update's n + 1 ≤ N gets N = 13, n = 11), an
    equation's solution first (n = m − 1 with n = 13 gives m = 14);
    DEFAULT_SIZE where none does, so that the check's positioned error names the condition.
    A greedy search: it does not go back to change an earlier size."""
    from .front.data import on_data
    conds = [sp.sympify(c.cond) for c in core.constraints if not on_data(c)]
    env = dict(env)

    def holds(c, trial) -> bool:
        try:
            return bool(c.xreplace(trial))
        except (TypeError, ZeroDivisionError):       # a size bound to make a divisor 0: not this value
            return False

    def solutions(s) -> list:
        """Values of s that an equation it completes asks for (n = m − 1 with m bound: m − 1),
        where they are non-negative integers: tried before the candidates."""
        out = []
        for c in conds:
            if isinstance(c, sp.Eq) and s in c.free_symbols and c.free_symbols <= set(env) | {s}:
                try:
                    sols = sp.solve(c.xreplace(env), s)
                except (NotImplementedError, TypeError, ValueError):
                    continue
                out += [int(x) for x in sols if x.is_Integer and x >= 0]
        return out

    for s in core.sizes:
        if s in env:
            continue
        for v in solutions(s) + list(DEFAULT_CANDIDATES):
            trial = {**env, s: sp.Integer(v)}
            # the conditions this size completes (one that failed before it stays the error it is)
            if all(holds(c, trial) for c in conds if s in c.free_symbols and c.free_symbols <= set(trial)):
                env = trial
                break
        else:
            env[s] = sp.Integer(DEFAULT_SIZE)
    return env


def tolerance(ctype: str, length: int) -> float:
    """16·eps·√L, L the reduction length feeding one output element: the bound grows with
    the reduction, it is not loosened globally."""
    return 16 * EPS[ctype] * float(np.sqrt(length))


# a kernel may round at other points than the estimates below see (exp goes through exp2
# of a prescaled argument, which rounds the argument once more): each element may be off
# by this many times what they give it
AMPLIFIED = 4


def rounding_allowance(prog, arrays: dict, sizes: dict, ref: dict) -> dict:
    """For each output and updated input of a float32 kernel, what rounding to float32 alone
    moves each element, which no 16·eps·√L bound on the reductions sees (exp(20·x)
    amplifies the rounding of 20·x by 20·|x|): name -> array of the ref's shape, the larger
    of two estimates, each 0 where a value is not finite —
    * the program evaluated in float32 against float64 (`ref`): its own rounding, in
      source order (one sample: it may round luckily at an element);
    * the float64 program with every floating input moved by half a float32 ulp
      (×(1 + 2^-24)): the rounding any float32 kernel makes of its first operands, however
      it rounds (deterministic).
    Per element, so that an ill-conditioned element loosens no other."""
    from .front import interp
    try:
        with np.errstate(all="ignore"):
            runs = [interp.evaluate(prog.core, arrays, sizes, dtype=np.float32),
                    interp.evaluate(prog.core, arrays, sizes, scale=1 + 2.0 ** -24)]
    except (ArithmeticError, ValueError):            # nothing to learn from them: the bound stands alone
        return {}
    out = {}
    for name, r in ref.items():
        a = np.asarray(r, dtype=np.float64)
        moved = np.zeros(a.shape)
        for run in runs:
            b = np.asarray(run.get(name, a), dtype=np.float64)
            if b.shape != a.shape:
                continue
            both = np.isfinite(a) & np.isfinite(b)
            with np.errstate(invalid="ignore"):
                moved = np.maximum(moved, np.where(both, np.abs(a - b), 0.0))
        out[name] = moved
    return out


def reduction_lengths(onf, sizes: dict) -> dict:
    """For each output and updated input, the longest chain of accumulations feeding one of
    its elements (error grows with it): its own reductions' extents, through the temporaries
    it reads (their chains continue into it), plus 1.  An output is not charged for the
    reductions of another: `y = x + 1` beside `z = + red A` keeps L = 1."""
    env = {sp.Symbol(k, integer=True, nonnegative=True): v for k, v in sizes.items()}
    from .front.data import bounds, upper_bound
    bound = bounds(onf.dnf.program)
    temps = {s.name: s for s in onf.dnf.stmts if s.role == "temp"}
    done: dict = {}

    def chain(name: str) -> int:
        if name not in done:
            done[name] = 0                              # (a temporary never reads itself)
            done[name] = length(temps[name].body)
        return done[name]

    def length(e) -> int:
        match e:
            case DReduce(extent=ext, body=b):
                ext = upper_bound(ext, bound)          # a data extent (Σ_{l<lens[b]}): its largest value
                return int(sp.sympify(ext).xreplace(env)) + length(b)
            case DOp(args=args):
                return max((length(a) for a in args), default=0)
            case DSelect(then=t, other=o):
                return max(length(t), length(o))
            case DRead(array=a) if a in temps:
                return chain(a)
        return 0
    out: dict = {}
    for s in onf.dnf.stmts:
        if s.role != "temp":
            out[s.name] = max(out.get(s.name, 1), length(s.body) + 1)
    return out


def reduction_length(onf, sizes: dict) -> int:
    """The longest of reduction_lengths: one bound for every output of the program."""
    return max(reduction_lengths(onf, sizes).values(), default=1)


def compare(name: str, got: np.ndarray, ref: np.ndarray, tol: float,
            allowance: np.ndarray | None = None) -> tuple[float, float, bool, tuple, float]:
    """(max abs error, max rel error, within tolerance, where, the absolute bound used): the
    bound is tol · max(1, max|ref| over the finite values), plus at each element its
    `allowance` where one is given (an absolute array of ref's shape: rounding_allowance
    times AMPLIFIED); a non-finite reference value must be matched exactly (NaN by NaN).
    `where` is the element furthest past its bound (or with the largest error)."""
    if got.shape != ref.shape:
        raise CheckError(f"output '{name}' has shape {got.shape}, the reference {ref.shape}")
    if ref.size == 0:
        return 0.0, 0.0, True, (), tol
    g = got.astype(np.float64)
    with np.errstate(invalid="ignore"):            # inf − inf where both are infinite
        err = np.abs(g - ref)
    finite = np.isfinite(ref)
    err = np.where(finite, err, np.where((g == ref) | (np.isnan(g) & np.isnan(ref)), 0.0, np.inf))
    scale = max(1.0, float(np.max(np.abs(ref[finite]))) if finite.any() else 1.0)
    bound = tol * scale + (allowance if allowance is not None else 0.0)
    with np.errstate(invalid="ignore"):
        past = err - bound
    worst = np.unravel_index(int(np.argmax(past)), err.shape)
    max_abs = float(np.max(err))
    return max_abs, max_abs / scale, bool(np.all(err <= bound)), tuple(int(i) for i in worst), tol * scale


def options(args, sizes: dict) -> dict:
    """The compile options the CLI's flags set (the keywords of moac.options.Options.make)."""
    return dict(target=args.target, sizes=sizes, mapping=args.mapping, unroll=args.unroll, share_kv=args.share_kv,
                pack=args.pack, wsum_unroll=args.unroll_wsum, index_bits=args.index_bits)


def check_command(prog, args, sizes: dict) -> int:
    try:
        kern = prog.compile(cc=args.cc, **options(args, sizes))
    except ArgumentError as e:          # a -D size that breaks a condition
        e.message += " (choose other sizes with -D)"
        raise
    ctype = kern.signature.ctype
    arrays, all_sizes = random_inputs(prog, sizes, args.seed)
    try:
        ref = prog.evaluate(sizes=all_sizes, **arrays)        # first: the kernel rewrites the inputs it updates
        allow = rounding_allowance(prog, arrays, all_sizes, ref) if ctype == "float" else {}
        got = kern(**arrays, **{k: v for k, v in all_sizes.items() if k in kern.onf.params})
    except ArgumentError as e:
        e.message += " (choose other sizes with -D)"
        raise
    lengths = reduction_lengths(kern.onf, all_sizes)
    shown = " ".join(f"{k}={v}" for k, v in all_sizes.items())
    from .targets import get_target
    where_run = " (run on this CPU: in-process builds of a device target disable offloading)" \
        if get_target(args.target).device_entry and get_target(args.target).host_only_flags else ""
    results, ok_all = [], True
    updated = [u for u, _ in prog.core.updates]
    for name in list(prog.outputs) + updated:
        decl = _decl(prog, name)
        L = lengths.get(name, 1)
        tol = tolerance(ctype, L)
        extra = AMPLIFIED * allow[name] if name in allow else None
        # the values an update writes into a narrow input are rounded to its storage, as a declared output's are
        rounding = ROUNDING.get(decl, 0.0) if name in prog.core.output_dtypes or name in updated else 0.0
        max_abs, max_rel, ok, where, bound = compare(name, dtypes.as_float64(decl, got[name]), ref[name],
                                                     tol + rounding, extra)
        most = float(np.max(extra)) if extra is not None and extra.size else 0.0
        results.append({"name": name, "max_abs_error": _finite(max_abs), "max_rel_error": _finite(max_rel),
                        "tolerance": tol + rounding, "absolute_bound": bound, "reduction_length": L, "ok": ok,
                        "worst_index": list(where) if not ok else None, "storage": decl if rounding else None,
                        "storage_rounding": rounding, "rounding_allowance": most if extra is not None else None})
        ok_all &= ok
    if getattr(args, "json", False):
        print(json.dumps({"schema": 1, "stage": "check", "file": prog.source.filename, "target": args.target,
                          "run_on_host": bool(where_run), "sizes": all_sizes, "seed": args.seed, "ctype": ctype,
                          "outputs": results, "ok": bool(ok_all)}, indent=2))
        return 0 if ok_all else 1
    print(f"check {prog.source.filename}: target {args.target}{where_run}, sizes {shown}, seed {args.seed}")
    for r in results:
        L = r["reduction_length"]
        tol = tolerance(ctype, L)
        shown_tol = f"{tol:.1e}" if not r["storage"] else \
            f"{r['tolerance']:.1e} = {tol:.1e} + {r['storage_rounding']:.1e}, half an ulp of {r['storage']},"
        amplified = ""
        if (r["rounding_allowance"] or 0.0) > r["absolute_bound"]:      # worth saying: the program amplifies rounding
            amplified = (f", and at each element {AMPLIFIED} × what rounding to float32 moves it, up to "
                         f"{r['rounding_allowance']:.1e}")
        print(f"  {r['name']}: max abs error {float(r['max_abs_error']):.3e}, max rel error "
              f"{float(r['max_rel_error']):.3e} "
              f"(tolerance {shown_tol} relative to max(1, max|ref|): {r['absolute_bound']:.1e} absolute{amplified}; "
              f"reduction length {L}) {'OK' if r['ok'] else 'MISMATCH at ' + str(tuple(r['worst_index']))}")
    if not ok_all:
        print("check FAILED", file=sys.stderr)
        return 1
    return 0


def _finite(x: float):
    """A float for JSON: inf and NaN (an error against a non-finite reference) as strings."""
    return x if np.isfinite(x) else str(x)


def _decl(prog, name: str) -> str:
    """The storage dtype of an input or output (an output without a declared storage is in
    the kernel's arithmetic type, which float64 holds exactly)."""
    return next((i.dtype for i in prog.inputs if i.name == name), prog.core.output_dtypes.get(name, "f64"))


def compile_command(prog, args, sizes: dict) -> str | None:
    """The C source for these flags, or None with --offload, which writes the source and a
    bundle beside -o itself."""
    from .cache import write_atomic
    from .options import Options
    from .targets import flags as target_flags
    art = prog.lower(Options.make(**options(args, sizes)))
    src = art.c_source
    if args.offload == "none":
        return src
    if not args.out or args.out == "-":
        raise MoacError("--offload needs -o OUT.c (the bundle is written beside it)")
    try:
        target_flags(args.target, args.offload)
    except ValueError as e:
        raise MoacError(str(e)) from None
    write_atomic(args.out, src)
    bundle(art, args.offload, Path(args.out))
    return None


def bundle(art, offload: str, out: Path) -> None:
    """A self-contained GPU bundle beside OUT.c (OUT.cu): the offload library, the runtime
    libraries the target needs (libgomp for OpenACC), and a manifest the runners read
    (moac.gpu, bench/gpu_run.py, bench/gpu_check.py)."""
    from .front.data import bounds, on_data
    from .jit.build import build_library, compile_flags, write_atomic
    from .targets import get_target
    onf, sig, src = art.onf, art.signature, art.c_source
    target = get_target(onf.target)
    flags = compile_flags(onf.target, offload=offload)
    if shutil.which(target.compiler) is None:
        raise MoacError(f"the {onf.target} bundle needs {target.compiler}, which is not on PATH")
    lib = build_library(src, flags, cc=target.compiler)
    so = out.with_suffix(".so")
    shutil.copyfile(lib, so)
    libdir = out.parent / "lib"
    if target.runtime_libs:
        libdir.mkdir(exist_ok=True)
    for name in target.runtime_libs:
        path = _find_lib(name)
        if path is None:
            raise MoacError(f"{name} not found; install gcc-12-offload-nvptx (apt-get install -y "
                            "gcc-12-offload-nvptx)")
        shutil.copyfile(path, libdir / name)
    manifest = {
        "source": onf.dnf.program.source.filename,
        "function": sig.fname,
        "target": onf.target,
        "stream": target.stream,      # the device entry takes a stream after its workspace
        "ctype": sig.ctype,
        "fixed": onf.fixed,
        "params": [{"name": p.name, "kind": p.kind, "shape": [str(s) for s in p.shape],
                    "dtype": "i64" if p.kind == "size" else p.dtype}
                   for p in sig.params],
        "derived": {n: str(e) for n, e in onf.dnf.program.derived},
        "constraints": [{"cond": str(c.cond), "message": c.message} for c in onf.dnf.program.constraints
                        if not on_data(c)],
        "data_conditions": _data_conditions(onf.dnf.program),
        "data_bounds": {k: str(v) for k, v in bounds(onf.dnf.program).items()},
        "flags": flags,
        "traffic_bytes": str(onf.traffic),
        "minimum_bytes": str(onf.minimum),
        "flops": str(onf.flops),
    }
    write_atomic(out.with_suffix(".json"), json.dumps(manifest, indent=2) + "\n")
    runtime = f" and {libdir}/ (runtime)" if target.runtime_libs else ""
    print(f"wrote {out}, {so}, {out.with_suffix('.json')}{runtime}")


def _data_conditions(program) -> list:
    """The conditions on integer inputs, as the numpy source moac.datacheck compiles."""
    from .front.data import condition_source, on_data
    out = []
    for c in program.constraints:
        if on_data(c):
            extents, test = condition_source(c.cond, c.over)
            out.append({"extents": extents, "test": test, "message": c.message,
                        "where": f"{program.source.filename}:{c.span.line}:{c.span.col}"})
    return out


def _find_lib(name: str):
    try:
        r = subprocess.run(["gcc", f"-print-file-name={name}"], capture_output=True, text=True, check=False)
        p = Path(r.stdout.strip())
        if p.is_absolute() and p.exists():
            return p.resolve()
    except OSError:
        pass
    for d in ("/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib"):
        p = Path(d) / name
        if p.exists():
            return p
    return None
