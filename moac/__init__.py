"""moac: a symbolic compiler for the Mathematics of Arrays that emits C/OpenACC."""
from .errors import (ArgumentError, BuildError, CheckError, MoacError, NameError_, ParseError,
                     RewriteError, ShapeError)
from .version import __version__

__all__ = ["Program", "load", "parse", "MoacError", "ParseError", "ShapeError", "NameError_",
           "RewriteError", "BuildError", "ArgumentError", "CheckError", "__version__"]


def __getattr__(name: str):
    """Program, load and parse, and the submodules, imported on first use: `import moac.gpu`
    must not pull in the compiler (sympy, lark)."""
    if name in ("Program", "load", "parse"):
        from . import program
        return getattr(program, name)
    import importlib
    try:
        return importlib.import_module(f"{__name__}.{name}")
    except ModuleNotFoundError as e:
        if e.name != f"{__name__}.{name}":
            raise
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
