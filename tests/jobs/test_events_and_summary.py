"""The job event log and job summary files."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from curator_dask.jobs.events import EventLog, read_events
from curator_dask.jobs.summary import read_summary, write_summary


def test_seq_strictly_increases_across_attempts(tmp_path):
    path = str(tmp_path / "job" / "events.jsonl")
    with EventLog(path, job_id="j1", run_id="r1") as log:
        log.emit("job_start", pid=1)
        log.emit("sources_planned", total=3, skipped=0, to_process=3)
    with EventLog(path, job_id="j1", run_id="r2") as log:
        log.emit("run_resume")
        log.emit("job_complete")
    records = read_events(path)
    assert [r["seq"] for r in records] == [1, 2, 3, 4]
    assert [r["run_id"] for r in records] == ["r1", "r1", "r2", "r2"]
    assert all(r["job_id"] == "j1" and r["ts"].endswith("Z") for r in records)
    assert records[1]["total"] == 3


def test_torn_last_line_from_a_killed_writer_is_skipped(tmp_path):
    path = str(tmp_path / "events.jsonl")
    code = textwrap.dedent(f"""
        import os, signal
        from curator_dask.jobs.events import EventLog
        log = EventLog({path!r}, job_id="j", run_id="r1")
        for _ in range(5):
            log.emit("warning", message="x")
        log._file.write('{{"seq": 6, "job_id": "j", "ty')  # half a record
        log._file.flush()
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == -9
    assert [r["seq"] for r in read_events(path)] == [1, 2, 3, 4, 5]
    with EventLog(path, job_id="j", run_id="r2") as log:
        assert log.emit("run_resume")["seq"] == 6


def test_unknown_event_type_is_refused(tmp_path):
    with EventLog(str(tmp_path / "e.jsonl"), job_id="j", run_id="r") as log, \
            pytest.raises(ValueError, match="unknown event type 'jobstart'"):
        log.emit("jobstart")


def test_summary_is_replaced_atomically_and_validated(tmp_path):
    path = str(tmp_path / "job_summary.json")
    write_summary(path, job_id="j", state="running", sources={"total": 3})
    first = read_summary(path)
    assert first["state"] == "running" and first["pid"] == os.getpid()
    write_summary(path, job_id="j", state="completed")
    assert read_summary(path)["state"] == "completed"
    assert sorted(os.listdir(tmp_path)) == ["job_summary.json"]  # no temp files left
    with pytest.raises(ValueError, match="job state must be one of"):
        write_summary(path, job_id="j", state="done")
    assert json.loads(Path(path).read_text())["state"] == "completed"
    assert read_summary(str(tmp_path / "missing.json")) is None


def test_event_volume_stays_bounded_at_100000_sources():
    """100,000 one-source Dask tasks through the executor's event stream: per-task records up
    to the detail limit, then per-window sums that still add up to every source and row (and
    every submission: ``source_start``); one ``stage_start`` per stage that ran."""
    from curator_dask.backends.counts import StageCount
    from curator_dask.backends.dask.events import EventStream
    from curator_dask.backends.dask.worker import GroupResult

    class Stage:
        def __init__(self, name):
            self.name = name

    records = []
    stream = EventStream(lambda type_, **f: records.append((type_, f)),
                          [Stage("src"), Stage("filter"), Stage("writer")], window=0.05)
    for i in range(100_000):
        result = GroupResult(batches=[], counts={1: StageCount(calls=1, items_in=10, items_out=9),
                                                 2: StageCount(calls=1, items_in=9)},
                             ended={1: 1.0, 2: 1.0})
        stream.chunk_submitted([f"s{i}"])
        stream.chunk_done([f"s{i}"], result)
    stream.close()
    assert len(records) < 25_000
    started = [f for t, f in records if t == "source_start"]
    assert {f["scope"] for f in started} == {"task", "window"}
    assert sum(f["count"] for f in started) == 100_000
    assert [f["stage"] for t, f in records if t == "stage_start"] == ["filter", "writer"]
    task = [f for t, f in records if t == "stage_complete" and f["scope"] == "task"]
    window = [f for t, f in records if t == "stage_complete" and f["scope"] == "window"]
    assert task and window
    assert sum(f["rows_in"] for f in task + window if f["stage"] == "filter") == 1_000_000
    done = [f["count"] for t, f in records if t == "source_complete"]
    assert sum(done) == 100_000


def test_live_progress_counts_sources_per_stage():
    from curator_dask.backends.counts import StageCount
    from curator_dask.backends.dask.progress import LiveProgress

    class Stage:
        def __init__(self, name):
            self.name = name

    live = LiveProgress([Stage("src"), Stage("a"), Stage("b")], "run123456789")
    live.planned(10, 2, 8)
    live.stage_advanced((1,), 3)  # group (a) finished 3 sources; b has not seen them yet
    snap = live.snapshot()
    assert snap["run_key_token"] == "run12345"
    assert snap["stages"] == [{"stage": "a", "index": 1, **StageCount().__dict__,
                               "sources_done": 3}]
    live.stage_advanced((2,), 2)
    live.chunk_done(["s1", "s2"], {"s2"}, {1: StageCount(tasks_in=2), 2: StageCount(tasks_in=2)})
    snap = live.snapshot()
    assert snap["sources"]["completed"] == 1 and snap["sources"]["failed"] == 1
    assert [(r["stage"], r["sources_done"], r["tasks_in"]) for r in snap["stages"]] == [
        ("a", 3, 2), ("b", 2, 2)]
    live.head_done({0: StageCount(tasks_in=1, tasks_out=10)})  # the driver's stages count too
    assert [(r["index"], r["tasks_out"]) for r in live.snapshot()["stages"]] == [
        (0, 10), (1, 0), (2, 0)]
