"""Dask clusters on SLURM through dask-jobqueue: TLS by default, lost jobs replaced.

``SLURMCluster`` submits one SLURM job per worker. A Dask scheduler runs whatever pickled code
reaches it, so on a shared cluster the scheduler and workers talk TLS with temporary
credentials (``tls=False`` opts out, for example on a private allocation). dask-jobqueue does
not replace a worker job lost to preemption, walltime or ``scancel``: the watchdog here
re-applies the target size every few seconds, which submits a new job once distributed has
given up on the lost one (``distributed.deploy.lost-worker-timeout``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
import threading
from typing import Any

logger = logging.getLogger(__name__)


class SlurmClusterHandle:
    """A dask-jobqueue ``SLURMCluster`` scaled to ``jobs`` worker jobs, kept at that size.

    Keyword arguments go to ``SLURMCluster`` and default to dask-jobqueue's ``jobqueue.slurm``
    configuration (cores, memory, queue, walltime, interface, ...).

    Example:
        >>> # handle = SlurmClusterHandle(jobs=2, cores=4, memory="8GB", walltime="01:00:00")
        >>> # client = Client(handle.cluster); ...; handle.close()
    """

    def __init__(self, jobs: int, *, tls: bool = True, watchdog_interval: float | None = None,
                 **cluster_kwargs: Any) -> None:
        from curator_dask import config

        watchdog_interval = float(config.get("slurm.watchdog-interval", watchdog_interval))
        try:
            from dask_jobqueue import SLURMCluster
        except ImportError as exc:
            msg = ("cluster='slurm' needs dask-jobqueue: pip install 'curator_dask[slurm]'")
            raise ImportError(msg) from exc
        if jobs < 1:
            msg = f"jobs must be at least 1, got {jobs}"
            raise ValueError(msg)
        self.jobs = jobs
        self._tls_dir: str | None = None
        kwargs = dict(cluster_kwargs)
        if tls and "security" not in kwargs:
            # Temporary credentials are written where the worker jobs can read them: a private
            # (0700) folder under the home directory, usually shared on HPC systems.
            base = os.path.expanduser(os.path.join("~", ".curator-dask", "tls"))
            os.makedirs(base, mode=0o700, exist_ok=True)
            _remove_empty_dirs(base)
            self._tls_dir = tempfile.mkdtemp(prefix="cluster-", dir=base)
            kwargs.setdefault("shared_temp_directory", self._tls_dir)
            kwargs["security"] = True
        kwargs.update(loopback_dashboards(kwargs))
        self.cluster = SLURMCluster(**kwargs)
        self.tls = str(self.cluster.scheduler_address).startswith("tls://")
        self.cluster.scale(jobs=jobs)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, args=(watchdog_interval,),
                                        name="curator-dask-slurm-watchdog", daemon=True)
        self._thread.start()
        logger.info("SLURMCluster at %s (%s), %d worker jobs", self.cluster.scheduler_address,
                    "TLS" if self.tls else "no TLS", jobs)

    def _watch(self, interval: float) -> None:
        while not self._stop.wait(interval):
            try:
                running = len(self.cluster.scheduler_info.get("workers", {}))
                if running < self.jobs:
                    logger.info("SLURM watchdog: %d of %d workers; rescaling", running,
                                self.jobs)
                self.cluster.scale(jobs=self.jobs)
            except Exception as exc:  # noqa: BLE001 (keep watching; report once per failure)
                logger.warning("SLURM watchdog could not rescale: %s", exc)

    def close(self) -> None:
        # dask-jobqueue deletes its credential files itself (at exit); the emptied folder is
        # removed by the next cluster started here.
        self._stop.set()
        self.cluster.close()


def loopback_dashboards(kwargs: dict[str, Any]) -> dict[str, Any]:
    """``scheduler_options`` and ``worker_extra_args`` for ``SLURMCluster`` that keep the
    dashboards (plain HTTP, while the comms use TLS) on loopback, unless the user chose.

    dask-jobqueue binds the scheduler's dashboard to ``:8787`` (every interface) and ``dask
    worker`` its own to ``:0``; here they listen on ``127.0.0.1`` (the scheduler's on port
    8787, or a free one when taken). Reach the scheduler's through an SSH tunnel, e.g.
    ``ssh -L 8787:localhost:8787 login-node`` (docs/design/architecture.md "Safety of names
    and addresses"). The values given, in ``kwargs`` or in the ``jobqueue.slurm``
    configuration, are completed, never replaced.

    Example:
        >>> opts = loopback_dashboards({"scheduler_options": {"port": 8786}})
        >>> opts["scheduler_options"]
        {'port': 8786, 'dashboard_address': '127.0.0.1:8787'}
        >>> opts["worker_extra_args"][-2:]
        ['--dashboard-address', '127.0.0.1:0']
        >>> loopback_dashboards({"scheduler_options": {"dashboard_address": ":9000"},
        ...                      "worker_extra_args": ["--no-dashboard"]})["scheduler_options"]
        {'dashboard_address': ':9000'}
    """
    import dask.config

    scheduler = kwargs.get("scheduler_options")
    if scheduler is None:
        scheduler = dask.config.get("jobqueue.slurm.scheduler-options", None) or {}
    scheduler = dict(scheduler)
    scheduler.setdefault("dashboard_address", "127.0.0.1:8787")
    worker = kwargs.get("worker_extra_args")
    if worker is None:
        worker = dask.config.get("jobqueue.slurm.worker-extra-args", None) or []
    worker = list(worker)
    # `--no-dashboard` alone still serves /health and /metrics on --dashboard-address.
    if not any(str(a).startswith("--dashboard-address") for a in worker):
        worker += ["--dashboard-address", "127.0.0.1:0"]
    return {"scheduler_options": scheduler, "worker_extra_args": worker}


def _remove_empty_dirs(base: str) -> None:
    for name in os.listdir(base):
        with contextlib.suppress(OSError):
            os.rmdir(os.path.join(base, name))
