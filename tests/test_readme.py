"""The README's two set-up commands stay as CI runs them."""

from __future__ import annotations

import os
import re
from pathlib import Path

ROOT = os.path.join(os.path.dirname(__file__), os.pardir)


def _setup_commands() -> list[str]:
    text = Path(ROOT, "README.md").read_text()
    section = text.split("## Set up on a fresh machine", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```bash\n(.*?)\n```", section, flags=re.S)


def test_readme_has_exactly_two_setup_commands():
    commands = _setup_commands()
    assert len(commands) == 2
    assert all("\n" not in c for c in commands)
    assert "resume_demo.py" in commands[0] and "pip install -e ." in commands[0]
    assert "pytest" in commands[1]


def test_ci_runs_the_readme_test_command():
    ci = Path(ROOT, ".ci", "run").read_text().splitlines()
    assert _setup_commands()[1] in ci
