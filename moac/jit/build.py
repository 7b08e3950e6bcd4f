"""C source -> loaded kernel (stage 6: `build`).

gcc runs without a shell; libraries live in a content-hashed cache (key = C source
+ compiler argv + compiler version + moac version) and are named by the key, so a
changed kernel never reuses a stale dlopen handle.  A library is built into a
temporary file and renamed into place, which makes concurrent builds of the same
key safe.  moac.jit.kernel loads it.
"""
from __future__ import annotations

import functools
import hashlib
import os
import shlex
import shutil
import subprocess
import tempfile
from pathlib import Path

from ..cache import cache_dir, write_atomic
from ..errors import BuildError
from ..timing import note, stage
from ..targets import flags as target_flags
from ..targets import get_target
from .kernel import Kernel

BASE_FLAGS = ("-O3", "-std=gnu11", "-fPIC", "-shared")


@functools.cache
def compiler_version(cc: str) -> str:
    try:
        r = subprocess.run([cc, "--version"], capture_output=True, text=True, check=False)
    except OSError as e:
        raise BuildError(f"cannot run the C compiler {cc!r}: {e.strerror}", [cc, "--version"], "", "") from None
    return r.stdout.splitlines()[0] if r.stdout else cc


def compile_flags(target: str, offload: str = "none", werror: bool = False, native: bool = False) -> list[str]:
    """The gcc flags for a target: the common ones and the target's own (a device build
    for `offload` takes the target's complete offload flag list); `native` adds the
    target's flags for this machine's CPU to a host build (in-process builds only)."""
    base = get_target(target).base_flags
    flags = target_flags(target, offload) if offload != "none" else list(base) + target_flags(target)
    if native and offload == "none":
        flags += list(get_target(target).native_flags)
    if werror:
        flags += list(get_target(target).werror_flags)
    return flags


@functools.cache
def native_arch(cc: str) -> str:
    """What -march=native means for `cc` on this machine (part of the cache key, so a cache
    shared between machines never hands one CPU's build to another)."""
    try:
        r = subprocess.run([cc, "-march=native", "-Q", "--help=target"], capture_output=True, text=True, check=False)
    except OSError:
        return "unknown"
    return " ".join(ln.split()[-1] for ln in r.stdout.splitlines() if ln.strip().startswith(("-march=", "-mtune=")))


def _digest(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


def _verified(lib: Path) -> bool:
    """The library in the cache is the one built: its content hash is the one recorded
    beside it (a truncated or edited library is rebuilt, never loaded: a truncated one
    would crash the process with SIGBUS when mapped)."""
    sums = lib.with_suffix(".sha256")
    try:
        want = sums.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return False
    return bool(want) and _digest(lib) == want


def build_library(c_source: str, flags: list[str], cc: str = "gcc") -> Path:
    """Compile C source into a shared library in the cache; return its path.  The
    compiler reads a fresh copy of the source (an edited file in the cache is never
    built), and a cached library is used only if its content hash checks out."""
    from ..version import __version__
    argv_tail = list(flags) + ["-lm"]
    native = native_arch(cc) if "-march=native" in flags else ""
    key = hashlib.sha256("\0".join([c_source, " ".join([cc] + argv_tail), compiler_version(cc),
                                    __version__] + ([native] if native else [])).encode()).hexdigest()[:24]
    root = cache_dir()
    lib = root / f"moac_{key}.so"
    if lib.exists() and _verified(lib):
        note(f"library from the cache: {lib}")
        return lib
    c_file = root / f"moac_{key}.c"
    try:
        same = c_file.read_text(encoding="utf-8") == c_source
    except (OSError, UnicodeDecodeError):
        same = False
    try:
        if not same:
            write_atomic(c_file, c_source)
        fd, tmp = tempfile.mkstemp(prefix=f".moac_{key}.", suffix=".so", dir=root)
    except OSError as e:
        raise type(e)(e.errno, f"cannot write to the cache directory (MOAC_CACHE_DIR): {e.strerror}",
                      str(root)) from None
    os.close(fd)
    argv = [cc] + list(flags) + ["-o", tmp, str(c_file), "-lm"]
    note(shlex.join(argv))
    for attempt in (1, 2):
        try:
            with stage(f"build ({Path(cc).name})"):
                r = subprocess.run(argv, capture_output=True, text=True, check=False)
        except OSError as e:
            Path(tmp).unlink(missing_ok=True)
            raise BuildError(f"cannot run the C compiler {cc!r}: {e.strerror}", argv, "", str(c_file)) from None
        if r.returncode == 0 or attempt == 2 or c_file.exists():
            break
        write_atomic(c_file, c_source)      # removed under the compiler (cache clear spares young sources): again
    digest = _digest(Path(tmp)) if r.returncode == 0 else None
    if digest is None:
        Path(tmp).unlink(missing_ok=True)
        raise BuildError(f"the C compiler failed (exit {r.returncode})" if r.returncode else
                         "the built library was removed before it could be stored", argv, r.stderr, str(c_file))
    write_atomic(lib.with_suffix(".sha256"), digest + "\n")
    os.replace(tmp, lib)
    return lib


def build(art, cc: str | None = None, werror: bool = False, extra_flags: tuple = (),
          native: bool | None = None) -> Kernel:
    """Build the C source of a lowering (moac.driver.Artifacts) and load it (`cc`: the
    compiler; None is the target's, gcc or nvcc; `native`: the target's flags for this
    machine's CPU, as a library built and loaded in this process can use them; None:
    on unless the environment sets MOAC_NATIVE=0)."""
    if native is None:
        native = os.environ.get("MOAC_NATIVE", "1") != "0"
    compiler = get_target(art.options.target).compiler
    # CC names the C compiler of targets built with gcc (not nvcc's); MOAC_CFLAGS adds flags
    cc = cc or (os.environ.get("CC") if compiler == "gcc" else None) or compiler
    extra_flags = tuple(extra_flags) + tuple(shlex.split(os.environ.get("MOAC_CFLAGS", "")))
    if shutil.which(cc) is None and not os.path.exists(cc):
        raise BuildError(f"C compiler {cc!r} not found", [cc], "", "")
    flags = compile_flags(art.options.target, werror=werror, native=native) + list(extra_flags)
    aligned = tuple(p.name for p in art.signature.params if p.cname in art.cunit.aligned)
    for attempt in (1, 2):
        lib = build_library(art.c_source, flags, cc)
        try:
            return Kernel(art.onf, art.c_source, lib, art.signature, flags, aligned)
        except OSError:
            if lib.exists():
                raise
            if attempt == 2:                # the cache was cleared between the build and the load, twice
                raise BuildError(f"the library {lib.name} was removed from the cache before it could be loaded "
                                 "(a `moac cache clear` during the build?); build again", [], "", "") from None
