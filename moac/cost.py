"""`moac cost`: DRAM bytes, flops, KV bytes per token, arithmetic intensity and a
roofline estimate, all evaluated from the ONF's symbolic counts."""
from __future__ import annotations

from dataclasses import dataclass

import sympy as sp

from . import hardware as H
from .schedule.choices import RULES, evaluate
from .targets import get_target
from .errors import MoacError


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


def _no_ceiling(e):
    return sp.sympify(e).replace(sp.ceiling, lambda x: x)


def analyse(prog, sizes: dict, target: str = "openacc", token: str | None = "n", storage: dict | None = None) -> Cost:
    tok = next((s for s in prog.core.sizes if s.name == token), None)
    fixed = {k: v for k, v in sizes.items() if not (tok is not None and k == tok.name)}
    onf = prog.onf(target=target, sizes=fixed, storage=storage or {})
    values = {}
    from .front.sizes import resolve
    env = resolve(prog.core, sizes)
    if all(s in env for s in prog.core.sizes):
        values = dict(env)
        for ch in onf.choices:
            values[ch.var] = sp.Integer(evaluate(ch, values, get_target(target).gangs))
    kv = fpt = None
    if tok is not None:
        # the run-time choices (the chunk size) as the sequence grows without bound
        big = {ch.var: RULES[ch.rule](*(10**12 for _ in ch.args)) for ch in onf.choices}
        kv = sp.expand(sp.diff(_no_ceiling(onf.minimum), tok))
        fpt = sp.expand(sp.diff(_no_ceiling(onf.flops).xreplace(big), tok))
    return Cost(onf, tok, values, onf.traffic, onf.minimum, onf.flops, kv, fpt)


def counts_at(onf, sizes: dict) -> tuple:
    """(DRAM bytes, minimum bytes, flops) of one call at these sizes (name -> int: the sizes
    a call binds; the fixed ones may be left out), the run-time choices (the split-K chunk)
    evaluated as the kernel evaluates them."""
    from .front.core import size_symbol
    values = {size_symbol(k): sp.Integer(int(v)) for k, v in {**onf.fixed, **sizes}.items()}
    for ch in onf.choices:
        values[ch.var] = sp.Integer(evaluate(ch, values, get_target(onf.target).gangs))
    out = []
    for e in (onf.traffic, onf.minimum, onf.flops):
        v = sp.sympify(e).xreplace(values)
        if v.free_symbols:
            raise MoacError(f"the counts need the size(s) {', '.join(sorted(s.name for s in v.free_symbols))}")
        out.append(int(v) if v.is_integer else float(v))
    return tuple(out)


def _num(e, values):
    v = sp.sympify(e).xreplace(values or {})
    return float(v) if not v.free_symbols else None


def _fmt_bytes(b: float) -> str:
    for unit, k in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if b >= k:
            return f"{b:,.0f} bytes ({b / k:.2f} {unit})"
    return f"{b:,.0f} bytes"


def report(prog, sizes: dict, hardware: list, layers: int | None, kv_dtype: str | None, token: str = "n",
           target: str = "openacc") -> str:
    from .dnf import fmt_index
    storage = {}
    if kv_dtype:
        tok_syms = {s for s in prog.core.sizes if s.name == token}
        storage = {i.name: kv_dtype for i in prog.inputs
                   if any(sp.sympify(e).free_symbols & tok_syms for e in i.shape)}
        if not storage:
            raise MoacError(f"--kv-dtype: no input has the token axis '{token}' in its shape")
    c = analyse(prog, sizes, target, token, storage)
    v = c.values
    L = [f"cost of {prog.source.filename} (target {target}; plan: {c.onf.plan})"]
    if storage:
        L.append("storage       " + ", ".join(f"{k} as {d}" for k, d in storage.items()) + " (--kv-dtype)")
    if v:
        L.append("sizes         " + ", ".join(f"{k.name} = {int(x)}" for k, x in v.items() if not isinstance(k, sp.Dummy))
                 + "".join(f", {k.name} = {int(x)} (run time)" for k, x in v.items() if isinstance(k, sp.Dummy)))

    def line(label, e, unit):
        n = _num(e, v) if v else None
        shown = f" = {n:,.0f} {unit}" if n is not None else f" {unit}"
        L.append(f"{label:13} {fmt_index(sp.factor(e))}{shown}")
    line("DRAM bytes", c.traffic, "per call")
    line("minimum", c.minimum, "per call (each needed input element read once, each output written once)")
    line("flops", c.flops, "per call")
    if c.kv_per_token is not None:
        kvv = _num(c.kv_per_token, v)
        L.append(f"KV bytes/token {fmt_index(c.kv_per_token)} per layer (∂ minimum / ∂{token})"
                 + (f" = {_fmt_bytes(kvv)}" if kvv is not None else ""))
        if layers:
            total = c.kv_per_token * layers
            tv = _num(total, v)
            L.append(f"whole model   {layers} layers × {fmt_index(c.kv_per_token)} = "
                     + (_fmt_bytes(tv) if tv is not None else fmt_index(total)) + " per token")
        ai_tok = sp.simplify(c.flops_per_token / c.kv_per_token)
        aiv = _num(ai_tok, v)
        shown = f"{aiv:.2f}" if aiv is not None else fmt_index(ai_tok)
        L.append(f"intensity     {shown} flop/byte per token (long-sequence limit: ∂flops/∂{token} ÷ ∂bytes/∂{token})")
    bytes_v, flops_v = (_num(c.traffic, v), _num(c.flops, v)) if v else (None, None)
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
