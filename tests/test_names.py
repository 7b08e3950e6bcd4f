"""Every name the package uses is defined: pyflakes over moac/ and bench/, its undefined
names only (a NameError on a path the other tests do not take, as a57d311 left in the fast
call path of moac.gpu, which runs only on CUDA tensors)."""
from __future__ import annotations

from pathlib import Path

import pytest

from test_back_common import ROOT

pyflakes = pytest.importorskip("pyflakes.api", reason="pyflakes (the test extra) is not installed")
from pyflakes import messages, reporter  # noqa: E402

UNDEFINED = (messages.UndefinedName, messages.UndefinedLocal, messages.UndefinedExport)


class _Collect(reporter.Reporter):
    def __init__(self):
        self.found = []

    def flake(self, message):
        if isinstance(message, UNDEFINED):
            self.found.append(f"{message.filename}:{message.lineno}: {message.message % message.message_args}")

    def syntaxError(self, filename, msg, lineno, offset, text):
        self.found.append(f"{filename}:{lineno}: {msg}")

    def unexpectedError(self, filename, msg):
        self.found.append(f"{filename}: {msg}")


@pytest.mark.parametrize("folder", ["moac", "bench"])
def test_no_undefined_names(folder):
    out = _Collect()
    for path in sorted((ROOT / folder).rglob("*.py")):
        pyflakes.check(path.read_text(encoding="utf-8"), str(path.relative_to(ROOT)), out)
    assert out.found == []
