"""Faulty inputs (field test, issue 12): missing paths, invalid UTF-8, empty files, odd names.

Real files under ``tmp_path``; the runs go through ``python -m curator_dask run`` in a
subprocess or through a real LocalCluster (the ``executor`` fixture).
"""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path

import pandas as pd
import pytest

from curator_dask import JsonlReader, JsonlWriter, Pipeline
from curator_dask.jobs.summary import read_summary
from curator_dask.stages.file_partitioning import FilePartitioningStage, NoInputFilesError
from curator_dask.stages.text.io.reader import InvalidUtf8Error, JsonlReaderStage
from curator_dask.tasks import EmptyTask, FileGroupTask
from tests.helpers import cli

LOG_LINE = re.compile(r"\d\d:\d\d:\d\d (DEBUG|INFO|WARNING) ")  # the CLI's log format
BAD_UTF8 = b'{"text": "good one"}\n{"text": "ok \xff\xfe bad"}\n{"text": "good two"}\n'


def _write(path: Path, payload: bytes = b'{"text": "hello"}\n') -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(payload)
    return str(path)


def _groups(stage: FilePartitioningStage) -> list[list[str]]:
    return [t.data for t in stage.process(EmptyTask())]


def _pipeline(reader: JsonlReader, out: Path | None = None) -> Pipeline:
    p = Pipeline(name="faults").add_stage(reader)
    return p if out is None else p.add_stage(JsonlWriter(path=str(out)))


def _yaml(tmp_path: Path, file_paths: str, extra: str = "") -> str:
    (tmp_path / "p.yaml").write_text(
        "stages:\n  - _target_: curator_dask.stages.text.io.reader.JsonlReader\n"
        f"    file_paths: {json.dumps(file_paths)}\n{extra}"
        "  - _target_: curator_dask.stages.text.io.writer.JsonlWriter\n    path: out\n")
    return "p.yaml"


# --------------------------------------------------------------------------------------------
# 1. A path that names no file is an error unless allow_no_files=True
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("make", "reason"),
    [
        (lambda d: str(d / "does-not-exist"), "does not exist"),
        (lambda d: str(d / "nothing-*.jsonl"), "matches no file or directory"),
        (lambda d: _write(d / "only.txt") and str(d), "holds no files ending in .json, .jsonl"),
        (lambda d: _write(d / "x.txt"), "is not one of the files ending in"),
    ],
    ids=["missing", "glob", "dir-without-matches", "file-with-other-extension"],
)
def test_entry_without_files_raises_naming_it(tmp_path: Path, make, reason: str) -> None:
    entry = make(tmp_path)
    stage = JsonlReader(file_paths=entry).decompose()[0]
    with pytest.raises(NoInputFilesError) as info:
        stage.process(EmptyTask())
    assert isinstance(info.value, FileNotFoundError)
    message = str(info.value)
    # a path that is not there is a typo: its fix is the path (issue 32, item 3)
    fix = "check the path" if reason == "does not exist" else "allow_no_files=True"
    assert f"{entry} {reason}" in message and fix in message


def test_missing_entry_in_a_list_raises_and_allow_no_files_skips_it(tmp_path: Path) -> None:
    good = _write(tmp_path / "a.jsonl")
    paths = [good, str(tmp_path / "typo.jsonl")]
    with pytest.raises(NoInputFilesError, match="typo.jsonl does not exist"):
        _groups(FilePartitioningStage(file_paths=paths))
    with pytest.raises(NoInputFilesError, match="empty list"):
        _groups(FilePartitioningStage(file_paths=[]))
    assert _groups(FilePartitioningStage(file_paths=paths, allow_no_files=True)) == [[good]]
    assert _groups(FilePartitioningStage(file_paths=[], allow_no_files=True)) == []


def test_readers_pass_allow_no_files_on(tmp_path: Path) -> None:
    from curator_dask.stages.text.io.reader import ParquetReader

    missing = str(tmp_path / "missing")
    for reader in (JsonlReader(file_paths=missing, allow_no_files=True),
                   ParquetReader(file_paths=missing, allow_no_files=True)):
        stage = reader.decompose()[0]
        assert stage.allow_no_files is True
        assert stage.process(EmptyTask()) == []
    assert ParquetReader(file_paths=missing).decompose()[0].allow_no_files is False


@pytest.mark.slow
@pytest.mark.parametrize(("entry", "reason"), [("does-not-exist", "does not exist"),
                                               ("in/nothing-*.jsonl",
                                                "matches no file or directory")])
def test_cli_run_with_missing_input_is_a_one_line_usage_error_before_any_cluster(
        tmp_path: Path, entry: str, reason: str) -> None:
    """Exit 2, one line and nothing before it (issues 20 and 32): a path that names nothing
    is refused before the job is made (no job folder, no resume hint for a job that could
    never be resumed), and no output folder is made."""
    (tmp_path / "in").mkdir()
    out = cli("run", _yaml(tmp_path, entry), "--workers", "1", "--no-progress",
              "--work-dir", "jobs", "--job-id", "missing-input", cwd=tmp_path, timeout=180)
    assert out.returncode == 2, out.stderr
    fix = ("check the path" if reason == "does not exist" else
           "pass allow_no_files=True (FilePartitioningStage or the reader) to accept that")
    lines = out.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        f"python -m curator_dask run: error: No input files: {tmp_path / entry} {reason}; "
        f"{fix}"), out.stderr
    assert not (tmp_path / "jobs").exists() and not (tmp_path / "out").exists()


@pytest.mark.slow
def test_api_run_missing_input_fails_and_opt_in_completes(tmp_path: Path, executor) -> None:
    missing = str(tmp_path / "does-not-exist")
    with pytest.raises(NoInputFilesError, match="does-not-exist does not exist") as info:
        _pipeline(JsonlReader(file_paths=missing)).run(
            executor=executor, work_dir=str(tmp_path / "jobs"), job_id="api-missing")
    assert "check the path" in str(info.value)
    # refused before the job was made: there is no job to resume or to list as failed
    assert not (tmp_path / "jobs" / "api-missing").exists()

    result = _pipeline(JsonlReader(file_paths=missing, allow_no_files=True)).run(
        executor=executor, work_dir=str(tmp_path / "jobs"), job_id="api-allowed")
    assert result.num_sources == 0 and list(result) == []
    summary = read_summary(str(tmp_path / "jobs" / "api-allowed" / "job_summary.json"))
    assert summary["state"] == "completed"


# --------------------------------------------------------------------------------------------
# 2. Invalid UTF-8: an error naming file and line, or replaced / skipped and counted
# --------------------------------------------------------------------------------------------


def _task(paths: list[str]) -> FileGroupTask:
    task = FileGroupTask(dataset_name="ds", data=paths, _metadata={"source_files": paths})
    task._set_task_id("0_abc", 0)
    return task


@pytest.mark.parametrize("engine", ["pyarrow_direct", "pandas"])
def test_invalid_utf8_is_an_error_naming_file_and_line(tmp_path: Path, engine: str) -> None:
    path = _write(tmp_path / "bad.jsonl", BAD_UTF8)
    stage = JsonlReaderStage(read_kwargs={"engine": engine})
    with pytest.raises(InvalidUtf8Error) as info:
        stage.process(_task([path]))
    message = str(info.value)
    assert f"{path} at line 2" in message and "invalid_utf8='replace'" in message


@pytest.mark.parametrize("engine", ["pyarrow_direct", "pandas"])
def test_invalid_utf8_replace_and_skip_are_counted(tmp_path: Path, engine: str, caplog) -> None:
    path = _write(tmp_path / "bad.jsonl", BAD_UTF8)
    kwargs = {"read_kwargs": {"engine": engine}}
    replaced = JsonlReaderStage(invalid_utf8="replace", **kwargs)
    data = replaced.process(_task([path])).data
    texts = list(data["text"]) if engine == "pandas" else data.column("text").to_pylist()
    assert texts == ["good one", "ok \ufffd\ufffd bad", "good two"]
    assert replaced._consume_custom_metrics() == {"invalid_utf8_lines_replaced": 1}

    skipped = JsonlReaderStage(invalid_utf8="skip", **kwargs)
    with caplog.at_level(logging.WARNING):
        batch = skipped.process(_task([path]))
    assert batch.num_items == 2
    assert skipped._consume_custom_metrics() == {"invalid_utf8_lines_skipped": 1}
    assert any(path in r.getMessage() and "skipped" in r.getMessage() for r in caplog.records)
    with pytest.raises(ValueError, match="invalid_utf8 must be one of"):
        JsonlReaderStage(invalid_utf8="ignore")


def test_malformed_line_after_a_replaced_one_keeps_its_number(tmp_path: Path) -> None:
    path = _write(tmp_path / "bad.jsonl", BAD_UTF8 + b'{"text": \n')
    for mode in ("replace", "skip"):
        with pytest.raises(ValueError, match=f"{path} at line 4"):
            JsonlReaderStage(invalid_utf8=mode).process(_task([path]))


@pytest.mark.slow
def test_cli_run_with_invalid_utf8_fails_naming_file_and_line(tmp_path: Path) -> None:
    path = _write(tmp_path / "in" / "bad.jsonl", BAD_UTF8)
    out = cli("run", _yaml(tmp_path, "in"), "--workers", "1", "--no-progress", "--no-job",
              cwd=tmp_path, timeout=180)
    assert out.returncode == 1, out.stderr
    assert f"Invalid UTF-8 in {path} at line 2" in out.stderr
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").iterdir())


@pytest.mark.slow
def test_run_with_replace_writes_readable_output_and_skip_drops(tmp_path: Path,
                                                                executor) -> None:
    _write(tmp_path / "in" / "bad.jsonl", BAD_UTF8)
    for mode, expected in (("replace", ["good one", "ok \ufffd\ufffd bad", "good two"]),
                           ("skip", ["good one", "good two"])):
        out = tmp_path / f"out-{mode}"
        result = _pipeline(JsonlReader(file_paths=str(tmp_path / "in"), invalid_utf8=mode),
                           out).run(executor=executor)
        (written,) = out.iterdir()
        lines = written.read_bytes().decode("utf-8").splitlines()
        assert [json.loads(line)["text"] for line in lines] == expected
        assert pd.read_json(written, lines=True)["text"].tolist() == expected
        (reader_count,) = [c for name, c in result.stage_counts if name == "jsonl_reader"]
        assert reader_count.items_out == len(expected)
        metrics = {k: v for task in result for perf in task._stage_perf
                   for k, v in perf.custom_metrics.items()}
        done = "replaced" if mode == "replace" else "skipped"
        assert metrics == {f"invalid_utf8_lines_{done}": 1}


# --------------------------------------------------------------------------------------------
# 3. "No data read" names the stage, the files and the task
# --------------------------------------------------------------------------------------------


def test_empty_file_error_names_stage_file_and_task(tmp_path: Path) -> None:
    path = _write(tmp_path / "empty.jsonl", b"")
    with pytest.raises(ValueError) as info:
        JsonlReaderStage().process(_task([path]))
    assert str(info.value) == (
        f"jsonl_reader: no data read from {path} (task 0_abc_0): the file is empty; pass "
        "allow_empty=True to the reader (YAML: allow_empty: true) to accept partitions "
        "without rows")
    blank = _write(tmp_path / "blank.jsonl", b"\n\n")
    with pytest.raises(ValueError, match=f"from {path}, {blank} .*they hold no rows"):
        JsonlReaderStage().process(_task([path, blank]))


@pytest.mark.slow
def test_run_over_an_empty_file_names_it(tmp_path: Path, executor) -> None:
    path = _write(tmp_path / "in" / "empty.jsonl", b"")
    with pytest.raises(Exception, match=f"no data read from {path} .*the file is empty"):
        _pipeline(JsonlReader(file_paths=str(tmp_path / "in"))).run(executor=executor)


# --------------------------------------------------------------------------------------------
# 4. Names: "[" in an existing path is literal; "..jsonl" is read; ".jsonl" is named
# --------------------------------------------------------------------------------------------


def test_existing_path_with_glob_characters_is_literal(tmp_path: Path) -> None:
    data = tmp_path / "data[1]"
    a = _write(data / "a.jsonl")
    assert _groups(FilePartitioningStage(file_paths=str(data))) == [[a]]
    assert _groups(FilePartitioningStage(file_paths=[a])) == [[a]]
    b = _write(tmp_path / "g" / "b.jsonl")
    assert _groups(FilePartitioningStage(file_paths=str(tmp_path / "g" / "*.jsonl"))) == [[b]]


def test_dot_dot_jsonl_is_read_and_hidden_extension_name_is_warned(tmp_path: Path,
                                                                   caplog) -> None:
    dotdot = _write(tmp_path / "d" / "..jsonl")
    plain = _write(tmp_path / "d" / "a.jsonl")
    _write(tmp_path / "d" / ".jsonl")
    with caplog.at_level(logging.WARNING, logger="curator_dask.utils.files"):
        assert _groups(FilePartitioningStage(file_paths=str(tmp_path / "d"))) == [[dotdot],
                                                                                  [plain]]
    # only this module's records: a Dask client of an earlier test in the process may log too
    warned = [r.getMessage() for r in caplog.records if r.name == "curator_dask.utils.files"]
    assert len(warned) == 1 and str(tmp_path / "d" / ".jsonl") in warned[0]


def test_normal_inputs_partition_as_nemo_curator_does(tmp_path: Path) -> None:
    nemo_stage = pytest.importorskip("nemo_curator.stages.file_partitioning")
    from nemo_curator.tasks import EmptyTask as NemoEmptyTask

    for name in ("a.jsonl", "B.JSON", ".hidden.jsonl", "sub/c.jsonl", "sub/.x/d.jsonl", "e.txt"):
        _write(tmp_path / "in" / name)
    root = str(tmp_path / "in")
    for kwargs in ({}, {"files_per_partition": 2}, {"blocksize": "40B"}):
        ours = [(t.data, t._metadata) for t in
                FilePartitioningStage(file_paths=root, **kwargs).process(EmptyTask())]
        theirs = [(t.data, t._metadata) for t in nemo_stage.FilePartitioningStage(
            file_paths=root, **kwargs).process(NemoEmptyTask())]
        assert ours == theirs
