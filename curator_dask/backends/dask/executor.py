"""``DaskExecutor``: the executor's options, its cluster's lifecycle, and ``execute``.

The driver runs the head (stages up to the source) itself, then keeps at most
``max_in_flight`` Dask tasks in flight on the cluster (:mod:`.streaming`); one run, from its
options to its result, is :mod:`.run`'s ``DaskRun``, its stop :mod:`.stop`'s, every way to get a
cluster in :mod:`.clusters`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import weakref
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import dask.config

from curator_dask import config as _config
from curator_dask.backends.base import BaseExecutor, NullObserver, RunObserver, RunOptions
from curator_dask.backends.dask import cluster_kinds as kinds
from curator_dask.backends.dask import extensions
from curator_dask.backends.dask.result import RunResult
from curator_dask.backends.dask.stop import RUNS
from curator_dask.utils import private_api

# distributed's config defaults are loaded with the executor, without importing distributed
# (that waits for the run, after its workers' server has started): a caller's
# dask.config.set({"distributed...": ...}) around DaskExecutor(...) would otherwise drop them
# on exit, with the keys it added, when distributed is first imported inside the block.
if "distributed" not in dask.config.config:
    dask.config.update_defaults(private_api.distributed_defaults())

if TYPE_CHECKING:
    from distributed import Client

    from curator_dask.stages.base import ProcessingStage
    from curator_dask.tasks import Task

logger = logging.getLogger(__name__)

__all__ = ["DaskExecutor", "RunResult", "any_started"]

# The executors of this process with a started cluster (NeMo's id generator functions are
# redirected to Dask while one is: curator_dask/nemo/patches.py).
_STARTED: weakref.WeakSet[DaskExecutor] = weakref.WeakSet()


def any_started() -> bool:
    """Whether a ``DaskExecutor`` of this process has a started cluster."""
    return any(e._provisioned is not None for e in list(_STARTED))


class DaskExecutor(BaseExecutor):
    """Runs pipelines on Dask: an embedded ``LocalCluster`` by default, or a given cluster.

    Args:
        address: scheduler address of a running cluster (``tcp://host:8786``).
        client: an existing ``distributed.Client`` to use (it is not closed).
        n_workers: worker processes of the embedded cluster (default: CPU count).
        threads_per_worker: threads per embedded worker (default 1).
        max_in_flight: Dask tasks in flight (default: 2 x total worker threads; for
            ``cluster="slurm"`` the threads of all ``jobs``, or of the ``adapt`` maximum).
        max_sources_per_task: upper bound on sources packed into one Dask task when sources
            are tiny (default: config ``execution.max-sources-per-task``, 256; 1 disables).
        fuse: fuse consecutive stages with equal resources (default: config, True).
        progress: show a progress bar (default: only when interactive).
        keep_outputs: return the sink's output tasks (default ``True``, NeMo Curator's
            contract; config ``execution.keep-outputs``). They are held by the driver until
            the run ends, about 1-2 KB each; ``False`` returns an empty list with the same
            counts (``result.num_outputs``) and keeps the driver's memory flat.
        cluster: ``"slurm"`` to start a dask-jobqueue ``SLURMCluster`` of ``jobs`` worker jobs
            (``cluster_kwargs`` go to it; defaults from the ``jobqueue.slurm`` config), with
            TLS on unless ``tls=False``; lost worker jobs are replaced. Or ``adapt`` instead of
            ``jobs`` for adaptive scaling. ``"slurm-runner"``
            inside an ``srun`` step of 3 or more tasks (dask-jobqueue's ``SLURMRunner``): rank
            0 runs the scheduler, rank 1 returns from :meth:`start` and runs the pipeline, the
            others run workers and never return from :meth:`start`.
        jobs: number of SLURM worker jobs (``cluster="slurm"``; default 1).
        adapt: ``(minimum, maximum)`` SLURM worker jobs (``cluster="slurm"``, instead of
            ``jobs``): jobs are asked for while sources wait and released after
            ``slurm.adapt-idle-timeout`` seconds idle; with minimum 0 the cluster starts with no
            job. ``max_in_flight`` then defaults to 2 x the threads of ``maximum`` jobs.
        tls: TLS with temporary credentials for ``cluster="slurm"`` (default: config
            ``slurm.tls``, true).
        scheduler_file: the shared scheduler file of ``cluster="slurm-runner"`` (default
            ``./.curator-dask-scheduler-{job_id}.json``).
        dashboard_address: where the embedded cluster's dashboard listens (default: config
            ``local-cluster.dashboard-address``); giving it turns the dashboard on. Without
            it the dashboard starts only in a notebook or terminal (config
            ``local-cluster.dashboard``), which saves its start-up in batch jobs.
        cluster_kwargs: extra ``LocalCluster`` (or ``SLURMCluster``) keyword arguments.

    Use it as a context manager to keep one embedded cluster across several runs.

    Example:
        >>> executor = DaskExecutor(n_workers=2, progress=False)
        >>> executor.fuse
        True
    """

    def __init__(
        self,
        config: dict[str, Any] | None = None,
        *,
        address: str | None = None,
        client: Client | None = None,
        cluster: str | None = None,
        jobs: int | None = None,
        adapt: tuple[int, int] | None = None,
        tls: bool | None = None,
        scheduler_file: str | None = None,
        n_workers: int | None = None,
        threads_per_worker: int | None = None,
        max_in_flight: int | None = None,
        max_sources_per_task: int | None = None,
        fuse: bool | None = None,
        progress: bool | None = None,
        keep_outputs: bool | None = None,
        dashboard_address: str | None = None,
        cluster_kwargs: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(config)
        _check_arguments(address, client, cluster, max_in_flight, n_workers, scheduler_file)
        self.cluster_kind = cluster or kinds.DEFAULT_KIND
        self.adapt = _check_adapt(cluster, jobs, adapt)
        self.jobs = None if self.adapt is not None else jobs if jobs is not None else 1
        self.tls = bool(_config.get("slurm.tls", tls))
        self.address = address
        self._given_client = client
        self.scheduler_file = scheduler_file
        self.n_workers = _config.get("local-cluster.n-workers", n_workers) or os.cpu_count() or 1
        self.threads_per_worker = _config.get(
            "local-cluster.threads-per-worker", threads_per_worker
        )
        self.max_in_flight = _config.get("execution.max-in-flight", max_in_flight)
        self.max_sources_per_task = int(
            _config.get("execution.max-sources-per-task", max_sources_per_task)
        )
        self.fuse = bool(_config.get("execution.fuse", fuse))
        self.progress = _config.get("execution.progress", progress)
        self.keep_outputs = bool(_config.get("execution.keep-outputs", keep_outputs))
        self._dashboard_requested = dashboard_address is not None
        self.dashboard_address = _config.get(
            "local-cluster.dashboard-address", dashboard_address
        )
        self.cluster_kwargs = dict(cluster_kwargs or {})
        self.drain_timeout = float(_config.get("execution.drain-timeout"))
        # Each run has its own stop, in the process's registry of runs (stop.RUNS) while it
        # is in progress: two runs on one entered executor stop independently. The lock
        # orders start, close and the end of a run for runs made from several threads.
        self._lock = threading.RLock()
        self._provisioned: Any = None
        self._entered = False
        # e.g. NeMo's checkpointed Pipeline.run, which reaches nothing of the executor before
        # its Ray path (curator_dask/nemo/patches.py); no process starts before start()
        extensions.notify("executor_made", executor=self)

    @property
    def _client(self) -> Client | None:
        return self._provisioned.client if self._provisioned is not None else None

    @property
    def client(self) -> Client | None:
        """The ``distributed.Client`` of the started cluster, or ``None`` before
        :meth:`start` (workflows run their dask.dataframe phases on it)."""
        return self._client

    @contextlib.contextmanager
    def kept_open(self) -> Iterator[Client]:
        """Start the cluster and keep it across the runs made inside the block.

        A workflow of several pipeline runs and dask.dataframe phases uses it so that they
        share one cluster; the cluster is closed at the end of the block only if the executor
        was not already entered (``with executor:``) by the caller.

        Example:
            >>> # with executor.kept_open() as client: ...
        """
        with self._lock:
            was_entered = self._entered
            client = self.start()
            self._entered = True
        try:
            yield client
        finally:
            if not was_entered:
                with self._lock:
                    self._entered = False
                    if not RUNS.of(self):
                        self.close()

    @property
    def cluster(self) -> Any:
        """The cluster object this executor started (``LocalCluster``, the SLURM cluster
        handle, the ``SLURMRunner``), or ``None``."""
        return self._provisioned.cluster if self._provisioned is not None else None

    def settings(self) -> dict[str, Any]:
        """The executor's resolved choices (a job records them in ``resolved_config.json``)."""
        return {k: getattr(self, k) for k in (
            "cluster_kind", "address", "n_workers", "threads_per_worker", "max_in_flight",
            "max_sources_per_task", "fuse", "drain_timeout", "jobs", "adapt", "keep_outputs")}

    def request_stop(self, reason: str = "stop requested") -> None:
        """Stop starting sources in every run in progress on this executor; running ones get
        ``execution.drain-timeout`` seconds to finish.

        Safe to call from a signal handler or another thread. Each run then raises
        :class:`~curator_dask.errors.RunStopped` after flushing its checkpoint. A request
        made while no run is in progress is not kept for a later run. It goes through the
        registry of runs in progress (:func:`curator_dask.backends.dask.stop.request_stop`,
        limited to this executor's runs).
        """
        RUNS.request(reason, executor=self)

    def run_ended(self) -> None:
        """A run on this executor ended (its ``DaskRun`` left the registry of runs): the
        cluster is closed when this executor is not entered (a context manager) and no other
        run is still in progress on it."""
        with self._lock:
            if not self._entered and not RUNS.of(self):
                self.close()

    # -- cluster lifecycle ------------------------------------------------------------------
    def start(self) -> Client:
        """Connect to (or start) the cluster; idempotent, also from several threads."""
        with self._lock:
            return self._start()

    def _start(self) -> Client:
        if self._provisioned is None:
            from curator_dask.backends.dask.clusters import ClusterSpec, provision

            kind = kinds.implied_kind(self.cluster_kind, address=self.address,
                                      client=self._given_client)
            # an embedded cluster's forkserver that none will use goes
            if not kinds.cluster_kind(kind).embedded:
                from curator_dask.backends.dask.local import release_unused_server

                release_unused_server()
            self._provisioned = provision(ClusterSpec(
                kind=kind, address=self.address, client=self._given_client, jobs=self.jobs,
                adapt=self.adapt, tls=self.tls, n_workers=self.n_workers,
                threads_per_worker=self.threads_per_worker,
                dashboard_address=self.dashboard_address,
                dashboard_requested=self._dashboard_requested,
                scheduler_file=self.scheduler_file, cluster_kwargs=self.cluster_kwargs))
            _STARTED.add(self)
            extensions.notify("executor_started", executor=self)
            if kinds.cluster_kind(kind).full_size_known and self.max_in_flight is None:
                # Sized for the cluster's full size, not for the workers that happen to have
                # joined when the run starts (none, for an adaptive cluster of minimum 0).
                self.max_in_flight = 2 * self._provisioned.cluster.max_threads
            link = self.dashboard_link()
            if link:  # where progress is shown, each run shows the link with its bars
                from curator_dask.backends.dask.progress import showing

                logger.log(logging.DEBUG if showing(self.progress) else logging.INFO,
                           "Dask dashboard: %s", link)
        return self._provisioned.client

    def dashboard_link(self) -> str | None:
        """The dashboard URL when a dashboard is running, else ``None``."""
        found = self._provisioned
        if found is None or not found.dashboard_on:
            return None
        return getattr(found.client, "dashboard_link", None)

    def close(self) -> None:
        """Close the cluster this executor started (a given client is left open)."""
        with self._lock:
            found, self._provisioned = self._provisioned, None
            _STARTED.discard(self)
        extensions.notify("executor_closed", executor=self)  # e.g. NeMo's modules restored
        if found is not None:
            found.stack.close()

    def __enter__(self) -> DaskExecutor:
        self.start()
        self._entered = True
        return self

    def __exit__(self, *exc: object) -> None:
        self._entered = False
        self.close()

    # -- execution --------------------------------------------------------------------------
    def execute(
        self,
        stages: list[ProcessingStage],
        initial_tasks: list[Task] | None = None,
        options: RunOptions | None = None,
        observer: RunObserver | None = None,
    ) -> RunResult:
        """Run built ``stages`` and return the sink's outputs as a :class:`RunResult`.

        ``options`` (built and checked by ``Pipeline.run``) add a checkpoint, stage
        checkpoints, input verification, an array shard and a performance report; ``observer``
        (a job) receives the plan, events and progress, and can ask the run to stop.
        """
        # The workers' server first: it imports their modules while this process imports
        # distributed and runs its part of the run (a refused run leaves an idle server,
        # which exits with this process or is reused by the next run).
        self.prepare_workers()
        from curator_dask.backends.dask.run import DaskRun

        extensions.notify("run_begins", executor=self)  # e.g. NeMo modules imported since
        run = DaskRun(self, stages, options or RunOptions.plain(), observer or NullObserver(),
                      initial_tasks)
        return run.execute()

    def prepare_workers(self) -> None:
        """Start the forkserver an embedded cluster's workers will come from, ahead of the
        cluster (it imports their modules meanwhile, in a process of its own); nothing once
        the cluster is started, for another kind of cluster, or with config
        ``local-cluster.forkserver-prestart`` false. :meth:`execute` calls it when a run
        begins, never the constructor. Never fails: the cluster's start tries again.

        Example:
            >>> # executor.prepare_workers()  # e.g. before a slow set-up of your own
        """
        if (self._provisioned is None and self._given_client is None and self.address is None
                and kinds.cluster_kind(self.cluster_kind).embedded
                and self.cluster_kwargs.get("processes", True) is not False):
            from curator_dask.backends.dask.local import prepare_workers

            prepare_workers(_config.get("local-cluster.malloc-trim-threshold"))


def _check_adapt(cluster: Any, jobs: Any, adapt: Any) -> tuple[int, int] | None:
    """``adapt`` checked (``None`` when not given): only with ``cluster="slurm"``, never
    together with ``jobs``."""
    if adapt is None:
        return None
    from curator_dask.slurm.cluster import check_adapt

    if "adapt" not in kinds.cluster_kind(cluster or kinds.DEFAULT_KIND).options:
        msg = (f"DaskExecutor: adapt={adapt!r} scales SLURM worker jobs; it goes with "
               f"{_kinds_taking('adapt')}, not cluster={cluster!r}")
        raise ValueError(msg)
    try:
        return check_adapt(adapt, jobs)
    except ValueError as exc:
        raise ValueError(f"DaskExecutor: {exc}") from None


def _check_arguments(address: Any, client: Any, cluster: Any, max_in_flight: Any,
                     n_workers: Any, scheduler_file: Any) -> None:
    if sum(x is not None for x in (address, client, cluster)) > 1:
        msg = "DaskExecutor: pass at most one of address=, client= and cluster="
        raise ValueError(msg)
    if cluster is not None:
        try:
            kinds.cluster_kind(cluster, by_name=True)
        except kinds.UnknownClusterKindError as exc:
            raise kinds.UnknownClusterKindError(f"DaskExecutor: {exc}") from None
    if scheduler_file is not None and "scheduler_file" not in kinds.cluster_kind(
            cluster or kinds.DEFAULT_KIND).options:
        msg = f"DaskExecutor: scheduler_file= goes with {_kinds_taking('scheduler_file')}"
        raise ValueError(msg)
    if max_in_flight is not None and max_in_flight < 1:
        msg = f"DaskExecutor: max_in_flight must be at least 1, got {max_in_flight}"
        raise ValueError(msg)
    if n_workers is not None and n_workers < 1:
        msg = f"DaskExecutor: n_workers must be at least 1, got {n_workers}"
        raise ValueError(msg)


def _kinds_taking(option: str) -> str:
    """``cluster='slurm'`` (or several, joined by "or"): the kinds ``option`` goes with."""
    return " or ".join(f"cluster={kind.name!r}" for kind in kinds.kinds_with(option))
