"""The options of one compilation: frozen and hashable, the key of every cache."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Options:
    target: str = "openacc"
    sizes: tuple = ()            # (name, int) pairs, sorted: sizes fixed at compile time
    mapping: str = "auto"        # auto | naive (vector lanes over reduction axes)
    unroll: int = 0              # tokens per pass of the split-K score loop (0: derived)
    storage: tuple = ()          # (input, dtype) pairs overriding declared dtypes (cost studies)
    share_kv: bool = True        # GQA: query heads of one KV head share a gang (each K/V row loaded once)
    pack: str = "auto"           # auto: packed loads where the register-stride lifting allows; none
    wsum_unroll: int = 0         # tokens per iteration of the weighted sum (0: derived, 1 on GPU lanes, 4 on SIMD)
    index_bits: int = 0          # 0: 32-bit kernels where every buffer fits (checked at run time), else
                                 # 64-bit ones; 32 or 64: only that width (32 refuses sizes that do not fit)

    @staticmethod
    def make(target: str = "openacc", sizes: dict | None = None, mapping: str = "auto", unroll: int = 0,
             storage: dict | None = None, share_kv: bool = True, pack: str = "auto",
             wsum_unroll: int = 0, index_bits: int = 0, **unknown) -> "Options":
        from .errors import ArgumentError           # a MoacError: the CLI's flags are checked as these are
        from .targets import get_target
        if unknown:
            raise ArgumentError(f"unknown option(s) {', '.join(sorted(unknown))}; the options are target, sizes, "
                                "mapping, unroll, storage, share_kv, pack, wsum_unroll, index_bits")
        for name, d in (("sizes", sizes), ("storage", storage)):
            if d is not None and not isinstance(d, dict):
                raise ArgumentError(f"{name} must be a dict (name -> value), got {type(d).__name__}")
        try:
            get_target(target)
        except ValueError as e:
            raise ArgumentError(str(e)) from None
        if mapping not in ("auto", "naive"):
            raise ArgumentError(f"mapping must be 'auto' or 'naive', got {mapping!r}")
        if pack not in ("auto", "none"):
            raise ArgumentError(f"pack must be 'auto' or 'none', got {pack!r}")
        for name, v in (("index_bits", index_bits), ("unroll", unroll), ("wsum_unroll", wsum_unroll)):
            if isinstance(v, bool) or not isinstance(v, int) and not hasattr(v, "__index__"):
                raise ArgumentError(f"{name} must be an integer, got {v!r}")
        if int(index_bits) not in (0, 32, 64):
            raise ArgumentError(f"index_bits must be 0 (auto), 32 or 64, got {index_bits}")
        if int(unroll) < 0 or int(wsum_unroll) < 0:
            raise ArgumentError(f"unroll and wsum_unroll must be ≥ 0 (0: derived), got {unroll} and {wsum_unroll}")
        return Options(target, tuple(sorted((sizes or {}).items())), mapping, int(unroll),
                       tuple(sorted((storage or {}).items())), bool(share_kv), pack, int(wsum_unroll),
                       int(index_bits))

    @property
    def size_dict(self) -> dict:
        return dict(self.sizes)
