"""moac's cache directory and what lives in it (light: no compiler stage is imported).

Three kinds of entry, all named `moac_*` or `.moac_*`, never anything else:
- built libraries (`moac_<hash>.so`, their `.c` and `.sha256`: moac.jit.build);
- the parser tables of the grammar (`moac_parser_<hash>.lark`: lark's own cache format,
  keyed by the grammar's hash, so an edited grammar never loads stale tables);
- the text of a finished command (`moac_out_<hash>.txt`): `moac compile`'s C for one
  source and one set of options, keyed by the source's bytes and name, the options and a
  fingerprint of moac's own files, so that a changed program, flag or moac never hits.
"""
from __future__ import annotations

import functools
import hashlib
import os
import stat
import tempfile
import time
from importlib import resources
from pathlib import Path

SUFFIXES = (".so", ".c", ".sha256", ".lark", ".txt")


def cache_dir() -> Path:
    """MOAC_CACHE_DIR, else $XDG_CACHE_HOME/moac or ~/.cache/moac; where the default cannot
    be written (a read-only home), a directory of this user's own in the temporary
    directory (`fallback_dir`).  A MOAC_CACHE_DIR that cannot be used is an error."""
    chosen = os.environ.get("MOAC_CACHE_DIR")
    root = chosen or os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "moac")
    p = Path(root)
    try:
        p.mkdir(parents=True, exist_ok=True)
        if not os.access(p, os.W_OK | os.X_OK):
            raise PermissionError(13, os.strerror(13), str(p))
    except OSError as e:                # an OSError of its own kind, naming the setting
        if not chosen:
            return fallback_dir(e)
        raise type(e)(e.errno, f"cannot use the cache directory (MOAC_CACHE_DIR, else ~/.cache/moac): "
                               f"{e.strerror}", str(p)) from None
    return p


def fallback_dir(why: OSError) -> Path:
    """<tmp>/moac-<uid>, made with mode 0700, used only if this user owns it and no one else
    may write it (a library there is loaded and run); else the default's error."""
    p = Path(tempfile.gettempdir()) / f"moac-{os.getuid()}"
    try:
        p.mkdir(mode=0o700, exist_ok=True)
        st = os.lstat(p)
    except OSError:
        st = None
    if st is None or not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o022:
        raise type(why)(why.errno, "cannot use the cache directory (MOAC_CACHE_DIR, else ~/.cache/moac): "
                                   f"{why.strerror}; nor {p}, which is not a directory of this user's that "
                                   "only it may write", why.filename) from None
    return p


BUSY = 3600     # seconds: a temporary file (.moac_*) younger than this may be a build in progress


def entries(root: Path, busy: bool = True) -> list:
    """The files moac made in a cache directory (never anything else that lives there);
    busy=False leaves out the files of builds that may still be running: temporary files,
    and a library's C source while the library is not there yet (gcc may be reading it)."""
    now = time.time()

    def running(p: Path) -> bool:
        young = now - _mtime(p) <= BUSY
        return young and (p.name.startswith(".") or p.suffix == ".c" and not p.with_suffix(".so").exists())
    return [p for p in root.iterdir() if p.is_file() and (p.name.startswith("moac_") and p.suffix in SUFFIXES
                                                          or p.name.startswith(".moac_"))   # temporary: any suffix
            and (busy or not running(p))]


def _mtime(p: Path) -> float:
    try:
        return p.stat().st_mtime
    except OSError:
        return 0.0


def cache_info() -> str:
    root = cache_dir()
    files = entries(root)
    libs = [p for p in files if p.suffix == ".so" and not p.name.startswith(".")]
    outs = [p for p in files if p.name.startswith("moac_out_")]
    tables = [p for p in files if p.name.startswith("moac_parser_")]
    size = sum(p.stat().st_size for p in files)
    return (f"cache {root}: {len(libs)} libraries, {len(outs)} compiled sources, {len(tables)} parser tables, "
            f"{len(files)} files, {size / 2**20:.1f} MiB")


def cache_clear() -> str:
    """Remove what moac put in its cache (libraries, their sources and hashes, parser tables,
    compiled sources; a library loaded in a running process stays valid: the file is
    unlinked, not overwritten), but not the files of builds that may still be running (a
    clear during builds deleted gcc's input and output under it)."""
    root = cache_dir()
    files = entries(root, busy=False)
    for p in files:
        p.unlink(missing_ok=True)
    return f"cache {root}: removed {len(files)} files"


@functools.cache
def fingerprint() -> str:
    """A hash of moac's own files (code, grammar, templates, prelude): any edit to moac, or
    another version of it, changes every key of the output cache."""
    h = hashlib.sha256()
    here = Path(__file__).resolve().parent
    for pkg, beside in (("moac", here), ("moac.grammar", here.parent / "grammar"),
                        ("moac.templates", here.parent / "templates")):
        try:                            # installed: the package's files; a checkout: the folders
            root = Path(str(resources.files(pkg)))
        except (ModuleNotFoundError, TypeError):
            root = beside
        h.update(pkg.encode() + b"\0")
        for path in sorted(_files(root), key=str):
            h.update(str(path.relative_to(root)).encode() + b"\0")
            h.update(path.read_bytes())
    return h.hexdigest()


def _files(root: Path):
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for f in filenames:
            if f.endswith((".py", ".lark", ".j2", ".moa")):
                yield Path(dirpath) / f


def _out_path(key: tuple) -> Path:
    h = hashlib.sha256(repr((fingerprint(),) + key).encode()).hexdigest()[:40]
    return cache_dir() / f"moac_out_{h}.txt"


def enabled() -> bool:
    return os.environ.get("MOAC_NO_CACHE", "") in ("", "0")


def get_text(key: tuple) -> str | None:
    """The cached text for this key, or None (no entry, caching off, unreadable, or not the
    text stored: its first line is the hash of the rest, so an emptied or truncated entry
    is a miss, never an empty or cut-off C file)."""
    if not enabled():
        return None
    try:
        head, _, text = _out_path(key).read_text(encoding="utf-8").partition("\n")
    except (OSError, UnicodeDecodeError):
        return None
    return text if head == "sha256 " + hashlib.sha256(text.encode()).hexdigest() else None


def put_text(key: tuple, text: str) -> None:
    """Store the text for this key (atomically; a cache that cannot be written is no error)."""
    if not enabled():
        return
    try:
        write_atomic(_out_path(key), "sha256 " + hashlib.sha256(text.encode()).hexdigest() + "\n" + text)
    except OSError:
        pass


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
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent or ".")
    except OSError as e:                # named by the file asked for, not the temporary one
        raise type(e)(e.errno, e.strerror, str(path)) from None
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
