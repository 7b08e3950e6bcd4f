"""Stage 3: Core -> Denotational Normal Form (ψ-reduction)."""
from .evaluate import evaluate_dnf
from .form import DNF, format_dnf, format_trace
from .ir import DConst, DIndex, DOp, DRead, DReduce, DSelect, DStmt, fmt_index, format_stmt
from .program import to_dnf
from .verify import verify_dnf
from .walk import canonical_key, children, free_index_vars, map_children, reads, substitute

__all__ = ["DNF", "DConst", "DIndex", "DOp", "DRead", "DReduce", "DSelect", "DStmt", "canonical_key", "children",
           "evaluate_dnf", "fmt_index", "format_dnf", "format_stmt", "format_trace", "free_index_vars",
           "map_children", "reads", "substitute", "to_dnf", "verify_dnf"]
