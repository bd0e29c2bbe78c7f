"""The embedded cluster's workers come from the pre-loaded forkserver (issue 14, item 3).

The server is a fresh interpreter (never a fork of the driver, which may hold CUDA state),
imports the workers' modules once, forks every worker, is reused while the environment stays
the same, and exits with the driver. ``local-cluster.start-method: spawn`` switches back.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import types

import dask.config
import psutil
import pytest

from curator_dask import DaskExecutor
from curator_dask.backends.dask import forkserver
from curator_dask.sample_data import generate_jsonl

# the forkserver and worker processes of this process are watched: no shared cluster alive
pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("no_shared_cluster")]

DRIVER_ONLY = "curator_dask_test_driver_only_state"  # stands for CUDA state of the driver


def _worker_view() -> dict:
    """What a worker process looks like from inside, before it ran any task."""
    import gc
    import os
    import signal
    import sys

    return {
        "ppid": os.getppid(),
        "preloaded": all(m in sys.modules for m in (
            "pandas", "pyarrow.json", "curator_dask.backends.dask.worker")),
        "driver_state": "curator_dask_test_driver_only_state" in sys.modules,
        "sigint_ignored": signal.getsignal(signal.SIGINT) is signal.SIG_IGN,
        "frozen": gc.get_freeze_count(),
        "gc_enabled": gc.isenabled(),
        "env": os.environ.get("CURATOR_DASK_TEST_FORKSERVER"),
        "preload_env": os.environ.get(forkserver.PRELOAD_ENV),
        "cwd": os.getcwd(),
    }


def _views(executor: DaskExecutor) -> list[dict]:
    return list(executor.start().run(_worker_view).values())


def test_workers_are_forked_by_the_preloaded_server_not_by_the_driver(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, DRIVER_ONLY, types.ModuleType(DRIVER_ONLY))
    executor = DaskExecutor(n_workers=2, progress=False)
    executor.prepare_workers()  # the server starts in the directory of the time
    monkeypatch.chdir(tmp_path)  # later: the workers follow the driver, not the server
    with executor:
        assert executor.cluster.curator_dask_start_method == "forkserver"
        server = forkserver.server_pid()
        views = _views(executor)
        cmdline = " ".join(psutil.Process(server).cmdline())
    assert server is not None and server != os.getpid()
    # a fresh interpreter running multiprocessing's server, started by the driver
    assert "from multiprocessing.forkserver import main" in cmdline
    assert psutil.Process(server).ppid() == os.getpid()
    assert len(views) == 2
    for view in views:
        assert view["ppid"] == server  # forked by the server
        assert view["preloaded"]  # imported once, in the server
        assert not view["driver_state"]  # nothing of the driver's memory
        assert view["sigint_ignored"]  # Ctrl+C is the driver's
        assert view["frozen"] > 0  # the preloaded objects skip the workers' collections
        assert view["gc_enabled"]  # off in the server only
        assert view["preload_env"] is None
        assert view["cwd"] == str(tmp_path)  # the driver's, as multiprocessing prepares it


def test_the_server_is_reused_and_replaced_when_the_environment_changes(monkeypatch):
    monkeypatch.delenv("CURATOR_DASK_TEST_FORKSERVER", raising=False)
    with DaskExecutor(n_workers=1, progress=False) as executor:
        first = forkserver.server_pid()
        assert [v["env"] for v in _views(executor)] == [None]
    with DaskExecutor(n_workers=1, progress=False) as executor:
        assert forkserver.server_pid() == first  # same environment: the same server
    monkeypatch.setenv("CURATOR_DASK_TEST_FORKSERVER", "set after the first cluster")
    with DaskExecutor(n_workers=1, progress=False) as executor:
        views = _views(executor)
        second = forkserver.server_pid()
    assert second != first
    assert [(v["ppid"], v["env"]) for v in views] == [(second, "set after the first cluster")]
    _gone(first)  # the old server exited once its workers had


def test_a_cluster_alive_beside_another_forks_from_the_same_server(monkeypatch):
    """distributed's Nanny sets ``__DASK_PARENT_PID`` when the first cluster starts (process
    titles): bookkeeping, not another environment. Counted, a second cluster alive beside the
    first (a test suite's shared one) spawned its workers, about 1 s more for each."""
    monkeypatch.delenv("__DASK_PARENT_PID", raising=False)  # as in a process's first cluster
    with DaskExecutor(n_workers=1, progress=False):
        server = forkserver.server_pid()
        assert os.environ.get("__DASK_PARENT_PID") == str(os.getpid())
        with DaskExecutor(n_workers=1, progress=False) as second:
            assert second.cluster.curator_dask_start_method == "forkserver"
            assert [v["ppid"] for v in _views(second)] == [server]


def test_spawn_through_the_config():
    with (dask.config.set({"curator-dask.local-cluster.start-method": "spawn"}),
          DaskExecutor(n_workers=1, progress=False) as executor):
        assert executor.cluster.curator_dask_start_method == "spawn"
        views = _views(executor)
    assert [v["ppid"] for v in views] == [os.getpid()]  # the driver spawned it
    assert views[0]["sigint_ignored"] and not views[0]["preloaded"]


def test_an_unknown_start_method_is_refused():
    with (dask.config.set({"curator-dask.local-cluster.start-method": "fork"}),
          pytest.raises(ValueError, match="start-method must be one of")):
        forkserver.start_method()


SCRIPT = """
import os
from curator_dask import DaskExecutor, JsonlReader, JsonlWriter, Pipeline
from curator_dask.backends.dask import forkserver

p = Pipeline(name="p").add_stage(JsonlReader(file_paths="input")).add_stage(
    JsonlWriter(path="output"))
executor = DaskExecutor(n_workers=2, progress=False)
result = p.run(executor=executor)  # at module level: no __main__ guard
print("server", forkserver.server_pid(), "outputs", len(result), flush=True)
"""


@pytest.mark.parametrize("how", ["script", "stdin"])
def test_a_driver_without_main_guard_or_file_and_the_server_exits_with_it(tmp_path, how):
    """A script without ``if __name__ == "__main__"`` and a driver with no main file (as in a
    notebook: code read from stdin) run once; the server goes when the driver has."""
    generate_jsonl(str(tmp_path / "input"), files=3, docs_per_file=4, seed=2)
    (tmp_path / "script.py").write_text(SCRIPT)
    argv, stdin = ([sys.executable, "script.py"], None) if how == "script" else (
        [sys.executable, "-"], SCRIPT)
    proc = subprocess.run(argv, input=stdin, cwd=tmp_path, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    words = proc.stdout.split()
    assert proc.stdout.count("server") == 1 and words[3] == "3", proc.stdout  # ran once
    _gone(int(words[1]))
    assert len(os.listdir(tmp_path / "output")) == 3


def _gone(pid: int, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return  # exited; its parent (this process, or init) reaps it
        except psutil.NoSuchProcess:
            return
        time.sleep(0.1)
    raise AssertionError(f"process {pid} is still running")


EARLY = """
import atexit, gc, os, sys
atexit.register(lambda: print("frozen at exit", gc.get_freeze_count() > 0, flush=True))
from curator_dask import DaskExecutor, JsonlReader, JsonlWriter, Pipeline
from curator_dask.backends.dask import forkserver
imported = forkserver.server_pid()
executor = DaskExecutor(n_workers=1, progress=False)
made = forkserver.server_pid()
executor.prepare_workers()  # what a run does first
prepared = forkserver.server_pid()
p = Pipeline(name="p").add_stage(JsonlReader(file_paths="input")).add_stage(
    JsonlWriter(path="output"))
p.run(executor=executor)
print("imported", imported, "made", made, "prepared", prepared, "used", forkserver.server_pid(),
      flush=True)
"""


@pytest.mark.parametrize("setting", ["default", "off"])
def test_the_server_starts_when_a_run_begins_not_at_import(tmp_path, setting):
    """Getting ``Pipeline`` or making a ``DaskExecutor`` starts no server; a run starts it
    ahead of its cluster (``prepare_workers``), and the cluster uses that one; turned off, the
    cluster's start starts it. A driver that ran an embedded cluster freezes its objects at
    exit (``local-cluster.freeze-at-exit``)."""
    generate_jsonl(str(tmp_path / "input"), files=2, docs_per_file=3, seed=4)
    env = dict(os.environ)
    if setting == "off":
        env.update({"DASK_CURATOR_DASK__LOCAL_CLUSTER__FORKSERVER_PRESTART": "false",
                    "DASK_CURATOR_DASK__LOCAL_CLUSTER__FREEZE_AT_EXIT": "false"})
    proc = subprocess.run([sys.executable, "-c", EARLY], cwd=tmp_path, env=env, text=True,
                          capture_output=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    words = dict(zip(*[iter(proc.stdout.split("\n")[0].split())] * 2, strict=True))
    assert words["imported"] == words["made"] == "None" != words["used"], proc.stdout
    if setting == "default":
        assert words["prepared"] == words["used"], proc.stdout
        assert "frozen at exit True" in proc.stdout
    else:
        assert words["prepared"] == "None", proc.stdout
        assert "frozen at exit False" in proc.stdout


def test_a_driver_of_another_cluster_lets_an_unused_server_go():
    from distributed import LocalCluster

    with DaskExecutor(n_workers=1, progress=False):
        pass
    pid = forkserver.server_pid()
    assert pid is not None  # kept for the next embedded cluster
    with LocalCluster(n_workers=1, processes=False, dashboard_address=None) as other:
        executor = DaskExecutor(address=other.scheduler_address, progress=False)
        assert forkserver.server_pid() == pid  # made only: nothing happens yet
        with executor:  # its start lets the unused server go
            assert forkserver.server_pid() is None
    _gone(pid)
