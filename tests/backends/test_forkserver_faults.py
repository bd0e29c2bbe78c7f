"""The embedded cluster's forkserver killed while the cluster starts (issue 19, item 9).

A forkserver that dies takes the workers it forked with it, and the cluster's start failed with
``RuntimeError: Nanny failed to start``. Now the start is tried again with a new server, and if
that one dies too, with spawned workers; each step is a warning.

The kills are real: ``SIGKILL`` to the real server process (its id from ``forkserver``'s
state), from a thread, while ``Pipeline.run`` on a fresh ``DaskExecutor`` starts its cluster.
The points are events, not times: the server killed before the cluster starts, once it has
forked one worker, once it has forked every worker. To make "while the cluster starts" certain,
the workers wait in a preload of their own until the killer is done (a real preload file that
waits for a real file), so the cluster cannot finish starting before the kill.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import threading
from pathlib import Path

import psutil
import pytest

from curator_dask import DaskExecutor, JsonlReader, JsonlWriter, Pipeline
from curator_dask.backends.dask import forkserver
from curator_dask.sample_data import generate_jsonl
from tests.backends.process_stages import RecordProcess
from tests.helpers import poll_for

pytestmark = pytest.mark.slow

FILES = 4
GATE_PRELOAD = """
import os, time

def dask_setup(worker):
    # the worker's start waits here until the test's killer is done (at most 120 s)
    deadline = time.monotonic() + 120
    while not os.path.exists({gate!r}) and time.monotonic() < deadline:
        time.sleep(0.01)
"""


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


class Killer:
    """Kills our forkserver ``times`` times, each as soon as it has forked ``children``
    workers, then opens the gate the workers wait at."""

    def __init__(self, gate: Path, children: int, times: int) -> None:
        self.gate, self.children, self.times = gate, children, times
        self.killed: list[int] = []
        self.orphans: list[int] = []  # workers the killed servers had forked
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _target(self) -> int | None:
        pid = forkserver.server_pid()
        if pid is None or pid in self.killed or _gone(pid):
            return None
        try:
            forked = psutil.Process(pid).children()
        except psutil.NoSuchProcess:
            return None
        return pid if len(forked) >= self.children else None

    def _run(self) -> None:
        try:
            for _ in range(self.times):
                pid = poll_for(self._target, 120, "no forkserver to kill", interval=0.002)
                self.orphans += [p.pid for p in psutil.Process(pid).children()]
                os.kill(pid, signal.SIGKILL)
                self.killed.append(pid)
        finally:
            self.gate.touch()


def _pipeline(tmp_path: Path) -> Pipeline:
    generate_jsonl(str(tmp_path / "input"), files=FILES, docs_per_file=3, seed=19)
    return (Pipeline(name="forkserver-killed")
            .add_stage(JsonlReader(file_paths=str(tmp_path / "input")))
            .add_stage(RecordProcess(path=str(tmp_path / "processes.txt")))
            .add_stage(JsonlWriter(path=str(tmp_path / "output"))))


def _rows(directory: Path) -> list[dict]:
    rows = [json.loads(line) for path in sorted(directory.glob("*.jsonl"))
            for line in path.read_text().splitlines()]
    return sorted(rows, key=lambda r: r["id"])


def _run(tmp_path: Path, caplog: pytest.LogCaptureFixture, *, children: int,
         times: int) -> tuple[Killer, list]:
    """Run the pipeline on a fresh executor while the killer works; returns the killer and the
    ``(pid, parent pid)`` of the worker processes that ran the stage."""
    caplog.set_level(logging.WARNING)
    gate = tmp_path / "gate"
    preload = tmp_path / "gate_preload.py"
    preload.write_text(GATE_PRELOAD.format(gate=str(gate)))
    pipeline = _pipeline(tmp_path)
    executor = DaskExecutor(n_workers=2, progress=False,
                            cluster_kwargs={"preload": [str(preload)]})
    killer = Killer(gate, children, times)
    if children == 0:  # "as soon as it exists": started ahead, killed before the run
        executor.prepare_workers()
        killer._run()
        poll_for(lambda: _gone(killer.killed[0]), 30, "the killed forkserver is still there")
    else:
        killer.thread.start()
    result = pipeline.run(executor=executor)
    if killer.thread.ident is not None:
        killer.thread.join(timeout=30)
    assert len(killer.killed) == times
    assert len(result) == FILES
    assert _rows(tmp_path / "output") == _rows(tmp_path / "input")  # every row, unchanged
    lines = (tmp_path / "processes.txt").read_text().split("\n")
    processes = sorted({tuple(map(int, line.split())) for line in lines if line})
    # the workers the killed servers had forked did not outlive them
    poll_for(lambda: all(_gone(p) for p in killer.orphans), 60,
             lambda: f"workers of a killed forkserver still running: {killer.orphans}")
    return killer, processes


@pytest.mark.parametrize(("point", "children"), [
    ("before the cluster starts", 0),
    ("once it forked a worker", 1),
    ("once it forked every worker", 2),
])
def test_a_forkserver_killed_while_the_cluster_starts_is_started_again(
        tmp_path, caplog, point, children):
    killer, processes = _run(tmp_path, caplog, children=children, times=1)
    (dead,) = killer.killed
    server = forkserver.server_pid()
    assert server not in (None, dead) and not _gone(server)
    # the stage ran in workers forked by the new server
    assert processes and {ppid for _, ppid in processes} == {server}, (point, processes)
    text = caplog.text
    assert f"(pid {dead}) has died; starting a new one" in text, text
    if children:  # the start it broke was tried again
        assert f"(pid {dead}) died while the cluster started" in text, text
    assert "spawning the workers instead" not in text


def test_a_restarted_forkserver_that_dies_too_leaves_spawned_workers(tmp_path, caplog):
    killer, processes = _run(tmp_path, caplog, children=1, times=2)
    first, second = killer.killed
    assert processes and {ppid for _, ppid in processes} == {os.getpid()}  # spawned by us
    text = caplog.text
    assert f"(pid {first}) died while the cluster started" in text, text
    assert f"restarted forkserver of the embedded cluster's workers (pid {second}) died " \
           "too while the cluster started" in text, text
    assert "spawning the workers instead" in text
    # the next cluster of this driver has a forkserver again
    with DaskExecutor(n_workers=1, progress=False) as executor:
        assert executor.cluster.curator_dask_start_method == "forkserver"
        assert forkserver.server_pid() not in (None, first, second)
