"""C with OpenACC (gcc -fopenacc): gang/vector/seq loops, kernels on device pointers,
a host entry with one data region.  GCC 12 makes vector reductions warp shuffles only at
vector_length(32) (../docs/gpu.md)."""
from .base import Target

VECTOR_LENGTH = 32

TARGET = Target(
    name="openacc",
    description="C with OpenACC pragmas (gcc -fopenacc; runs on the host without a GPU)",
    cflags=("-fopenacc",),
    gang=f"#pragma acc parallel loop gang{{collapse}} vector_length({VECTOR_LENGTH}) {{clauses}}",
    vector="#pragma acc loop vector",
    vector_reduce="#pragma acc loop vector reduction({op}:{vars})",
    seq="#pragma acc loop seq",
    serial=f"#pragma acc parallel num_gangs(1) vector_length({VECTOR_LENGTH}) {{clauses}}",
    data_clause="deviceptr",
    device_entry=True,
    helper_prefix="#pragma acc routine seq",
    model_macro="_OPENACC",
    header="openacc.h",
    device_malloc="acc_malloc",
    device_free="acc_free",
    on_device="acc_get_device_type() != acc_device_host",
    copy_to_device="acc_memcpy_to_device",
    copy_from_device="acc_memcpy_from_device",
    # with the nvptx offload compiler installed, plain -fopenacc would also build (and
    # fail) for sm_35: host builds disable offloading explicitly
    host_only_flags=("-foffload=disable",),
    offload={"nvptx": ("-O3", "-std=gnu11", "-fPIC", "-shared", "-ffast-math", "-fopenacc",
                       "-foffload=nvptx-none", "-foffload-options=nvptx-none=-misa=sm_80",
                       "-foffload-options=-lm")},
    vector_length=VECTOR_LENGTH,
    runtime_libs=("libgomp.so.1", "libgomp-plugin-nvptx.so.1"),
)
