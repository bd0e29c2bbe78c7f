"""Each ``# type: ignore`` in the package names its error code and says why on its line.

mypy checks the package in the test command (``pyproject.toml``, ``[tool.mypy]``, with
``warn_unused_ignores``); this keeps its few exceptions explained where they are.
"""

from __future__ import annotations

import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "curator_dask"
IGNORE = re.compile(r"#\s*type:\s*ignore(?P<code>\[[a-z-, ]+\])?(?P<rest>.*)$")


def unexplained(text: str) -> list[int]:
    """The line numbers whose ignore has no error code or no reason after it.

    Example:
        >>> unexplained("x = 1  # type: ignore[misc]  # why\\ny = 2  # type: ignore\\n")
        [2]
    """
    found = []
    for number, line in enumerate(text.splitlines(), start=1):
        match = IGNORE.search(line)
        if match and (not match.group("code") or not match.group("rest").strip(" #")):
            found.append(number)
    return found


def test_every_type_ignore_has_a_code_and_a_reason() -> None:
    missing = [f"{path.relative_to(PACKAGE.parent)}:{n}" for path in sorted(PACKAGE.rglob("*.py"))
               for n in unexplained(path.read_text())]
    assert not missing, f"a type: ignore without its code and reason: {missing}"
