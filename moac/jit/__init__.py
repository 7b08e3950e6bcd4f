"""Stage 6: C text -> a loaded kernel: the build cache (build), the loaded library and its
call (kernel), the frozen size binding a call uses (binding)."""
