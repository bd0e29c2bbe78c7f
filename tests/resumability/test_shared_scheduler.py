"""Checkpointed runs that share one running scheduler never share a writer file (issue 24).

A real ``dask scheduler`` and ``dask worker`` run as subprocesses and are reached by address,
as ``DaskExecutor(address=...)`` reaches a cluster someone else started. Each run's completion
plugin opens its store in that one scheduler process, so before writer ids carried a per-run
token two runs with one checkpoint path opened the same ``<host>-<pid>.mdb`` there (LMDB
forbids opening a file twice in one process). Real LMDB files, read as NeMo Curator reads them.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from curator_dask.resumability.store import METADATA_DIRNAME, read_completed
from curator_dask.sample_data import generate_jsonl
from tests.helpers import poll_for, stop_process_group

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]  # the checkout under test (a worktree too)
DASK = str(Path(sys.executable).with_name("dask"))
FILES = 3  # input files (source partitions) per run

# One run, as a separate driver process: JsonlReader -> WaitFor(gate, marker) -> JsonlWriter.
DRIVER = textwrap.dedent("""
    import json, sys
    from curator_dask import DaskExecutor, Pipeline
    from curator_dask.stages.text.io.reader import JsonlReader
    from curator_dask.stages.text.io.writer import JsonlWriter
    from tests.backends.dask_test_stages import WaitFor

    address, data, out, ckpt, gate, marker = sys.argv[1:]
    p = Pipeline(name="shared")
    p.add_stage(JsonlReader(file_paths=data, fields=["id", "text"]))
    p.add_stage(WaitFor(path=gate, marker=marker))
    p.add_stage(JsonlWriter(path=out))
    result = p.run(executor=DaskExecutor(address=address, progress=False), checkpoint_path=ckpt)
    print(json.dumps({"writer_file": result.checkpoint["writer_file"],
                      "skipped": result.skipped_sources, "written": len(result)}))
""")


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DASK_", "PYTHONPATH"))}
    env["PYTHONPATH"] = str(ROOT)  # the workers and drivers import tests.* and this checkout
    return env


@pytest.fixture(scope="module")
def scheduler(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> str:
    """A running ``dask scheduler`` and one worker (6 threads: every batch of two runs can
    wait in ``WaitFor`` at once); its address. Both process groups end with the module."""
    home = tmp_path_factory.mktemp("shared-scheduler")
    scheduler_file = home / "scheduler.json"
    procs: list[subprocess.Popen] = []

    def start(*args: str, log: str) -> None:
        with open(home / log, "w") as out:
            procs.append(subprocess.Popen([DASK, *args], cwd=home, env=_env(), stdout=out,
                                          stderr=subprocess.STDOUT, start_new_session=True))

    request.addfinalizer(lambda: [stop_process_group(p) for p in reversed(procs)])

    def logs() -> str:
        return "\n".join(p.read_text()[-2000:] for p in sorted(home.glob("*.log")))

    start("scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard",
          "--scheduler-file", str(scheduler_file), log="scheduler.log")
    address = poll_for(lambda: json.loads(scheduler_file.read_text())["address"], 60,
                       lambda: "the scheduler wrote no scheduler file: " + logs(),
                       interval=0.2, ignore=(OSError, ValueError, KeyError))
    start("worker", "--scheduler-file", str(scheduler_file), "--nworkers", "1", "--nthreads",
          str(2 * FILES), "--no-dashboard", "--host", "127.0.0.1", log="worker.log")
    from distributed import Client

    with Client(address, timeout=30) as client:
        try:
            client.wait_for_workers(1, timeout=60)
        except TimeoutError:
            pytest.fail("the worker did not join: " + logs())
    return address


def writer_files(ckpt: Path) -> dict[str, set[str]]:
    """``{file name: completed ids}`` of every writer file, each read as NeMo Curator reads it."""
    meta = ckpt / METADATA_DIRNAME
    return {p.name: read_completed(str(p)) for p in sorted(meta.glob("*.mdb"))}


def inputs(tmp_path: Path, name: str, seed: int) -> Path:
    data = tmp_path / name
    generate_jsonl(str(data), files=FILES, docs_per_file=2, seed=seed)
    return data


def run_in_driver(address: str, data: Path, out: Path, ckpt: Path, gate: Path,
                  marker: Path) -> subprocess.Popen:
    (data.parent / "driver.py").write_text(DRIVER)
    return subprocess.Popen(
        [sys.executable, str(data.parent / "driver.py"), address, str(data), str(out),
         str(ckpt), str(gate), str(marker)],
        cwd=data.parent, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, start_new_session=True)


def finish(proc: subprocess.Popen) -> dict:
    try:
        stdout, stderr = proc.communicate(timeout=240)
    finally:
        stop_process_group(proc)
    assert proc.returncode == 0, stderr[-4000:]
    return json.loads(stdout.strip().splitlines()[-1])


def run_here(address: str, data: Path, out: Path, ckpt: Path, gate: Path) -> dict:
    """One run from this process (the gate is open: nothing waits)."""
    from curator_dask import DaskExecutor, Pipeline
    from curator_dask.stages.text.io.reader import JsonlReader
    from curator_dask.stages.text.io.writer import JsonlWriter
    from tests.backends.dask_test_stages import WaitFor

    p = Pipeline(name="shared")
    p.add_stage(JsonlReader(file_paths=str(data), fields=["id", "text"]))
    p.add_stage(WaitFor(path=str(gate)))
    p.add_stage(JsonlWriter(path=str(out)))
    result = p.run(executor=DaskExecutor(address=address, progress=False),
                   checkpoint_path=str(ckpt))
    return {"writer_file": result.checkpoint["writer_file"],
            "skipped": result.skipped_sources, "written": len(result)}


def assert_token_names(files: dict[str, set[str]]) -> None:
    """Generated names: NeMo Curator's ``<host>-<pid>`` of the scheduler, then a token."""
    host = re.escape(socket.gethostname())
    for name in files:
        assert re.fullmatch(rf"{host}-\d+-[0-9a-f]{{8}}\.mdb", name), name


def assert_resume_skips_all(address: str, tmp_path: Path, runs: list[Path], ckpt: Path,
                            gate: Path) -> None:
    before = writer_files(ckpt)
    for i, data in enumerate(runs):
        again = run_here(address, data, tmp_path / f"again-{i}", ckpt, gate)
        assert (again["skipped"], again["written"]) == (FILES, 0)
    assert writer_files(ckpt) == before  # a run that completes nothing leaves no file


def assert_two_writer_files(summaries: list[dict], ckpt: Path) -> None:
    """Both runs wrote all their sources, each into a writer file of its own, and the
    checkpoint holds exactly those two files and every source of both."""
    assert [s["written"] for s in summaries] == [FILES, FILES]
    files = writer_files(ckpt)
    own = [os.path.basename(s["writer_file"]) for s in summaries]
    assert own[0] != own[1], f"both runs wrote {own[0]}"
    assert sorted(files) == sorted(own)
    assert_token_names(files)
    assert [len(files[name]) for name in own] == [FILES, FILES]
    assert len(set.union(*files.values())) == 2 * FILES


def test_two_concurrent_runs_on_one_scheduler_write_two_files(scheduler: str,
                                                              tmp_path: Path) -> None:
    ckpt, gate = tmp_path / "ckpt", tmp_path / "gate"
    runs = [inputs(tmp_path, "in-a", 1), inputs(tmp_path, "in-b", 2)]
    markers = [tmp_path / "marker-a", tmp_path / "marker-b"]
    procs = [run_in_driver(scheduler, data, tmp_path / f"out-{i}", ckpt, gate, marker)
             for i, (data, marker) in enumerate(zip(runs, markers, strict=True))]
    try:
        # a batch of each run waits in WaitFor: both runs' stores are open in the scheduler
        poll_for(lambda: all(m.exists() and m.read_text().strip() for m in markers)
                 or any(p.poll() is not None for p in procs), 180,
                 "the two runs never had batches in flight at the same time", interval=0.2)
        for proc in procs:
            if proc.poll() is not None:  # its error (stderr) first
                pytest.fail(f"a driver ended before the gate opened: {finish(proc)}")
    finally:
        gate.touch()
    summaries = [finish(p) for p in procs]
    assert_two_writer_files(summaries, ckpt)  # neither run lost completions
    assert_resume_skips_all(scheduler, tmp_path, runs, ckpt, gate)


def test_two_runs_one_after_the_other_on_one_scheduler_write_two_files(
        scheduler: str, tmp_path: Path) -> None:
    ckpt, gate = tmp_path / "ckpt", tmp_path / "gate"
    gate.touch()
    runs = [inputs(tmp_path, "in-a", 3), inputs(tmp_path, "in-b", 4)]
    summaries = [run_here(scheduler, data, tmp_path / f"out-{i}", ckpt, gate)
                 for i, data in enumerate(runs)]
    assert_two_writer_files(summaries, ckpt)
    assert_resume_skips_all(scheduler, tmp_path, runs, ckpt, gate)
