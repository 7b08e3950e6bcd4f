"""moac: a symbolic compiler for the Mathematics of Arrays that emits C/OpenACC.

`import moac` is light: the compiler's stages (sympy, lark, jinja2, cffi) load on the first
use of `moac.Program`, `moac.load` or `moac.parse`, so that `moac.gpu` and the command line's
cached paths start fast.
"""
from .errors import (ArgumentError, BuildError, CheckError, DeviceError, MoacError, NameError_, ParseError,
                     RewriteError, ShapeError)
from .version import __version__

__all__ = ["Program", "load", "parse", "MoacError", "ParseError", "ShapeError", "NameError_",
           "RewriteError", "BuildError", "ArgumentError", "CheckError", "DeviceError", "__version__"]

_LAZY = {"Program", "load", "parse"}


def __getattr__(name: str):
    """Program, load and parse, and the submodules, imported on first use: `import moac` and
    `import moac.gpu` must not pull in the compiler (sympy, lark)."""
    if name in _LAZY:
        from . import program
        value = getattr(program, name)
        globals()[name] = value
        return value
    import importlib
    try:
        return importlib.import_module(f"{__name__}.{name}")
    except ModuleNotFoundError as e:
        if e.name != f"{__name__}.{name}":
            raise
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | _LAZY)
