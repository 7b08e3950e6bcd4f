"""Targets as data: the pragmas and compiler flags of each code generation target.

The ONF says which loop runs at which hardware level (gang, vector, seq, serial);
a Target turns that into pragma text.  Codegen never tests the target's name.
"""
from __future__ import annotations

from dataclasses import dataclass

VECTOR_LENGTH = 32   # GCC 12 OpenACC: vector reductions are warp shuffles only at 32 lanes


@dataclass(frozen=True, slots=True)
class Target:
    name: str
    description: str
    cflags: tuple            # flags that select the programming model
    gang: str | None         # outer parallel loop; {collapse} {clauses}
    vector: str | None       # inner lane loop
    vector_reduce: str | None  # inner lane loop with a reduction; {op} {var}
    seq: str | None
    serial: str | None       # a single-threaded region; {clauses}
    device_entry: bool       # the kernels take device pointers; a host entry moves the data

    def data_pragma(self, copyin: list, copy: list, copyout: list) -> str:
        """The data region of the host entry: each array moved once."""
        parts = [f"{clause}({', '.join(xs)})" for clause, xs in
                 (("copyin", copyin), ("copy", copy), ("copyout", copyout)) if xs]
        return " ".join(["#pragma acc data"] + parts)

    def host_data_pragma(self, pointers: list) -> str:
        """Inside the data region: the device addresses of the host arrays."""
        return f"#pragma acc host_data use_device({', '.join(pointers)})"

    def gang_pragma(self, collapse: int, clauses: str) -> str | None:
        if self.gang is None:
            return None
        col = f" collapse({collapse})" if collapse > 1 else ""
        return self.gang.format(collapse=col, clauses=clauses).rstrip()

    def vector_pragma(self, reduction: tuple | None = None) -> str | None:
        if reduction is None:
            return self.vector
        if self.vector_reduce is None:
            return None
        op, var = reduction
        return self.vector_reduce.format(op=_RED_OP[op], var=var)

    def serial_pragma(self, clauses: str) -> str | None:
        return None if self.serial is None else self.serial.format(clauses=clauses).rstrip()


_RED_OP = {"add": "+", "mul": "*", "max": "max", "min": "min"}

TARGETS = {
    "openacc": Target(
        name="openacc",
        description="C with OpenACC pragmas (gcc -fopenacc; runs on the host without a GPU)",
        cflags=("-fopenacc",),
        gang=f"#pragma acc parallel loop gang{{collapse}} vector_length({VECTOR_LENGTH}) {{clauses}}",
        vector="#pragma acc loop vector",
        vector_reduce="#pragma acc loop vector reduction({op}:{var})",
        seq="#pragma acc loop seq",
        serial=f"#pragma acc parallel num_gangs(1) vector_length({VECTOR_LENGTH}) {{clauses}}",
        device_entry=True,
    ),
    "openmp": Target(
        name="openmp",
        description="C with OpenMP pragmas for CPU multicore (gcc -fopenmp)",
        cflags=("-fopenmp",),
        gang="#pragma omp parallel for{collapse} schedule(static)",
        vector=None,
        vector_reduce=None,
        seq=None,
        serial=None,
        device_entry=False,
    ),
    "c": Target(
        name="c",
        description="sequential C (the reference for bit-for-bit comparisons)",
        cflags=(),
        gang=None, vector=None, vector_reduce=None, seq=None, serial=None,
        device_entry=False,
    ),
}


def get_target(name: str) -> Target:
    try:
        return TARGETS[name]
    except KeyError:
        raise ValueError(f"unknown target {name!r}; choose one of {', '.join(TARGETS)}") from None
