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

from ..errors import BuildError
from ..targets import flags as target_flags
from ..targets import get_target
from .kernel import Kernel

BASE_FLAGS = ("-O3", "-std=gnu11", "-fPIC", "-shared")


def cache_dir() -> Path:
    root = os.environ.get("MOAC_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "moac")
    p = Path(root)
    p.mkdir(parents=True, exist_ok=True)
    return p


def _entries(root: Path) -> list:
    """The files moac made in a cache directory (never anything else that lives there)."""
    return [p for p in root.iterdir() if p.is_file() and (p.name.startswith("moac_") or p.name.startswith(".moac_"))
            and p.suffix in (".so", ".c", ".sha256")]


def cache_info() -> str:
    root = cache_dir()
    files = _entries(root)
    libs = [p for p in files if p.suffix == ".so" and not p.name.startswith(".")]
    size = sum(p.stat().st_size for p in files)
    return f"cache {root}: {len(libs)} libraries, {len(files)} files, {size / 2**20:.1f} MiB"


def cache_clear() -> str:
    """Remove the libraries and sources moac built (a library loaded in a running process
    stays valid: the file is unlinked, not overwritten)."""
    root = cache_dir()
    files = _entries(root)
    for p in files:
        p.unlink(missing_ok=True)
    return f"cache {root}: removed {len(files)} files"


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


def write_atomic(path: str | Path, text: str | bytes) -> None:
    """Write a file so that a reader never sees it half-written: a temporary file renamed
    over it.  A path that exists and is not a regular file (/dev/null, a FIFO, a terminal)
    is written through, never replaced; a directory is refused.  Text is written as UTF-8,
    bytes as they are."""
    path = Path(path)
    mode = {"mode": "wb"} if isinstance(text, bytes) else {"mode": "w", "encoding": "utf-8"}
    if path.is_dir():
        raise IsADirectoryError(21, "is a directory", str(path))
    if path.exists() and not path.is_file():
        with open(path, **mode) as f:
            f.write(text)
        return
    if not (path.parent if str(path.parent) else Path(".")).is_dir():
        raise FileNotFoundError(2, "no such directory", str(path.parent))
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent or ".")
    try:
        with os.fdopen(fd, **mode) as f:
            f.write(text)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


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
        return lib
    c_file = root / f"moac_{key}.c"
    try:
        same = c_file.read_text(encoding="utf-8") == c_source
    except (OSError, UnicodeDecodeError):
        same = False
    if not same:
        write_atomic(c_file, c_source)
    fd, tmp = tempfile.mkstemp(prefix=f".moac_{key}.", suffix=".so", dir=root)
    os.close(fd)
    argv = [cc] + list(flags) + ["-o", tmp, str(c_file), "-lm"]
    try:
        r = subprocess.run(argv, capture_output=True, text=True, check=False)
    except OSError as e:
        Path(tmp).unlink(missing_ok=True)
        raise BuildError(f"cannot run the C compiler {cc!r}: {e.strerror}", argv, "", str(c_file)) from None
    if r.returncode != 0:
        Path(tmp).unlink(missing_ok=True)
        raise BuildError(f"the C compiler failed (exit {r.returncode})", argv, r.stderr, str(c_file))
    write_atomic(lib.with_suffix(".sha256"), _digest(Path(tmp)) + "\n")
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
    lib = build_library(art.c_source, flags, cc)
    aligned = tuple(p.name for p in art.signature.params if p.cname in art.cunit.aligned)
    return Kernel(art.onf, art.c_source, lib, art.signature, flags, aligned)
