"""Dask clusters on SLURM through dask-jobqueue: TLS by default, lost jobs replaced.

``SLURMCluster`` submits one SLURM job per worker. A Dask scheduler runs whatever pickled code
reaches it, so on a shared cluster the scheduler and workers talk TLS with temporary
credentials (``tls=False`` opts out, for example on a private allocation).

Two ways to size the cluster:

- ``jobs=N``, a fixed size. dask-jobqueue does not replace a worker job lost to preemption,
  walltime or ``scancel``: the watchdog here re-applies the target size every few seconds,
  which submits a new job once distributed has given up on the lost one
  (``distributed.deploy.lost-worker-timeout``).
- ``adapt=(minimum, maximum)`` worker jobs: dask-jobqueue's adaptive scaling (distributed's
  ``Adaptive``) asks for jobs while source chains wait for a thread and releases jobs that
  stay idle for ``slurm.adapt-idle-timeout`` seconds. A lost job stays in the cluster's plan,
  so adaptive scaling submits it again by itself; the watchdog then only warns when jobs were
  asked for and none has connected for ``cluster.wait-for-workers-timeout`` seconds.

In both, a job that ends before its worker joins is unknown to Dask and stays in the plan: the
watchdog replaces it, and after ``slurm.max-failed-job-starts`` in a row :meth:`failure` is the
run's error (``slurm/job_starts.py``).

Each worker job exports the workers' ``PYTHONHASHSEED`` before ``dask worker`` starts
(:func:`hash_seed_prologue`), so that all of them hash strings alike.
"""

from __future__ import annotations

import contextlib
import logging
import math
import numbers
import os
import tempfile
import threading
import time
from typing import Any

from curator_dask.backends.dask.cluster_kinds import SLURM
from curator_dask.utils import private_api
from curator_dask.utils.hash_seed import worker_hash_seed

logger = logging.getLogger(__name__)

# Chains the driver keeps in flight per worker thread (its default window is 2 x threads):
# adaptive scaling asks for a worker job for every this many chains per thread waiting.
CHAINS_PER_THREAD = 2


def check_adapt(adapt: Any, jobs: Any = None, *, given: str | None = None) -> tuple[int, int]:
    """``adapt`` as ``(minimum, maximum)`` worker jobs, or ``ValueError`` naming the value
    given and the fix. ``given`` is how the error names it (default ``adapt=...``).

    Example:
        >>> check_adapt([0, 4])
        (0, 4)
        >>> try:
        ...     check_adapt((3, 1))
        ... except ValueError as exc:
        ...     print(str(exc).split(";")[0])
        adapt=(3, 1): the minimum 3 is above the maximum 1
    """
    given = given or f"adapt={adapt!r}"
    if jobs is not None:
        msg = (f"{given} and jobs={jobs!r} exclude each other: jobs= keeps a fixed number of "
               "worker jobs, adapt= lets it follow the work; pass only one of them")
        raise ValueError(msg)
    pair = isinstance(adapt, (tuple, list)) and len(adapt) == 2
    if not pair or not all(isinstance(v, numbers.Integral) and not isinstance(v, bool)
                           for v in adapt):
        msg = (f"{given}: expected two integers, the minimum and maximum number of worker "
               "jobs, e.g. (0, 4)")
        raise ValueError(msg)
    low, high = int(adapt[0]), int(adapt[1])
    if low < 0:
        msg = f"{given}: the minimum must be 0 or more (0 releases every job when idle)"
        raise ValueError(msg)
    if high < 1:
        msg = f"{given}: the maximum must be at least 1 worker job, got {high}"
        raise ValueError(msg)
    if low > high:
        msg = (f"{given}: the minimum {low} is above the maximum {high}; give (minimum, "
               f"maximum), e.g. ({high}, {low})")
        raise ValueError(msg)
    return low, high


class SlurmClusterHandle:
    """A dask-jobqueue ``SLURMCluster`` kept at ``jobs`` worker jobs, or scaled adaptively
    between ``adapt=(minimum, maximum)`` worker jobs.

    Keyword arguments go to ``SLURMCluster`` and default to dask-jobqueue's ``jobqueue.slurm``
    configuration (cores, memory, queue, walltime, interface, ...). ``max_failed_job_starts``
    (default: config ``slurm.max-failed-job-starts``) worker jobs in a row that end before
    their worker joins make :meth:`failure` a ``WorkerJobsFailedError``.

    Example:
        >>> # handle = SlurmClusterHandle(jobs=2, cores=4, memory="8GB", walltime="01:00:00")
        >>> # handle = SlurmClusterHandle(None, adapt=(0, 8), cores=4, memory="8GB")
        >>> # client = Client(handle.cluster); ...; handle.close()
    """

    def __init__(self, jobs: int | None = 1, *, adapt: tuple[int, int] | None = None,
                 tls: bool = True, watchdog_interval: float | None = None,
                 max_failed_job_starts: int | None = None, **cluster_kwargs: Any) -> None:
        from curator_dask import config
        from curator_dask.slurm.job_starts import JobStarts

        watchdog_interval = float(config.get("slurm.watchdog-interval", watchdog_interval))
        self._starts = JobStarts(config.get("slurm.max-failed-job-starts",
                                            max_failed_job_starts))
        try:
            from dask_jobqueue import SLURMCluster
        except ImportError as exc:
            msg = f"cluster={SLURM!r} needs dask-jobqueue: pip install 'curator_dask[slurm]'"
            raise ImportError(msg) from exc
        self.adapt = check_adapt(adapt, jobs) if adapt is not None else None
        if self.adapt is not None:
            self.jobs: int | None = None
            self._max_jobs = self.adapt[1]
        elif jobs is None or jobs < 1:
            msg = f"jobs must be at least 1, got {jobs}"
            raise ValueError(msg)
        else:
            self.jobs = self._max_jobs = jobs  # the watchdog keeps the cluster at this size
        timing = adapt_timing() if self.adapt is not None else {}  # checked before any job
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
        kwargs.update(hash_seed_prologue(kwargs, worker_hash_seed()))
        self._worker_args = [str(a) for a in kwargs["worker_extra_args"]]
        self.cluster = SLURMCluster(**kwargs)
        self.tls = str(self.cluster.scheduler_address).startswith("tls://")
        self._starts.attach(self.cluster)  # before the first job is submitted
        self._stop = threading.Event()
        if self.adapt is None:
            self.cluster.scale(jobs=jobs)
            watch: Any = self._watch
        else:
            self.cluster.adapt(
                Adaptive=_adaptive_class(), minimum_jobs=self.adapt[0],
                maximum_jobs=self.adapt[1], **timing,
                threads_per_worker=int(
                    private_api.slurm_job_template(self.cluster).worker_process_threads))
            watch = self._watch_adaptive
        self._thread = threading.Thread(target=watch, args=(watchdog_interval,),
                                        name="curator-dask-slurm-watchdog", daemon=True)
        self._thread.start()
        logger.info("SLURMCluster at %s (%s), %s", self.cluster.scheduler_address,
                    "TLS" if self.tls else "no TLS", self.size)

    @property
    def size(self) -> str:
        """The cluster's size in words: ``2 worker jobs`` or ``0 to 4 worker jobs (adaptive)``."""
        if self.adapt is None:
            return f"{self.jobs} worker jobs"
        return f"{self.adapt[0]} to {self.adapt[1]} worker jobs (adaptive)"

    @property
    def threads_per_job(self) -> int:
        """Dask worker threads one worker job offers (its processes x threads per process)."""
        job = private_api.slurm_job_template(self.cluster)  # what its adapt() and scale() read
        return int(job.worker_processes) * int(job.worker_process_threads)

    @property
    def max_threads(self) -> int:
        """Worker threads at the cluster's full size (``jobs``, or the adaptive maximum)."""
        return int(self._max_jobs) * self.threads_per_job

    def worker_resources(self) -> dict[str, float]:
        """The Dask resources each worker job will offer (its ``--resources`` argument), to
        judge the stages before any worker has joined (an adaptive cluster at 0 jobs)."""
        args, found = self._worker_args, ""
        for i, arg in enumerate(args):
            if arg == "--resources" and i + 1 < len(args):
                found = args[i + 1]
            elif arg.startswith("--resources="):
                found = arg.split("=", 1)[1]
        pairs = (item.split("=", 1) for item in found.replace(",", " ").split() if "=" in item)
        return {name.strip(): float(value) for name, value in pairs}

    def failure(self) -> Exception | None:
        """The run's error once ``slurm.max-failed-job-starts`` worker jobs in a row ended
        before their Dask worker joined (a ``WorkerJobsFailedError``), else ``None``."""
        return self._starts.failure()

    def wait_for_first_worker(self, client: Any, timeout: float) -> None:
        """``client.wait_for_workers(1, timeout)``, but raising :meth:`failure` as soon as
        the watchdog has seen the worker jobs fail, instead of at the timeout."""
        from distributed.exceptions import WorkerStartTimeoutError

        deadline = time.monotonic() + float(timeout)
        while True:
            error = self.failure()
            if error is not None:
                raise error
            left = deadline - time.monotonic()
            try:
                client.wait_for_workers(1, timeout=max(0.1, min(1.0, left)))
                return
            except WorkerStartTimeoutError as exc:
                if left <= 1.0:
                    raise WorkerStartTimeoutError(exc.available_workers, 1, timeout) from None

    def _check_starts(self) -> None:
        """Replace the worker jobs that ended before their worker joined (they stay in the
        cluster's plan otherwise: nothing would submit another), up to the bound."""
        try:
            dropped = self._starts.check(self.cluster)
            if dropped and not self._stop.is_set():
                self.cluster.sync(self.cluster.scale_down, dropped)
        except Exception as exc:  # noqa: BLE001 (keep watching; the next look tries again)
            logger.warning("SLURM watchdog could not check its worker jobs: %s", exc)

    def _watch(self, interval: float) -> None:
        while not self._stop.wait(interval):
            self._check_starts()
            try:
                running = len(self.cluster.scheduler_info.get("workers", {}))
                if running < self._max_jobs:
                    logger.info("SLURM watchdog: %d of %d workers; rescaling", running,
                                self._max_jobs)
                self.cluster.scale(jobs=self._max_jobs)
            except Exception as exc:  # noqa: BLE001 (keep watching; report once per failure)
                logger.warning("SLURM watchdog could not rescale: %s", exc)

    def _watch_adaptive(self, interval: float) -> None:
        """Adaptive scaling replaces lost jobs itself; warn once when jobs were asked for and
        none has connected for ``cluster.wait-for-workers-timeout`` seconds."""
        from curator_dask import config

        timeout = float(config.get("cluster.wait-for-workers-timeout"))
        since: float | None = None
        warned = False
        while not self._stop.wait(interval):
            self._check_starts()
            try:
                asked = len(self.cluster.worker_spec)
                running = len(self.cluster.scheduler_info.get("workers", {}))
            except Exception:  # noqa: BLE001 (informational only)
                continue
            if running or not asked:
                since, warned = None, False
                continue
            since = since or time.monotonic()
            if not warned and time.monotonic() - since >= timeout:
                warned = True
                logger.warning(
                    "adaptive SLURM cluster: %d worker jobs asked for, none has connected in "
                    "%.0f s; they may be pending in the queue (squeue -n %s) or failing at "
                    "start (see their logs)", asked, timeout, self.cluster.job_name)

    def close(self) -> None:
        # dask-jobqueue deletes its credential files itself (at exit); the emptied folder is
        # removed by the next cluster started here.
        self._stop.set()
        self.cluster.close()


def adapt_timing() -> dict[str, float | int]:
    """``Adaptive``'s ``interval`` and ``wait_count`` from the ``slurm.adapt-interval`` and
    ``slurm.adapt-idle-timeout`` config: a job is released after about ``wait_count`` x
    ``interval`` seconds recommended for removal (idle).

    Example:
        >>> import dask
        >>> with dask.config.set({"curator-dask.slurm.adapt-interval": 0.5,
        ...                       "curator-dask.slurm.adapt-idle-timeout": 2}):
        ...     adapt_timing()
        {'interval': 0.5, 'wait_count': 4}
    """
    from curator_dask import config

    interval = float(config.get("slurm.adapt-interval"))
    idle = float(config.get("slurm.adapt-idle-timeout"))
    if interval <= 0 or idle < 0:
        msg = (f"slurm.adapt-interval must be above 0 and slurm.adapt-idle-timeout 0 or more "
               f"(seconds), got {interval} and {idle}")
        raise ValueError(msg)
    return {"interval": interval, "wait_count": max(1, math.ceil(idle / interval))}


def _adaptive_class() -> type:
    """distributed's ``Adaptive``, also counting the source chains waiting for a thread.

    The driver keeps a window of chains in flight, never the whole backlog, so the scheduler's
    own estimate (the queued work, done within ``distributed.adaptive.target-duration``)
    stays small when chains are short. Here the target is also one worker for every
    ``CHAINS_PER_THREAD`` chains per thread that are running, queued or waiting for a worker:
    while sources wait, the cluster grows toward the maximum; at the end of a run it shrinks,
    and idle jobs are released after ``slurm.adapt-idle-timeout`` seconds.
    """
    from distributed.deploy.adaptive import Adaptive

    class SourceAdaptive(Adaptive):
        def __init__(self, *args: Any, threads_per_worker: int = 1, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.threads_per_worker = threads_per_worker

        async def target(self) -> int:
            own = await super().target()
            # in this process's loop; Any: a Scheduler when the cluster has one in-process
            scheduler: Any = getattr(self.cluster, "scheduler", None)
            if not hasattr(scheduler, "unrunnable"):
                return own
            chains = (len(scheduler.queued) + len(scheduler.unrunnable)
                      + sum(len(ws.processing) for ws in scheduler.workers.values()))
            return max(own, math.ceil(chains / (CHAINS_PER_THREAD * self.threads_per_worker)))

    return SourceAdaptive


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


def hash_seed_prologue(kwargs: dict[str, Any], seed: str | None) -> dict[str, Any]:
    """``job_script_prologue`` for ``SLURMCluster`` that exports ``PYTHONHASHSEED=seed``
    before ``dask worker`` starts (a running interpreter cannot change its hash seed; see
    :mod:`curator_dask.utils.hash_seed`), so every worker job hashes strings alike. The
    prologue given (in ``kwargs``, else ``jobqueue.slurm.job-script-prologue``, else the
    deprecated ``env_extra``) is kept after it; nothing changes when it mentions
    ``PYTHONHASHSEED`` itself or ``seed`` is ``None``.

    Example:
        >>> hash_seed_prologue({"job_script_prologue": ["module load python"]}, "6640")
        {'job_script_prologue': ['export PYTHONHASHSEED=6640', 'module load python']}
        >>> hash_seed_prologue({"job_script_prologue": ["export PYTHONHASHSEED=1"]}, "6640")
        {}
    """
    import shlex

    import dask.config

    from curator_dask.utils.hash_seed import ENV

    lines = kwargs.get("job_script_prologue")
    if lines is None:
        lines = dask.config.get("jobqueue.slurm.job-script-prologue", None)
    if not lines:
        lines = kwargs.get("env_extra") or dask.config.get("jobqueue.slurm.env-extra", None)
    lines = [str(line) for line in lines or []]
    if seed is None or any(ENV in line for line in lines):
        return {}
    return {"job_script_prologue": [f"export {ENV}={shlex.quote(seed)}", *lines]}


def _remove_empty_dirs(base: str) -> None:
    for name in os.listdir(base):
        with contextlib.suppress(OSError):
            os.rmdir(os.path.join(base, name))
