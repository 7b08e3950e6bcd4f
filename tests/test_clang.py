"""The C moac writes is clean under clang's -Wall -Werror, not only GCC's: clang warns of an
unused static inline function in a .c file (GCC does not), so a file defines only the
helpers it calls; and of a `#pragma omp simd` loop it cannot vectorise, which the openmp
target's files silence under clang.  The first test needs no clang; the second runs where
one is installed (`clang`, or the ziglang package's `zig cc`)."""
import re
import shutil
import subprocess
import sys

import pytest

from moac.emit.codegen import used_helpers
from test_back_common import EXAMPLE_NAMES, example

DEFINES = re.compile(r"^static\b[^(=;{]*?\b(\w+)\(", re.M)


@pytest.mark.parametrize("target", ["c", "openmp", "openacc"])
def test_every_helper_a_file_defines_is_called(target):
    for name in EXAMPLE_NAMES:
        text = example(name).c_source(target=target)
        for fn in DEFINES.findall(text):
            assert len(re.findall(rf"\b{fn}\b", text)) >= 2, f"{name} [{target}] defines {fn} and never calls it"


def test_used_helpers_follows_calls_between_helpers():
    helpers = ("static inline int f(int a) { return a; }",
               "static inline int g(int a) { return f(a) + 1; }",
               "static inline int h(int a) { return a * 2; }",
               "/* a declaration */\nfloat exp2f(float);")
    assert used_helpers(helpers, "int main(void) { return g(1); }") == helpers[:2] + helpers[3:]
    assert used_helpers(helpers, "int main(void) { return 0; }") == helpers[3:]


def _clang() -> list | None:
    if shutil.which("clang"):
        return ["clang"]
    try:
        import ziglang  # noqa: F401
    except ImportError:
        return None
    return [sys.executable, "-m", "ziglang", "cc"]


@pytest.mark.skipif(_clang() is None, reason="no clang (nor the ziglang package)")
@pytest.mark.parametrize("target", ["c", "openmp"])
def test_clang_compiles_every_example_with_wall_werror(target, tmp_path):
    flags = ["-fopenmp", "-fno-math-errno", "-fno-trapping-math", "-fassociative-math", "-fno-signed-zeros"] \
        if target == "openmp" else []
    for name in EXAMPLE_NAMES:
        src = tmp_path / f"{name}.c"
        src.write_text(example(name).c_source(target=target))
        r = subprocess.run([*_clang(), "-O2", "-std=gnu11", "-fPIC", "-Wall", "-Werror", *flags, "-c", str(src),
                            "-o", str(tmp_path / f"{name}.o")], capture_output=True, text=True)
        assert r.returncode == 0, f"{name} [{target}]:\n{r.stderr[-2000:]}"
