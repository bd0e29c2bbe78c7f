"""Every code block marked runnable in docs/*.md runs without error (tools/docs/snippets.py).

A block is marked by ``<!-- runnable -->`` on the line above it; each runs alone in a fresh
temporary directory, with this interpreter, under its time limit.
"""

from __future__ import annotations

import subprocess
import textwrap

import pytest

from tests.helpers import REPO_ROOT as ROOT
from tests.helpers import docs_tool

snippets = docs_tool("snippets")


def _collect():
    try:
        return snippets.find(ROOT / "docs"), None
    except snippets.SnippetError as exc:
        return [], str(exc)


SNIPPETS, PARSE_ERROR = _collect()


def test_runnable_markers_are_well_formed():
    assert PARSE_ERROR is None, PARSE_ERROR


def test_there_are_runnable_blocks():
    assert SNIPPETS, "no <!-- runnable --> blocks found under docs/"


@pytest.mark.slow  # most blocks start a Dask cluster
@pytest.mark.parametrize("snippet", SNIPPETS, ids=lambda s: s.id)
def test_runnable_block(snippet, tmp_path):
    try:
        proc = snippets.run(snippet, tmp_path)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{snippet.path.name}:{snippet.line} took longer than {snippet.timeout:g} s",
                    pytrace=False)
    if proc.returncode != 0:
        pytest.fail(f"{snippet.path.name}:{snippet.line} ({snippet.lang}) exited with "
                    f"{proc.returncode}\n--- code\n{snippet.code}--- stdout\n{proc.stdout}"
                    f"--- stderr\n{proc.stderr}", pytrace=False)


# -- the convention itself ------------------------------------------------------------------

PAGE = textwrap.dedent("""\
    # Page

    ```python
    not marked: never run
    ```

    <!-- runnable file=data.txt -->
    ```text
    hello
    ```

    <!-- runnable timeout=5 -->
    ```bash
    grep -q hello data.txt
    echo ran
    ```

    <!-- runnable -->
    ````python
    print(open("data.txt").read().strip())
    ````
""")


def test_parse_marks_files_timeouts_and_fences(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(PAGE)
    found = snippets.parse(page)
    assert [(s.lang, s.file, s.timeout) for s in found] == [
        ("text", "data.txt", snippets.DEFAULT_TIMEOUT), ("bash", None, 5.0),
        ("python", None, snippets.DEFAULT_TIMEOUT)]
    assert found[1].files == {"data.txt": "hello\n"}
    assert found[2].line == 19
    runnable = snippets.find(tmp_path)
    assert len(runnable) == 2
    for snippet in runnable:
        proc = snippets.run(snippet, tmp_path / snippet.id.replace(":", "_"))
        assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "hello\n"


@pytest.mark.parametrize("text, message", [
    ("<!-- runnable -->\nplain text\n", "must be followed by a fenced block"),
    ("<!-- runnable -->\n```yaml\na: 1\n```\n", "cannot run a 'yaml' block"),
    ("<!-- runnable speed=9 -->\n```python\npass\n```\n", "unknown runnable option"),
    ("<!-- runnable -->\n```python\npass\n", "not closed"),
    ("<!-- runnable file=../x -->\n```text\nx\n```\n", "relative path"),
])
def test_malformed_markers_are_errors(tmp_path, text, message):
    page = tmp_path / "bad.md"
    page.write_text(text)
    with pytest.raises(snippets.SnippetError, match=message):
        snippets.parse(page)
