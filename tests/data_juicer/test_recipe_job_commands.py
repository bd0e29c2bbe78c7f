"""curator_dask's own job commands on a Data-Juicer recipe job: ``status`` (the table and one
job), ``report`` and ``stop``, run as a user runs them, on real recipe runs whose job folder is
Data-Juicer's layout (curator_dask/jobs/dj_format.py reads it)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from curator_dask.jobs.index import ENV_VAR
from tests.data_juicer.helpers import SRC, TWELVE_OPS, corpus, write_recipe

OPS = [next(iter(op)) for op in TWELVE_OPS]
PARTS = ["--partition.mode", "manual", "--partition.num_of_partitions", "3"]


def _env(index: Path) -> dict[str, str]:
    """The environment of the commands: this module's own job index, not the user's."""
    return dict(os.environ, PYTHONPATH=SRC, **{ENV_VAR: str(index)})


def _cli(env: dict[str, str], cwd: Path, *args: str, check: bool = True, timeout: float = 300
         ) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([sys.executable, "-m", "curator_dask", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)
    if check:
        assert proc.returncode == 0, (proc.stdout[-2000:], proc.stderr[-3000:])
    return proc


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A completed run of the 12-operator recipe (3 partitions), job ``cmd-job``, and the
    per-operator counts its run printed."""
    root = tmp_path_factory.mktemp("dj-job-commands")
    data = corpus(root, max_bytes=300_000)
    recipe = write_recipe(root / "recipe.yaml", data, root / "out" / "result.jsonl",
                          TWELVE_OPS, executor_type="dask")
    env = _env(root / "jobs.json")
    run = _cli(env, root, "run", str(recipe), *PARTS, "--job_id", "cmd-job")
    printed = {m[1]: (int(m[2].replace(",", "")), int(m[3].replace(",", "")))
               for m in re.finditer(r"^\s+(\w+)\s+([\d,]+) ->\s+([\d,]+) rows", run.stdout,
                                    re.MULTILINE)}
    assert list(printed) == OPS, run.stdout
    elsewhere = root / "elsewhere"  # the commands run from another folder: found by the index
    elsewhere.mkdir()
    return {"root": root, "env": env, "counts": printed, "cwd": elsewhere,
            "job_dir": root / "out" / "cmd-job"}


def test_status_lists_the_recipe_job(job: dict[str, Any]) -> None:
    listed = _cli(job["env"], job["cwd"], "status", "--all")
    line = next(x for x in listed.stdout.splitlines() if "cmd-job" in x)
    assert "completed" in line and str(job["root"] / "out") in line, listed.stdout
    local = _cli(job["env"], job["cwd"], "status", "--work-dir", str(job["root"] / "out"))
    assert "cmd-job" in local.stdout and "completed" in local.stdout, local.stdout
    rows = json.loads(_cli(job["env"], job["cwd"], "status", "--all", "--json").stdout)
    row = next(r for r in rows if r["job_id"] == "cmd-job")
    assert row["state"] == "completed" and row["job_dir"] == str(job["job_dir"])
    assert row["sources"]["total"] == 3 and row["sources"]["completed"] == 3  # partitions


def test_status_of_the_job_shows_each_operator_and_its_counts(job: dict[str, Any]) -> None:
    data = json.loads(_cli(job["env"], job["cwd"], "status", "cmd-job", "--json").stdout)
    assert data["state"] == "completed" and data["format"] == "data_juicer"
    assert [s["stage"] for s in data["stages"]] == OPS
    for stage in data["stages"]:
        assert (stage["items_in"], stage["items_out"]) == job["counts"][stage["stage"]], stage
        assert stage["rows_dropped"] == stage["items_in"] - stage["items_out"]
        assert stage["tasks_in"] == 3 and stage["sources_done"] == 3  # every partition
    text = _cli(job["env"], job["cwd"], "status", "cmd-job").stdout
    assert "job cmd-job  completed" in text and "3/3 done" in text, text
    dedup = job["counts"]["document_deduplicator"]
    assert re.search(rf"document_deduplicator .*\b{dedup[0]}\b.*\b{dedup[1]}\b", text), text
    detailed = _cli(job["env"], job["cwd"], "status", "cmd-job", "--detailed").stdout
    for name in OPS:  # the detail table shows every operator's name in full
        assert name in detailed, (name, detailed)
    assert "3 completed" in detailed and "partition 2" in detailed, detailed


def test_report_of_the_job(job: dict[str, Any]) -> None:
    out = job["root"] / "report.html"
    proc = _cli(job["env"], job["cwd"], "report", "cmd-job", "-o", str(out))
    assert proc.stdout.strip() == str(out)
    html = out.read_text()
    assert "Job cmd-job" in html and "Partitions (attempt 1 of 1)" in html
    for name, (rows_in, rows_out) in job["counts"].items():
        assert re.search(rf"<td>{name}</td><td>3</td><td>3</td><td>{rows_in}</td>"
                         rf"<td>{rows_out}</td>", html), name
    partitions = re.findall(r"<td>partition (\d)</td><td>completed</td>", html)
    assert partitions == ["0", "1", "2"]


def test_the_python_api_reads_the_job(job: dict[str, Any],
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    from curator_dask.jobs import JobUtils, show_job_progress

    monkeypatch.setenv(ENV_VAR, job["env"][ENV_VAR])
    progress = show_job_progress("cmd-job", detailed=True)
    assert progress["percent"] == 100.0 and len(progress["partitions"]) == 3
    utils = JobUtils("cmd-job")
    assert utils.load_job_summary()["state"] == "completed"
    assert len(utils.load_event_logs(types=["partition_complete"])) == 3
    ops = utils.load_event_logs(types=["op_complete"], run_id="last")
    assert {e["stage"] for e in ops} == set(OPS) and len(ops) == 3 * len(OPS)


def _dj_summary(job_dir: Path) -> dict[str, Any]:
    try:
        return json.loads((job_dir / "job_summary.json").read_text())
    except (OSError, ValueError):
        return {}


def _op_completes(job_dir: Path) -> int:
    return sum(line.count('"op_complete"') for path in job_dir.glob("events_*.jsonl")
               for line in path.read_text().splitlines())


@pytest.mark.parametrize("stopper", ["curator_dask", "data_juicer"])
def test_stop_a_running_recipe_job_then_resume_it(tmp_path: Path, stopper: str) -> None:
    """``python -m curator_dask stop JOB`` and Data-Juicer's own stopper
    (``python -m data_juicer.utils.job.stopper JOB``) both stop a running recipe job."""
    from curator_dask.jobs.monitor import progress_data

    data = corpus(tmp_path, max_bytes=3_000_000)
    recipe = write_recipe(tmp_path / "recipe.yaml", data, tmp_path / "out" / "result.jsonl",
                          TWELVE_OPS, executor_type="dask")
    env = _env(tmp_path / "jobs.json")
    # Data-Juicer's own operator code, one partition at a time: the run lasts well beyond its
    # first op_complete, so that the stop lands while it runs
    args = ["--no-fast-ops", "--partition.mode", "manual", "--partition.num_of_partitions",
            "16", "--partition.max_concurrent_partitions", "1", "--checkpoint.strategy",
            "every_op"]
    job_dir = tmp_path / "out" / "stop-job"
    proc = subprocess.Popen([sys.executable, "-m", "curator_dask", "run", str(recipe), *args,
                             "--job_id", "stop-job"], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 300
        while proc.poll() is None and time.monotonic() < deadline:
            if _dj_summary(job_dir).get("status") == "running" and _op_completes(job_dir):
                break
            time.sleep(0.05)
        assert proc.poll() is None, "the run ended before it could be stopped"
        running = progress_data(str(job_dir))  # in this process: no time lost starting one
        assert running["state"] == "running" and running["pid"] == proc.pid
        if stopper == "curator_dask":
            stop = _cli(env, tmp_path, "stop", "stop-job", "--timeout", "240", timeout=300)
            assert f"sent SIGTERM to driver {proc.pid}" in stop.stdout, stop.stdout
            assert "job stop-job: stopped" in stop.stdout, stop.stdout
        else:
            # The stopper waits for the driver's pid to go: as a shell does, this process
            # reaps its child meanwhile (an unreaped zombie would keep the pid alive)
            import threading

            ended: dict[str, tuple[str, str]] = {}
            reaper = threading.Thread(target=lambda: ended.update(io=proc.communicate()))
            reaper.start()
            dj = subprocess.run([sys.executable, "-m", "data_juicer.utils.job.stopper",
                                 "stop-job", "--base-dir", str(tmp_path / "out"),
                                 "--timeout", "240"], capture_output=True, text=True,
                                env=env, timeout=300)
            assert dj.returncode == 0, dj.stdout + dj.stderr
            reaper.join(timeout=120)
        out, err = ended["io"] if stopper == "data_juicer" else proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 3, err[-3000:]
    assert _dj_summary(job_dir)["status"] == "stopped"
    stopped = _cli(env, tmp_path, "status", "stop-job").stdout
    assert "stopped" in stopped and "resume with:" in stopped, stopped
    assert "not running" in _cli(env, tmp_path, "stop", "stop-job").stdout

    _cli(env, tmp_path, "run", str(recipe), *args, "--resume", "stop-job", timeout=600)
    done = json.loads(_cli(env, tmp_path, "status", "stop-job", "--json",
                           "--detailed").stdout)
    assert done["state"] == "completed" and done["attempts"] == 2
    assert done["sources"]["completed"] == 16
    html = Path(_cli(env, tmp_path, "report", "stop-job").stdout.strip()).read_text()
    assert "stopped" in html and "attempt 2 of 2" in html
