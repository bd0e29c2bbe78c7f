"""A stop request belongs to one attempt of a job: a killed driver's request never stops the
resume (issue 12, item 1; docs/design/architecture.md "Jobs")."""

from __future__ import annotations

import json
import os
import signal
import time

import pytest

from curator_dask.sample_data import generate_jsonl
from tests.helpers import cli, poll_for, slow_pipeline, start_cli

PIPELINE = slow_pipeline(0.7, "stale-stop")
RUN = ("run", "pipe.py:build", "--workers", "1", "--no-progress")


def kill_running_job(tmp_path, job_id: str) -> dict:
    """Start job ``job_id`` (6 slow sources), SIGKILL its process group (driver and workers)
    once it has written output, and return the summary it left: state ``running``."""
    (tmp_path / "pipe.py").write_text(PIPELINE)
    generate_jsonl(str(tmp_path / "input"), files=6, docs_per_file=2, seed=12)
    proc = start_cli(*RUN, "--job-id", job_id, cwd=tmp_path, start_new_session=True)
    try:
        poll_for(lambda: list((tmp_path / "output").glob("*.jsonl")), 90, "no output appeared",
                 interval=0.1)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=30)
    summary = json.loads((tmp_path / "curator-dask-jobs" / job_id / "job_summary.json")
                         .read_text())
    assert summary["state"] == "running"
    return summary


def resume_completes(tmp_path, job_id: str) -> str:
    """``--resume job_id`` exits 0 with all 6 outputs; returns its stderr."""
    done = cli(*RUN, "--resume", job_id, cwd=tmp_path, timeout=180)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert len(list((tmp_path / "output").glob("*.jsonl"))) == 6
    return done.stderr


@pytest.mark.slow
def test_stop_of_a_killed_driver_says_so_and_the_resume_completes(tmp_path):
    kill_running_job(tmp_path, "killed")
    # no wait for a driver that is gone: the subprocess's own timeout bounds it, not a clock
    stop = cli("stop", "killed", "--timeout", "3", cwd=tmp_path, timeout=60)
    assert stop.returncode == 1, stop.stdout + stop.stderr
    assert "driver gone" in stop.stderr and "--resume killed" in stop.stderr, stop.stderr
    # no request is left that nobody reads (and that the next attempt would obey)
    assert not (tmp_path / "curator-dask-jobs" / "killed" / "stop_request.json").exists()
    # the job API says the same: not running (its driver is gone), and stop_job refuses
    from curator_dask.jobs import list_running_jobs, stop_job
    from curator_dask.jobs.control import StopError

    assert "killed" not in [j["job_id"] for j in list_running_jobs(work_dir=tmp_path)]
    with pytest.raises(StopError, match=r"driver \(pid \d+\) is gone.*--resume killed"):
        stop_job("killed", timeout=3, work_dir=tmp_path / "curator-dask-jobs")
    assert not (tmp_path / "curator-dask-jobs" / "killed" / "stop_request.json").exists()
    resume_completes(tmp_path, "killed")


@pytest.mark.slow
def test_a_request_for_an_earlier_attempt_is_ignored_and_removed(tmp_path):
    """The driver ran on another host (its pid cannot be checked here), so `stop` leaves a
    request naming that attempt; the resume removes it, says so, and completes."""
    summary = kill_running_job(tmp_path, "elsewhere")
    job_dir = tmp_path / "curator-dask-jobs" / "elsewhere"
    (job_dir / "job_summary.json").write_text(json.dumps({**summary, "host": "another-node"}))
    from curator_dask.jobs import list_running_jobs

    # another host's driver cannot be checked from here: listed as running, and said so
    listed = [j for j in list_running_jobs() if j["job_id"] == "elsewhere"]
    assert [(j["host"], j["driver_checked"]) for j in listed] == [("another-node", False)]
    stop = cli("stop", "elsewhere", "--timeout", "1", cwd=tmp_path, timeout=60)
    assert stop.returncode == 1 and "job elsewhere: running" in stop.stdout, stop.stdout
    request = json.loads((job_dir / "stop_request.json").read_text())
    assert request["run_id"] == summary["run_id"]
    stderr = resume_completes(tmp_path, "elsewhere")
    assert f"ignoring a stop request for attempt {summary['run_id']}" in stderr, stderr[-3000:]
    assert not (job_dir / "stop_request.json").exists()


def _job(tmp_path, job_id: str):
    from curator_dask.jobs.run import JobRun
    from curator_dask.stages.base import ProcessingStage

    class Source(ProcessingStage):
        name = "source"
        is_source_stage = True

    job = JobRun([Source()], work_dir=str(tmp_path), job_id=job_id, heartbeat=3600)
    job._stop.set()  # no heartbeat thread: the test checks for requests itself
    job._thread.join()
    asked: list[str] = []
    job.bind(stop=asked.append, progress=dict)
    return job, asked


def test_an_old_request_without_an_attempt_is_ignored(tmp_path):
    """A request in the old format (no attempt named) counts only if made after the attempt
    started."""
    from curator_dask.jobs.summary import STOP_REQUEST

    job, asked = _job(tmp_path, "old-format")
    path = job.directory.file(STOP_REQUEST)
    try:
        with open(path, "w", encoding="utf-8") as f:
            json.dump({"requested": job.started - 60, "by_pid": 1}, f)
        job._check_stop_request()
        assert asked == [] and not os.path.exists(path)
        with open(path, "w", encoding="utf-8") as f:
            json.dump({"requested": time.time(), "by_pid": 1}, f)
        job._check_stop_request()
        assert len(asked) == 1 and not os.path.exists(path)
    finally:
        job.finish("stopped")


def test_a_request_for_this_attempt_stops_it(tmp_path):
    from curator_dask.jobs.control import request_stop
    from curator_dask.jobs.summary import STOP_REQUEST

    job, asked = _job(tmp_path, "this-attempt")
    try:
        request_stop(job.directory.path)
        with open(job.directory.file(STOP_REQUEST), encoding="utf-8") as f:
            assert json.load(f)["run_id"] == job.run_id
        job._check_stop_request()
        assert asked == ["stop requested with `python -m curator_dask stop`"]
    finally:
        job.finish("stopped")
