"""`status` on a shared account and for stopped jobs (issue 20, items 7 and 10): a stopped job
reads as stopped with its reason, never as an error; without JOB, `status` lists the work
dir's jobs plus the running ones from anywhere (`--all`: the whole index); each job is one
line at 150 columns (work dirs shortened: `~` for home, the middle elided)."""

from __future__ import annotations

import json
import os
import re
import signal
import time
from pathlib import Path

import pytest

from curator_dask.jobs.index import ENV_VAR
from curator_dask.sample_data import generate_jsonl
from tests.helpers import CLI, cli, in_terminal, poll_for, slow_pipeline, start_cli

RUN = ("run", "pipe.py:build", "--workers", "1", "--no-progress")


def project(root: Path, seconds: float, files: int) -> Path:
    """A folder with ``pipe.py`` (a stage sleeping ``seconds`` per batch) and ``files`` inputs."""
    root.mkdir(parents=True)
    (root / "pipe.py").write_text(slow_pipeline(seconds, root.name))
    generate_jsonl(str(root / "input"), files=files, docs_per_file=2, seed=3)
    return root


def listed(cwd: Path, env: dict, *args: str) -> list[str]:
    """The job ids `status --json [ARGS]` lists, run in ``cwd``."""
    out = cli("status", "--json", *args, cwd=cwd, env=env)
    assert out.returncode == 0, out.stderr
    return [row["job_id"] for row in json.loads(out.stdout)]


def running_with_sources(cwd: Path, env: dict, job: str) -> dict | None:
    out = cli("status", job, "--json", cwd=cwd, env=env)
    if out.returncode == 0 and (summary := json.loads(out.stdout)).get("sources"):
        return summary if summary["state"] == "running" else None
    return None


@pytest.mark.slow
def test_a_job_stopped_by_sigusr1_reads_as_stopped_with_its_reason(tmp_path, monkeypatch):
    env = {ENV_VAR: str(tmp_path / "index.json")}
    here = project(tmp_path / "p", 0.7, files=8)
    proc = start_cli(*RUN, "--job-id", "sig-stopped", cwd=here, env=env)
    try:
        poll_for(lambda: list((here / "output").glob("*.jsonl")), 90, "no output appeared",
                 interval=0.1, on_timeout=proc.kill)
        proc.send_signal(signal.SIGUSR1)
        proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 3
    one = cli("status", "sig-stopped", cwd=here, env=env)
    assert one.returncode == 0, one.stderr
    assert "sig-stopped  stopped  pid" in one.stdout, one.stdout
    reason = [line for line in one.stdout.splitlines() if line.startswith("stopped: ")]
    assert len(reason) == 1 and reason[0].startswith(
        "stopped: received SIGUSR1; "), one.stdout
    assert re.match(r"stopped: received SIGUSR1; \d+ of 8 source partitions ", reason[0]), reason
    assert "error" not in one.stdout and "RunStopped" not in one.stdout, one.stdout
    assert "resume with: python -m curator_dask run pipe.py:build" in one.stdout
    row = next(x for x in cli("status", cwd=here, env=env).stdout.splitlines()
               if "sig-stopped" in x)
    assert " stopped " in row, row
    # the notebook's view of the same job: HTML, stopped with the reason
    from curator_dask.jobs.status import status

    monkeypatch.setenv(ENV_VAR, env[ENV_VAR])
    html = status("sig-stopped", work_dir=here / "curator-dask-jobs")._repr_html_()
    assert ">stopped</b>: received SIGUSR1; " in html and "RunStopped" not in html, html


@pytest.mark.slow
def test_status_lists_the_work_dirs_jobs_and_running_ones_from_anywhere(tmp_path, monkeypatch):
    """Also the job API on the running job (issue 21, item 6): ``list_running_jobs`` and
    ``stop --list`` list it, ``status --detailed`` shows its running partitions, a watch
    (``--interval``, which implies ``--watch``) redraws until it ends, and ``stop_job`` stops
    it as ``stop JOB`` does."""
    from curator_dask.jobs import list_running_jobs, show_job_progress, stop_job

    env = {ENV_VAR: str(tmp_path / "index.json")}
    monkeypatch.setenv(ENV_VAR, env[ENV_VAR])  # the API in this process reads the same index
    a, b = project(tmp_path / "a", 0.0, files=2), project(tmp_path / "b", 0.0, files=2)
    for where, job in ((a, "job-a"), (b, "job-b")):
        done = cli(*RUN, "--job-id", job, cwd=where, env=env, timeout=240)
        assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    c = project(tmp_path / "c", 1.0, files=40)
    proc = start_cli(*RUN, "--job-id", "job-c", cwd=c, env=env)
    try:
        poll_for(lambda: running_with_sources(c, env, "job-c"), 90, "job-c never ran",
                 interval=0.2, on_timeout=proc.kill)
        assert listed(a, env) == ["job-a", "job-c"]  # b's finished job is left out
        assert listed(a, env, "--all") == ["job-a", "job-b", "job-c"]
        assert listed(a, env, "--work-dir", str(b / "curator-dask-jobs")) == ["job-b", "job-c"]
        table = cli("status", cwd=a, env=env).stdout
        assert "job-b" not in table and "1 more job in the job index" in table, table
        assert "status --all" in table
        running = list_running_jobs()  # the finished job-a and job-b are not running
        assert [(j["job_id"], j["pid"], j["driver_checked"]) for j in running] == [
            ("job-c", proc.pid, True)]
        assert running[0]["job_dir"] == str(c / "curator-dask-jobs" / "job-c")
        listing = cli("stop", "--list", cwd=a, env=env)
        assert listing.returncode == 0, listing.stderr
        assert [line.split()[0] for line in listing.stdout.splitlines()] == ["job-c"]
        assert f"pid {proc.pid} on " in listing.stdout and "/40 sources done" in listing.stdout
        progress = poll_for(lambda: (p := show_job_progress("job-c", detailed=True))[
            "partitions"] and p, 60, "job-c's event log never listed a partition",
            on_timeout=proc.kill)
        assert progress["state"] == "running" and progress["sources"]["total"] == 40
        detailed = cli("status", "job-c", "--detailed", cwd=a, env=env)
        assert detailed.returncode == 0 and "partitions (Dask tasks of sources" in detailed.stdout
        assert "running" in detailed.stdout.split("partitions (", 1)[1], detailed.stdout
        watch = start_cli("status", "job-c", "--json", "--interval", "0.2", cwd=a, env=env)
        first = watch.stdout.readline()  # the watch has drawn once before the stop
        assert json.loads(first)["state"] == "running", first
        outcome = stop_job("job-c", timeout=60)
        assert (outcome.stopped, outcome.how, outcome.state) == (True, "stop request",
                                                                "stopped"), outcome
        rest, _ = watch.communicate(timeout=60)  # the watch ends by itself with the job
        proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 3 and watch.returncode == 0
    states = [json.loads(line)["state"] for line in rest.splitlines()]
    assert states[-1] == "stopped" and set(states[:-1]) <= {"running"}, states
    assert list_running_jobs() == [] and "no running jobs" in cli(
        "stop", "--list", cwd=a, env=env).stdout
    again = stop_job(c / "curator-dask-jobs" / "job-c")  # by its folder: nothing to do
    assert (again.was_running, again.stopped, again.how) == (False, False, "not running")
    assert listed(a, env) == ["job-a"]  # stopped elsewhere: no longer listed here
    assert listed(a, env, "--all") == ["job-a", "job-b", "job-c"]
    assert "2 more jobs in the job index" in cli("status", cwd=a, env=env).stdout
    one = cli("status", "job-c", cwd=a, env=env).stdout  # found through the index
    assert "stopped: stop requested with `python -m curator_dask stop`; " in one, one
    assert "error" not in one, one


def summary_row(job_id: str, state: str, job_dir: str, ended: str | None) -> dict:
    return {"job_id": job_id, "state": state, "started": "2026-12-01T21:38:02Z",
            "ended": ended, "job_dir": job_dir,
            "sources": {"total": 1_250_000, "skipped": 250_000, "completed": 1_000_000,
                        "failed": 12}}


def test_each_job_is_one_line_at_150_columns(tmp_path, monkeypatch):
    """The widest states, two-day runs, 7-digit counts and work dirs of 200 characters under
    the home folder: every row is one line of at most 150 columns, the job id whole, the work
    dir as ``~/`` + start + ``…`` + end."""
    from rich.console import Console

    from curator_dask.jobs.view import jobs_table

    monkeypatch.setenv("HOME", str(tmp_path))
    deep = str(tmp_path / "projects" / ("nested-" * 25) / "curator-dask-jobs")
    states = [("running (driver gone)", None), ("completed", "2026-12-02T03:04:05Z"),
              ("completed_with_failures", "2026-12-02T03:04:05Z"),
              ("stopped", "2026-12-01T22:00:00Z"), ("failed", "2026-12-01T23:00:00Z")]
    rows = [summary_row(f"20261201_21380{i}_a1b2c3", state, f"{deep}/20261201_21380{i}_a1b2c3",
                        ended) for i, (state, ended) in enumerate(states)]
    console = Console(width=150, record=True, file=open(os.devnull, "w"))  # noqa: SIM115
    console.print(jobs_table(rows))
    lines = console.export_text().splitlines()
    assert len(lines) == 2 + len(rows), "\n".join(lines)  # header, rule, one line per job
    assert max(len(line) for line in lines) <= 150
    for line, row in zip(lines[2:], rows, strict=True):
        assert line.split()[0] == row["job_id"] and row["state"] in line, line
        folder = line.rsplit("│", 1)[1].strip()
        assert folder.startswith("~/proj") and "…" in folder, folder
        assert folder.endswith("dask-jobs") and len(folder) >= 20, folder
        assert "1000000" in line and "1250000" in line, line


@pytest.mark.slow
def test_status_at_a_terminal_keeps_each_job_on_one_line(tmp_path, monkeypatch):
    """`status --work-dir DIR` on a 120-column terminal, real jobs in a deep work dir under
    home."""
    from curator_dask.jobs.run import JobRun
    from tests.jobs.test_job_index import Source

    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv(ENV_VAR, str(tmp_path / "index.json"))
    work_dir = tmp_path / "projects" / ("nested-" * 20) / "curator-dask-jobs"
    ids, started = [], {}
    for _ in range(3):
        job = JobRun([Source()], work_dir=str(work_dir), heartbeat=3600)
        job.finish("completed")
        ids.append(job.job_id)
        started[job.job_id] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(job.started))
    status, out = in_terminal([*CLI, "status", "--work-dir", str(work_dir)], cwd=tmp_path)
    assert os.waitstatus_to_exitcode(status) == 0, out
    rows = [line for line in out.splitlines() if "│" in line]
    assert len(rows) == len(ids), out  # no row wrapped onto a second line
    # oldest first: by the second each started (the summary's), then by id (an id's time is
    # its making, which may fall in the second before its start)
    assert [row.split()[0] for row in rows] == sorted(ids, key=lambda i: (started[i], i)), out
    assert all(len(line) <= 120 for line in out.splitlines()), out
    folders = [row.rsplit("│", 1)[1].strip() for row in rows]
    assert all(f.startswith("~/pro") and "…" in f and f.endswith("-jobs") for f in folders), out
