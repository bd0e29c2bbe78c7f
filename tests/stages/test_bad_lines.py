"""Malformed JSONL lines (field test, issue 32 items 8 and 3): ``on_bad_lines`` skips, counts and
sets them aside, on whole files and row ranges, in the API and in a YAML pipeline; a fixed
input's refused ``--resume`` names the checkpoint to go on from; the readers' messages for a
JSON array and a missing field (an empty file's: tests/stages/test_input_faults.py).

Real files under ``tmp_path``; the runs use a real LocalCluster (the ``executor`` fixture) or
``python -m curator_dask run`` in a subprocess.
"""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path

import pandas as pd
import pytest

from curator_dask import JsonlReader, JsonlWriter, Pipeline
from curator_dask.stages.text.io.reader import JsonlReaderStage, MalformedJsonError
from curator_dask.tasks import FileGroupTask, RowRangeTask
from tests.helpers import cli

# line 2: unterminated string; line 4: blank; line 5: valid JSON, not an object
BAD = (b'{"text": "one"}\n{"text": "two\n{"text": "three"}\n\n[1, 2]\n'
       b'{"text": "six"}\n')
GOOD_TEXTS = ["one", "three", "six"]
LOG_LINE = re.compile(r"\d\d:\d\d:\d\d (DEBUG|INFO|WARNING) ")  # the CLI's log format


def _write(path: Path, payload: bytes) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(payload)
    return str(path)


def _task(paths: list[str]) -> FileGroupTask:
    task = FileGroupTask(dataset_name="ds", data=paths, _metadata={"source_files": paths})
    task._set_task_id("0_abc", 0)
    return task


def _texts(data) -> list[str]:
    return list(data["text"]) if isinstance(data, pd.DataFrame) else data.column(
        "text").to_pylist()


def _set_aside(folder: Path) -> list[dict]:
    return [json.loads(line) for p in sorted(folder.iterdir())
            for line in p.read_text().splitlines()]


# --------------------------------------------------------------------------------------------
# The stage: error (default), skip, warn, bad_lines_path
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("engine", ["pyarrow_direct", "pandas"])
def test_a_malformed_line_is_an_error_naming_it_and_the_option(tmp_path: Path,
                                                               engine: str) -> None:
    path = _write(tmp_path / "bad.jsonl", BAD)
    with pytest.raises(MalformedJsonError) as info:
        JsonlReaderStage(read_kwargs={"engine": engine}).process(_task([path]))
    message = str(info.value)
    assert message.startswith(f"Malformed JSON in {path} at line 2: Unterminated string")
    assert "on_bad_lines='skip'" in message and "on_bad_lines: skip" in message


@pytest.mark.parametrize("engine", ["pyarrow_direct", "pandas"])
@pytest.mark.parametrize("mode", ["skip", "warn"])
def test_skip_and_warn_drop_count_and_set_aside_the_lines(tmp_path: Path, engine: str,
                                                          mode: str, caplog) -> None:
    path = _write(tmp_path / "in" / "bad.jsonl", BAD)
    aside = tmp_path / "bad-lines"
    stage = JsonlReaderStage(read_kwargs={"engine": engine}, on_bad_lines=mode,
                             bad_lines_path=str(aside))
    with caplog.at_level(logging.WARNING):
        batch = stage.process(_task([path]))
    assert _texts(batch.data) == GOOD_TEXTS
    assert stage._consume_custom_metrics() == {"bad_lines_skipped": 2}
    (written,) = aside.iterdir()
    assert written.name.startswith("bad.jsonl.") and written.name.endswith(".bad_lines.jsonl")
    assert _set_aside(aside) == [
        {"path": path, "line": 2, "error": "Unterminated string starting at: line 1 column 10 "
                                          "(char 9)", "raw": '{"text": "two'},
        {"path": path, "line": 5, "error": "not a JSON object (a list)", "raw": "[1, 2]"}]
    messages = [r.getMessage() for r in caplog.records]
    summary = [m for m in messages if "2 malformed line(s) skipped (line 2, 5)" in m]
    assert len(summary) == 1 and path in summary[0] and str(written) in summary[0]
    per_line = [m for m in messages if "skipping malformed line" in m]
    assert len(per_line) == (2 if mode == "warn" else 0)


def test_skipped_lines_of_a_row_range_keep_the_file_numbers(tmp_path: Path) -> None:
    """The range starts at line 2 (byte 16); its bad lines are lines 2 and 5 of the file, and
    the file they are written to names the rows."""
    path = _write(tmp_path / "bad.jsonl", BAD)
    aside = tmp_path / "aside"
    stage = JsonlReaderStage(on_bad_lines="skip", bad_lines_path=str(aside))
    task = RowRangeTask.of([{"path": path, "start_row": 1, "end_row": 5, "start_byte": 16,
                             "end_byte": len(BAD) - 16}], dataset_name="ds", index=0, total=1)
    assert _texts(stage.process(task).data) == ["three"]
    (written,) = aside.iterdir()
    assert ".rows-1-5." in written.name
    assert [r["line"] for r in _set_aside(aside)] == [2, 5]


def test_bad_lines_options_are_checked_when_the_reader_is_made(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"on_bad_lines must be one of \['error', 'skip', "):
        JsonlReader(file_paths=str(tmp_path), on_bad_lines="ignore")
    with pytest.raises(ValueError, match="pass on_bad_lines='skip'"):
        JsonlReader(file_paths=str(tmp_path), bad_lines_path=str(tmp_path / "b"))
    reader = JsonlReader(file_paths=str(tmp_path), on_bad_lines="warn", bad_lines_path="rel")
    stage = reader.decompose()[1]
    assert (stage.on_bad_lines, stage.bad_lines_path) == ("warn", str(Path.cwd() / "rel"))
    assert JsonlReader(file_paths=str(tmp_path)).decompose()[1].on_bad_lines is None  # "error"


# --------------------------------------------------------------------------------------------
# Messages: a JSON array, a missing field
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("payload", [b'[{"text": "a"}, {"text": "b"}]\n',
                                     b'[\n  {"text": "a"},\n  {"text": "b"}\n]\n'],
                         ids=["one-line", "indented"])
def test_a_json_array_is_named_not_json_lines(tmp_path: Path, payload: bytes) -> None:
    path = _write(tmp_path / "array.json", payload)
    with pytest.raises(MalformedJsonError) as info:
        JsonlReaderStage().process(_task([path]))
    assert str(info.value).startswith(
        f"{path} is not JSON Lines (one object per line): line 1 is ")
    assert "jq -c '.[]'" in str(info.value)


def test_a_missing_field_names_the_fields_the_file_has(tmp_path: Path, caplog) -> None:
    path = _write(tmp_path / "c.jsonl", b'{"id": 1, "content": "x"}\n')
    with pytest.raises(ValueError) as info:
        JsonlReaderStage(fields=["text"]).process(_task([path]))
    assert "they have the fields ['id', 'content']" in str(info.value)
    other = _write(tmp_path / "d.jsonl", b'{"id": 2, "text": "y"}\n')
    with caplog.at_level(logging.WARNING):
        JsonlReaderStage(fields=["text", "lang"]).process(_task([other]))
    assert any("columns ['lang'] not found (it has ['id', 'text'])" in r.getMessage()
               for r in caplog.records)


# --------------------------------------------------------------------------------------------
# Real runs: a LocalCluster, a YAML pipeline, a refused resume after a fix
# --------------------------------------------------------------------------------------------


def _input(folder: Path) -> None:
    _write(folder / "a.jsonl", b'{"text": "a1"}\n{"text": "a2"}\n')
    _write(folder / "b.jsonl", BAD)


@pytest.mark.slow
@pytest.mark.parametrize("partition", [None, {"mode": "manual", "num_of_partitions": 3}],
                         ids=["whole-files", "row-ranges"])
def test_run_skips_counts_and_sets_aside(tmp_path: Path, executor, partition) -> None:
    _input(tmp_path / "in")
    out, aside = tmp_path / "out", tmp_path / "aside"
    # with row ranges the two bad lines may fall in two partitions, which fail on their own:
    # the run reports whichever failed first
    with pytest.raises(Exception, match=r"Malformed JSON in .*b.jsonl at line 2|b.jsonl is not "
                                        r"JSON Lines \(one object per line\): line 5"):
        (Pipeline(name="bad-lines").add_stage(JsonlReader(str(tmp_path / "in"),
                                                          partition=partition))
         .add_stage(JsonlWriter(str(out))).run(executor=executor))
    result = (Pipeline(name="bad-lines")
              .add_stage(JsonlReader(str(tmp_path / "in"), partition=partition,
                                     on_bad_lines="skip", bad_lines_path=str(aside)))
              .add_stage(JsonlWriter(str(out))).run(executor=executor))
    written = sorted(json.loads(line)["text"] for p in out.glob("*.jsonl")
                     for line in p.read_text().splitlines())
    assert written == sorted(["a1", "a2", *GOOD_TEXTS])
    skipped = sum(perf.custom_metrics.get("bad_lines_skipped", 0) for task in result
                  for perf in task._stage_perf)
    assert skipped == 2
    assert sorted(r["line"] for r in _set_aside(aside)) == [2, 5]
    assert {r["path"] for r in _set_aside(aside)} == {str(tmp_path / "in" / "b.jsonl")}


def _yaml(tmp_path: Path, extra: str = "") -> str:
    (tmp_path / "p.yaml").write_text(
        "stages:\n  - _target_: curator_dask.JsonlReader\n    file_paths: in\n"
        f"{extra}  - _target_: curator_dask.JsonlWriter\n    path: out\n")
    return "p.yaml"


def _errors(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if not LOG_LINE.match(line)]


@pytest.mark.slow
def test_yaml_reader_skips_with_on_bad_lines(tmp_path: Path) -> None:
    _input(tmp_path / "in")
    run = cli("run", _yaml(tmp_path, "    on_bad_lines: skip\n    bad_lines_path: aside\n"),
              "--workers", "1", "--no-progress", "--no-job", cwd=tmp_path, timeout=180)
    assert run.returncode == 0, run.stderr
    assert "b.jsonl: 2 malformed line(s) skipped (line 2, 5)" in run.stderr
    assert [r["raw"] for r in _set_aside(tmp_path / "aside")] == ['{"text": "two', "[1, 2]"]
    written = [json.loads(line)["text"] for p in (tmp_path / "out").glob("*.jsonl")
               for line in p.read_text().splitlines()]
    assert sorted(written) == sorted(["a1", "a2", *GOOD_TEXTS])


@pytest.mark.slow
def test_fixed_line_refused_resume_names_the_checkpoint_that_goes_on(tmp_path: Path) -> None:
    """The run fails on b.jsonl; the user fixes the line; ``--resume`` is refused (the input
    changed) and says how to keep the finished work; that way processes only b.jsonl."""
    _input(tmp_path / "in")
    args = ("--workers", "1", "--no-progress", "--work-dir", "jobs")
    first = cli("run", _yaml(tmp_path), *args, "--job-id", "j1", cwd=tmp_path, timeout=180)
    assert first.returncode == 1 and "at line 2" in first.stderr, first.stderr
    _write(tmp_path / "in" / "b.jsonl", BAD.replace(b'"two\n', b'"two"}\n').replace(
        b"[1, 2]\n", b""))
    refused = cli("run", "p.yaml", *args, "--resume", "j1", cwd=tmp_path, timeout=180)
    assert refused.returncode == 2, refused.stderr
    (line,) = _errors(refused.stderr)
    checkpoint = tmp_path / "jobs" / "j1" / "checkpoint"
    assert f"start a new job on its checkpoint (--checkpoint-path {checkpoint})" in line
    again = cli("run", "p.yaml", *args, "--job-id", "j2", "--checkpoint-path", str(checkpoint),
                cwd=tmp_path, timeout=180)
    assert again.returncode == 0, again.stderr
    assert "1 already complete (skipped), 1 to process" in again.stderr
    written = sorted(json.loads(line)["text"] for p in (tmp_path / "out").glob("*.jsonl")
                     for line in p.read_text().splitlines())
    assert written == sorted(["a1", "a2", "one", "two", "three", "six"])
