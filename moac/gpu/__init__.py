"""GPU bundles from Python, without the compiler: load what `moac compile --offload nvptx`
wrote and call its device entry on torch CUDA tensors (docs/gpu.md, "moac.gpu").

    from moac.gpu import load_bundle
    kernel = load_bundle("gpu/decode.json")      # an OpenACC bundle: before `import torch`
    import torch
    out = kernel(q=q, K=K, V=V)["out"]           # CUDA tensors in, CUDA tensors out

Importing it needs ctypes and moac.errors only (not sympy, lark, jinja2 or cffi); torch is
imported at the first call.  `python -m moac.gpu BUNDLE.json -D n=4096` (or `moac run`)
runs a bundle on random tensors, checks it and times it.
"""
from .bundle import DeviceKernel, Launch, Manifest, load_bundle
from .runtime import load_runtime
from .shapes import Binder, Expr

__all__ = ["load_bundle", "DeviceKernel", "Launch", "Manifest", "load_runtime", "Binder", "Expr"]
