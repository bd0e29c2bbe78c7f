"""``cluster="slurm"``: the dashboards (plain HTTP) listen on loopback only; the comm ports (TLS)
on the chosen interface (issue 12, item 4). Checked on the sockets of a real run.

Only the project's own local SLURM is used (tests/slurm/local_slurm.py).
"""

from __future__ import annotations

import os
import sys

import pytest

from tests.slurm.local_slurm import local_slurm, network_kwargs

_reason = local_slurm()
pytestmark = [pytest.mark.slurm, pytest.mark.slow,
              pytest.mark.skipif(_reason is not None, reason=_reason or "")]

ANY = ("0.0.0.0", "::")


def _listening(pids: set[int]) -> list[tuple[int, str, int]]:
    import psutil

    return sorted((c.pid, c.laddr.ip, c.laddr.port) for c in psutil.net_connections(kind="inet")
                  if c.status == psutil.CONN_LISTEN and c.pid in pids)


def test_slurm_cluster_dashboards_listen_on_loopback_only(tmp_path):
    pytest.importorskip("dask_jobqueue")
    from curator_dask import DaskExecutor

    # As in test_real_slurm.py's TLS test, but no dashboard options: the defaults are tested.
    kwargs = {"cores": 1, "memory": "1GB", "processes": 1, "queue": "debug",
              "walltime": "00:10:00", **network_kwargs(), "log_directory": str(tmp_path / "logs"),
              "python": sys.executable}
    def job_listening() -> list[tuple[int, str, int]]:
        """The listening sockets of the worker job this runs in (defined here, so that it
        travels by value): the worker's process, its nanny
        (its parent, under slurmstepd) and their children. Run on the worker (``client.run``): on
        the multi-node test cluster its processes and sockets are in the node's own PID and
        network namespaces, where only a process of that node sees them."""
        import psutil

        worker = psutil.Process()
        top = worker
        for parent in worker.parents():
            if parent.name().startswith("slurmstepd") or parent.pid == 1:
                break
            top = parent
        pids = {top.pid, *(p.pid for p in top.children(recursive=True))}
        return sorted((c.pid, c.laddr.ip, c.laddr.port) for c in psutil.net_connections(kind="inet")
                      if c.status == psutil.CONN_LISTEN and c.pid in pids)

    with DaskExecutor(cluster="slurm", jobs=1, progress=False, cluster_kwargs=kwargs) as executor:
        client = executor.start()
        client.wait_for_workers(1, timeout=120)
        assert executor.cluster.tls
        http = client.run_on_scheduler(lambda dask_scheduler: dask_scheduler.http_server.port)
        worker_http = client.run(lambda dask_worker: dask_worker.http_server.port)
        driver = _listening({os.getpid()})
        (job,) = client.run(job_listening).values()
    report = f"driver: {driver}\nworker job: {job}"
    assert driver and job, report
    assert not [s for s in driver + job if s[1] in ANY], report
    # the scheduler's and the worker's HTTP servers are among them, on loopback
    assert (os.getpid(), "127.0.0.1", http) in driver, report
    (worker_http_port,) = worker_http.values()
    assert any(s[1:] == ("127.0.0.1", worker_http_port) for s in job), report
