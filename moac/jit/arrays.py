"""The arrays a kernel call takes and gives: numpy views of numpy arrays, CPU torch tensors
and DLPack objects (no copies), and results back as torch tensors."""
from __future__ import annotations

import numpy as np

from .. import dtypes
from ..errors import ArgumentError

NP_DTYPE = {"float": np.float32, "double": np.float64}


def _np_dtype(p) -> np.dtype:
    """The numpy dtype of an array parameter: its storage dtype's (bf16 as uint16 bit
    patterns, f16 as float16), for a signature without them its C type's."""
    return np.dtype(dtypes.NUMPY[p.dtype] if p.dtype else NP_DTYPE[p.ctype])


def _as_torch(v: np.ndarray, dtype: str):
    """A numpy result as a torch tensor sharing its memory: bf16 and the 8-bit floats as
    torch's own dtypes (their bit patterns viewed), the others as they are."""
    import torch
    if dtype == "bf16":
        return torch.from_numpy(v.view(np.int16)).view(torch.bfloat16)
    if dtype in ("f8e4m3", "f8e5m2"):
        return torch.from_numpy(v).view({"f8e4m3": torch.float8_e4m3fn, "f8e5m2": torch.float8_e5m2}[dtype])
    return torch.from_numpy(v)


def _is_torch(x) -> bool:
    return type(x).__module__.startswith("torch") and type(x).__name__ in ("Tensor", "Parameter")


def wrong_dtype(what: str, declared: str, got) -> ArgumentError:
    """The error for an array of another dtype than its declaration's (`what`: "input 'x'"
    or "out['y']"), as a kernel call and `evaluate` say it."""
    return ArgumentError(f"{what} must have dtype {dtypes.describe(declared)} (declared {declared}), got {got}")


_TORCH_BITS = {"bfloat16": "bf16", "float8_e4m3fn": "f8e4m3", "float8_e5m2": "f8e5m2"}   # read as bit patterns


def as_array(name: str, x, declared: str | None = None, out: bool = False):
    """A numpy view of an argument, no copy: numpy arrays as they are, CPU torch tensors
    (bf16 and float8 as their bit patterns), anything else with __dlpack__ through numpy.
    (array, is_torch).  A tensor whose bit patterns are taken is refused here unless it is
    the `declared` dtype (where given): as bits, float8_e5m2 and float8_e4m3fn look alike.
    `out`: the argument is an out= array (so the messages say)."""
    what = f"out['{name}']" if out else f"input '{name}'"
    if isinstance(x, np.ndarray):
        return x, False
    if isinstance(x, np.generic):       # a numpy scalar (np.float32(2.5)) for a rank-0 input: its 0-d array
        return np.asarray(x), False
    if _is_torch(x):
        import torch
        if x.device.type != "cpu":
            raise ArgumentError(f"{what} is a {x.device.type} tensor: a host kernel takes CPU tensors "
                                "(GPU tensors go through the device entry of a GPU bundle, docs/gpu.md)")
        t = x.detach()
        bits = _TORCH_BITS.get(str(t.dtype).removeprefix("torch."))
        if declared is not None and bits is not None and bits != declared:
            raise wrong_dtype(what, declared, t.dtype)
        if t.dtype == torch.bfloat16:
            return t.view(torch.int16).numpy().view(np.uint16), True
        if t.dtype in (getattr(torch, "float8_e4m3fn", None), getattr(torch, "float8_e5m2", None)):
            return t.view(torch.uint8).numpy(), True          # the bit patterns, as f8e4m3 / f8e5m2 take them
        try:
            return t.numpy(), True
        except TypeError as e:
            raise ArgumentError(f"{what}: {e}") from None
    if hasattr(x, "__dlpack__"):
        try:
            return np.from_dlpack(x), False
        except (TypeError, RuntimeError, BufferError) as e:
            raise ArgumentError(f"{what}: cannot be read through DLPack ({e})") from None
    return x, False
