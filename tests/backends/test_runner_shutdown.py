"""The ``slurm-runner`` step's driver closes the workers before the scheduler
(:func:`~curator_dask.backends.dask.clusters.close_workers_first`): the workers leave while the
scheduler still answers them, so no worker rank logs a failed heartbeat to a scheduler that is
gone (a traceback of 40 lines in the job's log, once pushing the run's own summary out of the
tail a test read). Here on a real in-process ``LocalCluster``."""

from __future__ import annotations

from distributed import Client, LocalCluster

from curator_dask.backends.dask.clusters import close_workers_first


def test_the_workers_leave_while_the_scheduler_still_runs():
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                      dashboard_address=None) as cluster, Client(cluster) as client:
        client.wait_for_workers(2)
        assert client.submit(sum, [1, 2]).result() == 3
        assert close_workers_first(client) == 0
        assert cluster.scheduler.workers == {}
        assert cluster.scheduler.status.name == "running"  # still there to terminate next
        assert all(w.status.name in ("closed", "closing") for w in cluster.workers.values())


def test_a_scheduler_already_gone_is_not_an_error():
    cluster = LocalCluster(n_workers=1, processes=False, dashboard_address=None)
    client = Client(cluster)
    cluster.close()
    try:
        assert close_workers_first(client, timeout=1) == -1
    finally:
        client.close()
