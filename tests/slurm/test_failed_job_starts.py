"""SLURM worker jobs that end before their Dask worker joins (a real local SLURM).

Each job here runs a ``job_script_prologue`` that exits 1 (or, in the last test, exits 1 once
a file is removed), as a bad ``python`` or a broken environment would: without the watchdog's
count the run would wait forever for workers that never come. The run must instead fail with
``WorkerJobsFailedError`` naming each job, its state and its output file, after
``slurm.max-failed-job-starts`` of them in a row, keep what completed in its checkpoint, and
leave no job behind.
"""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
import threading
import uuid
from pathlib import Path
from typing import Any

import pytest

from curator_dask.sample_data import generate_jsonl
from tests.helpers import cli, completed_ids, import_path, poll_for, slow_pipeline
from tests.slurm.local_slurm import local_slurm, network_kwargs

_reason = local_slurm()
pytestmark = [pytest.mark.slurm, pytest.mark.slow, pytest.mark.timeout(300),
              pytest.mark.skipif(_reason is not None, reason=_reason or "")]

FAST = {"curator-dask.slurm.watchdog-interval": 0.5, "curator-dask.slurm.adapt-interval": 0.5}


def _queued(name: str) -> str:
    return subprocess.run(["squeue", "-h", "-n", name, "-o", "%i %T %r"], capture_output=True,
                          text=True, check=True).stdout.strip()


def _job_kwargs(tmp_path: Path, name: str, prologue: list[str]) -> dict[str, Any]:
    return {"cores": 1, "memory": "1GB", "processes": 1, "queue": "debug",
            "walltime": "00:05:00", **network_kwargs(dashboard_address=None),
            "log_directory": str(tmp_path / "logs"), "python": sys.executable,
            "job_name": name, "job_script_prologue": prologue}


def _plain_pipeline(tmp_path: Path) -> Any:
    from curator_dask import JsonlReader, JsonlWriter, Pipeline

    generate_jsonl(str(tmp_path / "input"), files=6, docs_per_file=2, seed=11)
    return (Pipeline(name="failed-starts")
            .add_stage(JsonlReader(file_paths=str(tmp_path / "input")))
            .add_stage(JsonlWriter(path=str(tmp_path / "output"))))


def _in_thread(fn: Any) -> tuple[threading.Thread, dict[str, Any]]:
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["result"] = fn()
        except BaseException as exc:  # noqa: BLE001 (the test judges it)
            box["error"] = exc

    thread = threading.Thread(target=target, name="failed-starts-run", daemon=True)
    thread.start()
    return thread, box


def _wait_for_end(thread: threading.Thread, name: str) -> None:
    poll_for(lambda: not thread.is_alive(), 150,
             lambda: f"the run did not end; its worker jobs in squeue: {_queued(name)!r}",
             interval=0.2, on_timeout=lambda: subprocess.run(["scancel", "-n", name]))


def _failed_jobs(error: BaseException, name: str, log_dir: Path) -> list[str]:
    """The job ids the error names, each checked: a job of this cluster that SLURM ran and
    failed, and its output and error files, which exist."""
    from curator_dask.errors import WorkerJobsFailedError

    assert isinstance(error, WorkerJobsFailedError), repr(error)
    assert isinstance(error, RuntimeError)
    text = str(error)
    assert "\n" not in text, text  # the command line prints it as one line
    found = re.findall(r"job (\d+) (\w+), exit code (\S+) \([^)]*\), output (\S+), errors "
                       r"(\S+?)[;.] ", text)
    assert found, text
    for job_id, state, code, out, err in found:
        assert (state, code) == ("FAILED", "1:0"), text
        assert Path(out) == log_dir / f"{name}-{job_id}.out", text  # dask-jobqueue's -o
        assert Path(err) == log_dir / f"{name}-{job_id}.err", text
        assert Path(out).exists() and Path(err).exists(), text
        shown = subprocess.run(["scontrol", "show", "job", job_id], capture_output=True,
                               text=True, check=True).stdout
        assert f"JobName={name}" in shown, shown
    return [job_id for job_id, *_ in found]


def test_adaptive_cluster_whose_jobs_exit_at_start_fails_the_run_naming_them(tmp_path):
    """``adapt=(0, 2)``: the two jobs asked for exit at once, are replaced, and the run fails
    once 3 ended in a row, instead of waiting with an empty queue."""
    pytest.importorskip("dask_jobqueue")
    import dask

    from curator_dask import DaskExecutor

    pipeline = _plain_pipeline(tmp_path)
    name = f"failstart-{uuid.uuid4().hex[:8]}"
    kwargs = _job_kwargs(tmp_path, name, ["exit 1"])
    with dask.config.set({**FAST, "curator-dask.slurm.max-failed-job-starts": 3}):
        executor = DaskExecutor(cluster="slurm", adapt=(0, 2), progress=False,
                                cluster_kwargs=kwargs)
        thread, box = _in_thread(lambda: pipeline.run(
            executor=executor, checkpoint_path=str(tmp_path / "ckpt")))
        _wait_for_end(thread, name)
    assert "result" not in box, box
    jobs = _failed_jobs(box["error"], name, tmp_path / "logs")
    assert len(set(jobs)) >= 3, jobs  # the first two were replaced: more than adapt's maximum
    assert "slurm.max-failed-job-starts=3" in str(box["error"])
    assert completed_ids(tmp_path / "ckpt") == set()  # the checkpoint was closed, readable
    assert not (tmp_path / "output").exists() or not list((tmp_path / "output").iterdir())
    poll_for(lambda: _queued(name) == "", 30, lambda: f"jobs left: {_queued(name)}")


def test_fixed_size_cluster_whose_jobs_exit_at_start_fails_before_its_timeout(tmp_path):
    """``jobs=2``: the driver waits for a first worker (60 s by default); it fails as soon as
    2 jobs ended in a row, with the same error."""
    pytest.importorskip("dask_jobqueue")
    import dask

    from curator_dask import DaskExecutor

    pipeline = _plain_pipeline(tmp_path)
    name = f"failstart-{uuid.uuid4().hex[:8]}"
    kwargs = _job_kwargs(tmp_path, name, ["exit 1"])
    settings = {**FAST, "curator-dask.slurm.max-failed-job-starts": 2,
                # past the test's own deadline: only the failed starts can end the wait
                "curator-dask.cluster.wait-for-workers-timeout": 900}
    with dask.config.set(settings):
        executor = DaskExecutor(cluster="slurm", jobs=2, progress=False, cluster_kwargs=kwargs)
        thread, box = _in_thread(lambda: pipeline.run(executor=executor))
        _wait_for_end(thread, name)
    assert "result" not in box, box
    jobs = _failed_jobs(box["error"], name, tmp_path / "logs")
    assert len(set(jobs)) >= 2, jobs
    assert executor.cluster is None  # the cluster that could not start was closed
    poll_for(lambda: _queued(name) == "", 30, lambda: f"jobs left: {_queued(name)}")


def test_replacements_that_die_at_start_end_a_run_whose_first_worker_worked(tmp_path):
    """``jobs=1``: the first job's worker processes sources, then is cancelled; each
    replacement exits at start. The joined job is not counted, the 2 replacements are, and
    what completed before stays in the checkpoint."""
    pytest.importorskip("dask_jobqueue")
    import cloudpickle
    import dask

    from curator_dask import DaskExecutor, JsonlReader, JsonlWriter, Pipeline

    slow_mod = import_path(_write(tmp_path / "slow_failstart_mod.py", slow_pipeline(0.5)))
    cloudpickle.register_pickle_by_value(slow_mod)  # the worker jobs cannot import it
    generate_jsonl(str(tmp_path / "input"), files=8, docs_per_file=1, seed=5)
    output = tmp_path / "output"
    pipeline = (Pipeline(name="failstart-after-work")
                .add_stage(JsonlReader(file_paths=str(tmp_path / "input")))
                .add_stage(slow_mod.Slow())
                .add_stage(JsonlWriter(path=str(output))))
    allow = tmp_path / "allow-start"
    allow.touch()
    name = f"failstart-{uuid.uuid4().hex[:8]}"
    kwargs = _job_kwargs(tmp_path, name, [f"test -e {allow} || exit 1"])
    settings = {**FAST, "curator-dask.slurm.max-failed-job-starts": 2,
                "distributed.deploy.lost-worker-timeout": "1s"}
    with dask.config.set(settings):
        executor = DaskExecutor(cluster="slurm", jobs=1, progress=False, cluster_kwargs=kwargs)
        thread, box = _in_thread(lambda: pipeline.run(
            executor=executor, checkpoint_path=str(tmp_path / "ckpt")))
        poll_for(lambda: len(list(output.glob("*.jsonl"))) >= 2 or not thread.is_alive(), 150,
                 lambda: f"the first worker wrote no output; squeue: {_queued(name)!r}",
                 interval=0.1, on_timeout=lambda: subprocess.run(["scancel", "-n", name]))
        first = _queued(name).split()
        assert first and thread.is_alive(), (first, box)
        allow.unlink()  # from now on every job of this cluster exits at start
        subprocess.run(["scancel", first[0]], check=True)
        _wait_for_end(thread, name)
    assert "result" not in box, box
    jobs = _failed_jobs(box["error"], name, tmp_path / "logs")
    assert first[0] not in jobs and len(set(jobs)) >= 2, (first, jobs)
    written = len(list(output.glob("*.jsonl")))
    done = completed_ids(tmp_path / "ckpt")
    assert 1 <= len(done) <= written < 8, (done, written)
    poll_for(lambda: _queued(name) == "", 30, lambda: f"jobs left: {_queued(name)}")


def test_cli_run_whose_worker_jobs_exit_at_start_exits_1_with_one_line(tmp_path):
    """``run --cluster slurm --adapt 0:2``: exit code 1 and one line naming the jobs."""
    pytest.importorskip("dask_jobqueue")
    (tmp_path / "pipe.py").write_text(textwrap.dedent("""
        from curator_dask import JsonlReader, JsonlWriter, Pipeline

        def build():
            return (Pipeline(name="failstart-cli").add_stage(JsonlReader(file_paths="input"))
                    .add_stage(JsonlWriter(path="output")))
    """))
    generate_jsonl(str(tmp_path / "input"), files=4, docs_per_file=2, seed=3)
    name = f"failstart-{uuid.uuid4().hex[:8]}"
    env = {"DASK_JOBQUEUE__SLURM__CORES": "1", "DASK_JOBQUEUE__SLURM__MEMORY": "1GB",
           "DASK_JOBQUEUE__SLURM__PROCESSES": "1", "DASK_JOBQUEUE__SLURM__QUEUE": "debug",
           "DASK_JOBQUEUE__SLURM__WALLTIME": "00:05:00",
           "DASK_JOBQUEUE__SLURM__INTERFACE": "lo",
           "DASK_JOBQUEUE__SLURM__LOG_DIRECTORY": str(tmp_path / "logs"),
           "DASK_JOBQUEUE__SLURM__PYTHON": sys.executable,
           "DASK_JOBQUEUE__SLURM__JOB_NAME": name,
           "DASK_JOBQUEUE__SLURM__JOB_SCRIPT_PROLOGUE": '["exit 1"]',
           "DASK_JOBQUEUE__SLURM__SCHEDULER_OPTIONS": '{"dashboard_address": None}',
           "DASK_CURATOR_DASK__SLURM__MAX_FAILED_JOB_STARTS": "2",
           "DASK_CURATOR_DASK__SLURM__WATCHDOG_INTERVAL": "0.5",
           "DASK_CURATOR_DASK__SLURM__ADAPT_INTERVAL": "0.5"}
    try:
        done = cli("run", "pipe.py:build", "--cluster", "slurm", "--adapt", "0:2",
                   "--checkpoint-path", "ckpt", "--no-progress", cwd=tmp_path, env=env,
                   timeout=150)
    finally:
        subprocess.run(["scancel", "-n", name], check=False)
    assert done.returncode == 1, done.stderr[-3000:]
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("python -m curator_dask run: failed: WorkerJobsFailedError: "), last
    assert len(set(re.findall(r"job (\d+) FAILED", last))) >= 2, last
    assert completed_ids(tmp_path / "ckpt") == set()


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path
