"""A real SLURM (tools/local-slurm/start.sh): array shards, failure, retry, resubmission.

Skipped, with the reason, when no SLURM controller answers (``sinfo`` fails).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from curator_dask.sample_data import generate_jsonl


def _slurm_available() -> str | None:
    if shutil.which("sbatch") is None:
        return "sbatch is not installed (start one with tools/local-slurm/start.sh)"
    try:
        proc = subprocess.run(["sinfo", "-h"], capture_output=True, text=True, timeout=15)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"sinfo failed: {exc}"
    if proc.returncode != 0:
        return f"no SLURM controller answers: {proc.stderr.strip()}"
    return None


_reason = _slurm_available()
pytestmark = [pytest.mark.slurm, pytest.mark.slow,
              pytest.mark.skipif(_reason is not None, reason=_reason or "")]

PIPELINE = textwrap.dedent("""
    import os
    from dataclasses import dataclass
    from curator_dask import FailedTask, JsonlReader, JsonlWriter, Pipeline, ProcessingStage

    @dataclass
    class FailEverything(ProcessingStage):
        name: str = "fail_everything"
        def process(self, task):
            return FailedTask()

    def build():
        p = Pipeline(name="array-test").add_stage(JsonlReader(file_paths="input"))
        shard = os.environ.get("NEMO_CURATOR_SLURM_ARRAY_SHARD_INDEX")
        if shard is not None and shard == os.environ.get("TEST_FAIL_SHARD"):
            p.add_stage(FailEverything())
        return p.add_stage(JsonlWriter(path=os.environ.get("TEST_OUTPUT", "output")))
""")


def cli(*args: str, cwd: Path, env: dict | None = None, timeout: float = 120):
    return subprocess.run([sys.executable, "-m", "curator_dask", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})


def wait_for_job(job_id: str, timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        out = subprocess.run(["squeue", "-h", "-j", job_id], capture_output=True, text=True)
        if out.returncode == 0 and not out.stdout.strip():
            return
        time.sleep(1)
    subprocess.run(["scancel", job_id])
    pytest.fail(f"job {job_id} did not finish in {timeout} s")


def test_array_failure_retry_submit_and_union(tmp_path):
    (tmp_path / "array_pipe.py").write_text(PIPELINE)
    generate_jsonl(str(tmp_path / "input"), files=12, docs_per_file=3, seed=12)
    (tmp_path / "logs").mkdir()
    job_opts = ["--cpus-per-task", "1", "--time", "00:05:00", "--output",
                str(tmp_path / "logs" / "%A_%a.log")]
    submitted = cli("slurm", "submit", "array_pipe.py:build", "--array", "0-3",
                    "--checkpoint-path", "ckpt", *job_opts, cwd=tmp_path,
                    env={"TEST_FAIL_SHARD": "2"})
    assert submitted.returncode == 0, submitted.stderr
    job_id = submitted.stdout.strip()
    assert job_id.isdigit()
    wait_for_job(job_id)
    logs = "\n".join(p.read_text() for p in sorted((tmp_path / "logs").iterdir()))

    retry = cli("slurm", "retry", "--checkpoint-path", "ckpt", cwd=tmp_path)
    assert retry.returncode == 0, retry.stderr + logs
    assert retry.stdout == "2\n", logs
    fields = cli("slurm", "retry", "--checkpoint-path", "ckpt", "--format", "fields",
                 cwd=tmp_path)
    assert fields.stdout == "2 0 0 4\n"
    markers = list((tmp_path / "ckpt" / ".nemo_curator_metadata" / ".failed_tasks").rglob(
        "failed_tasks.json"))
    assert [m.parent.name for m in markers] == ["shard_2"]

    resubmitted = cli("slurm", "retry", "--checkpoint-path", "ckpt", "--submit",
                      "array_pipe.py:build", *job_opts, cwd=tmp_path)
    assert resubmitted.returncode == 0, resubmitted.stderr
    retry_job = resubmitted.stdout.split("as job ")[1].strip()
    wait_for_job(retry_job)
    after = cli("slurm", "retry", "--checkpoint-path", "ckpt", cwd=tmp_path)
    assert after.returncode == 0 and after.stdout == "", after.stderr

    single = cli("run", "array_pipe.py:build", "--workers", "1", "--no-progress", cwd=tmp_path,
                 env={"NEMO_CURATOR_SLURM_ARRAY_ENABLED": "0", "TEST_OUTPUT": "single"})
    assert single.returncode == 0, single.stderr

    def files(d: Path) -> dict[str, bytes]:
        return {p.name: p.read_bytes() for p in sorted(d.iterdir())}

    assert len(files(tmp_path / "single")) == 12
    assert files(tmp_path / "output") == files(tmp_path / "single")


SLOW_PIPELINE = textwrap.dedent("""
    import time
    from dataclasses import dataclass
    from curator_dask import JsonlReader, JsonlWriter, Pipeline, ProcessingStage

    @dataclass
    class Slow(ProcessingStage):
        name: str = "slow"
        def process(self, task):
            time.sleep(0.8)
            return task

    def build():
        return (Pipeline(name="requeue-test").add_stage(JsonlReader(file_paths="input"))
                .add_stage(Slow()).add_stage(JsonlWriter(path="output")))
""")


def test_requeued_task_resumes_and_skips_completed_sources(tmp_path):
    (tmp_path / "slow_pipe.py").write_text(SLOW_PIPELINE)
    generate_jsonl(str(tmp_path / "input"), files=8, docs_per_file=2, seed=8)
    log = tmp_path / "task.log"
    submitted = cli("slurm", "submit", "slow_pipe.py:build", "--array", "0", "--total-shards",
                    "1", "--checkpoint-path", "ckpt", "--cpus-per-task", "1", "--requeue",
                    "--time", "00:05:00", "--output", str(log), cwd=tmp_path)
    assert submitted.returncode == 0, submitted.stderr
    job_id = submitted.stdout.strip()
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        out = tmp_path / "output"
        if out.exists() and len(list(out.glob("*.jsonl"))) >= 2:
            break
        time.sleep(0.1)
    else:
        subprocess.run(["scancel", job_id])
        pytest.fail("the array task produced no output: " + (log.read_text() if log.exists()
                                                             else "no log"))
    requeue = subprocess.run(["scontrol", "requeue", f"{job_id}_0"], capture_output=True,
                             text=True)
    assert requeue.returncode == 0, requeue.stderr
    wait_for_job(job_id, timeout=240)
    text = log.read_text()
    # the restarted task (SLURM_RESTART_COUNT=1) skipped what the first attempt completed
    import re

    found = re.findall(r"8 source partitions: (\d+) already complete \(skipped\), (\d+) to "
                       r"process", text)
    assert found, text[-3000:]
    skipped, todo = map(int, found[-1])
    assert skipped >= 1 and skipped + todo == 8, text[-3000:]
    retry = cli("slurm", "retry", "--checkpoint-path", "ckpt", cwd=tmp_path)
    assert retry.returncode == 0 and retry.stdout == "", retry.stdout + retry.stderr
    assert len(list((tmp_path / "output").glob("*.jsonl"))) == 8


def test_slurm_cluster_with_tls_replaces_a_cancelled_worker_job(tmp_path):
    pytest.importorskip("dask_jobqueue")
    import threading

    import dask

    from curator_dask import DaskExecutor, JsonlReader, JsonlWriter, Pipeline

    sys.path.insert(0, str(tmp_path))
    (tmp_path / "slow_stage_mod.py").write_text(SLOW_PIPELINE)
    import cloudpickle
    import slow_stage_mod

    # SLURM worker jobs cannot import a module that lives only in this test's folder.
    cloudpickle.register_pickle_by_value(slow_stage_mod)
    generate_jsonl(str(tmp_path / "input"), files=12, docs_per_file=2, seed=3)
    pipeline = (Pipeline(name="slurm-cluster")
                .add_stage(JsonlReader(file_paths=str(tmp_path / "input")))
                .add_stage(slow_stage_mod.Slow())
                .add_stage(JsonlWriter(path=str(tmp_path / "output"))))
    kwargs = {"cores": 1, "memory": "1GB", "processes": 1, "queue": "debug",
              "walltime": "00:10:00", "interface": "lo", "log_directory": str(tmp_path / "logs"),
              "scheduler_options": {"dashboard_address": None},
              "python": sys.executable}
    seen_jobs: set[str] = set()
    with dask.config.set({"distributed.deploy.lost-worker-timeout": "2s",
                          "curator-dask.slurm.watchdog-interval": 1}):
        executor = DaskExecutor(cluster="slurm", jobs=2, progress=False, cluster_kwargs=kwargs)
        with executor:
            handle = executor._cluster
            assert handle.tls and handle.cluster.scheduler_address.startswith("tls://")
            executor.start().wait_for_workers(2, timeout=120)
            result: dict = {}
            runner = threading.Thread(
                target=lambda: result.setdefault("r", pipeline.run(executor=executor)))
            runner.start()
            deadline = time.monotonic() + 120
            while not list((tmp_path / "output").glob("*.jsonl")) and time.monotonic() < deadline:
                time.sleep(0.1)
            jobs = {name: job.job_id for name, job in handle.cluster.workers.items()}
            seen_jobs.update(jobs.values())
            victim = sorted(jobs.values())[0]
            subprocess.run(["scancel", victim], check=True)
            while runner.is_alive() and time.monotonic() < deadline:
                seen_jobs.update(job.job_id for job in handle.cluster.workers.values()
                                 if job.job_id)
                time.sleep(0.2)
            runner.join(timeout=5)
            # the watchdog submitted a replacement job, which joined the cluster
            for _ in range(100):
                seen_jobs.update(job.job_id for job in handle.cluster.workers.values()
                                 if job.job_id)
                if len(seen_jobs) >= 3 and len(executor.start().scheduler_info()["workers"]) >= 2:
                    break
                time.sleep(0.2)
    assert len(result["r"]) == 12
    assert len(list((tmp_path / "output").glob("*.jsonl"))) == 12
    assert len(seen_jobs) >= 3, seen_jobs


def test_array_task_as_one_srun_step_with_slurm_runner(tmp_path):
    pytest.importorskip("dask_jobqueue")
    (tmp_path / "array_pipe.py").write_text(PIPELINE)
    generate_jsonl(str(tmp_path / "input"), files=4, docs_per_file=2, seed=21)
    log = tmp_path / "runner.log"
    submitted = cli("slurm", "submit", "array_pipe.py:build", "--array", "0", "--total-shards",
                    "1", "--checkpoint-path", "ckpt", "--dask-runner-tasks", "3",
                    "--cpus-per-task", "1", "--time", "00:05:00", "--output", str(log),
                    cwd=tmp_path)
    assert submitted.returncode == 0, submitted.stderr
    wait_for_job(submitted.stdout.strip())
    text = log.read_text() if log.exists() else ""
    assert len(list((tmp_path / "output").glob("*.jsonl"))) == 4, text[-3000:]
    retry = cli("slurm", "retry", "--checkpoint-path", "ckpt", cwd=tmp_path)
    assert retry.returncode == 0 and retry.stdout == "", text[-3000:]  # the driver rank wrote it


def test_submission_errors_show_command_exit_code_and_output():
    from curator_dask.slurm.sbatch import (
        ArrayJobSpec,
        SbatchError,
        render_array_script,
        submit_script,
    )

    script = render_array_script(ArrayJobSpec(pipeline="p.yaml", array="0", checkpoint_path="/c",
                                              partition="no-such-partition", cpus_per_task=1))
    with pytest.raises(SbatchError) as info:
        submit_script(script)
    text = str(info.value)
    assert "sbatch --parsable exited with 1" in text
    assert "stdout:" in text and "stderr:" in text and "partition" in text.lower()
