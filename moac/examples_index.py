"""The example programs that ship with moac (the repository's examples/ folder, installed
as the data package moac.examples), and the `moac examples` subcommand.

    >>> import moac
    >>> from moac import examples_index
    >>> "decode" in examples_index.names()
    True
    >>> prog = moac.load(examples_index.path("decode"))
"""
from __future__ import annotations

import sys
from importlib import resources
from pathlib import Path


def folder() -> Path:
    """The folder of the examples: inside the installed package, or the examples/ folder
    beside moac/ in a checkout (where moac.examples is not a package)."""
    checkout = Path(__file__).resolve().parent.parent / "examples"
    try:
        root = resources.files("moac.examples")
    except ModuleNotFoundError:
        return checkout
    if isinstance(root, Path):
        return root
    for entry in root.iterdir():    # a folder without __init__.py: a namespace over its one folder
        return Path(entry).parent
    return checkout


def _files() -> dict[str, Path]:
    """Example name (the file's stem) -> its path."""
    return {p.stem: p for p in folder().glob("*.moa") if p.is_file()}


def names() -> list[str]:
    """The names of the examples, sorted (`decode` for decode.moa)."""
    return sorted(_files())


def path(name: str) -> Path:
    """The source file of an example, by name (a trailing `.moa` is allowed).  An unknown
    name is a LookupError whose message lists the names."""
    files = _files()
    key = name[:-4] if name.endswith(".moa") else name
    if key not in files:
        raise LookupError(f"no example named {name!r}; the examples are: {', '.join(sorted(files))}")
    return files[key]


def description(name: str) -> str:
    """The text of an example's first comment line (`-- ...`), or '' if it has none."""
    for line in path(name).read_text(encoding="utf-8").splitlines():
        if line.lstrip().startswith("--"):
            return line.lstrip()[2:].strip()
    return ""


def command(name: str | None, show_path: bool = False) -> int:
    """`moac examples [NAME] [--path]`: without a name, one line per example (its name and
    first comment line) or, with --path, their folder; with one, the example's source or,
    with --path, its path.  Exit status 2 for an unknown name."""
    if name is None:
        if show_path:
            print(folder())
            return 0
        ns = names()
        width = max(map(len, ns), default=0)
        for n in ns:
            print(f"{n:<{width}}  {description(n)}".rstrip())
        return 0
    try:
        p = path(name)
    except LookupError as e:
        print(f"moac: error: {e.args[0]}", file=sys.stderr)
        return 2
    if show_path:
        print(p)
    else:
        sys.stdout.write(p.read_text(encoding="utf-8"))
    return 0
