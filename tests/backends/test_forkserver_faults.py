"""The embedded cluster's forkserver killed while the cluster starts (issue 19, item 9).

A forkserver that dies takes the workers it forked with it, and the cluster's start failed with
``RuntimeError: Nanny failed to start``. Now the start is tried again with a new server, and if
that one dies too, with spawned workers; each step is a warning.

The kills are real: ``SIGKILL`` to the real server process while ``Pipeline.run`` on a fresh
``DaskExecutor`` starts its cluster. The points are events, not times: the server killed before
the cluster starts (by the test, once the server exists), once it has forked one worker, once it
has forked every worker. The last two are done by the forked workers themselves, in a preload of
their own (a real preload file) that runs while the worker starts, so the cluster cannot finish
starting before the kill, and a restarted server is killed by its own first worker as surely as
the first one was (a killer thread polling for the server raced the cluster's start: CI once saw
it kill only once).
"""

from __future__ import annotations

import json
import logging
import os
import signal
from pathlib import Path

import psutil
import pytest

from curator_dask import DaskExecutor, JsonlReader, JsonlWriter, Pipeline
from curator_dask.backends.dask import forkserver
from curator_dask.sample_data import generate_jsonl
from tests.backends.process_stages import RecordProcess
from tests.helpers import poll_for

# the forkserver and worker processes of this process are watched: no shared cluster alive
pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("no_shared_cluster")]

FILES = 4
KILL_PRELOAD = """
import fcntl, os, signal
import psutil

STATE, CHILDREN, TIMES, DRIVER = {state!r}, {children!r}, {times!r}, {driver!r}

def _lines(name):
    path = os.path.join(STATE, name)
    return open(path).read().split() if os.path.exists(path) else []

def _add(name, values):
    with open(os.path.join(STATE, name), "a") as f:
        f.write("".join(f"{{v}}\\n" for v in values))

def dask_setup(worker):
    server = psutil.Process(os.getppid())
    if server.pid == DRIVER or server.ppid() != DRIVER:
        return  # spawned by the driver, not forked by its forkserver
    with open(os.path.join(STATE, "lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # the workers of one server start at once
        killed = _lines("killed")
        if len(killed) >= TIMES or str(server.pid) in killed:
            return
        _add("forked-by-" + str(server.pid), [os.getpid()])
        if len(_lines("forked-by-" + str(server.pid))) < CHILDREN:
            return
        _add("orphans", [c.pid for c in server.children()])
        _add("killed", [server.pid])
        os.kill(server.pid, signal.SIGKILL)
"""


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


class Killer:
    """Kills our forkserver ``times`` times, each as soon as it has forked ``children``
    workers: ``children == 0`` by :meth:`kill_now`, otherwise by the workers' preload
    (:meth:`preload`). What it killed is read back from its state folder."""

    def __init__(self, state: Path, children: int, times: int) -> None:
        self.state, self.children, self.times = state, children, times
        state.mkdir()

    def preload(self) -> str:
        return KILL_PRELOAD.format(state=str(self.state), children=self.children,
                                   times=self.times, driver=os.getpid())

    def kill_now(self) -> None:
        pid = poll_for(forkserver.server_pid, 120, "no forkserver to kill", interval=0.002)
        (self.state / "orphans").write_text(
            "".join(f"{p.pid}\n" for p in psutil.Process(pid).children()))
        os.kill(pid, signal.SIGKILL)
        (self.state / "killed").write_text(f"{pid}\n")

    def _read(self, name: str) -> list[int]:
        path = self.state / name
        return [int(v) for v in path.read_text().split()] if path.exists() else []

    @property
    def killed(self) -> list[int]:
        return self._read("killed")

    @property
    def orphans(self) -> list[int]:
        """The workers the killed servers had forked."""
        return self._read("orphans")


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
    killer = Killer(tmp_path / "killer", children, times)
    preload = tmp_path / "kill_preload.py"
    preload.write_text(killer.preload())
    pipeline = _pipeline(tmp_path)
    executor = DaskExecutor(n_workers=2, progress=False,
                            cluster_kwargs={"preload": [str(preload)]})
    if children == 0:  # "as soon as it exists": started ahead, killed before the run
        executor.prepare_workers()
        killer.kill_now()
        poll_for(lambda: _gone(killer.killed[0]), 30, "the killed forkserver is still there")
    result = pipeline.run(executor=executor)
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
