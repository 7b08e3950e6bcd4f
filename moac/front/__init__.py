"""The front end: text -> AST (syntax) -> typed Core with symbolic shapes (core), the
size binder (sizes) and the reference interpreter of the source program (interp)."""
