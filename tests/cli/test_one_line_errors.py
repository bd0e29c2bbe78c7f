"""Every error found while a pipeline runs ends the command line in exactly one line, and no
traceback without ``-v`` (issue 32, items 2 and 3; docs/guarantees.md "Exit codes").

The field test found the right one-line message followed by 20-49 lines of ``Original
traceback:`` for a line broken in the middle of a JSONL file, an empty ``.jsonl`` among good
files, a missing ``text`` field, a ``.json`` file holding an array and a read-only output
folder, in ``run`` and ``dedup`` alike; and errors that came late or named the wrong fix (a
misspelled input path advised ``allow_no_files=True`` and left a job and an empty output
folder behind, an output path that is a file said ``[Errno 17] File exists``).

Each case is a real ``python -m curator_dask`` process on real files. The run's own INFO log
lines may come before the error line (they say what the run did); nothing else may. A bad
input path is refused before the job is made, so nothing at all precedes its line.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.helpers import cli

pytestmark = pytest.mark.slow

LOG_LINE = re.compile(r"\d\d:\d\d:\d\d (DEBUG|INFO|WARNING) ")  # the CLI's log format
PIPELINE = """\
stages:
  - _target_: curator_dask.JsonlReader
    file_paths: {input}
{reader_extra}  - _target_: curator_dask.JsonlWriter
    path: {output}
"""


def _good(folder: Path, files: int = 3) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(files):
        (folder / f"part-{i}.jsonl").write_text("".join(
            json.dumps({"text": f"document {i}-{j} " * 8, "id": f"{i}-{j}"}) + "\n"
            for j in range(4)))


def _yaml(tmp: Path, *, input: str = "in", output: str = "out", reader_extra: str = "") -> str:
    (tmp / "p.yaml").write_text(PIPELINE.format(input=input, output=output,
                                                reader_extra=reader_extra))
    return "p.yaml"


def broken_line(tmp: Path) -> list[str]:
    _good(tmp / "in")
    with open(tmp / "in" / "part-1.jsonl", "a") as f:
        f.write('{"text": "cut in the mid\n')
    return ["run", _yaml(tmp)]


def empty_file(tmp: Path) -> list[str]:
    _good(tmp / "in")
    (tmp / "in" / "part-9.jsonl").write_text("")
    return ["run", _yaml(tmp)]


def missing_field(tmp: Path) -> list[str]:
    _good(tmp / "in")
    return ["run", _yaml(tmp, reader_extra="    fields: [content]\n")]


def json_array(tmp: Path) -> list[str]:
    _good(tmp / "in")
    (tmp / "in" / "array.json").write_text(json.dumps([{"text": "a"}, {"text": "b"}],
                                                      indent=2))
    return ["run", _yaml(tmp)]


def output_is_a_file(tmp: Path) -> list[str]:
    _good(tmp / "in")
    (tmp / "out").write_text("not a folder\n")
    return ["run", _yaml(tmp)]


def misspelled_input(tmp: Path) -> list[str]:
    _good(tmp / "input")
    return ["run", _yaml(tmp, input="inptu"), "--work-dir", "jobs"]


def dedup_exact_broken_line(tmp: Path) -> list[str]:
    broken_line(tmp)
    return ["dedup", "exact", "in", "--output", "dd"]


def dedup_fuzzy_broken_line(tmp: Path) -> list[str]:
    broken_line(tmp)
    return ["dedup", "fuzzy", "in", "--output", "dd", "--cache", "cache"]


def dedup_misspelled_input(tmp: Path) -> list[str]:
    _good(tmp / "input")
    return ["dedup", "exact", "inptu", "--output", "dd"]


def unknown_target(tmp: Path) -> list[str]:
    _good(tmp / "in")
    (tmp / "p.yaml").write_text(PIPELINE.format(input="in", output="out", reader_extra="")
                                .replace("curator_dask.JsonlReader", "curator_dask.JsonlReadr"))
    return ["run", "p.yaml"]


def misspelled_parameter(tmp: Path) -> list[str]:
    _good(tmp / "in")
    (tmp / "p.yaml").write_text(PIPELINE.format(input="in", output="out", reader_extra="")
                                .replace("file_paths:", "file_path:"))
    return ["run", "p.yaml"]


CASES: dict[str, tuple[Callable[[Path], list[str]], int, str]] = {
    # name: (make the case, exit code, what the one line says)
    "broken-line": (broken_line, 1, "Malformed JSON in"),
    "empty-file": (empty_file, 1, "allow_empty: true"),
    "missing-field": (missing_field, 1, "they have the fields ['text', 'id']"),
    "json-array": (json_array, 1, "not JSON Lines (one object per line)"),
    "output-is-a-file": (output_is_a_file, 2, "is a file, not a folder"),
    "misspelled-input": (misspelled_input, 2, "inptu does not exist; check the path (did you "
                                              "mean"),
    "dedup-exact-broken-line": (dedup_exact_broken_line, 1, "Malformed JSON in"),
    "dedup-fuzzy-broken-line": (dedup_fuzzy_broken_line, 1, "Malformed JSON in"),
    "dedup-misspelled-input": (dedup_misspelled_input, 2, "check the path"),
    "unknown-target": (unknown_target, 2, "did you mean curator_dask.JsonlReader?"),
    "misspelled-parameter": (misspelled_parameter, 2, "did you mean 'file_paths'?"),
}


def _error_lines(out: subprocess.CompletedProcess[str]) -> list[str]:
    return [line for line in out.stderr.splitlines() if line.strip() and not LOG_LINE.match(line)]


@pytest.mark.parametrize("case", list(CASES))
def test_one_error_line_and_no_traceback(tmp_path: Path, case: str) -> None:
    make, code, says = CASES[case]
    args = make(tmp_path)
    out = cli(*args, "--workers", "1", cwd=tmp_path, timeout=240) if args[0] == "run" else \
        cli(*args, cwd=tmp_path, timeout=240)
    lines = _error_lines(out)
    assert out.returncode == code, out.stderr[-4000:]
    assert len(lines) == 1 and "Traceback" not in out.stderr, out.stderr[-4000:]
    assert says in lines[0], lines[0]
    if case in ("misspelled-input", "dedup-misspelled-input"):
        # refused before anything was made: no job, no log line, no output folder
        assert out.stderr.splitlines() == lines
        assert not (tmp_path / "jobs").exists() and not (tmp_path / "out").exists()
        assert not (tmp_path / "dd").exists()


def test_the_traceback_with_v(tmp_path: Path) -> None:
    out = cli(*broken_line(tmp_path), "--workers", "1", "-v", cwd=tmp_path, timeout=240)
    assert out.returncode == 1
    assert "Traceback" in out.stderr and "Original traceback:" in out.stderr


@pytest.fixture
def read_only_folder(tmp_path: Path):
    """A real read-only file system (a tmpfs mounted read-only): root may write into a
    folder of mode 0555, not into a read-only mount. Skipped where this process cannot mount
    (not root, or no mount namespace rights)."""
    folder = tmp_path / "ro"
    folder.mkdir()
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(folder)],
                          capture_output=True, text=True, check=False)
    if made.returncode != 0:
        pytest.skip(f"cannot mount a read-only tmpfs here: {made.stderr.strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], check=False)


def test_a_read_only_output_folder_is_named_before_the_cluster_starts(
        tmp_path: Path, read_only_folder: Path) -> None:
    _good(tmp_path / "in")
    out = cli("run", _yaml(tmp_path, output="ro/out"), "--workers", "1", cwd=tmp_path,
              timeout=240)
    lines = _error_lines(out)
    assert out.returncode == 2, out.stderr
    assert lines == [f"python -m curator_dask run: error: jsonl_writer: output folder "
                     f"{tmp_path / 'ro' / 'out'} cannot be made: Read-only file system; give a "
                     "folder this user can write to"], out.stderr
    assert "Dask dashboard" not in out.stderr  # found before any cluster started
