"""C with OpenMP for CPU multicore: gangs become threads; lanes and seq loops are left to
the compiler."""
from .base import Target

TARGET = Target(
    name="openmp",
    description="C with OpenMP pragmas for CPU multicore (gcc -fopenmp)",
    cflags=("-fopenmp",),
    gang="#pragma omp parallel for{collapse} schedule(static)",
)
