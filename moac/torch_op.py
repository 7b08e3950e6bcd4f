"""A compiled kernel as a PyTorch custom operator, so that it runs under `torch.compile`.

`as_custom_op(kernel)` registers a `torch.library.custom_op` whose positional arguments
are the program's inputs in declaration order, then, as ints, the sizes that appear in no
input's shape (a cache length), in declaration order.  It returns the program's output
tensor, or a tuple of them in `output` order; inputs the program updates in place
(`update` lines) are declared in `mutates_args`.

The real implementation calls the Kernel on CPU tensors (no copies).  CUDA tensors go to
`device_kernel`, any callable with the Kernel's keyword interface (inputs and sizes by
name, a dict of outputs back); without one they are an ArgumentError.

The fake implementation (what `torch.compile` traces with) runs no C and no sympy.  With
concrete shapes it binds the sizes with the kernel's frozen binding and takes the outputs'
shapes from it.  With symbolic shapes (`dynamic=True`) binding would guard on every
dimension, so it follows a plan made once at registration: an output extent that is an
input's extent is that input's dimension; other extents are the frozen output-shape
expressions evaluated on sizes built from the dimensions (a size that is a whole axis is
that dimension, one that is a factor of an axis, g in hq = g·hkv, is the dimension divided
by the other factors).  Only where an output needs a size the plan cannot reach (an alias
m = n + 1 with only ⟨m⟩ in the inputs) does it bind the symbolic dimensions, which
specialises the graph to them (torch guards on the values and recompiles for others).
Shapes are checked against each other by the real call: a bad call raises the Kernel's
ArgumentError when it runs.

This is the only module of moac that imports torch.
"""
from __future__ import annotations

import hashlib
import keyword

import torch

from .errors import ArgumentError

_DTYPE = {"f32": torch.float32, "f64": torch.float64, "bf16": torch.bfloat16, "f16": torch.float16}
_RESERVED = {"self", "out"}          # names torch's schemas give a meaning of their own
_TORCH_NAMESPACES = {"aten", "prims", "prim", "torch", "_c10d_functional", "c10d", "quantized", "inductor",
                     "higher_order", "mkldnn", "_quantized", "rngprims", "profiler", "debugprims"}
_OPS: dict = {}                      # (namespace, name) -> (library file, device_kernel, op)


def _schema_name(name: str, taken: set) -> str:
    """The moac name as a schema argument: moac names are ASCII identifiers; a Python
    keyword (also a schema keyword: if, None, True) or self/out gets a trailing _."""
    out = name
    while keyword.iskeyword(out) or out in _RESERVED or out in taken:
        out += "_"
    taken.add(out)
    return out


class _Plan:
    """What the op needs of a kernel, worked out once at registration."""

    def __init__(self, kernel):
        import sympy as sp        # registration only (moac's front end has it loaded already)
        prog = kernel.onf.dnf.program
        self.kernel = kernel
        self.binding = kernel._binding
        self.fixed = dict(kernel.onf.fixed)
        self.inputs = [i.name for i in prog.inputs]
        self.outputs = [name for name, _ in prog.outputs]
        self.updated = [u for u, _ in prog.updates]
        in_shapes = {s.name for i in prog.inputs for e in i.shape for s in sp.sympify(e).free_symbols}
        self.int_sizes = [s.name for s in prog.sizes if s.name not in in_shapes and s.name not in self.fixed]
        dtype = {p.name: p.dtype for p in kernel.signature.params if p.kind == "output"}
        self.dtypes = [_DTYPE[dtype[o]] for o in self.outputs]     # the arithmetic type or the declared storage
        need = {x.name for _, c in prog.outputs for e in c.shape for x in sp.sympify(e).free_symbols}
        self.sources = self._sources(prog, sp, need)
        extents = {sp.expand(e): (k, ax) for k, i in reversed(list(enumerate(prog.inputs)))
                   for ax, e in reversed(list(enumerate(i.shape)))}
        self.same_as = {name: [extents.get(sp.expand(e)) for e in c.shape] for name, c in prog.outputs}

    def _sources(self, prog, sp, need: set) -> list | None:
        """How each size comes from the inputs' dimensions under symbolic shapes, in an order
        that has a size's factors first: (name, "axis", k, ax) for a whole axis, (name,
        "factor", k, ax, c, others) for c·name·Π others; None where a size the outputs'
        shapes need has neither."""
        known = set(self.fixed) | set(self.int_sizes)
        steps = []
        axes = [(k, ax, sp.sympify(e)) for k, i in enumerate(prog.inputs) for ax, e in enumerate(i.shape)]
        for k, ax, e in axes:
            if isinstance(e, sp.Symbol) and e.name not in known:
                steps.append((e.name, "axis", k, ax))
                known.add(e.name)
        progress = True
        while progress:
            progress = False
            for k, ax, e in axes:
                c, factors = e.as_coeff_mul()
                names = [f.name for f in factors if isinstance(f, sp.Symbol)]
                unknown = [n for n in names if n not in known]
                if (len(unknown) == 1 and len(names) == len(factors) and len(set(names)) == len(names)
                        and c.is_Integer and int(c) > 0):
                    steps.append((unknown[0], "factor", k, ax, int(c), [n for n in names if n != unknown[0]]))
                    known.add(unknown[0])
                    progress = True
        return steps if known >= need else None

    def arguments(self, args: tuple) -> dict:
        """The Kernel's keyword arguments from the op's positional ones."""
        return dict(zip(self.inputs + self.int_sizes, args))

    # ---- the real implementation
    def run(self, *args):
        kw = self.arguments(args)
        fn = _pick(self.kernel, self.device_kernel, [kw[n].device for n in self.inputs])
        res = fn(**kw)
        missing = [o for o in self.outputs if o not in res]
        if missing:
            raise ArgumentError(f"the kernel returned no {', '.join(missing)} (a device_kernel must return a dict "
                                "of the program's outputs by name)")
        outs = tuple(res[o] for o in self.outputs)
        return outs[0] if len(outs) == 1 else outs

    # ---- the fake implementation
    def fake(self, *args):
        kw = self.arguments(args)
        shapes = {n: tuple(kw[n].shape) for n in self.inputs}
        given = {n: kw[n] for n in self.int_sizes}
        symbolic = any(type(d) is not int for s in shapes.values() for d in s) or \
            any(type(v) is not int for v in given.values())
        out_shapes = self._symbolic_shapes(shapes, given) if symbolic else None
        if out_shapes is None:
            env = self.binding.bind(shapes, given)      # on SymInts, int() guards on their values
            out_shapes = [self.binding.output_shape(o, env) for o in self.outputs]
        like = kw[self.inputs[0]] if self.inputs else None
        outs = [like.new_empty(shape, dtype=dtype) if like is not None else torch.empty(shape, dtype=dtype)
                for shape, dtype in zip(out_shapes, self.dtypes)]
        return outs[0] if len(outs) == 1 else tuple(outs)

    def _symbolic_shapes(self, shapes: dict, given: dict):
        """The outputs' shapes in the inputs' symbolic dimensions, no guard added; None where
        a size the outputs need cannot be reached so."""
        env, out = None, []
        for name in self.outputs:
            same = [None if src is None else shapes[self.inputs[src[0]]][src[1]] for src in self.same_as[name]]
            if None in same:
                env = env or self._symbolic_sizes(shapes, given)
                if env is None:
                    return None
                same = [d if s is None else s for d, s in zip(self.binding.output_shape(name, env), same)]
            out.append(tuple(same))
        return out

    def _symbolic_sizes(self, shapes: dict, given: dict):
        if self.sources is None:
            return None
        env = {**self.fixed, **given}
        for step in self.sources:
            name, how, k, ax = step[:4]
            dim = shapes[self.inputs[k]][ax]
            if how == "axis":
                env[name] = dim
                continue
            div = step[4]
            for n in step[5]:
                div = div * env[n]
            if type(div) is int and div == 0:          # the size is not determined: bind says so
                return None
            env[name] = dim // div
        return env


def _pick(kernel, device_kernel, devices: list):
    """The callable for inputs on these devices: the Kernel for CPU tensors, device_kernel
    for CUDA tensors; anything else is an ArgumentError."""
    kinds = sorted({d.type for d in devices})
    if kinds in ([], ["cpu"]):
        return kernel
    if kinds == ["cuda"]:
        if device_kernel is None:
            raise ArgumentError("the inputs are CUDA tensors: this op wraps a host kernel; CUDA tensors need the "
                                "device entry of a GPU bundle (docs/gpu.md), passed as "
                                "as_custom_op(kernel, device_kernel=...)")
        return device_kernel
    raise ArgumentError(f"the inputs are on {', '.join(kinds)}: the op takes CPU tensors"
                        + (" or CUDA tensors (with a device_kernel)" if len(kinds) == 1 else
                           ", or CUDA tensors, all on one device"))


def _op_name(kernel, name: str | None) -> str:
    if name is None:
        digest = hashlib.sha256(kernel.library.name.encode()).hexdigest()[:10]   # the library's name is a content hash
        return f"{kernel.signature.fname}_{digest}"
    if not (isinstance(name, str) and name.isascii() and name.isidentifier()):
        raise ArgumentError(f"op name {name!r} must be an ASCII identifier")
    return name


def as_custom_op(kernel, name: str | None = None, namespace: str = "moac", device_kernel=None):
    """Register `kernel` as the custom op `namespace::name` and return it (a torch
    CustomOpDef: call it like a function, or as torch.ops.<namespace>.<name>).

    Arguments: the inputs in declaration order, then the sizes no input's shape fixes, as
    ints.  Result: the output tensor, or a tuple in `output` order.  `name` defaults to the
    kernel's function name and a hash of its library; the same kernel (library) with the
    same arguments gives the same op.  `device_kernel`: a callable with the Kernel's
    keyword interface that CUDA tensors are passed to (a GPU bundle's device entry)."""
    if not (isinstance(namespace, str) and namespace.isascii() and namespace.isidentifier()):
        raise ArgumentError(f"namespace {namespace!r} must be an ASCII identifier")
    if namespace in _TORCH_NAMESPACES:      # aten::add registered again broke every later torch.compile
        raise ArgumentError(f"namespace {namespace!r} is torch's own; choose another (the default is 'moac')")
    if device_kernel is not None and not callable(device_kernel):
        raise ArgumentError(f"device_kernel must be callable, got {type(device_kernel).__name__}")
    opname = _op_name(kernel, name)
    key = (namespace, opname)
    if key in _OPS:
        library, dk, op = _OPS[key]
        if library != kernel.library.name:
            raise ArgumentError(f"op {namespace}::{opname} is already registered for another kernel "
                                "(pass another name)")
        if dk is not device_kernel:
            raise ArgumentError(f"op {namespace}::{opname} is already registered with "
                                f"{'no' if dk is None else 'another'} device_kernel (pass another name)")
        return op
    plan = _Plan(kernel)
    plan.device_kernel = device_kernel
    taken: set = set()
    names = {n: _schema_name(n, taken) for n in plan.inputs + plan.int_sizes}
    alias = {u: f"a{k}" for k, u in enumerate(plan.updated)}        # one alias set per updated input
    params = [f"Tensor({alias[n]}!) {names[n]}" if n in alias else f"Tensor {names[n]}"
              for n in plan.inputs] + [f"SymInt {names[n]}" for n in plan.int_sizes]
    ret = "Tensor" if len(plan.outputs) == 1 else "(" + ", ".join(["Tensor"] * len(plan.outputs)) + ")"
    schema = f"({', '.join(params)}) -> {ret}"

    def impl(*args):
        return plan.run(*args)

    def fake(*args):
        return plan.fake(*args)

    op = torch.library.custom_op(f"{namespace}::{opname}", impl, mutates_args=[names[u] for u in plan.updated],
                                 schema=schema)
    op.register_fake(fake)
    _OPS[key] = (kernel.library.name, device_kernel, op)
    return op
