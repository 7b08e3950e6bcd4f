"""openmp kernels built without -fassociative-math and -fno-signed-zeros (IEEE for inf/NaN)."""
FLAGS = ["-fno-associative-math", "-fsigned-zeros"]


def edit(c_source: str) -> str:
    return c_source
