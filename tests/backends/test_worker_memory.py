"""A partition over the workers' memory ends the run with a named error, never a hang (issue 19,
item 5): the stages, the partition's files, the worker's memory limit and what to change, on a
real LocalCluster whose worker Dask's nanny restarts for memory, and through the CLI on an
external cluster of real ``dask scheduler`` / ``dask worker --memory-limit`` processes.

Each cluster is small (one worker of 600 MB, one thread) and lets a task kill two workers
(``distributed.scheduler.allowed-failures`` 1), so each test takes seconds.
"""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import signal
import subprocess
import sys
import textwrap
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import dask
import pytest

from curator_dask import DaskExecutor, JsonlReader, JsonlWriter, Pipeline, ProcessingStage
from curator_dask.sample_data import generate_jsonl
from tests.helpers import cli, completed_ids, poll_for

LIMIT = 600_000_000  # bytes: "572.20 MiB" in Dask's log lines and in the error


def _grow_to(fraction: float) -> bytes:
    """Bytes that bring this worker's resident memory to ``fraction`` of its limit."""
    import psutil
    from distributed import get_worker

    limit = get_worker().memory_manager.memory_limit
    grow = max(0, int(fraction * limit) - psutil.Process().memory_info().rss)
    return b"x" * grow  # written, so resident


@dataclass
class Hog(ProcessingStage):
    """Needs more memory than the worker may have for the partition of file ``bad``; runs
    for 2 s first, so the worker's heartbeat tells the scheduler it is running it."""

    bad: str = "part-00002"
    name: str = "hog"

    def process(self, task):
        if any(self.bad in f for f in task._metadata.get("source_files", [])):
            time.sleep(2)
            big = _grow_to(1.2)
            time.sleep(5)  # the nanny restarts the worker within 0.1 s
            del big
        return task


@dataclass
class Crash(ProcessingStage):
    """Kills its own worker process (SIGKILL, as the kernel's OOM killer or a crash in native
    code would) for the partition of file ``bad``, 2 s in."""

    bad: str = "part-00001"
    name: str = "crash"

    def process(self, task):
        if any(self.bad in f for f in task._metadata.get("source_files", [])):
            time.sleep(2)
            os.kill(os.getpid(), signal.SIGKILL)
        return task


_KEPT: list[bytes] = []


@dataclass
class Keep(ProcessingStage):
    """Keeps 87 % of the worker's memory limit after its first call, as a cache or an allocator
    that keeps freed memory would: the worker pauses (above 80 %) and is never killed."""

    name: str = "keep"

    def process(self, task):
        if not _KEPT:
            _KEPT.append(_grow_to(0.87))
        time.sleep(0.5)
        return task


@dataclass
class Slow(ProcessingStage):
    """Touches ``marker`` (a chain is running), then takes 1 s."""

    marker: str = ""
    name: str = "slow"

    def process(self, task):
        Path(self.marker).touch()
        time.sleep(1)
        return task


@contextlib.contextmanager
def one_small_worker(**kwargs):
    """A DaskExecutor on a real LocalCluster of one 600 MB worker with one thread; a task may
    kill 2 workers. One source per chain, at most 2 chains in flight (the second queued behind
    the first on the worker)."""
    with dask.config.set({"distributed.scheduler.allowed-failures": 1}), DaskExecutor(
            n_workers=1, threads_per_worker=1, progress=False, max_sources_per_task=1,
            max_in_flight=2, cluster_kwargs={"memory_limit": LIMIT}, **kwargs) as executor:
        yield executor


def _pipeline(tmp_path: Path, stage: ProcessingStage, files: int) -> tuple[Pipeline, list[str]]:
    paths = generate_jsonl(str(tmp_path / "input"), files=files, docs_per_file=2, seed=3)
    pipeline = (Pipeline(name="memory").add_stage(JsonlReader(file_paths=str(tmp_path / "input")))
                .add_stage(stage).add_stage(JsonlWriter(path=str(tmp_path / "output"))))
    return pipeline, paths


def test_the_error_names_stages_files_and_limit_in_one_line_and_survives_pickling():
    from curator_dask.errors import WorkerFailedError, WorkerMemoryError

    error = WorkerMemoryError("restarted 2 times", stages=["jsonl_reader", "hog"],
                              source_files=["/in/a.jsonl"], task_ids=["0_ab"],
                              memory_limit=LIMIT, workers=["tcp://127.0.0.1:1"])
    assert str(error) == ("Stages 'jsonl_reader' + 'hog' ran out of worker memory on "
                          "/in/a.jsonl: restarted 2 times")
    again = pickle.loads(pickle.dumps(error))
    assert type(again) is WorkerMemoryError and str(again) == str(error)
    assert (again.stages, again.source_files, again.task_ids, again.memory_limit,
            again.workers) == (["jsonl_reader", "hog"], ["/in/a.jsonl"], ["0_ab"], LIMIT,
                               ["tcp://127.0.0.1:1"])
    assert isinstance(error, WorkerFailedError) and isinstance(error, RuntimeError)
    assert not isinstance(error, MemoryError)  # the driver itself is not out of memory


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_a_partition_over_the_memory_limit_ends_with_WorkerMemoryError(tmp_path):
    pipeline, paths = _pipeline(tmp_path, Hog(), files=4)
    checkpoint = tmp_path / "ck"
    with one_small_worker() as executor, pytest.raises(Exception) as info:
        pipeline.run(executor=executor, checkpoint_path=str(checkpoint))
    error = info.value
    assert type(error).__name__ == "WorkerMemoryError", repr(error)
    # the partition of part-00002 used the memory; part-00003's chain, when it is queued behind
    # it on the same worker, is killed with it (Dask counts both deaths) but is not the one named
    assert error.source_files == [paths[2]], str(error)
    assert error.stages == ["jsonl_reader", "hog", "jsonl_writer"]
    assert error.memory_limit == LIMIT
    text = str(error)
    assert "\n" not in text
    assert text.startswith(f"Stages 'jsonl_reader' + 'hog' + 'jsonl_writer' ran out of worker "
                           f"memory on {paths[2]}: the worker running it was restarted 2 times")
    for fix in ("572.20 MiB", "'memory_limit'", "files_per_partition", "blocksize",
                "allowed-failures", "--no-fuse"):
        assert fix in text, (fix, text)
    assert type(error.__cause__).__name__ == "KilledWorker"
    # the two partitions before it (finished before it started) were flushed, and part-00003's
    # when it ran between the deaths; it stays pending
    done = completed_ids(checkpoint)
    assert 2 <= len(done) <= 3 and error.task_ids[0] not in done, (done, error.task_ids)


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_workers_killed_without_a_memory_restart_end_with_WorkerFailedError(tmp_path):
    pipeline, paths = _pipeline(tmp_path, Crash(), files=3)
    with one_small_worker() as executor, pytest.raises(Exception) as info:
        pipeline.run(executor=executor)
    error = info.value
    assert type(error).__name__ == "WorkerFailedError", repr(error)
    assert error.source_files == [paths[1]] and error.stages[1] == "crash", str(error)
    text = str(error)
    assert text.startswith(f"Stages 'jsonl_reader' + 'crash' + 'jsonl_writer' could not finish "
                           f"on {paths[1]}: the worker running it died 2 times"), text
    assert "no memory restart recorded (its memory limit is 572.20 MiB" in text, text


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_every_worker_paused_for_memory_ends_the_run_instead_of_hanging(tmp_path):
    pipeline, paths = _pipeline(tmp_path, Keep(), files=6)
    checkpoint = tmp_path / "ck"
    with one_small_worker() as executor, pytest.raises(Exception) as info, dask.config.set(
            {"curator-dask.cluster.stalled-workers-grace": 3}):
        pipeline.run(executor=executor, checkpoint_path=str(checkpoint))
    error = info.value
    assert type(error).__name__ == "WorkerMemoryError", repr(error)
    text = str(error)
    assert "every Dask worker has been paused for memory with no task running for 3 s" in text
    assert "of 572.20 MiB" in text and "distributed.worker.memory.pause" in text, text
    assert error.memory_limit == LIMIT and len(error.workers) == 1
    assert error.stages == ["jsonl_reader", "keep", "jsonl_writer"]
    # the chains that wait are named; the first partition finished before the worker paused
    assert error.source_files and set(error.source_files) <= set(paths[1:]), text
    done = completed_ids(checkpoint)
    assert 1 <= len(done) < len(paths) and not done & set(error.task_ids), (done, error.task_ids)


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_an_embedded_cluster_left_with_no_worker_ends_the_run_instead_of_hanging(tmp_path):
    """The embedded cluster's nannies restart a lost worker at once; one that cannot leaves the
    cluster with no worker, and the chains would wait forever. That state is made here for
    real by scaling the cluster to no worker while a chain runs."""
    started = tmp_path / "started"
    pipeline, _ = _pipeline(tmp_path, Slow(marker=str(started)), files=4)
    with one_small_worker() as executor, dask.config.set(
            {"curator-dask.cluster.stalled-workers-grace": 3}):
        def scale_to_nothing() -> None:
            poll_for(started.exists, 60, "no chain started")
            executor.cluster.scale(0)

        thread = threading.Thread(target=scale_to_nothing)
        thread.start()
        with pytest.raises(Exception) as info:
            pipeline.run(executor=executor, checkpoint_path=str(tmp_path / "ck"))
        thread.join()
    error = info.value
    assert type(error).__name__ == "WorkerFailedError", repr(error)
    assert "the embedded cluster has had no worker for 3 s" in str(error), str(error)
    assert error.stages == ["jsonl_reader", "slow", "jsonl_writer"] and error.source_files


PIPELINE = textwrap.dedent("""
    import time
    from dataclasses import dataclass
    from curator_dask import JsonlReader, JsonlWriter, Pipeline, ProcessingStage

    @dataclass
    class Hog(ProcessingStage):
        name: str = "hog"
        def process(self, task):
            if any("part-00001" in f for f in task._metadata.get("source_files", [])):
                from distributed import get_worker
                time.sleep(2)
                big = b"x" * int(1.2 * get_worker().memory_manager.memory_limit)
                time.sleep(5)
            return task

    def build():
        return (Pipeline(name="hog").add_stage(JsonlReader(file_paths="input"))
                .add_stage(Hog()).add_stage(JsonlWriter(path="output")))
""")


class NannyCluster:
    """``dask scheduler`` and one ``dask worker --memory-limit 600MB`` with its nanny (the
    nanny restarts the worker for memory), each in its own process group."""

    def __init__(self, root: Path) -> None:
        dask_cli = os.path.join(os.path.dirname(sys.executable), "dask")
        env = {**os.environ, "DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES": "1"}
        file = root / "scheduler.json"
        self.procs = [self._start([dask_cli, "scheduler", "--port", "0", "--host", "127.0.0.1",
                                   "--no-dashboard", "--scheduler-file", str(file)], root, env)]
        poll_for(lambda: file.exists() and file.stat().st_size > 0, 60, "no scheduler file")
        self.address = json.loads(file.read_text())["address"]
        self.procs.append(self._start([dask_cli, "worker", "--scheduler-file", str(file),
                                       "--nthreads", "1", "--memory-limit", str(LIMIT),
                                       "--no-dashboard", "--host", "127.0.0.1"], root, env))

    @staticmethod
    def _start(command: list[str], cwd: Path, env: dict[str, str]) -> subprocess.Popen:
        return subprocess.Popen(command, cwd=cwd, env=env, start_new_session=True,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_cli_exits_1_with_one_line_naming_the_stage_files_and_limit(tmp_path):
    (tmp_path / "pipe.py").write_text(PIPELINE)
    paths = generate_jsonl(str(tmp_path / "input"), files=3, docs_per_file=2, seed=5)
    cluster = NannyCluster(tmp_path)
    try:
        out = cli("run", "pipe.py:build", "--address", cluster.address, "--no-progress",
                  "--no-job", "--checkpoint-path", "ck", cwd=tmp_path, timeout=200)
    finally:
        cluster.close()
    assert out.returncode == 1, out.stderr[-3000:]
    lines = [line for line in out.stderr.splitlines() if "WorkerMemoryError" in line]
    assert len(lines) == 1, out.stderr[-3000:]
    line = lines[0]
    assert line.startswith("python -m curator_dask run: failed: WorkerMemoryError: Stages "
                           f"'jsonl_reader' + 'hog' + 'jsonl_writer' ran out of worker memory "
                           f"on {paths[1]}: "), line
    assert "572.20 MiB" in line and "--memory-limit" in line and "blocksize" in line, line
    assert "Attempted to run task" not in out.stderr  # not Dask's KilledWorker text
    assert len(completed_ids(tmp_path / "ck")) == 1  # part-00000 finished before it
