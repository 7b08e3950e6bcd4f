"""Sequential C: no annotations (the reference for bit-for-bit comparisons)."""
from .base import Target

TARGET = Target(
    name="c",
    description="sequential C (the reference for bit-for-bit comparisons)",
    cflags=(),
)
