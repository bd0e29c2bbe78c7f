"""The job tools from any directory (issue 13, item 7): the per-user job index, `status`
listing and resolving jobs through it and saying where it looked, `status --watch` without a
job refreshing until Ctrl+C, and `stop --force` described as it behaves."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

from curator_dask.jobs.index import ENV_VAR, find_job, read_index, record_job
from curator_dask.jobs.run import JobRun
from curator_dask.stages.base import ProcessingStage
from tests.helpers import REPO_ROOT, cli, poll_for, start_cli


class Source(ProcessingStage):
    name = "source"
    is_source_stage = True


def finished_job(work_dir: Path, job_id: str) -> str:
    """A job made (and recorded in the index) by a real JobRun, ended as completed."""
    job = JobRun([Source()], work_dir=str(work_dir), job_id=job_id, heartbeat=3600)
    job.finish("completed")
    return job.directory.path


def test_a_job_is_recorded_when_it_starts_and_found_from_elsewhere(tmp_path, job_index):
    path = finished_job(tmp_path / "a" / "jobs", "indexed-job")
    assert {"job_id": "indexed-job", "path": path} in [
        {k: e[k] for k in ("job_id", "path")} for e in read_index()]
    assert str(job_index) == os.environ[ENV_VAR]  # the tests' own index, not the user's
    assert find_job("indexed-job", str(tmp_path / "b")) == [path]
    assert find_job("no-such-job", str(tmp_path / "b")) == []


def test_a_missing_or_corrupt_index_reads_as_empty_and_is_rewritten(tmp_path):
    where = tmp_path / "state" / "jobs.json"
    assert read_index(str(where)) == []
    where.parent.mkdir()
    where.write_text('{"jobs": [{"job_id": "torn"')  # a torn write from an old version
    assert read_index(str(where)) == []
    assert record_job("j", str(tmp_path / "jobs" / "j"), str(where))
    assert [e["job_id"] for e in read_index(str(where))] == ["j"]
    assert json.loads(where.read_text())["version"] == 1
    assert [p.name for p in where.parent.iterdir()] == ["jobs.json", "jobs.json.lock"]
    blocked = tmp_path / "file"
    blocked.write_text("")
    assert not record_job("j", str(tmp_path / "jobs" / "j"), str(blocked / "jobs.json"))


@pytest.mark.slow
def test_status_stop_and_report_find_jobs_from_another_directory(tmp_path):
    path = finished_job(tmp_path / "project" / "curator-dask-jobs", "from-afar")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    listing = cli("status", "--all", cwd=elsewhere)  # not running, elsewhere: only with --all
    assert listing.returncode == 0, listing.stderr
    row = next(x for x in listing.stdout.splitlines() if "from-afar" in x)
    assert "completed" in row and os.path.dirname(path) in row  # each job shows its work dir
    assert "from-afar" not in cli("status", cwd=elsewhere).stdout
    one = cli("status", "from-afar", cwd=elsewhere)
    assert one.returncode == 0 and "from-afar  completed" in one.stdout, one.stderr
    stop = cli("stop", "from-afar", cwd=elsewhere)
    assert stop.returncode == 0 and "is not running (state: completed)" in stop.stdout
    report = cli("report", "from-afar", cwd=elsewhere, timeout=120)
    assert report.returncode == 0 and report.stdout.strip() == os.path.join(path, "report.html")
    # nothing anywhere: it says where it looked
    empty = {ENV_VAR: str(tmp_path / "empty-index.json")}
    none = cli("status", cwd=elsewhere, env=empty)
    assert none.stdout.strip() == (f"no jobs in {elsewhere / 'curator-dask-jobs'} or in the "
                                   f"job index {tmp_path / 'empty-index.json'}")
    missing = cli("status", "from-afar", cwd=elsewhere, env=empty)
    assert missing.returncode == 2
    assert (f"no job 'from-afar' in {elsewhere / 'curator-dask-jobs'} or in the job index "
            f"{tmp_path / 'empty-index.json'}") in missing.stderr


@pytest.mark.slow
def test_status_watch_without_a_job_refreshes_until_ctrl_c(tmp_path):
    finished_job(tmp_path / "curator-dask-jobs", "watched")
    out = tmp_path / "watch.txt"
    with open(out, "w") as stdout:
        proc = start_cli("status", "--watch", cwd=tmp_path, stdout=stdout)
        try:
            poll_for(lambda: out.read_text().count("jobs at ") >= 2, 60,
                     lambda: f"no second refresh: {out.read_text()!r}", interval=0.2)
            assert proc.poll() is None  # still watching
            proc.send_signal(signal.SIGINT)
            _, err = proc.communicate(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
    assert proc.returncode == 0, err
    assert "Traceback" not in err
    assert out.read_text().count("watched") >= 2


def in_order(text: str, steps: list[str]) -> bool:
    """Whether ``steps`` occur in ``text`` one after the other."""
    at = 0
    for step in steps:
        at = text.find(step, at)
        if at < 0:
            return False
        at += len(step)
    return True


def test_stop_help_and_docs_say_what_force_does():
    """cmd_stop with --force: the cooperative request, at most 5 s, the scheduler's cancel,
    --timeout, SIGTERM, --timeout, SIGKILL; the help and docs/jobs.md say so, in that order."""
    from curator_dask.cli.main import build_parser

    sub = next(a for a in build_parser()._actions if a.dest == "command").choices["stop"]
    force = next(a for a in sub._actions if a.dest == "force").help
    assert in_order(force, ["5 s", "cancel the run's Dask tasks", "wait up to --timeout",
                            "SIGTERM", "SIGKILL if it still runs --timeout later"]), force
    assert "SIGTERM" not in sub.description  # without --force: only the request
    docs = (REPO_ROOT / "docs" / "jobs.md").read_text().split("`stop` is cooperative", 1)[1]
    docs = " ".join(docs.split("\n\n", 1)[0].split())
    assert in_order(docs, ["at most 5 seconds", "cancels the run's Dask tasks",
                           "waits up to `--timeout` again", "SIGTERM",
                           "SIGKILL if it still runs `--timeout` later"]), docs
