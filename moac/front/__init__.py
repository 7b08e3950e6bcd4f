"""The front end: text -> AST (syntax) -> typed Core with symbolic shapes (lower, with the
expression elaborator in elaborate; the IR in core), the size binder (sizes) and the
reference interpreter of the source program (interp)."""
