"""Storage dtypes: f64, f32, f16 and bf16; the 8-bit f8e4m3, f8e5m2 and i8 for inputs;
i32 and i64 for integer inputs that hold sizes and indices (front/data.py).

Low-precision inputs are stored as 16- or 8-bit patterns and widened exactly to f32 on
load, so the bytes moved shrink while the arithmetic stays in f32.  numpy has float16;
bf16 arrays are passed as uint16 bit patterns (or as ml_dtypes.bfloat16 where
installed), the 8-bit floats as uint8 bit patterns (or ml_dtypes.float8_e4m3fn /
float8_e5m2), i8 as int8.  An output may be stored as f16 or bf16 (`output out : bf16`),
rounded to nearest even.  Where ml_dtypes is installed (`pip install 'moac[fast]'`) the
bf16 and 8-bit float conversions use it; without it they are done with numpy integer
arithmetic, with the same bits.

The 8-bit floats are the OCP ones: f8e4m3 is E4M3FN (bias 7, no infinities, S.1111.111
the only NaN, largest 448, subnormals down to 2^-9), f8e5m2 is E5M2 (bias 15, IEEE-like
with ±inf and NaNs, largest 57344, subnormals down to 2^-16).
"""
from __future__ import annotations

import numpy as np

BYTES = {"f64": 8, "f32": 4, "f16": 2, "bf16": 2, "f8e4m3": 1, "f8e5m2": 1, "i8": 1, "i32": 4, "i64": 8}
CTYPE = {"f64": "double", "f32": "float", "f16": "uint16_t", "bf16": "uint16_t", "f8e4m3": "uint8_t",
         "f8e5m2": "uint8_t", "i8": "int8_t", "i32": "int32_t", "i64": "int64_t"}
NUMPY = {"f64": np.float64, "f32": np.float32, "f16": np.float16, "bf16": np.uint16, "f8e4m3": np.uint8,
         "f8e5m2": np.uint8, "i8": np.int8, "i32": np.int32, "i64": np.int64}
WIDENED = ("f16", "bf16", "f8e4m3", "f8e5m2", "i8")     # stored narrow, widened to f32 on load
OUTPUT_STORAGE = ("f16", "bf16")                          # an output's declared storage (else the arithmetic type)
FP8 = ("f8e4m3", "f8e5m2")
ML_NAME = {"bf16": "bfloat16", "f8e4m3": "float8_e4m3fn", "f8e5m2": "float8_e5m2"}   # ml_dtypes' names

# mantissa bits, exponent bias, largest finite pattern (sign clear), the canonical NaN, whether it has ±inf
_F8 = {"f8e4m3": (3, 7, 0x7E, 0x7F, False), "f8e5m2": (2, 15, 0x7B, 0x7E, True)}


def accepts(decl: str, a: np.ndarray) -> bool:
    """Whether an array's dtype is the storage the declaration asks for."""
    if decl in ML_NAME:
        return a.dtype == NUMPY[decl] or (a.dtype.name == ML_NAME[decl] and a.dtype.itemsize == BYTES[decl])
    return a.dtype == NUMPY[decl]


def describe(decl: str) -> str:
    if decl == "bf16":
        return "uint16 bf16 bit patterns (or ml_dtypes.bfloat16)"
    if decl in FP8:
        return f"uint8 {decl} bit patterns (or ml_dtypes.{ML_NAME[decl]})"
    return np.dtype(NUMPY[decl]).name


def _ml(name: str):
    """ml_dtypes' type of this name where ml_dtypes is installed (the `fast` extra), else None."""
    try:
        import ml_dtypes
    except ImportError:
        return None
    return getattr(ml_dtypes, name, None)


def _ml_bfloat16():
    """ml_dtypes.bfloat16 where ml_dtypes is installed (the `fast` extra), else None."""
    return _ml("bfloat16")


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


def fp8_bits(x, decl: str = "f8e4m3", saturate: bool = False) -> np.ndarray:
    """float -> 8-bit float bit patterns (uint8, C-contiguous, at least 1-d) of `decl`
    ("f8e4m3" or "f8e5m2"), rounding to nearest even (float64 input is rounded to float32
    first).  Subnormals are kept.  A magnitude beyond the largest finite value after
    rounding (the largest is 448 for f8e4m3, 57344 for f8e5m2; ±inf included) becomes,
    by default (OCP's non-saturating conversion, what ml_dtypes does), the NaN of its sign
    for f8e4m3, which has no infinity, and ±inf for f8e5m2; with saturate=True (OCP's
    "satfinite", what PyTorch's `.to(torch.float8_e4m3fn)` does) the largest finite value
    of its sign.  Every NaN becomes the one pattern 0x7F (f8e4m3) or 0x7E (f8e5m2).  Uses
    ml_dtypes where installed, with the same result bit for bit."""
    mbits, bias, top, nan_bits, has_inf = _F8[decl]
    t = _ml(ML_NAME[decl])
    if t is None:
        return _fp8_bits_numpy(x, decl, saturate)
    x32 = np.atleast_1d(np.ascontiguousarray(x, dtype=np.float32))
    with np.errstate(invalid="ignore", over="ignore"):
        bits = x32.astype(t).view(np.uint8)
    nan = np.isnan(x32)
    if saturate:
        over = ~nan & ((bits & 0x7F) > top)                   # NaN (f8e4m3) or inf (f8e5m2) from a number
        bits[over] = (bits[over] & 0x80) | top
    bits[nan] = nan_bits
    return bits


def _fp8_bits_numpy(x, decl: str, saturate: bool) -> np.ndarray:
    """fp8_bits without ml_dtypes.  Normal results: add half an ulp of the 8-bit format
    less one, plus the lowest kept bit, to the float32 bits and truncate (the carry moves
    into the exponent), then rebias; below the smallest normal: the magnitude in units of
    the smallest subnormal, rounded to the nearest even integer (exact: a power-of-two
    scaling, then np.rint); beyond the largest finite value: NaN, inf or the largest."""
    mbits, bias, top, nan_bits, has_inf = _F8[decl]
    x32 = np.atleast_1d(np.ascontiguousarray(x, dtype=np.float32))
    u = x32.view(np.uint32).astype(np.int64)
    sign, a = (u >> 24) & 0x80, u & 0x7FFFFFFF
    shift = 23 - mbits
    normal = ((a + (1 << (shift - 1)) - 1 + ((a >> shift) & 1)) >> shift) - ((127 - bias) << mbits)
    small = a < (128 - bias) << 23
    sub = np.rint(np.where(small, np.abs(x32), 0) * np.float32(2.0 ** (bias - 1 + mbits))).astype(np.int64)
    mag = np.where(small, sub, normal)
    over = mag > top
    mag = np.where(over, top if saturate else (0x7C if has_inf else nan_bits), mag)
    out = np.where(a > 0x7F800000, nan_bits, sign | mag)
    return out.astype(np.uint8)


def fp8_values(b: np.ndarray, decl: str = "f8e4m3") -> np.ndarray:
    """8-bit float bit patterns (uint8, or ml_dtypes' float8 type of `decl`) -> float32
    values, exactly; a NaN pattern gives the quiet NaN of its sign (0x7FC00000 or
    0xFFC00000).  Uses ml_dtypes where installed, with the same result bit for bit."""
    b = np.asarray(b)
    if b.dtype != np.uint8:
        return np.asarray(b, dtype=np.float32)
    t = _ml(ML_NAME[decl])
    if t is None:
        return _fp8_values_numpy(b, decl)
    return b.view(t).astype(np.float32)


def fp8_table(decl: str) -> np.ndarray:
    """The float32 value of each of the 256 patterns of `decl`, from the format's fields:
    (−1)^s · 2^(e − bias) · (1 + m / 2^mbits) for e > 0, (−1)^s · 2^(1 − bias) · m / 2^mbits
    for e = 0, and the NaN and inf patterns."""
    mbits, bias, top, nan_bits, has_inf = _F8[decl]
    p = np.arange(256)
    s, e, m = p >> 7, (p >> mbits) & (0x7F >> mbits), p & ((1 << mbits) - 1)
    mag = np.where(e > 0, np.ldexp(1.0 + m / 2.0 ** mbits, e - bias), np.ldexp(m / 2.0 ** mbits, 1 - bias))
    mag = np.where((p & 0x7F) > top, np.inf if has_inf else np.nan, mag)
    mag = np.where(has_inf & ((p & 0x7F) > 0x7C), np.nan, mag)
    vals = np.where(s == 1, -mag, mag).astype(np.float32)
    u = vals.view(np.uint32)
    u[np.isnan(vals)] = np.where(s[np.isnan(vals)] == 1, 0xFFC00000, 0x7FC00000)
    return vals


_TABLES: dict = {}


def _fp8_values_numpy(b: np.ndarray, decl: str) -> np.ndarray:
    """fp8_values without ml_dtypes: a lookup in the table of the 256 values."""
    if decl not in _TABLES:
        _TABLES[decl] = fp8_table(decl)
    return _TABLES[decl][b]


def as_float64(decl: str, a) -> np.ndarray:
    """The values an input (or an output of that storage) holds, as float64 (for the
    reference interpreter and the check)."""
    a = np.asarray(a)
    if decl == "bf16":
        return bf16_values(a).astype(np.float64)
    if decl in FP8:
        return fp8_values(a, decl).astype(np.float64)
    return a.astype(np.float64)


def random(decl: str, rng: np.random.Generator, shape: tuple) -> np.ndarray:
    """Standard-normal values in the storage of `decl` (i8: rounded to integers in
    [-128, 127], standard deviation 32)."""
    x = rng.standard_normal(shape)
    if decl == "bf16":
        return bf16_bits(x)
    if decl in FP8:
        return fp8_bits(x, decl)
    if decl == "i8":
        return np.clip(np.rint(32 * x), -128, 127).astype(np.int8)
    return x.astype(NUMPY[decl])
