"""The README's two set-up commands stay as CI runs them, and every code block of its "Use it"
section runs as written from where the first set-up command leaves a user (issue 20, item 3),
in the environment that command makes: a fresh virtual environment with the package and no
extra (issue 32, item 1: `dedup fuzzy` failed there for want of scipy, which the test command's
own environment, with NeMo Curator, had).

How the section runs: as a user types it into one terminal at the repository root, in order.
Bash blocks run in one bash process (a ``cd`` in one block holds for the next); consecutive
python blocks, prose between them allowed, are one python session (a notebook's cells: a later
one uses the names an earlier one made), fed to the ``python`` on ``PATH`` at that point, so
the README's own ``source .venv/bin/activate`` is what finds it. A block that must not run is
marked on the line above it, ``<!-- not run: why -->``; any other block that is not python or
bash fails the test, so no snippet is left out by accident.

Where it runs: a copy of the repository's files (tracked, and new ones git does not ignore)
in a temporary folder, where the first set-up command runs verbatim first (it makes ``.venv``
with ``pip install -e .``, generates ``examples/input`` and runs the demo). ``PATH`` loses this
interpreter's folder, so only the activation puts ``python`` there.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RUN_SECTIONS = ("Use it",)  # the README sections whose blocks run
RUNNABLE = ("python", "bash")
NOT_RUN = re.compile(r"<!--\s*not run:\s*(?P<why>\S.*?)\s*-->")
FENCE = re.compile(r"(?P<fence>`{3,})(?P<lang>[\w+-]*)\s*$")
HEREDOC = "README_PYTHON_SESSION"


class ReadmeBlockError(ValueError):
    """A block of a run section that is neither runnable nor marked, or a malformed marker."""


@dataclass(frozen=True)
class Block:
    """One fenced block: the line of its opening fence, its language, its code, and the reason
    of its ``<!-- not run: ... -->`` marker (``None`` when it runs)."""

    line: int
    lang: str
    code: str
    not_run: str | None = None


def _setup_commands() -> list[str]:
    text = Path(ROOT, "README.md").read_text()
    section = text.split("## Set up on a fresh machine", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```bash\n(.*?)\n```", section, flags=re.S)


def section_blocks(text: str, title: str) -> list[Block]:
    """The fenced blocks under ``## {title}`` (its subsections included), in order.

    Raises:
        ReadmeBlockError: the section is missing, a marker is not right above a block, a
            block is not closed, or a block is neither python, bash nor marked.
    """
    lines = text.splitlines()
    try:
        start = lines.index(f"## {title}")
    except ValueError:
        raise ReadmeBlockError(f"README.md has no section '## {title}'") from None
    blocks: list[Block] = []
    marker: tuple[int, str] | None = None
    i = start + 1
    while i < len(lines) and not lines[i].startswith("## "):
        line, fence = lines[i], FENCE.match(lines[i])
        found = NOT_RUN.fullmatch(line.strip())
        if marker is not None and fence is None:
            raise ReadmeBlockError(f"README.md:{marker[0]}: a '<!-- not run -->' marker must be "
                                   "on the line right above a fenced block")
        if found or line.strip().startswith("<!-- not run"):
            if not found:
                raise ReadmeBlockError(f"README.md:{i + 1}: write the reason: "
                                       "<!-- not run: why -->")
            marker = (i + 1, found["why"])
        elif fence is not None:
            end = next((j for j in range(i + 1, len(lines))
                        if lines[j].strip() == fence["fence"]), None)
            if end is None:
                raise ReadmeBlockError(f"README.md:{i + 1}: the block is not closed")
            block = Block(i + 1, fence["lang"], "\n".join(lines[i + 1:end]) + "\n",
                          marker[1] if marker else None)
            if block.not_run is None and block.lang not in RUNNABLE:
                raise ReadmeBlockError(
                    f"README.md:{block.line}: a {block.lang or 'plain'!r} block in '{title}' "
                    f"is neither run (only {', '.join(RUNNABLE)}) nor marked; put "
                    "'<!-- not run: why -->' on the line above it")
            blocks.append(block)
            marker, i = None, end
        i += 1
    return blocks


def terminal_script(blocks: list[Block]) -> str:
    """One bash script typing ``blocks`` into a terminal, each announced on stderr as
    ``README.md:<line>`` first (the last one printed is the one that failed)."""
    parts = ["set -e -o pipefail"]
    session: list[str] = []

    def close_session() -> None:
        if session:
            parts.append(f"python - <<'{HEREDOC}'\n{''.join(session)}{HEREDOC}")
            session.clear()

    for block in (b for b in blocks if b.not_run is None):
        if HEREDOC in block.code:
            raise ReadmeBlockError(f"README.md:{block.line}: the block holds {HEREDOC}")
        announce = f"README.md:{block.line} ({block.lang})"
        if block.lang == "python":
            session.append(f"__import__('sys').stderr.write({announce!r} + '\\n')\n"
                           + block.code)
        else:
            close_session()
            parts.append(f"echo {announce!r} >&2\n{block.code}")
    close_session()
    return "\n".join(parts) + "\n"


# -- the set-up commands --------------------------------------------------------------------


def test_readme_has_exactly_two_setup_commands():
    commands = _setup_commands()
    assert len(commands) == 2
    assert all("\n" not in c for c in commands)
    assert "resume_demo.py" in commands[0] and "pip install -e ." in commands[0]
    assert "pytest" in commands[1]


def test_ci_runs_the_readme_test_command():
    ci = Path(ROOT, ".ci", "run").read_text().splitlines()
    assert _setup_commands()[1] in ci


# -- the "Use it" section -------------------------------------------------------------------


def test_every_block_of_the_run_sections_is_run_or_marked():
    text = Path(ROOT, "README.md").read_text()
    for title in RUN_SECTIONS:
        blocks = section_blocks(text, title)
        assert any(b.not_run is None for b in blocks), f"nothing to run in '## {title}'"


PAGE = """\
## Use it

```bash
cd sub
```

Prose.

```python
x = 1
```

More prose.

```python
print(x)
```

<!-- not run: opens a browser -->
```bash
xdg-open site/index.html
```

<!-- not run: a sample of the output -->
```text
done
```

```bash
ls
```

## Next

```text
not in the section
```
"""


def test_blocks_markers_and_sessions():
    blocks = section_blocks(PAGE, "Use it")
    assert [(b.line, b.lang, b.not_run) for b in blocks] == [
        (3, "bash", None), (9, "python", None), (15, "python", None),
        (20, "bash", "opens a browser"), (25, "text", "a sample of the output"),
        (29, "bash", None)]
    script = terminal_script(blocks)
    assert "xdg-open" not in script and "done" not in script
    # the two python blocks are one session, between the two bash blocks that run
    assert script.count(f"<<'{HEREDOC}'") == 1
    assert script.index("cd sub") < script.index("x = 1") < script.index("print(x)") \
        < script.index("\nls\n")
    ran = subprocess.run(["bash", "-c", script.replace("cd sub", "true")], capture_output=True,
                         text=True, env={**os.environ, "PATH": _path_with(sys.executable)})
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.splitlines()[0] == "1"
    assert ran.stderr.splitlines() == ["README.md:3 (bash)", "README.md:9 (python)",
                                       "README.md:15 (python)", "README.md:29 (bash)"]


@pytest.mark.parametrize(("text", "message"), [
    ("## Use it\n\n```text\nx\n```\n", "a 'text' block in 'Use it' is neither run"),
    ("## Use it\n\n```\nx\n```\n", "a 'plain' block in 'Use it' is neither run"),
    ("## Use it\n\n<!-- not run -->\n```bash\nx\n```\n", "write the reason"),
    ("## Use it\n\n<!-- not run: why -->\n\n```bash\nx\n```\n", "on the line right above"),
    ("## Use it\n\n```bash\nx\n", "not closed"),
    ("## Elsewhere\n", "no section '## Use it'"),
])
def test_unmarked_and_malformed_blocks_are_errors(text, message):
    with pytest.raises(ReadmeBlockError, match=message):
        section_blocks(text, "Use it")


def _path_with(python: str) -> str:
    return os.pathsep.join([os.path.dirname(python), os.environ.get("PATH", "")])


def _copy_repository(dest: Path) -> None:
    """The repository's tracked files and the new ones git does not ignore, as a user's
    checkout holds them (no outputs, inputs or environment)."""
    listed = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others",
                             "--exclude-standard"], capture_output=True, check=True).stdout
    for name in filter(None, listed.decode().split("\0")):
        source = ROOT / name
        if source.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name)


def _clean_environ() -> dict[str, str]:
    """This process's environment without its virtual environment or interpreter on ``PATH``,
    as a user's new terminal has it."""
    own = {os.path.realpath(os.path.dirname(sys.executable))}
    if sys.prefix != sys.base_prefix:
        own.add(os.path.realpath(os.path.join(sys.prefix, "bin")))
    path = os.pathsep.join(p for p in os.environ.get("PATH", "").split(os.pathsep)
                           if p and os.path.realpath(p) not in own)
    env = {k: v for k, v in os.environ.items()
           if k not in ("VIRTUAL_ENV", "PYTHONHOME", "PYTHONPATH")}
    return {**env, "PATH": path}


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_use_it_runs_as_written_after_the_setup(tmp_path):
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("needs the git checkout (its file list)")
    repo = tmp_path / "repo"
    _copy_repository(repo)
    env = _clean_environ()
    setup = _setup_commands()[0]
    assert "pip install -e . " in setup  # the package alone: no extra
    made = subprocess.run(["bash", "-c", setup], cwd=repo, env=env, capture_output=True,
                          text=True, timeout=600)
    assert made.returncode == 0, (f"the first set-up command failed (exit {made.returncode})"
                                  f"\n{made.stdout[-3000:]}\n{made.stderr[-6000:]}")
    assert "Done: 8 source partitions" in made.stdout, made.stdout[-3000:]
    assert list((repo / "examples" / "input").glob("*.jsonl"))
    listed = subprocess.run([str(repo / ".venv" / "bin" / "python"), "-m", "pip", "list"],
                            capture_output=True, text=True, check=True).stdout
    assert "nemo" not in listed.lower()  # what hid the missing scipy

    text = (ROOT / "README.md").read_text()
    blocks = [b for title in RUN_SECTIONS for b in section_blocks(text, title)]
    proc = subprocess.run(["bash", "-c", terminal_script(blocks)], cwd=repo, env=env,
                          capture_output=True, text=True, timeout=840)
    announced = [line for line in proc.stderr.splitlines() if line.startswith("README.md:")]
    where = announced[-1] if announced else "before the first block"
    assert proc.returncode == 0, (f"{where} failed (exit {proc.returncode})\n--- stdout\n"
                                  f"{proc.stdout[-3000:]}\n--- stderr\n{proc.stderr[-6000:]}")
    assert announced == [f"README.md:{b.line} ({b.lang})" for b in blocks if b.not_run is None]
    assert "Traceback" not in proc.stderr, proc.stderr[-6000:]
