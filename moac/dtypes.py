"""Storage dtypes of inputs: f64, f32, f16 and bf16.

Low-precision inputs are stored as 16-bit patterns and widened to float on load, so
the bytes moved halve while the arithmetic stays in f32.  numpy has float16; bf16
arrays are passed as uint16 bit patterns (or as ml_dtypes.bfloat16 where installed).
Where ml_dtypes is installed (`pip install 'moac[fast]'`) the bf16 conversions use it;
without it they are done with numpy integer arithmetic, with the same bits.
"""
from __future__ import annotations

import numpy as np

BYTES = {"f64": 8, "f32": 4, "f16": 2, "bf16": 2}
CTYPE = {"f64": "double", "f32": "float", "f16": "uint16_t", "bf16": "uint16_t"}
NUMPY = {"f64": np.float64, "f32": np.float32, "f16": np.float16, "bf16": np.uint16}


def accepts(decl: str, a: np.ndarray) -> bool:
    """Whether an array's dtype is the storage the declaration asks for."""
    if decl == "bf16":
        return a.dtype == np.uint16 or (a.dtype.name == "bfloat16" and a.dtype.itemsize == 2)
    return a.dtype == NUMPY[decl]


def describe(decl: str) -> str:
    return "uint16 bf16 bit patterns (or ml_dtypes.bfloat16)" if decl == "bf16" else np.dtype(NUMPY[decl]).name


def _ml_bfloat16():
    """ml_dtypes.bfloat16 where ml_dtypes is installed (the `fast` extra), else None."""
    try:
        import ml_dtypes
    except ImportError:
        return None
    return ml_dtypes.bfloat16


def bf16_bits(x) -> np.ndarray:
    """float -> bf16 bit patterns (uint16, C-contiguous, at least 1-d), rounding to
    nearest even (float64 input is rounded to float32 first).  Every NaN, of either sign
    and any payload, becomes the one pattern 0x7FC0 (PyTorch's scalar conversion does the
    same).  Uses ml_dtypes where installed, with the same result bit for bit."""
    bf16 = _ml_bfloat16()
    if bf16 is None:
        return _bf16_bits_numpy(x)
    x32 = np.ascontiguousarray(x, dtype=np.float32)
    with np.errstate(invalid="ignore"):  # ml_dtypes flags a signalling NaN; the numpy path is quiet
        bits = x32.astype(bf16).view(np.uint16)
    bits[np.isnan(x32)] = 0x7FC0       # ml_dtypes keeps a NaN's sign: canonicalise it
    return bits


def _bf16_bits_numpy(x) -> np.ndarray:
    """bf16_bits without ml_dtypes: add 0x7FFF plus the lowest kept bit, then truncate."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    nan = np.isnan(np.asarray(x, dtype=np.float32))
    return np.where(nan, 0x7FC0, rounded).astype(np.uint16)


def bf16_values(b: np.ndarray) -> np.ndarray:
    """bf16 bit patterns (or ml_dtypes.bfloat16) -> float32 values, exactly (a NaN keeps
    its sign and payload).  Uses ml_dtypes where installed, with the same result bit for bit."""
    if b.dtype != np.uint16:
        return np.asarray(b, dtype=np.float32)
    bf16 = _ml_bfloat16()
    if bf16 is None:
        return _bf16_values_numpy(b)
    return b.view(bf16).astype(np.float32)


def _bf16_values_numpy(b: np.ndarray) -> np.ndarray:
    """bf16_values without ml_dtypes: the 16 bits become the high half of a float32."""
    return (b.astype(np.uint32) << 16).view(np.float32)


def as_float64(decl: str, a) -> np.ndarray:
    """The values an input holds, as float64 (for the reference interpreter)."""
    a = np.asarray(a)
    if decl == "bf16":
        return bf16_values(a).astype(np.float64)
    return a.astype(np.float64)


def random(decl: str, rng: np.random.Generator, shape: tuple) -> np.ndarray:
    x = rng.standard_normal(shape)
    if decl == "bf16":
        return bf16_bits(x)
    return x.astype(NUMPY[decl])
