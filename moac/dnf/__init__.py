"""Stage 3: Core -> Denotational Normal Form (ψ-reduction)."""
from .reduce import (DNF, DConst, DIndex, DOp, DRead, DReduce, DSelect, DStmt, canonical_key, evaluate_dnf,
                     fmt_index, format_dnf, format_stmt, format_trace, free_index_vars, to_dnf)

__all__ = ["DNF", "DConst", "DIndex", "DOp", "DRead", "DReduce", "DSelect", "DStmt", "canonical_key",
           "evaluate_dnf", "fmt_index", "format_dnf", "format_stmt", "format_trace", "free_index_vars", "to_dnf"]
