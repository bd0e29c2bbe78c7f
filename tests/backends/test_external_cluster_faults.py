"""Faults of an external cluster (``--address``), with a real ``dask scheduler`` and real
``dask worker`` processes: a scheduler killed mid-run ends the run with its own error and exit
code within a bounded time; a worker killed while the stages are being sent to the workers is
survived like one lost mid-run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from curator_dask.sample_data import generate_jsonl
from tests.helpers import completed_ids, poll_for, start_cli

pytestmark = pytest.mark.slow

PIPELINE = textwrap.dedent("""
    import os, time
    from dataclasses import dataclass
    from curator_dask import JsonlReader, JsonlWriter, Pipeline, ProcessingStage

    @dataclass
    class Slow(ProcessingStage):
        name: str = "slow"
        def process(self, task):
            time.sleep(float(os.environ.get("SLOW_SECONDS", "0.5")))
            return task

    class SlowToLoad(ProcessingStage):
        \"\"\"Takes 3 s to unpickle on a worker (while the stages are being sent), saying so
        with a file named after the worker's pid.\"\"\"
        name = "slow_to_load"
        def __init__(self, markers):
            self.markers = markers
        def __setstate__(self, state):
            self.__dict__.update(state)
            open(os.path.join(self.markers, str(os.getpid())), "w").close()
            time.sleep(3)
        def process(self, task):
            return task

    def build():
        p = Pipeline(name="faults").add_stage(JsonlReader(file_paths="input"))
        if os.environ.get("LOAD_MARKERS"):
            p.add_stage(SlowToLoad(os.environ["LOAD_MARKERS"]))
        return p.add_stage(Slow()).add_stage(JsonlWriter(path="output"))
""")


class ExternalCluster:
    """``dask scheduler`` and ``dask worker --no-nanny`` processes (a killed worker stays dead),
    each in its own process group, all killed at the end."""

    def __init__(self, root: Path, workers: int) -> None:
        self.root = root
        dask = os.path.join(os.path.dirname(sys.executable), "dask")
        self.env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), os.environ.get(
            "PYTHONPATH", "")])}
        file = root / "scheduler.json"
        self.scheduler = self._start([dask, "scheduler", "--port", "0", "--host", "127.0.0.1",
                                      "--no-dashboard", "--scheduler-file", str(file)])
        poll_for(lambda: file.exists() and file.stat().st_size > 0, 60, "no scheduler file")
        self.address = json.loads(file.read_text())["address"]
        self.workers = [self._start([dask, "worker", "--scheduler-file", str(file),
                                     "--no-nanny", "--nthreads", "1", "--no-dashboard",
                                     "--host", "127.0.0.1"]) for _ in range(workers)]

    def _start(self, command: list[str]) -> subprocess.Popen:
        return subprocess.Popen(command, cwd=self.root, env=self.env, start_new_session=True,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def close(self) -> None:
        for proc in [*self.workers, self.scheduler]:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)


@pytest.fixture
def cluster(tmp_path):
    made: list[ExternalCluster] = []

    def make(workers: int = 1) -> ExternalCluster:
        made.append(ExternalCluster(tmp_path, workers))
        return made[-1]

    (tmp_path / "pipe.py").write_text(PIPELINE)
    generate_jsonl(str(tmp_path / "input"), files=8, docs_per_file=2, seed=4)
    yield make
    for c in made:
        c.close()


def test_a_lost_scheduler_is_an_error_with_its_own_exit_code_in_bounded_time(tmp_path,
                                                                            cluster):
    external = cluster(workers=1)
    driver = start_cli("run", "pipe.py:build", "--address", external.address, "--no-progress",
                       "--no-job", "--checkpoint-path", "ck", cwd=tmp_path,
                       env={"SLOW_SECONDS": "1", "PYTHONPATH": str(tmp_path),
                            "DASK_CURATOR_DASK__CLUSTER__SCHEDULER_LOST_GRACE": "3"})
    try:
        # at least one completion reached the scheduler's writer file, then the scheduler dies
        recorded = poll_for(lambda: completed_ids(tmp_path / "ck"), 120,
                            "no completion was recorded", ignore=(Exception,))
        os.killpg(external.scheduler.pid, signal.SIGKILL)
        killed = time.monotonic()
        _, err = driver.communicate(timeout=120)
        took = time.monotonic() - killed
    finally:
        if driver.poll() is None:
            driver.kill()
    assert driver.returncode == 4, err[-3000:]
    assert f"lost the Dask scheduler {external.address}" in err, err[-3000:]
    assert "completions already recorded are kept" in err
    assert took < 60, took  # 3 s of grace, plus closing the client
    assert completed_ids(tmp_path / "ck") >= recorded  # nothing recorded was lost


def test_a_worker_lost_while_the_stages_are_sent_is_survived(tmp_path, cluster):
    external = cluster(workers=2)
    markers = tmp_path / "markers"
    markers.mkdir()
    poll_for(lambda: _workers(external.address) == 2, 60, "the workers did not connect")
    driver = start_cli("run", "pipe.py:build", "--address", external.address, "--no-progress",
                       "--no-job", cwd=tmp_path,
                       env={"SLOW_SECONDS": "0.1", "LOAD_MARKERS": str(markers),
                            "PYTHONPATH": str(tmp_path)})
    try:
        victim = external.workers[1]
        # the victim is unpickling the stages (the plugin is being registered): kill it now
        poll_for(lambda: (markers / str(victim.pid)).exists(), 120,
                 lambda: "the stages never reached the worker: " + str(os.listdir(markers)))
        os.killpg(victim.pid, signal.SIGKILL)
        out, err = driver.communicate(timeout=180)
    finally:
        if driver.poll() is None:
            driver.kill()
    assert driver.returncode == 0, err[-3000:]
    assert len(list((tmp_path / "output").glob("*.jsonl"))) == 8


def _workers(address: str) -> int:
    from distributed import Client

    with Client(address, timeout=10) as client:
        return len(client.nthreads())
