"""A real SLURM (tools/local-slurm/start.sh): array shards, failure, retry, resubmission.

Only the project's own local SLURM is used (tests/slurm/local_slurm.py checks the marks
start.sh leaves): on an HPC login node, whose ``sinfo`` answers too, these tests are skipped
with the reason and submit nothing. Jobs ask for what the local node offers (its CPU count).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from pathlib import Path

import pytest

from curator_dask.sample_data import generate_jsonl
from tests.helpers import cli, import_path, poll_for, slow_pipeline, wait_for_job
from tests.slurm.local_slurm import local_slurm, network_kwargs, node_cpus

_reason = local_slurm()
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


def failing_shard(input_dir: Path, total: int) -> int:
    """Shard 2, or the first shard that gets a source: which shard a file's source falls in
    depends on its absolute path (its id "0_<hash of the path>", docs/design/contract.md §5.4),
    so under some temporary folders shard 2 gets none and could not fail."""
    from curator_dask.partitions.groups import single_file_id
    from curator_dask.slurm.array import shard_for_task

    used = {shard_for_task(f"0_{single_file_id(str(p))}", total)
            for p in sorted(input_dir.glob("*.jsonl"))}
    return 2 if 2 in used else min(used)


def needs_cpus(n: int, what: str) -> None:
    """Skip, naming the CPUs needed, when the local SLURM's node has fewer than ``n``: a job
    that can never be scheduled would sit pending until the test's deadline."""
    cpus = node_cpus()
    if cpus < n:
        pytest.skip(f"{what} needs {n} CPUs; the local SLURM's node has {cpus} "
                    f"(restart it with SLURM_CPUS={n} bash tools/local-slurm/start.sh)")


def test_array_failure_retry_submit_and_union(tmp_path):
    (tmp_path / "array_pipe.py").write_text(PIPELINE)
    generate_jsonl(str(tmp_path / "input"), files=12, docs_per_file=3, seed=12)
    (tmp_path / "logs").mkdir()
    job_opts = ["--cpus-per-task", "1", "--time", "00:05:00", "--output",
                str(tmp_path / "logs" / "%A_%a.log")]
    failing = failing_shard(tmp_path / "input", 4)
    submitted = cli("slurm", "submit", "array_pipe.py:build", "--array", "0-3",
                    "--checkpoint-path", "ckpt", *job_opts, cwd=tmp_path,
                    env={"TEST_FAIL_SHARD": str(failing)})
    assert submitted.returncode == 0, submitted.stderr
    job_id = submitted.stdout.strip()
    assert job_id.isdigit()
    wait_for_job(job_id)
    logs = "\n".join(p.read_text() for p in sorted((tmp_path / "logs").iterdir()))

    retry = cli("slurm", "retry", "--checkpoint-path", "ckpt", cwd=tmp_path)
    assert retry.returncode == 0, retry.stderr + logs
    assert retry.stdout == f"{failing}\n", logs
    fields = cli("slurm", "retry", "--checkpoint-path", "ckpt", "--format", "fields",
                 cwd=tmp_path)
    assert fields.stdout == f"{failing} 0 0 4\n"
    markers = list((tmp_path / "ckpt" / ".nemo_curator_metadata" / ".failed_tasks").rglob(
        "failed_tasks.json"))
    assert [m.parent.name for m in markers] == [f"shard_{failing}"]

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


SLOW_PIPELINE = slow_pipeline(0.8, "requeue-test")


def test_requeued_task_resumes_and_skips_completed_sources(tmp_path):
    (tmp_path / "slow_pipe.py").write_text(SLOW_PIPELINE)
    generate_jsonl(str(tmp_path / "input"), files=8, docs_per_file=2, seed=8)
    log = tmp_path / "task.log"
    submitted = cli("slurm", "submit", "slow_pipe.py:build", "--array", "0", "--total-shards",
                    "1", "--checkpoint-path", "ckpt", "--cpus-per-task", "1", "--requeue",
                    "--time", "00:05:00", "--output", str(log), cwd=tmp_path)
    assert submitted.returncode == 0, submitted.stderr
    job_id = submitted.stdout.strip()
    poll_for(lambda: len(list((tmp_path / "output").glob("*.jsonl"))) >= 2, 120,
             lambda: "the array task produced no output: " + (log.read_text() if log.exists()
                                                              else "no log"),
             interval=0.1, on_timeout=lambda: subprocess.run(["scancel", job_id]))
    requeue = subprocess.run(["scontrol", "requeue", f"{job_id}_0"], capture_output=True,
                             text=True)
    assert requeue.returncode == 0, requeue.stderr
    wait_for_job(job_id, timeout=240)
    text = log.read_text()
    # the restarted task (SLURM_RESTART_COUNT=1) skipped what the first attempt completed
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

    needs_cpus(2, "two 1-core SLURMCluster worker jobs at once")
    (tmp_path / "slow_stage_mod.py").write_text(SLOW_PIPELINE)
    import cloudpickle

    slow_stage_mod = import_path(tmp_path / "slow_stage_mod.py")
    # SLURM worker jobs cannot import a module that lives only in this test's folder.
    cloudpickle.register_pickle_by_value(slow_stage_mod)
    generate_jsonl(str(tmp_path / "input"), files=12, docs_per_file=2, seed=3)
    pipeline = (Pipeline(name="slurm-cluster")
                .add_stage(JsonlReader(file_paths=str(tmp_path / "input")))
                .add_stage(slow_stage_mod.Slow())
                .add_stage(JsonlWriter(path=str(tmp_path / "output"))))
    kwargs = {"cores": 1, "memory": "1GB", "processes": 1, "queue": "debug",
              "walltime": "00:10:00", **network_kwargs(dashboard_address=None),
              "log_directory": str(tmp_path / "logs"),
              "python": sys.executable}
    seen_jobs: set[str] = set()
    with dask.config.set({"distributed.deploy.lost-worker-timeout": "2s",
                          "curator-dask.slurm.watchdog-interval": 1}):
        executor = DaskExecutor(cluster="slurm", jobs=2, progress=False, cluster_kwargs=kwargs)
        with executor:
            handle = executor.cluster
            assert handle.tls and handle.cluster.scheduler_address.startswith("tls://")
            executor.start().wait_for_workers(2, timeout=120)
            result: dict = {}
            runner = threading.Thread(
                target=lambda: result.setdefault("r", pipeline.run(executor=executor)))
            runner.start()
            poll_for(lambda: list((tmp_path / "output").glob("*.jsonl")), 120,
                     "the run wrote no output", interval=0.1)
            jobs = {name: job.job_id for name, job in handle.cluster.workers.items()}
            seen_jobs.update(jobs.values())
            victim = sorted(jobs.values())[0]
            subprocess.run(["scancel", victim], check=True)

            def run_finished() -> bool:
                seen_jobs.update(job.job_id for job in handle.cluster.workers.values()
                                 if job.job_id)
                return not runner.is_alive()

            poll_for(run_finished, 120, "the run did not finish after its worker job was "
                     "cancelled", interval=0.2)
            runner.join(timeout=5)

            # the watchdog submitted a replacement job, which joined the cluster
            def replaced() -> bool:
                seen_jobs.update(job.job_id for job in handle.cluster.workers.values()
                                 if job.job_id)
                return (len(seen_jobs) >= 3
                        and len(executor.start().scheduler_info()["workers"]) >= 2)

            # no failure here: the assertions below say what must hold
            poll_for(replaced, 20, "", interval=0.2, fail=False)
    assert len(result["r"]) == 12
    assert len(list((tmp_path / "output").glob("*.jsonl"))) == 12
    assert len(seen_jobs) >= 3, seen_jobs


def test_adaptive_slurm_cluster_starts_empty_grows_and_releases_its_jobs(tmp_path):
    """``adapt=(0, 2)``: no worker job until the run submits work, jobs while sources wait,
    the right output, and every job released once idle (``slurm.adapt-idle-timeout``)."""
    pytest.importorskip("dask_jobqueue")
    import cloudpickle
    import dask

    from curator_dask import DaskExecutor, JsonlReader, JsonlWriter, Pipeline

    needs_cpus(2, "two 1-core SLURMCluster worker jobs at once")
    (tmp_path / "slow_adapt_mod.py").write_text(SLOW_PIPELINE)
    slow_mod = import_path(tmp_path / "slow_adapt_mod.py")
    cloudpickle.register_pickle_by_value(slow_mod)  # the worker jobs cannot import it
    generate_jsonl(str(tmp_path / "input"), files=8, docs_per_file=1, seed=7)
    pipeline = (Pipeline(name="slurm-adapt")
                .add_stage(JsonlReader(file_paths=str(tmp_path / "input")))
                .add_stage(slow_mod.Slow())
                .add_stage(JsonlWriter(path=str(tmp_path / "output"))))
    name = f"adapt-{uuid.uuid4().hex[:8]}"
    kwargs = {"cores": 1, "memory": "1GB", "processes": 1, "queue": "debug",
              "walltime": "00:10:00", **network_kwargs(dashboard_address=None),
              "log_directory": str(tmp_path / "logs"), "python": sys.executable,
              "job_name": name}
    seen: set[str] = set()

    def jobs_now() -> set[str]:
        now = {line.split()[0] for line in _queued(name).splitlines()}
        seen.update(now)
        return now

    with dask.config.set({"curator-dask.slurm.adapt-interval": 0.5,
                          "curator-dask.slurm.adapt-idle-timeout": 2}):
        executor = DaskExecutor(cluster="slurm", adapt=(0, 2), progress=False,
                                cluster_kwargs=kwargs)
        with executor:  # returns at once: minimum 0 waits for no worker
            client = executor.start()
            time.sleep(1.5)  # three adaptive decisions without work: still no job
            assert jobs_now() == set() and not client.scheduler_info()["workers"]
            result: dict = {}
            runner = threading.Thread(
                target=lambda: result.setdefault("r", pipeline.run(executor=executor)))
            runner.start()

            def finished() -> bool:
                jobs_now()  # the jobs it got while sources waited
                return not runner.is_alive()

            poll_for(finished, 120,
                     lambda: f"the adaptive run did not finish; squeue: {_queued(name)}",
                     interval=0.2, on_timeout=lambda: subprocess.run(["scancel", "-n", name]))
            runner.join(timeout=5)
            # released when idle: none of the cluster's jobs is left in the queue
            poll_for(lambda: not jobs_now() and not client.scheduler_info()["workers"], 30,
                     lambda: f"worker jobs not released: {_queued(name)}", interval=0.2)
    assert len(result["r"]) == 8
    assert len(list((tmp_path / "output").glob("*.jsonl"))) == 8
    assert len(seen) == 2, seen  # sources waited for both jobs the maximum allows


def test_array_task_as_one_srun_step_with_slurm_runner(tmp_path):
    pytest.importorskip("dask_jobqueue")
    (tmp_path / "array_pipe.py").write_text(PIPELINE)
    generate_jsonl(str(tmp_path / "input"), files=4, docs_per_file=2, seed=21)
    log = tmp_path / "runner.log"
    tasks = 3  # the fewest SLURMRunner takes: scheduler, driver, one worker; 1 CPU each
    # A node with fewer CPUs could never start the job (it would pend with PartitionConfig):
    # there the job asks for --overcommit (sbatch reads SBATCH_OVERCOMMIT; `slurm submit` has
    # no option for it), so SLURM gives it one CPU and runs all 3 ranks of the step on it.
    overcommit = {"SBATCH_OVERCOMMIT": "1"} if node_cpus() < tasks else {}
    submitted = cli("slurm", "submit", "array_pipe.py:build", "--array", "0", "--total-shards",
                    "1", "--checkpoint-path", "ckpt", "--dask-runner-tasks", str(tasks),
                    "--cpus-per-task", "1", "--time", "00:05:00", "--output", str(log),
                    cwd=tmp_path, env=overcommit)
    assert submitted.returncode == 0, submitted.stderr
    wait_for_job(submitted.stdout.strip())
    text = log.read_text() if log.exists() else ""
    assert len(list((tmp_path / "output").glob("*.jsonl"))) == 4, text[-3000:]
    retry = cli("slurm", "retry", "--checkpoint-path", "ckpt", cwd=tmp_path)
    assert retry.returncode == 0 and retry.stdout == "", text[-3000:]  # the driver rank wrote it


def test_slurm_runner_task_honours_job_options_and_drains_on_usr1(tmp_path):
    """``--cluster slurm-runner`` runs through the same ``Pipeline.run`` as every cluster kind:
    the driver rank honours ``--job-id``/``--resume``, and SIGUSR1 drains it with exit 3."""
    pytest.importorskip("dask_jobqueue")
    from curator_dask.slurm.sbatch import ArrayJobSpec, render_array_script, submit_script

    (tmp_path / "slow_pipe.py").write_text(SLOW_PIPELINE)
    generate_jsonl(str(tmp_path / "input"), files=8, docs_per_file=2, seed=5)
    output, job_dir = tmp_path / "output", tmp_path / "curator-dask-jobs" / "runner-job"
    # 3 ranks (scheduler, driver, worker); on a smaller node they share CPUs (--overcommit).
    extra = ["--overcommit"] if node_cpus() < 3 else []

    def submit(log: str, *run_args: str) -> str:
        spec = ArrayJobSpec(pipeline="slow_pipe.py:build", array="0", total_shards=1,
                            checkpoint_path=str(tmp_path / "ckpt"), cpus_per_task=1,
                            time="00:05:00", output=str(tmp_path / log), dask_runner_tasks=3,
                            workdir=str(tmp_path), extra_run_args=run_args)
        return submit_script(render_array_script(spec), extra_args=extra)

    def tail(log: str) -> str:
        path = tmp_path / log
        return path.read_text()[-4000:] if path.exists() else f"no log at {path}"

    first = submit("first.log", "--job-id", "runner-job")
    poll_for(lambda: len(list(output.glob("*.jsonl"))) >= 1, 120,
             lambda: "the srun step wrote no output: " + tail("first.log"))
    # What SLURM does at --signal=B:USR1@grace: USR1 to the batch shell (here `exec srun`),
    # which forwards it to every rank of the step.
    subprocess.run(["scancel", "--batch", "--signal=USR1", first], check=True)
    wait_for_job(first)
    log = tail("first.log")
    assert "stopped: received SIGUSR1" in log, log
    assert _exit_code(first) == "3:0", log
    assert json.loads((job_dir / "job_summary.json").read_text())["state"] == "stopped"
    done_first = len(list(output.glob("*.jsonl")))
    assert 1 <= done_first < 8, log

    second = submit("second.log", "--resume", "runner-job")
    wait_for_job(second)
    log = tail("second.log")
    assert _exit_code(second) == "0:0", log
    found = re.findall(r"8 source partitions: (\d+) already complete \(skipped\), (\d+) to "
                       r"process", log)
    assert found and int(found[-1][0]) == done_first, log
    assert json.loads((job_dir / "job_summary.json").read_text())["state"] == "completed"
    events = [json.loads(line)["type"]
              for line in (job_dir / "events.jsonl").read_text().splitlines()]
    assert events.count("run_resume") == 1 and events[-1] == "job_complete", events
    assert len(list(output.glob("*.jsonl"))) == 8


def _exit_code(job_id: str) -> str:
    """``ExitCode=`` of a finished job, as ``scontrol`` reports it for 10 minutes."""
    shown = subprocess.run(["scontrol", "show", "job", "-o", job_id], capture_output=True,
                           text=True, check=True).stdout
    return re.search(r"\bExitCode=(\S+)", shown).group(1)



def _queued(job_name: str) -> str:
    """What ``squeue`` lists under ``job_name`` (empty when nothing was queued)."""
    return subprocess.run(["squeue", "-h", "-n", job_name, "-o", "%i %T %r"],
                          capture_output=True, text=True, check=True).stdout.strip()


def test_submit_refuses_a_request_no_node_of_the_partition_can_run(tmp_path):
    import uuid

    (tmp_path / "array_pipe.py").write_text(PIPELINE)
    cpus, name = node_cpus(), f"refused-{uuid.uuid4().hex[:8]}"
    common = ["slurm", "submit", "array_pipe.py:build", "--array", "0-3", "--checkpoint-path",
              "ckpt", "--time", "00:05:00", "--job-name", name]
    too_many = cli(*common, "--cpus-per-task", str(cpus + 1), cwd=tmp_path)
    assert too_many.returncode == 2, too_many.stdout + too_many.stderr
    assert (f"--cpus-per-task {cpus + 1} needs {cpus + 1} CPUs on a node, and the largest node "
            f"of partition ") in too_many.stderr
    assert f"has {cpus}; pass --cpus-per-task {cpus} or less" in too_many.stderr
    # what only SLURM knows (memory here) is judged by sbatch --test-only
    too_much_memory = cli(*common, "--cpus-per-task", "1", "--mem", "100000000M", cwd=tmp_path)
    assert too_much_memory.returncode == 2, too_much_memory.stderr
    assert "sbatch --test-only refused the request" in too_much_memory.stderr
    assert "--mem 100000000M" in too_much_memory.stderr
    assert too_many.stdout == too_much_memory.stdout == ""
    assert _queued(name) == ""  # nothing was queued
    assert not (tmp_path / "ckpt").exists()


def test_submit_without_cpus_per_task_asks_for_what_the_partition_has(tmp_path):
    (tmp_path / "array_pipe.py").write_text(PIPELINE)
    generate_jsonl(str(tmp_path / "input"), files=2, docs_per_file=2, seed=4)
    log = tmp_path / "task.log"
    cpus = min(16, node_cpus())
    submitted = cli("slurm", "submit", "array_pipe.py:build", "--array", "0", "--total-shards",
                    "1", "--checkpoint-path", "ckpt", "--time", "00:05:00", "--output",
                    str(log), cwd=tmp_path)
    assert submitted.returncode == 0, submitted.stderr
    job_id = submitted.stdout.strip()
    assert job_id.isdigit(), submitted.stdout
    assert f"--cpus-per-task not given: asking for {cpus} CPUs per task" in submitted.stderr
    shown = subprocess.run(["scontrol", "show", "job", "-o", job_id], capture_output=True,
                           text=True, check=True).stdout
    assert f"CPUs/Task={cpus}" in shown and "PartitionConfig" not in shown, shown
    wait_for_job(job_id)  # it runs, rather than pending forever
    text = log.read_text() if log.exists() else "no log"
    assert len(list((tmp_path / "output").glob("*.jsonl"))) == 2, text[-3000:]

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
