"""The `--json` forms of `moac dnf`, `onf`, `cost` and `check` (docs/cli.md lists the fields).

Every expression is a string in moac's notation (the text the dumps print) and, where every
size is known, also a number; every record says which file and stage it is about, so a
tool can read one without the others.  SCHEMA is the version of these field sets.
"""
from __future__ import annotations

import sympy as sp

SCHEMA = 1


def _expr(e) -> str:
    from .dnf import fmt_index
    return fmt_index(sp.sympify(e))


def _value(e, env: dict):
    v = sp.sympify(e).xreplace(env)
    return int(v) if v.is_Integer else (float(v) if v.is_number else None)


def _program(prog) -> dict:
    from .front.core import show_shape
    core = prog.core
    return {"file": prog.source.filename,
            "sizes": [s.name for s in core.sizes],
            "derived": {n: _expr(e) for n, e in core.derived},
            "inputs": [{"name": i.name, "dtype": i.dtype, "shape": [_expr(x) for x in i.shape],
                        "shown": show_shape(i.shape)} for i in prog.inputs],
            "outputs": list(prog.outputs),
            "output_storage": dict(core.output_dtypes),
            "updates": [u for u, _ in core.updates],
            "require": [{"condition": _expr(c.cond), "message": c.message} for c in core.constraints]}


def dnf(prog, d, sizes: dict, trace: bool = False) -> dict:
    from .dnf.ir import format_expr
    out = {"schema": SCHEMA, "stage": "dnf", **_program(prog),
           "statements": [{"name": s.name, "role": s.role, "vars": [str(v) for v in s.vars],
                           **({"at": [_expr(x) for x in s.at]} if s.at else {}),
                           "shape": [_expr(x) for x in s.shape], "body": format_expr(s.body)}
                          for s in d.stmts],
           "fixed": dict(sizes), "text": str(d)}
    if trace:
        out["trace"] = [{"rule": t.rule, "before": t.before, "after": t.after} for t in d.trace]
    return out


def onf(prog, o) -> dict:
    from .schedule.counts import source_count
    from .show import shown
    s, c = o.schedule, o.counts
    src, repeated = source_count(s, c)
    return {"schema": SCHEMA, "stage": "onf", "file": prog.source.filename, "target": o.target,
            "plan": o.plan, "declined": [{"plan": n, "why": w} for n, w in o.declined],
            "fixed": dict(o.fixed), "run_time_sizes": list(o.params),
            "buffers": [{"name": shown(b.name), "role": b.role, "dtype": b.dtype,
                         "shape": [_expr(x) for x in b.shape], "placement": b.placement} for b in s.buffers],
            "lifts": [{"var": lf.var, "extent": _expr(lf.extent), "factor": _expr(lf.factor), "outer": lf.outer,
                       "inner": lf.inner, "guarded": lf.guarded, "level": lf.level} for lf in s.lifts],
            "kernels": [{"name": k.name, "comment": k.comment,
                         "loops": [{"var": lp.var, "extent": _expr(lp.extent), "level": lp.level,
                                    "meaning": lp.meaning, "depth": lp.depth} for lp in k.loops],
                         "accesses": [{"array": shown(a.array), "offset": a.text, "write": a.write,
                                       "lanes": a.lanes, "gamma_difference": None if a.diff is None else _expr(a.diff)}
                                      for a in k.accesses],
                         "traffic_bytes": _expr(k.traffic), "flops": _expr(k.flops)} for k in c.kernels],
            "traffic_bytes": _expr(c.traffic), "minimum_bytes": _expr(c.minimum), "flops": _expr(c.flops),
            "source_ops": _expr(src), "repeated_work": None if repeated is None else _expr(repeated),
            "minimal": bool(c.minimal), "notes": list(s.notes), "text": str(o)}


def cost(prog, sizes: dict, hardware: list, layers, kv_dtype, token: str, target: str) -> dict:
    from .cost import _call_counts, _per_token_intensity, analyse, storage_for
    storage = storage_for(prog, kv_dtype, token)
    c = analyse(prog, sizes, target, token, storage)
    v = c.values
    named = {k.name: int(x) for k, x in v.items() if not isinstance(k, sp.Dummy)}
    run_time = {k.name: int(x) for k, x in v.items() if isinstance(k, sp.Dummy)}
    out = {"schema": SCHEMA, "stage": "cost", "file": prog.source.filename, "target": target, "plan": c.onf.plan,
           "storage": storage, "sizes": named, "run_time_choices": run_time}
    from .cost import _num
    out["data"] = {k: _expr(x) for k, x in c.data.items()}
    for key, e in (("traffic_bytes", c.traffic), ("minimum_bytes", c.minimum), ("flops", c.flops)):
        out[key] = {"expr": _expr(e), "value": _value(e, v) if v and not c.data else (_num(e, v, c.data) if v
                                                                                        else None)}
    if c.kv_per_token is not None:
        out["kv_bytes_per_token"] = {"expr": _expr(c.kv_per_token), "value": _value(c.kv_per_token, v),
                                     "layers": layers,
                                     "whole_model": _value(c.kv_per_token * layers, v) if layers else None}
        ai = _per_token_intensity(c)
        out["intensity_per_token"] = {"expr": _expr(ai), "value": _value(ai, v)}
    bytes_v, flops_v = _call_counts(c)
    out["intensity"] = flops_v / bytes_v if bytes_v and flops_v is not None else None
    out["roofline"] = []
    if bytes_v and flops_v is not None:
        for hw in hardware:
            t_mem, t32 = bytes_v / hw.bandwidth, flops_v / hw.fp32
            out["roofline"].append({"hardware": hw.name, "bandwidth_bytes_per_s": hw.bandwidth,
                                    "fp32_flops_per_s": hw.fp32, "bf16_flops_per_s": hw.bf16,
                                    "memory_s": t_mem, "fp32_s": t32, "bound": "memory" if t_mem >= t32 else "compute",
                                    "at_least_s": max(t_mem, t32)})
    return out
