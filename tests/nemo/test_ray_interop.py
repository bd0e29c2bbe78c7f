"""Against NeMo Curator's own Ray backend, for real: a Ray cluster started as NeMo's docs show
(``RayClient``), NeMo's ``RayActorPoolExecutor`` with a checkpoint. The Dask executor gives the
same files, bytes, names and task ids; NeMo's checkpoint is honoured by the Dask executor and
the Dask executor's by NeMo's.

The Ray side runs in a child process (Ray's daemons and its ``RAY_ADDRESS`` stay out of the
test process) and ends its cluster whatever happens; the test then checks that no process it
started is left: they carry a marker in their environment (Ray's daemons inherit it), so Ray
processes of anyone else on the machine are not looked at. The Ray side is hermetic: a private
temporary folder (``ray_temp_dir`` and ``RAY_TMPDIR``, so a ``/tmp/ray/ray_current_cluster``
naming a dead cluster of an earlier run is never read) and free ports; and whether it passes,
fails or times out, every process carrying the marker is killed before the test ends (CI once
saw a timed-out Ray side leave ``ray start --head`` and 19 processes running).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import uuid

from tests.helpers import REPO_ROOT, completed_ids, poll_for
from tests.nemo.nemo_pipelines import curation_pipeline, files_of, nemo_completed, write_input

RAY_SIDE = textwrap.dedent("""
    import json, os, signal, sys
    from nemo_curator.backends.ray_actor_pool import RayActorPoolExecutor
    from nemo_curator.core.client import RayClient
    from tests.nemo.nemo_pipelines import curation_pipeline
    data, out, ck, dask_ck, rerun_out, ray_tmp = sys.argv[1:7]
    client = RayClient(num_cpus=2, include_dashboard=False, ray_temp_dir=ray_tmp)
    client.start()
    report = {}
    try:
        tasks = curation_pipeline(data, out).run(executor=RayActorPoolExecutor(),
                                                 checkpoint_path=ck)
        report["ids"] = sorted(t.task_id for t in tasks)
        try:  # every source is complete in the Dask executor's checkpoint
            again = curation_pipeline(data, rerun_out).run(executor=RayActorPoolExecutor(),
                                                           checkpoint_path=dask_ck)
            report["rerun"] = len(again or [])
        except ValueError as exc:  # RayActorPoolExecutor: "No tasks to process"
            report["rerun"] = str(exc)
    finally:
        # RayClient.stop() lets `ray start --block` drain for 5 s; the test ends the cluster's
        # process group at once (the same group RayClient.stop() signals).
        os.killpg(os.getpgid(client.ray_process.pid), signal.SIGKILL)
        client.ray_process.wait()
    print("REPORT " + json.dumps(report))
""")


def test_same_as_nemos_ray_executor_and_checkpoints_interoperate(tmp_path, executor):
    data = write_input(tmp_path / "input")
    dask_ck, ray_ck = tmp_path / "dask_ck", tmp_path / "ray_ck"
    dask = curation_pipeline(data, tmp_path / "dask_out").run(executor=executor,
                                                              checkpoint_path=str(dask_ck))
    env = {**os.environ, "PATH": os.pathsep.join([os.path.dirname(sys.executable),
                                                  os.environ.get("PATH", "")]),
           "PYTHONPATH": str(REPO_ROOT)}
    env.pop("RAY_ADDRESS", None)
    marker = env[MARKER] = uuid.uuid4().hex
    # short: Ray's unix sockets live under it (a socket path has at most 107 bytes)
    ray_tmp = tempfile.mkdtemp(prefix="cdray-")
    env["RAY_TMPDIR"] = ray_tmp
    try:
        proc = subprocess.run(
            [sys.executable, "-c", RAY_SIDE, str(data), str(tmp_path / "ray_out"), str(ray_ck),
             str(dask_ck), str(tmp_path / "ray_rerun_out"), ray_tmp],
            capture_output=True, text=True, timeout=240, env=env, cwd=tmp_path)
    finally:  # passed, failed or timed out: nothing the Ray side started outlives the test
        proc_left = _kill_started_by(marker)
        shutil.rmtree(ray_tmp, ignore_errors=True)
    report_lines = [line for line in proc.stdout.splitlines() if line.startswith("REPORT ")]
    assert proc.returncode == 0 and report_lines, (proc.stdout + proc.stderr)[-4000:]
    report = json.loads(report_lines[-1][len("REPORT "):])
    assert not proc_left, f"Ray left {proc_left} running after its side ended"
    # the same output files, bytes and names; the same task ids
    assert files_of(tmp_path / "ray_out") == files_of(tmp_path / "dask_out")
    assert report["ids"] == sorted(t.task_id for t in dask)
    # the same completed sources in both checkpoints, whoever reads them
    assert completed_ids(ray_ck) == completed_ids(dask_ck) == nemo_completed(dask_ck)
    assert len(completed_ids(ray_ck)) == 3
    # the Dask executor's checkpoint, honoured by NeMo: nothing left to process
    assert "No tasks to process" in str(report["rerun"]) or report["rerun"] == 0
    assert not list((tmp_path / "ray_rerun_out").glob("*.jsonl"))
    # NeMo's checkpoint, honoured by the Dask executor
    rerun = curation_pipeline(data, tmp_path / "dask_rerun_out").run(
        executor=executor, checkpoint_path=str(ray_ck))
    assert list(rerun) == [] and rerun.skipped_sources == 3
    assert not list((tmp_path / "dask_rerun_out").glob("*.jsonl"))


MARKER = "CURATOR_DASK_TEST_RAY_SIDE"


def _started_by(marker: str) -> list:
    """The processes alive that carry this test's marker in their environment."""
    import psutil

    found = []
    for p in psutil.process_iter(["name", "pid", "status"]):
        try:
            if p.info["status"] != psutil.STATUS_ZOMBIE and p.environ().get(MARKER) == marker:
                found.append(p)
        except (psutil.Error, OSError):  # gone meanwhile
            continue
    return found


def _kill_started_by(marker: str) -> list[str]:
    """Kill every process that carries the marker; returns those that were still running a
    few seconds after the Ray side ended (its own clean-up should have ended them)."""
    import psutil

    # Ray's daemons exit by themselves once their GCS is gone: give them a moment
    poll_for(lambda: not _started_by(marker), 30, "", fail=False)
    left = [f"{p.info['name']} ({p.pid})" for p in _started_by(marker)]
    for p in _started_by(marker):
        with contextlib.suppress(psutil.Error):
            p.kill()
    return left
