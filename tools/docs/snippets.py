"""Runnable code blocks in the documentation: find them and run them.

Convention: an HTML comment on the line right above a fenced block marks it (the comment is
invisible in the rendered site and on GitHub):

    <!-- runnable -->
    ```python
    ...
    ```

- ``python`` blocks run with the docs' Python (``sys.executable``); ``bash`` / ``sh`` blocks
  run with ``bash -euo pipefail`` and that Python's ``bin/`` first on ``PATH`` (so ``python``
  and ``curator-dask`` are the project's).
- Every block runs alone, in a fresh empty temporary directory as the working directory, so
  it must create what it needs (``curator_dask.sample_data.generate_jsonl`` makes input).
- ``<!-- runnable timeout=120 -->`` sets the time limit in seconds (default 60).
- ``<!-- runnable file=pipeline.yaml -->`` above a block of any language does not run it: the
  block is written to ``pipeline.yaml`` in the directory of every later runnable block of the
  same page, so a page can show a file and then the command that uses it.

    python tools/docs/snippets.py [docs]     # list the runnable blocks
    python tools/docs/snippets.py --run      # run them all, stop at the first failure
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

MARKER = re.compile(r"^\s*<!--\s*runnable\b(?P<opts>[^>]*?)-->\s*$")
FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>`{3,}|~{3,})\s*(?P<lang>[\w+-]*)")
RUN_LANGS = {"python": "python", "py": "python", "bash": "bash", "sh": "bash", "shell": "bash"}
DEFAULT_TIMEOUT = 60.0


class SnippetError(ValueError):
    """A runnable marker that is malformed or not followed by a fenced block."""


@dataclass
class Snippet:
    path: Path
    line: int  # 1-based line of the opening fence
    lang: str
    code: str
    timeout: float = DEFAULT_TIMEOUT
    file: str | None = None  # a file block: written, not run
    files: dict[str, str] = field(default_factory=dict)  # file blocks above it on the page

    @property
    def id(self) -> str:
        return f"{self.path.name}:{self.line}"


def _options(text: str, where: str) -> dict[str, str]:
    opts = {}
    for token in shlex.split(text):
        key, sep, value = token.partition("=")
        if not sep or key not in ("timeout", "file"):
            msg = f"{where}: unknown runnable option {token!r} (use timeout=S or file=NAME)"
            raise SnippetError(msg)
        opts[key] = value
    return opts


def parse(path: Path) -> list[Snippet]:
    """Every marked block of one Markdown file, in order (file blocks included)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    out: list[Snippet] = []
    files: dict[str, str] = {}
    i = 0
    while i < len(lines):
        m = MARKER.match(lines[i])
        if not m:
            i += 1
            continue
        where = f"{path}:{i + 1}"
        opts = _options(m.group("opts"), where)
        j = i + 1
        while j < len(lines) and not lines[j].strip():
            j += 1
        fence = FENCE.match(lines[j]) if j < len(lines) else None
        if fence is None:
            raise SnippetError(f"{where}: a runnable marker must be followed by a fenced block")
        lang = fence.group("lang").lower()
        close = re.compile(r"^\s*" + re.escape(fence.group("fence")[0]) + "{"
                           + str(len(fence.group("fence"))) + r",}\s*$")
        k = j + 1
        body = []
        indent = len(fence.group("indent"))
        while k < len(lines) and not close.match(lines[k]):
            body.append(lines[k][indent:] if lines[k][:indent].strip() == "" else lines[k])
            k += 1
        if k >= len(lines):
            raise SnippetError(f"{where}: the fenced block is not closed")
        code = "\n".join(body) + "\n"
        if "file" in opts:
            name = opts["file"]
            if not name or os.path.isabs(name) or ".." in Path(name).parts:
                raise SnippetError(f"{where}: file= must be a relative path, got {name!r}")
            files[name] = code
            out.append(Snippet(path, j + 1, lang, code, file=name))
        else:
            if lang not in RUN_LANGS:
                raise SnippetError(f"{where}: cannot run a {lang or 'plain'!r} block "
                                   f"(runnable: {', '.join(sorted(RUN_LANGS))})")
            try:
                timeout = float(opts.get("timeout", DEFAULT_TIMEOUT))
            except ValueError:
                raise SnippetError(f"{where}: timeout must be a number of seconds") from None
            out.append(Snippet(path, j + 1, RUN_LANGS[lang], code, timeout=timeout,
                               files=dict(files)))
        i = k + 1
    return out


def find(docs_dir: str | os.PathLike = "docs") -> list[Snippet]:
    """The runnable blocks (not file blocks) of every ``*.md`` under ``docs_dir``."""
    out = []
    for path in sorted(Path(docs_dir).rglob("*.md")):
        out.extend(s for s in parse(path) if s.file is None)
    return out


def run(snippet: Snippet, workdir: str | os.PathLike | None = None,
        python: str | None = None) -> subprocess.CompletedProcess:
    """Run one block in ``workdir`` (a new temporary directory when ``None``)."""
    python = python or sys.executable
    if workdir is None:
        workdir = tempfile.mkdtemp(prefix="docs-snippet-")
    workdir = Path(workdir)
    for name, text in snippet.files.items():
        target = workdir / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
    env = dict(os.environ)
    env["PATH"] = os.path.dirname(python) + os.pathsep + env.get("PATH", "")
    env.setdefault("PYTHONUNBUFFERED", "1")
    if snippet.lang == "python":
        script = workdir / "_snippet.py"
        command = [python, str(script)]
    else:
        script = workdir / "_snippet.sh"
        command = ["bash", "-euo", "pipefail", str(script)]
    script.write_text(snippet.code, encoding="utf-8")
    return subprocess.run(command, cwd=workdir, env=env, capture_output=True, text=True,
                          timeout=snippet.timeout)


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(description="list or run the docs' runnable blocks")
    ap.add_argument("docs", nargs="?", default="docs")
    ap.add_argument("--run", action="store_true")
    args = ap.parse_args(argv)
    for snippet in find(args.docs):
        print(f"{snippet.id} ({snippet.lang}, {snippet.timeout:g} s)")
        if args.run:
            proc = run(snippet)
            if proc.returncode != 0:
                print(proc.stdout, proc.stderr, sep="\n")
                return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
