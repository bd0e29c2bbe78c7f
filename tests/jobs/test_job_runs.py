"""Runs as jobs: job folder, strict resume, event log and summary, on a real LocalCluster."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from curator_dask import DaskExecutor, JsonlReader, JsonlWriter, Pipeline, ProcessingStage
from curator_dask.jobs import JobUtils
from curator_dask.jobs.events import read_events
from curator_dask.jobs.job import ResumeMismatchError
from curator_dask.jobs.summary import read_summary
from curator_dask.sample_data import generate_jsonl
from tests.resumability.resume_test_stages import FailSoftOn

pytestmark = pytest.mark.slow
# The shared `executor` fixture (tests/conftest.py) with one worker, as this module's own
# fixture had it: its runs were written against one worker process.
EXECUTOR_KWARGS = {"n_workers": 1}


@dataclass
class Boom(ProcessingStage):
    name: str = "boom"

    def process(self, task):
        raise RuntimeError("boom")


def make(tmp_path, *middle) -> Pipeline:
    p = Pipeline(name="job").add_stage(JsonlReader(file_paths=str(tmp_path / "in")))
    for stage in middle:
        p.add_stage(stage)
    return p.add_stage(JsonlWriter(path=str(tmp_path / "out")))


def test_job_resume_events_and_summary(executor, tmp_path):
    generate_jsonl(str(tmp_path / "in"), files=4, docs_per_file=2, seed=2)
    work = str(tmp_path / "jobs")
    first = make(tmp_path, FailSoftOn(bad_ids=("1-0",))).run(
        executor=executor, work_dir=work, job_id="job-a", command="cmd")
    assert first.job_id == "job-a" and len(first) == 3
    job_dir = Path(work) / "job-a"
    summary = read_summary(str(job_dir / "job_summary.json"))
    # one source saw a FailedTask: a state of its own (it stays pending), naming the source
    assert summary["state"] == "completed_with_failures"
    assert summary["resume_command"] == "cmd --resume job-a"
    assert summary["sources"] == {"total": 4, "skipped": 0, "to_process": 4, "completed": 3,
                                  "failed": 1, "in_flight": 0}
    assert summary["failed_source_ids"] == list(first.failed_sources) and len(
        first.failed_sources) == 1
    end = read_events(str(job_dir / "events.jsonl"))[-1]
    assert (end["type"], end["state"], end["failed_sources"]) == (
        "job_complete", "completed_with_failures", 1)
    # resuming with a changed stage parameter is refused, naming it; nothing is deleted
    with pytest.raises(ResumeMismatchError, match=r"params.bad_ids: \[\"1-0\"\] -> \[\]"):
        make(tmp_path, FailSoftOn()).run(executor=executor, work_dir=work, resume="job-a")
    assert (job_dir / "checkpoint").is_dir() and len(list((tmp_path / "out").iterdir())) == 3
    # the unchanged resume finishes the job: only the failed source runs again
    again = make(tmp_path, FailSoftOn(bad_ids=("1-0",))).run(executor=executor, work_dir=work,
                                                             resume="job-a")
    # (the same stage fails the same source again: the job still ends with failures)
    assert again.skipped_sources == 3 and again.failed_sources == first.failed_sources
    assert read_summary(str(job_dir / "job_summary.json"))["state"] == "completed_with_failures"
    events = read_events(str(job_dir / "events.jsonl"))
    seqs = [e["seq"] for e in events]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs) == seqs[-1]
    types = [e["type"] for e in events]
    assert types[0] == "job_start" and "run_resume" in types
    # per attempt: one record for the Dask task that saw the FailedTask, one for the run
    assert types.count("source_failed") == 4 and types[-1] == "job_complete"
    per_task = [e for e in events if e["type"] == "stage_complete" and e["scope"] == "task"]
    assert {e["stage"] for e in per_task} >= {"fail_soft_on", "jsonl_writer"}
    assert all(e["duration"] >= 0 and e["ended"] for e in per_task)
    assert len({e["run_id"] for e in events}) == 2  # the refused attempt wrote nothing
    # the seed's event types, read through the job API (docs/jobs.md "Event log")
    job = JobUtils("job-a", work_dir=work)
    assert job.job_dir == str(job_dir) and job.load_job_summary()["state"] == (
        "completed_with_failures")
    first_run = events[0]["run_id"]
    starts = job.load_event_logs(types="partition_start")
    assert [e["type"] for e in starts] == ["source_start"] * 5  # 4 sources, then the retried 1
    # every partition is submitted before it completes or fails, under the same task id
    ends = job.load_event_logs(types=["partition_complete", "partition_failed"])
    for end in (e for e in ends if e.get("scope") == "task"):
        start = next(e for e in starts if e["task_id"] == end["task_id"]
                     and e["run_id"] == end["run_id"])
        assert start["seq"] < end["seq"] and set(end["source_ids"]) <= set(start["source_ids"])
    assert sum(e["count"] for e in starts if e["run_id"] == first_run) == 4
    # op_start: once per stage of the Dask tasks per attempt, before that stage's first record
    op_start = job.load_event_logs(types=["op_start"], run_id=first_run)
    assert [e["stage"] for e in op_start] == ["jsonl_reader", "fail_soft_on", "jsonl_writer"]
    for e in op_start:
        first = next(r for r in per_task if r["stage"] == e["stage"] and r["run_id"] == first_run)
        assert e["seq"] < first["seq"] and e["task_id"] == first["task_id"]
    assert job.load_event_logs("job_start") == [events[0], next(
        e for e in events if e["type"] == "run_resume")]  # the seed's job_start: each attempt
    assert job.load_event_logs(run_id="last") == [e for e in events if e["run_id"] != first_run]
    with pytest.raises(ValueError, match="unknown event type 'op_begin'.*partition_start"):
        job.load_event_logs(types=["op_begin"])


def test_modified_input_is_named(executor, tmp_path):
    generate_jsonl(str(tmp_path / "in"), files=3, docs_per_file=2, seed=3)
    work = str(tmp_path / "jobs")
    make(tmp_path).run(executor=executor, work_dir=work, job_id="job-b")
    (tmp_path / "in" / "part-00001.jsonl").write_text('{"id": "x", "text": "changed!"}\n')
    with pytest.raises(ResumeMismatchError, match=r"modified: .*part-00001\.jsonl"):
        make(tmp_path).run(executor=executor, work_dir=work, resume="job-b")


def test_job_failed_is_written_when_a_stage_raises(executor, tmp_path):
    generate_jsonl(str(tmp_path / "in"), files=2, docs_per_file=2, seed=4)
    work = str(tmp_path / "jobs")
    with pytest.raises(Exception, match="boom"):
        make(tmp_path, Boom()).run(executor=executor, work_dir=work, job_id="job-c")
    events = read_events(str(Path(work) / "job-c" / "events.jsonl"))
    assert events[-1]["type"] == "job_failed" and "boom" in events[-1]["error"]
    # the stage that raised: stage_failed (the seed's op_failed) just before job_failed
    failed = JobUtils("job-c", work_dir=work).load_event_logs(types="op_failed")
    assert failed == [events[-2]] and failed[0]["stage"] == "boom" and failed[0]["index"] == 2
    assert failed[0]["error"] == "RuntimeError: boom" and failed[0]["source_files"]
    summary = read_summary(str(Path(work) / "job-c" / "job_summary.json"))
    assert summary["state"] == "failed" and "boom" in summary["error"]


def test_job_id_and_resume_must_agree(executor, tmp_path):
    generate_jsonl(str(tmp_path / "in"), files=1, docs_per_file=1)
    with pytest.raises(ValueError, match="disagree"):
        make(tmp_path).run(executor=executor, work_dir=str(tmp_path / "j"), job_id="a",
                           resume="b")


def test_worker_lost_logs_and_resolved_config(tmp_path):
    """A stage SIGKILLs its worker once (a real lost worker; the nanny starts a new one)."""
    import json

    from tests.resumability.resume_test_stages import KillWorkerOnce

    generate_jsonl(str(tmp_path / "in"), files=3, docs_per_file=1, seed=9)
    work = tmp_path / "jobs"
    stage = KillWorkerOnce(victim_id="1-0", marker=str(tmp_path / "killed"))
    with DaskExecutor(n_workers=1, progress=False) as ex:
        result = make(tmp_path, stage).run(executor=ex, work_dir=str(work), job_id="lost")
    assert len(result) == 3 and (tmp_path / "killed").exists()
    events = read_events(str(work / "lost" / "events.jsonl"))
    lost = [e for e in events if e["type"] == "worker_lost"]
    assert len(lost) == 1 and lost[0]["worker"].startswith("tcp://127.0.0.1:")
    run_id = events[0]["run_id"]
    log = (work / "lost" / "logs" / f"driver-{run_id}.log").read_text()
    assert "left the cluster" in log
    resolved = json.loads((work / "lost" / "resolved_config.json").read_text())
    assert resolved["curator-dask"]["execution"]["fuse"] is True
    assert resolved["executor"]["n_workers"] == 1
    assert [s["name"] for s in resolved["pipeline"]["stages"]][-2:] == [
        "kill_worker_once", "jsonl_writer"]
