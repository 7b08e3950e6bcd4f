"""Packaging: the examples index and `moac examples`, the package data a wheel carries
(examples, grammar, templates, py.typed, the licence), and the extras."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

from moac import cli, examples_index

from test_back_common import EXAMPLE_NAMES, EXAMPLES, ROOT, moac_cli

PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def test_index_lists_every_example_file():
    assert EXAMPLE_NAMES                                   # the checkout has examples at all
    assert examples_index.names() == sorted(p.stem for p in EXAMPLES.glob("*.moa"))
    for name in EXAMPLE_NAMES:
        assert examples_index.path(name) == (EXAMPLES / f"{name}.moa").resolve()
    assert examples_index.path("decode.moa") == examples_index.path("decode")


def test_listing_gives_each_name_and_its_first_comment_line(capsys):
    assert cli.main(["examples"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [ln.split()[0] for ln in lines] == list(EXAMPLE_NAMES)
    by_name = {ln.split()[0]: ln.split(None, 1)[1] for ln in lines}
    assert by_name["decode"] == "One decode step of single-head attention: the current query q against a"
    for name in EXAMPLE_NAMES:
        first = next(ln for ln in (EXAMPLES / f"{name}.moa").read_text(encoding="utf-8").splitlines()
                     if ln.startswith("--"))
        assert by_name[name] == first[2:].strip()


@pytest.mark.parametrize("name", EXAMPLE_NAMES)
def test_examples_name_prints_the_file(name, capsys):
    assert cli.main(["examples", name]) == 0
    out, err = capsys.readouterr()
    assert out == (EXAMPLES / f"{name}.moa").read_text(encoding="utf-8") and err == ""


def test_examples_path(capsys):
    assert cli.main(["examples", "matmul", "--path"]) == 0
    assert Path(capsys.readouterr().out.strip()) == (EXAMPLES / "matmul.moa").resolve()
    assert cli.main(["examples", "--path"]) == 0
    assert Path(capsys.readouterr().out.strip()) == EXAMPLES.resolve()


def test_unknown_example_is_a_usage_error():
    r = moac_cli("examples", "no_such_example")
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.startswith("moac: error: no example named 'no_such_example'; the examples are: ")
    assert r.stderr.strip().split(": ")[-1].split(", ") == list(EXAMPLE_NAMES)
    with pytest.raises(LookupError, match="no example named 'nope'"):
        examples_index.path("nope")


def test_py_typed_marker_is_package_data():
    assert (ROOT / "moac" / "py.typed").is_file()
    assert "py.typed" in PYPROJECT["tool"]["setuptools"]["package-data"]["moac"]


def test_extras():
    from packaging.requirements import Requirement
    extras = PYPROJECT["project"]["optional-dependencies"]
    (torch,) = [Requirement(r) for r in extras["torch"]]
    ops = {s.operator for s in torch.specifier}
    assert torch.name == "torch" and "==" not in ops and "===" not in ops
    assert ops >= {">=", "<"}                              # a range with both ends
    assert torch.specifier.contains("2.13.0") and torch.specifier.contains("2.13.0+cpu")   # what CI installs
    assert not torch.specifier.contains("2.4.0")           # the tests use SDPA's enable_gqa (2.5)
    try:
        from importlib.metadata import version
        installed = version("torch")
    except Exception:                                      # noqa: BLE001 - torch is optional
        installed = None
    if installed is not None:
        assert torch.specifier.contains(installed), installed
    assert [Requirement(r).name for r in extras["fast"]] == ["ml_dtypes"]
    assert [Requirement(r).name for r in extras["plot"]] == ["matplotlib"]


def _setuptools_version() -> tuple:
    try:
        from importlib.metadata import version
        return tuple(int(p) for p in version("setuptools").split(".")[:2])
    except Exception:                                      # noqa: BLE001 - not installed, odd version
        return (0,)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """A wheel built from a copy of the checkout (the build leaves no files in the tree),
    with the setuptools installed here: no build isolation, no index."""
    if _setuptools_version() < (77,):
        pytest.skip("needs setuptools >= 77 (the test extra) to build the wheel")
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    src.mkdir()
    for f in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / f, src / f)
    for d in ("moac", "grammar", "templates", "examples"):
        shutil.copytree(ROOT / d, src / d, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
                        "-q", "-w", str(tmp / "dist"), str(src)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    (whl,) = (tmp / "dist").glob("moac-*.whl")
    return whl


def test_wheel_carries_the_package_data(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    for name in EXAMPLE_NAMES:
        assert f"moac/examples/{name}.moa" in names
    assert {"moac/py.typed", "moac/prelude.moa", "moac/grammar/moa.lark", "moac/examples_index.py"} <= names
    assert {f"moac/templates/{p.name}" for p in (ROOT / "templates").glob("*.j2")} <= names
    info = next(n.split("/")[0] for n in names if n.endswith(".dist-info/METADATA"))
    assert f"{info}/licenses/LICENSE" in names
    meta = zipfile.ZipFile(wheel).read(f"{info}/METADATA").decode()
    assert "License-Expression: MIT" in meta
    assert "Provides-Extra: fast" in meta and "Provides-Extra: plot" in meta


def test_examples_from_the_unpacked_wheel(wheel, tmp_path):
    """The wheel's moac, outside the checkout: the examples come from the package."""
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    env = dict(os.environ, PYTHONPATH=str(site))
    work = tmp_path / "work"
    work.mkdir()

    def moac(*args):
        return subprocess.run([sys.executable, "-m", "moac", *args], cwd=work, env=env, capture_output=True,
                              text=True, timeout=120)
    r = moac("examples", "--path")
    assert r.returncode == 0 and Path(r.stdout.strip()) == site / "moac" / "examples", r.stderr
    r = moac("examples")
    assert r.returncode == 0 and [ln.split()[0] for ln in r.stdout.splitlines()] == list(EXAMPLE_NAMES)
    r = moac("examples", "decode")
    assert r.returncode == 0 and r.stdout == (EXAMPLES / "decode.moa").read_text(encoding="utf-8")
    r = moac("compile", str(site / "moac" / "examples" / "decode.moa"), "--target", "c", "-D", "dk=8", "-D", "dv=8")
    assert r.returncode == 0 and "moac_decode(" in r.stdout, r.stderr
