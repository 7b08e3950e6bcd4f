"""moac: a symbolic compiler for the Mathematics of Arrays that emits C/OpenACC."""
from .errors import (ArgumentError, BuildError, CheckError, MoacError, NameError_, ParseError,
                     RewriteError, ShapeError)
from .program import Program, load, parse
from .version import __version__

__all__ = ["Program", "load", "parse", "MoacError", "ParseError", "ShapeError", "NameError_",
           "RewriteError", "BuildError", "ArgumentError", "CheckError", "__version__"]
