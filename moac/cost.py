"""`moac cost`: DRAM bytes, flops, KV bytes per token, arithmetic intensity and a
roofline estimate, all evaluated from the ONF's symbolic counts."""
from __future__ import annotations

from dataclasses import dataclass, field

import sympy as sp

from . import hardware as H
from .schedule.choices import RULES, evaluate
from .targets import get_target
from .errors import MoacError
from .front.data import data_reads


@dataclass(frozen=True)
class Cost:
    onf: object
    token: sp.Symbol | None
    values: dict            # symbol -> Integer (every size, run-time choices included) or {}
    traffic: sp.Expr
    minimum: sp.Expr
    flops: sp.Expr
    kv_per_token: sp.Expr | None     # bytes per token of the token axis (one layer)
    flops_per_token: sp.Expr | None
    data: dict = field(default_factory=dict)   # integer input -> the value its every element is taken at
                                               # (-D lens=4096, else the bound its conditions give)
    growing: bool = False   # the per-token figures are the long-sequence limit of a derivative with steps


def _no_ceiling(e):
    return sp.sympify(e).replace(sp.ceiling, lambda x: x)


def split_data(prog, sizes: dict) -> tuple:
    """(-D sizes, -D values of integer inputs): `-D lens=4096` takes every element of the
    integer input lens as 4096 for the estimates."""
    from .front.data import INDEX_DTYPES
    ints = {i.name for i in prog.inputs if i.dtype in INDEX_DTYPES}
    return {k: v for k, v in sizes.items() if k not in ints}, {k: v for k, v in sizes.items() if k in ints}


def _growing(d, tok) -> sp.Expr:
    """A derivative by the token size as that size grows without bound: the step of a
    min or max whose argument has the token (Heaviside(m − n) from ∂min(m, n)/∂n) is
    where it ends up, 0 or 1, so 8 − 4·Heaviside(m − n) bytes a token reads 8."""
    def step(a, *rest):
        k = sp.expand(a).coeff(tok)
        return sp.Integer(1) if k.is_positive else sp.Integer(0) if k.is_negative else sp.Heaviside(a, *rest)
    return sp.expand(sp.sympify(d).replace(sp.Heaviside, step))


def analyse(prog, sizes: dict, target: str = "openacc", token: str | None = "n", storage: dict | None = None) -> Cost:
    sizes, given = split_data(prog, sizes)
    tok = next((s for s in prog.core.sizes if s.name == token), None)
    fixed = {k: v for k, v in sizes.items() if not (tok is not None and k == tok.name)}
    onf = prog.onf(target=target, sizes=fixed, storage=storage or {})
    values = {}
    from .front.sizes import resolve
    env = resolve(prog.core, sizes)
    if all(s in env for s in prog.core.sizes):
        values = dict(env)
        for ch in onf.choices:
            tg = get_target(target)
            values[ch.var] = sp.Integer(evaluate(ch, values, *tg.chunk_choice(onf.schedule.tiled, onf.schedule.even_tiles, onf.schedule.tile_step_bytes, onf.schedule.tile_warps)))
    kv = fpt = None
    steps = False
    if tok is not None:
        # the run-time choices (the chunk size) as the sequence grows without bound
        big = {ch.var: RULES[ch.rule](*(10**12 for _ in ch.args)) for ch in onf.choices}
        kv, fpt = (sp.diff(_no_ceiling(onf.minimum), tok), sp.diff(_no_ceiling(onf.flops).xreplace(big), tok))
        steps = kv.has(sp.Heaviside) or fpt.has(sp.Heaviside)
        kv, fpt = _growing(kv, tok), _growing(fpt, tok)
        if kv == 0:                # the minimum does not grow with this size (a capacity: the data's lengths do)
            kv = fpt = None
    from .front.data import INDEX_DTYPES, bounds
    bound = bounds(prog.core)
    data = {i.name: sp.Integer(given[i.name]) if i.name in given else bound.get(i.name)
            for i in prog.inputs if i.dtype in INDEX_DTYPES}
    read = {r.func.__name__ for e in (onf.traffic, onf.minimum, onf.flops) for r in data_reads(e)}
    return Cost(onf, tok, values, onf.traffic, onf.minimum, onf.flops, kv, fpt,
                {k: v for k, v in data.items() if v is not None and k in read}, steps)


def storage_for(prog, kv_dtype: str | None, token: str) -> dict:
    """--kv-dtype: every input whose shape has the token axis, stored as kv_dtype."""
    if not kv_dtype:
        return {}
    tok_syms = {s for s in prog.core.sizes if s.name == token}
    storage = {i.name: kv_dtype for i in prog.inputs if any(sp.sympify(e).free_symbols & tok_syms for e in i.shape)}
    if not storage:
        raise MoacError(f"--kv-dtype: no input has the token axis '{token}' in its shape")
    return storage


def counts_at(onf, sizes: dict) -> tuple:
    """(DRAM bytes, minimum bytes, flops) of one call at these sizes (name -> int: the sizes
    a call binds; the fixed ones may be left out), the run-time choices (the split-K chunk)
    evaluated as the kernel evaluates them."""
    from .front.core import size_symbol
    values = {size_symbol(k): sp.Integer(int(v)) for k, v in {**onf.fixed, **sizes}.items()}
    for ch in onf.choices:
        tg = get_target(onf.target)
        values[ch.var] = sp.Integer(evaluate(ch, values, *tg.chunk_choice(onf.schedule.tiled, onf.schedule.even_tiles, onf.schedule.tile_step_bytes, onf.schedule.tile_warps)))
    out = []
    for e in (onf.traffic, onf.minimum, onf.flops):
        v = sp.sympify(e).xreplace(values)
        if v.free_symbols:
            raise MoacError(f"the counts need the size(s) {', '.join(sorted(s.name for s in v.free_symbols))}")
        out.append(int(v) if v.is_integer else float(v))
    return tuple(out)


def _num(e, values, data: dict | None = None):
    """e as a number at these sizes, each integer-array read at its value in `data` (sums
    over a batch then summed); None if a size or a read is left."""
    e = sp.sympify(e)
    if data and data_reads(e):
        e = e.xreplace({r: data[r.func.__name__] for r in data_reads(e) if r.func.__name__ in data})
    v = e.xreplace(values or {})
    if v.has(sp.Sum):
        v = v.doit()
    return float(v) if not v.free_symbols and not data_reads(v) else None


def _fmt_bytes(b: float) -> str:
    for unit, k in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if b >= k:
            return f"{b:,.0f} bytes ({b / k:.2f} {unit})"
    return f"{b:,.0f} bytes"


def _per_token_intensity(c: Cost):
    """∂flops/∂n ÷ ∂bytes/∂n (the long-sequence limit), a sympy expression."""
    return sp.simplify(c.flops_per_token / c.kv_per_token)


def _call_counts(c: Cost) -> tuple:
    """(DRAM bytes, flops) of the call as floats, (None, None) unless every size is fixed."""
    return (_num(c.traffic, c.values, c.data), _num(c.flops, c.values, c.data)) if c.values else (None, None)


def report(prog, sizes: dict, hardware: list, layers: int | None, kv_dtype: str | None, token: str = "n",
           target: str = "openacc") -> str:
    from .dnf import fmt_index
    storage = storage_for(prog, kv_dtype, token)
    c = analyse(prog, sizes, target, token, storage)
    v = c.values
    L = [f"cost of {prog.source.filename} (target {target}; plan: {c.onf.plan})"]
    if storage:
        L.append("storage       " + ", ".join(f"{k} as {d}" for k, d in storage.items()) + " (--kv-dtype)")
    if v:
        L.append("sizes         " + ", ".join(f"{k.name} = {int(x)}" for k, x in v.items() if not isinstance(k, sp.Dummy))
                 + "".join(f", {k.name} = {int(x)} (run time)" for k, x in v.items() if isinstance(k, sp.Dummy)))

    def line(label, e, unit):
        n = _num(e, v, c.data) if v else None
        exact = sp.sympify(e).xreplace(v) if v and not c.data else None
        if exact is not None and exact.is_Integer:          # every digit, not a float's
            shown = f" = {int(exact):,} {unit}"
        else:
            shown = f" = {n:,.0f} {unit}" if n is not None else f" {unit}"
        L.append(f"{label:13} {fmt_index(sp.factor(e))}{shown}")
    if v and c.data and any(data_reads(x) for x in (c.traffic, c.minimum, c.flops)):
        given = split_data(prog, sizes)[1]
        L.append("data          " + ", ".join(
            f"every element of {k} = {int(x) if sp.sympify(x).is_Integer else fmt_index(x)}"
            + (" (-D)" if k in given else f" (its bound; -D {k}=VALUE for another)") for k, x in c.data.items()))
    line("DRAM bytes", c.traffic, "per call")
    line("minimum", c.minimum, "per call (each needed input element read once, each output written once)")
    line("flops", c.flops, "per call")
    if c.kv_per_token is not None:
        kvv = _num(c.kv_per_token, v, c.data)
        L.append(f"KV bytes/token {fmt_index(c.kv_per_token)} per layer (∂ minimum / ∂{token}"
                 + (f" as {token} grows" if c.growing else "") + ")"
                 + (f" = {_fmt_bytes(kvv)}" if kvv is not None else ""))
        if layers:
            total = c.kv_per_token * layers
            tv = _num(total, v)
            L.append(f"whole model   {layers} layers × {fmt_index(c.kv_per_token)} = "
                     + (_fmt_bytes(tv) if tv is not None else fmt_index(total)) + " per token")
        ai_tok = _per_token_intensity(c)
        aiv = _num(ai_tok, v)
        shown = f"{aiv:.2f}" if aiv is not None else fmt_index(ai_tok)
        L.append(f"intensity     {shown} flop/byte per token (long-sequence limit: ∂flops/∂{token} ÷ ∂bytes/∂{token})")
    bytes_v, flops_v = _call_counts(c)
    if bytes_v and flops_v is not None:
        L.append(f"intensity     {flops_v / bytes_v:.2f} flop/byte for this call (flops / DRAM bytes)")
        for hw in hardware:
            t_mem = bytes_v / hw.bandwidth
            t32, t16 = flops_v / hw.fp32, flops_v / hw.bf16
            bound = "memory-bound" if t_mem >= t32 else "compute-bound"
            L.append(f"roofline      {hw.name}: {t_mem * 1e6:.2f} µs moving {bytes_v / 1e6:.2f} MB at "
                     f"{hw.bandwidth / 1e12:.2f} TB/s vs {t32 * 1e6:.2f} µs of fp32 arithmetic "
                     f"({hw.fp32 / 1e12:.1f} TFLOP/s; {t16 * 1e6:.3f} µs on 16-bit tensor units) → {bound}, "
                     f"≥ {max(t_mem, t32) * 1e6:.2f} µs per call; ridge {hw.fp32 / hw.bandwidth:.1f} (fp32) / "
                     f"{hw.bf16 / hw.bandwidth:.0f} (16-bit) flop/byte")
    elif hardware:
        L.append("roofline      (fix every size with -D for time estimates)")
    return "\n".join(L)


def hardware_list(names: list[str]) -> list:
    if not names:
        return list(H.HARDWARE.values())
    out = []
    for n in names:
        if n.lower() == "all":
            out += list(H.HARDWARE.values())
            continue
        try:
            out.append(H.get(n))
        except KeyError:
            raise MoacError(f"unknown hardware {n!r}; known: {', '.join(H.HARDWARE)}, cpu, all") from None
    return out


@dataclass(frozen=True)
class RooflinePoint:
    label: str
    intensity: float        # flop per DRAM byte


@dataclass(frozen=True)
class Roofline:
    """What `moac cost --plot` draws: the program's intensities and the hardware's roofs."""
    title: str
    points: tuple           # RooflinePoint, the intensities `report` prints
    hardware: tuple         # moac.hardware.Hardware

    @staticmethod
    def attainable(hw, intensity: float, peak: float | None = None) -> float:
        """flop/s the roofline allows at this intensity: min(peak, bandwidth × intensity),
        the peak fp32 unless given."""
        return min(hw.fp32 if peak is None else peak, hw.bandwidth * intensity)


def roofline_points(prog, sizes: dict, hardware: list, kv_dtype: str | None = None, token: str = "n",
                    target: str = "openacc") -> Roofline:
    """The data of the roofline plot: the intensities `report` prints, as numbers (the call's
    flops ÷ DRAM bytes where every size is fixed; per token in the long-sequence limit where
    the program has the token axis), and the hardware."""
    c = analyse(prog, sizes, target, token, storage_for(prog, kv_dtype, token))
    points = []
    if c.kv_per_token is not None:
        ai = _num(_per_token_intensity(c), c.values)
        if ai is not None and 0 < ai < float("inf"):
            points.append(RooflinePoint(f"per token ({token} → ∞)", ai))
    bytes_v, flops_v = _call_counts(c)
    if bytes_v and flops_v:
        points.append(RooflinePoint("this call", flops_v / bytes_v))
    shown = ", ".join(f"{k.name} = {int(x)}" for k, x in c.values.items() if not isinstance(k, sp.Dummy))
    title = f"{prog.source.filename} (target {target})" + (f"\n{shown}" if shown else "")
    return Roofline(title, tuple(points), tuple(hardware))


def _rate(flops: float) -> str:
    return f"{flops / 1e12:.3g} TFLOP/s" if flops >= 1e12 else f"{flops / 1e9:.3g} GFLOP/s"


PLOT_FORMATS = (".png", ".svg")


def plot(prog, sizes: dict, hardware: list, path: str, kv_dtype: str | None = None, token: str = "n",
         target: str = "openacc") -> str:
    """Draw the roofline into path (.png or .svg) with matplotlib's Agg backend; the line
    the report adds."""
    from pathlib import Path
    suffix = Path(path).suffix.lower()
    if suffix not in PLOT_FORMATS:
        raise MoacError(f"--plot writes a .png or an .svg file, got {path!r}")
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
        from matplotlib.ticker import FuncFormatter
    except ImportError:
        raise MoacError("moac cost --plot needs matplotlib (pip install 'moac[plot]')") from None
    import io
    import math

    import numpy as np

    from .cache import write_atomic
    r = roofline_points(prog, sizes, hardware, kv_dtype, token, target)
    if not r.points:
        raise MoacError("--plot: no intensity to plot (fix every size with -D)")
    if not r.hardware:
        raise MoacError("--plot: no hardware to plot")
    peak = max(hw.bf16 for hw in r.hardware)
    unit, scale = ("TFLOP/s", 1e12) if peak >= 1e12 else ("GFLOP/s", 1e9)
    marks = [p.intensity for p in r.points] + [hw.fp32 / hw.bandwidth for hw in r.hardware] + \
        [hw.bf16 / hw.bandwidth for hw in r.hardware]
    lo, hi = math.log10(min(marks) / 8), math.log10(max(marks) * 8)
    x = np.logspace(lo, hi, 400)
    fig = Figure(figsize=(8, 5.5))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    colors = [f"C{k}" for k in range(10)]
    for k, hw in enumerate(r.hardware):
        col = colors[k % len(colors)]
        ax.plot(x, np.minimum(hw.fp32, hw.bandwidth * x) / scale, color=col,
                label=f"{hw.name}: {hw.bandwidth / 1e9:,.0f} GB/s, {_rate(hw.fp32)} fp32")
        if hw.bf16 != hw.fp32:
            ax.plot(x, np.minimum(hw.bf16, hw.bandwidth * x) / scale, color=col, linestyle=":", linewidth=1)
    for k, p in enumerate(r.points):
        marker = "os^D"[k % 4]
        ax.axvline(p.intensity, color="0.5", linestyle="--", linewidth=0.8)
        ys = [Roofline.attainable(hw, p.intensity) / scale for hw in r.hardware]
        ax.scatter([p.intensity] * len(ys), ys, marker=marker, color="black", zorder=3,
                   label=f"{p.label}: {p.intensity:.2f} flop/byte")
    ax.set_xscale("log")
    ax.set_yscale("log")
    for axis in (ax.xaxis, ax.yaxis):           # 0.1, 1, 10 rather than 10^-1, 10^0, 10^1
        axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.set_xlabel("arithmetic intensity (flop/byte of DRAM traffic)")
    ax.set_ylabel(f"attainable performance ({unit})")
    ax.set_title(f"roofline: {r.title}", fontsize=10)
    ax.grid(True, which="both", linewidth=0.3)
    ax.legend(fontsize=8, title="solid: fp32 peak; dotted: 16-bit tensor peak", title_fontsize=8)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format=suffix[1:])
    write_atomic(path, buf.getvalue())
    return f"plot          {path} (roofline: {', '.join(p.label for p in r.points)})"
