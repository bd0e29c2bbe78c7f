"""``DaskExecutor``: runs a built pipeline on Dask distributed, streaming source chains.

The driver runs the head (stages up to the source) itself, then keeps at most
``max_in_flight`` source chains in flight on the cluster, submitting the next chain as one
finishes. A chain is one Dask task per fusion group, keyed ``<group>-<run>-<task_id>``. Payloads
stay on the workers; the driver only receives the sink's output tasks and counts.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import itertools
import logging
import os
import sys
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from curator_dask import config as _config
from curator_dask.backends.base import BaseExecutor
from curator_dask.backends.dask.adapter import StageAdapter, StageCount, run_stages
from curator_dask.backends.dask.plan import ExecutionPlan, build_plan
from curator_dask.errors import ResourceUnavailableError, RunStopped
from curator_dask.stages.base import NodeInfo, WorkerMetadata
from curator_dask.tasks import EmptyTask

if TYPE_CHECKING:
    from distributed import Client

    from curator_dask.stages.base import ProcessingStage
    from curator_dask.tasks import Task

logger = logging.getLogger(__name__)


class RunResult(list):
    """The sink's output tasks (a plain list), plus what the run did.

    Attributes:
        stage_counts: ``[(stage name, StageCount), ...]`` in pipeline order.
        num_sources: source tasks the head produced.
        skipped_sources: sources a checkpoint marked complete (not processed again).
        checkpoint: the completion plugin's summary (completed, pending, failed sources, ...).
        timings: seconds from the start of ``execute`` to ``cluster`` (connected),
            ``checkpoint_loaded``, ``head`` (sources known), ``sources_opened``,
            ``first_submit`` and ``end``.
        wall_time: seconds from the start of ``execute`` to its end.
        dashboard_link: the Dask dashboard URL, when there was one.
        stage_checkpoints: with stage checkpoints, entries saved and loaded per stage and the
            number of fallbacks (unusable entries).
    """

    stage_counts: list[tuple[str, StageCount]]
    num_sources: int = 0
    skipped_sources: int = 0
    checkpoint: dict[str, Any] | None = None
    timings: dict[str, float]
    wall_time: float = 0.0
    dashboard_link: str | None = None
    stage_checkpoints: dict[str, Any] | None = None

    def counts_table(self) -> list[dict[str, Any]]:
        """One dict per stage, ready for ``pandas.DataFrame``."""
        return [{"stage": name, **asdict(c)} for name, c in self.stage_counts]

    def _repr_html_(self) -> str:
        """A small per-stage table for Jupyter."""
        from html import escape

        columns = ["stage", "tasks_in", "tasks_out", "items_in", "items_out", "filtered",
                   "failed", "seconds"]
        head = "".join(f"<th>{c.replace('_', ' ')}</th>" for c in columns)
        rows = []
        for row in self.counts_table():
            cells = [escape(str(row["stage"]))] + [
                f"{row[c]:.2f}" if c == "seconds" else str(row[c]) for c in columns[1:]]
            rows.append("<tr>" + "".join(f"<td>{v}</td>" for v in cells) + "</tr>")
        caption = (f"{self.num_sources} sources ({self.skipped_sources} skipped), "
                   f"{len(self)} output tasks, {self.wall_time:.2f} s")
        if self.dashboard_link:
            caption += f' &middot; <a href="{escape(self.dashboard_link)}">dashboard</a>'
        return (f"<table><caption>{caption}</caption><thead><tr>{head}</tr></thead>"
                f"<tbody>{''.join(rows)}</tbody></table>")


class LiveProgress:
    """What a running ``execute`` has done so far; a job's summary heartbeat reads it.

    Example:
        >>> live = LiveProgress([], "run1")
        >>> live.planned(10, 2, 8)
        >>> live.snapshot()["sources"]["to_process"]
        8
    """

    def __init__(self, stages: Sequence[Any], run_id: str) -> None:
        self.stage_names = [s.name for s in stages]
        self.run_id = run_id
        self.scheduler: str | None = None
        self.dashboard: str | None = None
        self.counts: dict[int, StageCount] = {}
        self.sources = {"total": 0, "skipped": 0, "to_process": 0, "completed": 0,
                        "failed": 0, "in_flight": 0}
        self.finished_ids: list[str] = []
        self.first_submit: float | None = None
        self.stage_sources: dict[int, int] = {}  # sources that passed each stage
        self._lock = threading.Lock()

    def stage_advanced(self, stage_indices: Sequence[int], n: int) -> None:
        with self._lock:
            for i in stage_indices:
                self.stage_sources[i] = self.stage_sources.get(i, 0) + n

    def planned(self, total: int, skipped: int, to_process: int) -> None:
        self.sources.update(total=total, skipped=skipped, to_process=to_process)

    def chunk_done(self, ids: list[str], failed: set[str], counts: dict[int, StageCount]) -> None:
        with self._lock:
            self.finished_ids.extend(ids)
            n_failed = sum(1 for sid in ids if sid in failed)
            self.sources["failed"] += n_failed
            self.sources["completed"] += len(ids) - n_failed
            for i, c in counts.items():
                self.counts.setdefault(i, StageCount()).merge(c)

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            return {
                "run_key_token": self.run_id[:8],
                "scheduler": self.scheduler,
                "dashboard": self.dashboard,
                "sources": dict(self.sources),
                "processing_started": self.first_submit,
                "stages": [{"stage": self.stage_names[i], **asdict(self.counts.get(
                               i, StageCount())), "sources_done": self.stage_sources.get(i)}
                           for i in sorted(set(self.counts) | set(self.stage_sources))],
            }


class _EventStream:
    """Events of one run, bounded in volume at any number of sources.

    The first ``detail_limit`` records describe each Dask task (``scope: "task"``: its stages'
    durations and rows, its sources); after that, one record per stage per ``window`` seconds
    (``scope: "window"``) carries the same sums.
    """

    def __init__(self, on_event: Any, stages: Sequence[Any], *, detail_limit: int = 20_000,
                 window: float = 10.0) -> None:
        self.on_event = on_event
        self.names = [s.name for s in stages]
        self.detail_limit = detail_limit
        self.window = window
        self.records = 0
        self._window: dict[int, StageCount] = {}
        self._window_sources = [0, 0]  # completed, failed
        self._window_start = time.time()
        self.saved: dict[int, list] = {}
        self.loaded: dict[int, int] = {}
        self.notes: list[str] = []

    def emit(self, type_: str, **fields: Any) -> None:
        if self.on_event is not None:
            self.on_event(type_, **fields)
            self.records += 1

    def chunk_done(self, ids: list[str], result: Any) -> None:
        for stage, (n, size, secs) in result.saved.items():
            rec = self.saved.setdefault(stage, [0, 0, 0.0])
            rec[0] += n
            rec[1] += size
            rec[2] += secs
        for stage, n in result.loaded.items():
            self.loaded[stage] = self.loaded.get(stage, 0) + n
        for note in result.notes:
            if len(self.notes) < 100:
                self.emit("warning", message=note)
            self.notes.append(note)
        if self.on_event is None:
            return
        failed = [sid for sid in ids if sid in result.failed]
        done = len(ids) - len(failed)
        if self.records < self.detail_limit:
            task_id = ids[0] + (f"+{len(ids) - 1}" if len(ids) > 1 else "")
            for i, c in sorted(result.counts.items()):
                self.emit("stage_complete", scope="task", stage=self.names[i], index=i,
                          task_id=task_id, sources=len(ids), duration=round(c.seconds, 6),
                          rows_in=c.items_in, rows_out=c.items_out, tasks_in=c.tasks_in,
                          tasks_out=c.tasks_out, ended=result.ended.get(i))
            if done:
                self.emit("source_complete", scope="task", count=done, task_id=task_id,
                          source_ids=[sid for sid in ids if sid not in result.failed][:20])
            if failed:
                self.emit("source_failed", scope="task", count=len(failed), source_ids=failed)
            return
        for i, c in result.counts.items():
            self._window.setdefault(i, StageCount()).merge(c)
        self._window_sources[0] += done
        self._window_sources[1] += len(failed)
        if time.time() - self._window_start >= self.window:
            self.flush_window()

    def flush_window(self) -> None:
        now = time.time()
        for i, c in sorted(self._window.items()):
            self.emit("stage_complete", scope="window", stage=self.names[i], index=i,
                      window_start=self._window_start, ended=now, tasks=c.calls,
                      duration=round(c.seconds, 6), rows_in=c.items_in, rows_out=c.items_out,
                      tasks_in=c.tasks_in, tasks_out=c.tasks_out)
        done, failed = self._window_sources
        if done:
            self.emit("source_complete", scope="window", count=done)
        if failed:
            self.emit("source_failed", scope="window", count=failed)
        self._window.clear()
        self._window_sources = [0, 0]
        self._window_start = now

    def checkpoint_totals(self) -> None:
        for stage, (n, size, secs) in sorted(self.saved.items()):
            self.emit("checkpoint_save", stage=self.names[stage], index=stage, count=n,
                      bytes=size, seconds=round(secs, 3))
        for stage, n in sorted(self.loaded.items()):
            self.emit("checkpoint_load", stage=self.names[stage], index=stage, count=n)
        if len(self.notes) > 100:
            self.emit("warning", message=f"{len(self.notes) - 100} more stage checkpoint "
                      "warnings (see the driver log)")

    def close(self) -> None:
        if self._window:
            self.flush_window()

    def checkpoint_summary(self) -> dict[str, Any]:
        return {
            "saved": {self.names[i]: {"count": n, "bytes": b, "seconds": round(t, 3)}
                      for i, (n, b, t) in sorted(self.saved.items())},
            "loaded": {self.names[i]: n for i, n in sorted(self.loaded.items())},
            "fallbacks": len(self.notes),
        }


class ChunkSizer:
    """How many sources go into one Dask task.

    One task per source costs a few ms of scheduling and messaging, which dominates when
    sources are tiny. The sizer starts at one source per task and, from the measured time per
    source, grows chunks toward ``target_seconds`` of work each, without exceeding ``limit`` or
    leaving threads idle near the end (at most ``remaining / (2 * threads)`` per chunk).

    Example:
        >>> sizer = ChunkSizer(threads=2)
        >>> sizer.next_size(1000)
        1
        >>> sizer.observe(1, 0.001)
        >>> sizer.next_size(1000)
        100
    """

    def __init__(self, threads: int, limit: int | None = None, target_seconds: float = 0.1):
        self.threads = max(1, threads)
        self.limit = limit if limit is not None else 256
        self.target_seconds = target_seconds
        self.per_source: float | None = None

    def observe(self, n_sources: int, seconds: float) -> None:
        if n_sources <= 0 or seconds <= 0:
            return
        sample = seconds / n_sources
        self.per_source = sample if self.per_source is None else (
            0.7 * self.per_source + 0.3 * sample)

    def next_size(self, remaining: int) -> int:
        if self.per_source is None or self.limit <= 1:
            return 1
        wanted = int(self.target_seconds / self.per_source) if self.per_source > 0 else self.limit
        spread = max(1, remaining // (2 * self.threads))
        return max(1, min(wanted, self.limit, spread))


def _completed(done: Any) -> Any:
    """Iterate ``as_completed`` results, ending quietly at futures cancelled by a drain."""
    from distributed.client import FutureCancelledError

    try:
        yield from done
    except (FutureCancelledError, asyncio.CancelledError):
        return


def _interactive() -> bool:
    if "ipykernel" in sys.modules:
        return True
    return sys.stderr.isatty()


class DaskExecutor(BaseExecutor):
    """Runs pipelines on Dask: an embedded ``LocalCluster`` by default, or a given cluster.

    Args:
        address: scheduler address of a running cluster (``tcp://host:8786``).
        client: an existing ``distributed.Client`` to use (it is not closed).
        n_workers: worker processes of the embedded cluster (default: CPU count).
        threads_per_worker: threads per embedded worker (default 1).
        max_in_flight: Dask tasks in flight (default: 2 x total worker threads).
        max_sources_per_task: upper bound on sources packed into one Dask task when sources
            are tiny (default: config ``execution.max-sources-per-task``, 256; 1 disables).
        fuse: fuse consecutive stages with equal resources (default: config, True).
        progress: show a progress bar (default: only when interactive).
        cluster: ``"slurm"`` to start a dask-jobqueue ``SLURMCluster`` of ``jobs`` worker jobs
            (``cluster_kwargs`` go to it; defaults from the ``jobqueue.slurm`` config), with
            TLS on unless ``tls=False``; lost worker jobs are replaced.
        jobs: number of SLURM worker jobs (``cluster="slurm"``; default 1).
        tls: TLS with temporary credentials for ``cluster="slurm"`` (default: config
            ``slurm.tls``, true).
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
        tls: bool | None = None,
        n_workers: int | None = None,
        threads_per_worker: int | None = None,
        max_in_flight: int | None = None,
        max_sources_per_task: int | None = None,
        fuse: bool | None = None,
        progress: bool | None = None,
        dashboard_address: str | None = None,
        cluster_kwargs: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(config)
        if sum(x is not None for x in (address, client, cluster)) > 1:
            msg = "DaskExecutor: pass at most one of address=, client= and cluster="
            raise ValueError(msg)
        if cluster not in (None, "local", "slurm"):
            msg = f"DaskExecutor: cluster must be 'local' or 'slurm', got {cluster!r}"
            raise ValueError(msg)
        self.cluster_kind = cluster or "local"
        self.jobs = jobs if jobs is not None else 1
        self.tls = bool(_config.get("slurm.tls", tls))
        if max_in_flight is not None and max_in_flight < 1:
            msg = f"DaskExecutor: max_in_flight must be at least 1, got {max_in_flight}"
            raise ValueError(msg)
        if n_workers is not None and n_workers < 1:
            msg = f"DaskExecutor: n_workers must be at least 1, got {n_workers}"
            raise ValueError(msg)
        self.address = address
        self._given_client = client
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
        self._dashboard_requested = dashboard_address is not None
        self._dashboard_on: bool | None = None  # known for the embedded cluster
        self.dashboard_address = _config.get(
            "local-cluster.dashboard-address", dashboard_address
        )
        self.cluster_kwargs = dict(cluster_kwargs or {})
        self.drain_timeout = float(_config.get("execution.drain-timeout"))
        self._client: Client | None = None
        self._cluster: Any = None
        self._entered = False
        self._stop = threading.Event()
        self._stop_requested = False
        self._stop_reason = "stop requested"
        self.performance_report: str | None = None  # a path: save Dask's report of each run
        self.live: LiveProgress | None = None

    def request_stop(self, reason: str = "stop requested") -> None:
        """Stop starting sources; running ones get ``execution.drain-timeout`` seconds to finish.

        Safe to call from a signal handler or another thread. The run then raises
        :class:`~curator_dask.errors.RunStopped` after flushing the checkpoint.
        """
        self._stop_reason = reason
        self._stop_requested = True
        self._stop.set()

    # -- cluster lifecycle ------------------------------------------------------------------
    def start(self) -> Client:
        """Connect to (or start) the cluster; idempotent."""
        if self._client is not None:
            return self._client
        from distributed import Client

        from curator_dask.backends.dask.local import EmbeddedCluster

        if self._given_client is not None:
            self._client = self._given_client
        elif self.address is not None:
            self._client = Client(self.address)
            # Remote workers do not share the driver's stderr: bring stage logs back.
            self._client.forward_logging("curator_dask")
        elif self.cluster_kind == "slurm":
            from curator_dask.slurm.cluster import SlurmClusterHandle

            self._cluster = SlurmClusterHandle(self.jobs, tls=self.tls, **self.cluster_kwargs)
            self._client = Client(self._cluster.cluster)
            self._client.forward_logging("curator_dask")
        else:
            dashboard = _config.get("local-cluster.dashboard")
            if dashboard is None:  # only where someone can look at it
                dashboard = _interactive() or self._dashboard_requested
            kwargs = {
                "n_workers": self.n_workers,
                "threads_per_worker": self.threads_per_worker,
                "processes": True,
                "host": _config.get("local-cluster.host"),
                "dashboard_address": self.dashboard_address,
                **self.cluster_kwargs,
            }
            self._dashboard_on = bool(dashboard) and importlib.util.find_spec("bokeh") is not None
            if not dashboard:
                # No bokeh app; the scheduler's small HTTP server (health, metrics) stays on
                # the loopback address above instead of the default :8787.
                kwargs["scheduler_kwargs"] = {"dashboard": False,
                                              **kwargs.get("scheduler_kwargs", {})}
            if not kwargs["processes"] and "host" not in self.cluster_kwargs:
                kwargs.pop("host")  # threads in this process talk in-process, not over TCP
            trim = _config.get("local-cluster.malloc-trim-threshold")
            self._cluster = EmbeddedCluster(malloc_trim_threshold=trim, **kwargs)
            self._client = Client(self._cluster.cluster)
        timeout = _config.get("cluster.wait-for-workers-timeout")
        self._client.wait_for_workers(1, timeout=timeout)
        if self._dashboard_on is None:  # a cluster we did not start: ask its scheduler once
            try:
                services = self._client.scheduler_info(n_workers=0).get("services", {})
                self._dashboard_on = "dashboard" in services
            except Exception:  # noqa: BLE001 (informational only)
                self._dashboard_on = False
        link = self.dashboard_link()
        if link:
            logger.info("Dask dashboard: %s", link)
        return self._client

    def dashboard_link(self) -> str | None:
        """The dashboard URL when a dashboard is running, else ``None``."""
        if self._client is None or not self._dashboard_on:
            return None
        return getattr(self._client, "dashboard_link", None)

    def close(self) -> None:
        """Close the embedded cluster (a given client or address is only disconnected)."""
        client, cluster = self._client, self._cluster
        self._client = self._cluster = None
        if client is not None and client is not self._given_client:
            client.close()
        if cluster is not None:
            cluster.close()

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
        *,
        checkpoint_path: str | None = None,
        checkpoint_storage_options: dict | None = None,
        slurm_array: Any = None,
        on_event: Any = None,
        stage_checkpoints: Any = None,
        input_check: Any = None,
    ) -> RunResult:
        """Run built ``stages`` and return the sink's outputs as a :class:`RunResult`.

        With ``checkpoint_path`` (already validated by ``Pipeline.run``), sources completed
        earlier are skipped and completions are recorded (see :mod:`curator_dask.resumability`).
        ``stage_checkpoints`` (a strategy name, dict or ``StageCheckpoints``) memoizes chosen
        stage boundaries under the checkpoint; ``input_check`` (an ``InputCheck``) reprocesses
        or refuses completed sources whose input files changed.
        """
        from curator_dask.resumability.stage_checkpoints import StageCheckpoints

        started = time.perf_counter()
        timings: dict[str, float] = {}

        def mark(name: str) -> None:
            timings[name] = time.perf_counter() - started

        ckpt_config = StageCheckpoints.coerce(stage_checkpoints)
        if ckpt_config.enabled and checkpoint_path is None:
            msg = (f"stage checkpoints ({ckpt_config.strategy}) need checkpoint_path: they are "
                   "stored under it and only used for sources the checkpoint has not completed")
            raise ValueError(msg)
        plan = build_plan(stages, fuse=self.fuse, boundaries=ckpt_config.boundaries(stages))
        run_id = uuid.uuid4().hex[:12]
        self.live = LiveProgress(stages, run_id)
        # A stop requested from here on (even during cluster start) applies to this run.
        self._stop.clear()
        self._stop_requested = False
        counts: dict[int, StageCount] = {i: StageCount() for i in range(len(stages))}
        client = self.start()
        mark("cluster")
        self.live.scheduler = getattr(getattr(client, "scheduler", None), "address", None)
        self.live.dashboard = self.dashboard_link()
        completion = None
        planner = None
        summary: dict[str, Any] | None = None
        skipped = 0
        events = _EventStream(on_event, stages)
        run_completed = False
        try:
            self._check_resources(client, stages, plan)
            if checkpoint_path is not None:
                from curator_dask.resumability.client import CompletionClient

                completion = CompletionClient(client, run_id, checkpoint_path,
                                              storage_options=checkpoint_storage_options)
                mark("checkpoint_loaded")
            head_start = time.perf_counter()
            sources = self._run_head(stages, plan, initial_tasks or [EmptyTask()], counts)
            head_seconds = time.perf_counter() - head_start
            logger.debug("head: %d sources in %.3f s", len(sources), head_seconds)
            mark("head")
            if slurm_array is not None:
                from curator_dask.slurm.array import filter_slurm_array_source_tasks

                source_stage = stages[plan.head[-1]]
                sources = filter_slurm_array_source_tasks(sources, slurm_array, source_stage.name)
            todo = sources
            changed: list[str] = []
            if completion is not None:
                if input_check is not None:
                    changed = input_check.changed_sources(sources,
                                                          completion.completed_ids(sources))
                todo, skipped = completion.open_sources(sources, reopen=changed)
                mark("sources_opened")
            if ckpt_config.enabled and plan.boundaries:
                from curator_dask.resumability.stage_checkpoints import CheckpointPlanner

                planner = CheckpointPlanner(ckpt_config, stages, plan, checkpoint_path,
                                            checkpoint_storage_options)
                todo_ids = {t._source_id for t in todo}
                planner.prepare(t._source_id for t in sources
                                if t._source_id not in todo_ids)
            self.live.planned(len(sources), skipped, len(todo))
            events.emit("sources_planned", total=len(sources), skipped=skipped,
                        to_process=len(todo), **({"reprocessed_changed_inputs": len(changed)}
                                                 if changed else {}))
            if plan.groups and todo:
                outputs = self._stream(client, run_id, stages, plan, todo, counts,
                                       counting=completion is not None, planner=planner,
                                       events=events,
                                       on_first_submit=lambda: mark("first_submit"))
            else:
                outputs = todo
            if completion is not None:
                summary = completion.close()
            run_completed = True
        finally:
            if planner is not None:
                planner.close(run_completed=run_completed)
                events.checkpoint_totals()
            if completion is not None and summary is None:
                try:
                    summary = completion.close()
                except Exception as exc:  # noqa: BLE001 (do not hide the run's own error)
                    logger.error("resumability: could not flush the checkpoint: %s", exc)
            if input_check is not None and summary is not None:
                # Also after a stop or a failure: sources that completed are recorded.
                try:
                    input_check.record(self.live.finished_ids,
                                       set(summary.get("failed_sources") or ()))
                except Exception as exc:  # noqa: BLE001 (their next run reprocesses them)
                    logger.error("verify_inputs: could not record input fingerprints: %s", exc)
            if not self._entered:
                self.close()
        if summary and summary.get("errors"):
            from curator_dask.resumability.client import CheckpointError

            msg = "the completion plugin failed:\n" + "\n".join(summary["errors"])
            raise CheckpointError(msg)
        result = RunResult(outputs)
        result.stage_counts = [(s.name, counts[i]) for i, s in enumerate(stages)]
        events.close()
        # One aggregated record per stage for the whole run, whatever the number of sources.
        for i, s in enumerate(stages):
            events.emit("stage_complete", scope="run", stage=s.name, index=i,
                        **asdict(counts[i]))
        failed = (summary or {}).get("failed_sources") or []
        if failed:
            events.emit("source_failed", count=len(failed), source_ids=failed[:100])
        for text in (summary or {}).get("warnings", {}):
            events.emit("warning", message=text)
        result.num_sources = len(sources)
        result.skipped_sources = skipped
        result.checkpoint = summary
        result.stage_checkpoints = events.checkpoint_summary() if planner is not None else None
        result.wall_time = time.perf_counter() - started
        mark("end")
        result.timings = timings
        result.dashboard_link = self.dashboard_link()
        logger.info(
            "Finished %d sources in %.2f s: %d output tasks", len(todo), result.wall_time,
            len(outputs),
        )
        return result

    @staticmethod
    def _check_resources(
        client: Client, stages: Sequence[ProcessingStage], plan: ExecutionPlan
    ) -> None:
        workers = client.scheduler_info(n_workers=-1)["workers"]
        offered = [w.get("resources") or {} for w in workers.values()]
        for group in plan.groups:
            need = group.resource_dict
            if not need:
                continue
            if any(all(res.get(k, 0) >= v for k, v in need.items()) for res in offered):
                continue
            stage = stages[group.stage_indices[0]]
            msg = (
                f"Stage {stage.name!r} needs Dask worker resources {need}, but none of the "
                f"{len(offered)} workers offers them (worker resources: "
                f"{sorted({str(r) for r in offered})}). Start workers that have them, e.g. "
                "`dask worker ... --resources GPU=1` or DaskExecutor(cluster_kwargs="
                "{'resources': {'GPU': 1}}), or lower the stage's Resources."
            )
            raise ResourceUnavailableError(msg)

    @staticmethod
    def _run_head(
        stages: Sequence[ProcessingStage],
        plan: ExecutionPlan,
        initial: list[Task],
        counts: dict[int, StageCount],
    ) -> list[Task]:
        import socket

        head = [stages[i] for i in plan.head]
        node, meta = NodeInfo(node_id=socket.gethostname()), WorkerMetadata(worker_id="driver")
        for stage in head:
            stage.setup_on_node(node, meta)
        for stage in head:
            stage.setup(meta)
        try:
            batches, head_counts = run_stages([StageAdapter(s) for s in head], [list(initial)])
        finally:
            for stage in head:
                stage.teardown()
        for i, c in zip(plan.head, head_counts, strict=True):
            counts[i].merge(c)
        return [t for group in batches for t in group]

    def _stream(
        self,
        client: Client,
        run_id: str,
        stages: Sequence[ProcessingStage],
        plan: ExecutionPlan,
        sources: list[Task],
        counts: dict[int, StageCount],
        *,
        counting: bool = False,
        planner: Any = None,
        events: _EventStream | None = None,
        on_first_submit: Any = None,
    ) -> list[Task]:
        from distributed import as_completed

        from curator_dask.backends.dask.worker import GroupResult, StageHost, run_group

        host = StageHost(run_id, list(stages), counting=counting,
                         checkpoints=planner.runtime if planner is not None else None)
        started = time.perf_counter()
        client.register_plugin(host, name=host.name)
        logger.debug("stages sent to workers in %.3f s", time.perf_counter() - started)
        workers = client.nthreads()  # {address: threads}
        threads = sum(workers.values())
        window = self.max_in_flight or max(1, 2 * threads)
        bars = _StageBars(stages, plan, len(sources), self.progress,
                          self.live.dashboard, on_advance=self.live.stage_advanced)
        live = self.live
        outputs: list[Task] = []
        in_flight: dict = {}
        pending = iter(sources)
        remaining = len(sources)
        sizer = ChunkSizer(threads=threads, limit=self.max_sources_per_task)
        done = as_completed(with_results=True)
        stopped = threading.Event()
        finished = 0

        def drain() -> None:
            self._stop.wait()
            if stopped.is_set():
                return
            logger.warning("%s: no new sources; waiting up to %.0f s for %d running tasks",
                           self._stop_reason, self.drain_timeout, len(in_flight))
            deadline = time.monotonic() + self.drain_timeout
            while in_flight and time.monotonic() < deadline and not stopped.is_set():
                time.sleep(0.05)
            if in_flight and not stopped.is_set():
                client.cancel(list(in_flight), force=True)

        def watch_workers() -> None:
            # worker_lost events: the scheduler's worker set, compared every 2 s and at the end.
            known = set(workers)
            while True:
                last = stopped.wait(2.0)
                try:
                    now = set(client.nthreads())
                except Exception:  # noqa: BLE001 (the run itself reports a lost scheduler)
                    return
                for address in sorted(known - now):
                    logger.warning("worker %s left the cluster", address)
                    if events is not None:
                        events.emit("worker_lost", worker=address, remaining=len(now))
                known = now
                if last:
                    return

        threading.Thread(target=drain, name="curator-dask-drain", daemon=True).start()
        watcher = threading.Thread(target=watch_workers, name="curator-dask-workers",
                                   daemon=True)
        watcher.start()

        def submit_next() -> None:
            nonlocal remaining
            if self._stop.is_set():
                return
            chunk = list(itertools.islice(pending, sizer.next_size(remaining)))
            if not chunk:
                return
            remaining -= len(chunk)
            previous: Any = GroupResult(batches=[[task] for task in chunk])
            suffix = chunk[0].task_id + (f"+{len(chunk) - 1}" if len(chunk) > 1 else "")
            resume = None
            if planner is not None:
                resume = {t._source_id: c for t in chunk
                          if (c := planner.candidates(t._source_id))} or None
            for group in plan.groups:
                previous = client.submit(
                    run_group, host.name, group.index, group.stage_indices, previous,
                    resume if group.index == 0 else None,
                    key=f"{group.label}-{run_id[:8]}-{suffix}",
                    resources=group.resource_dict or None, pure=False,
                )
                if group is not plan.groups[-1]:
                    bars.watch(previous, group, len(chunk))
            in_flight[previous] = [t._source_id or t.task_id for t in chunk]
            live.sources["in_flight"] += len(chunk)
            done.add(previous)

        report = _performance_report(client, self.performance_report)
        try:
            report.__enter__()
            if on_first_submit is not None and not self._stop.is_set():
                on_first_submit()
            live.first_submit = time.time()
            for _ in range(window):
                submit_next()
            for future, result in _completed(done):
                ids = in_flight.pop(future)
                live.sources["in_flight"] -= len(ids)
                future.release()
                if not isinstance(result, GroupResult):  # cancelled (drain, stop --force)
                    if not self._stop.is_set():
                        self.request_stop("its Dask tasks were cancelled on the scheduler")
                    continue
                outputs.extend(result.tasks())
                for i, c in result.counts.items():
                    counts[i].merge(c)
                sizer.observe(len(ids), result.seconds)
                bars.advance(plan.groups[-1], len(ids))
                finished += len(ids)
                live.chunk_done(ids, result.failed, result.counts)
                if events is not None:
                    events.chunk_done(ids, result)
                if planner is not None:
                    planner.sources_finished(ids, result.failed)
                submit_next()
        except BaseException:
            client.cancel(list(in_flight), force=True)
            raise
        finally:
            stopped.set()
            self._stop.set()  # releases the drain thread
            watcher.join(timeout=10)
            bars.close()
            report.__exit__(None, None, None)
            try:
                client.unregister_worker_plugin(host.name)
            except Exception as exc:  # noqa: BLE001 (teardown must not hide the run's error)
                logger.warning("Could not remove worker plugin %s: %s", host.name, exc)
        if self._stop_requested and finished < len(sources):
            msg = (f"{self._stop_reason}: stopped after {finished} of {len(sources)} sources; "
                   "the rest stay pending")
            raise RunStopped(msg)
        return outputs


def _show_link(url: str) -> None:
    """The dashboard link: a clickable link in Jupyter, a line on stderr elsewhere."""
    if "ipykernel" in sys.modules:
        try:
            from html import escape

            from IPython.display import HTML, display

            link = escape(url)
            display(HTML(f'Dask dashboard: <a href="{link}" target="_blank">{link}</a>'))
            return
        except ImportError:
            pass
    from tqdm.auto import tqdm

    tqdm.write(f"Dask dashboard: {url}")


class _StageBars:
    """One progress bar per stage after the source (tqdm.auto: widgets in Jupyter).

    Stages fused into one Dask task advance together; a bar counts the sources that passed it.
    """

    def __init__(self, stages: Sequence[Any], plan: ExecutionPlan, total: int,
                 progress: bool | None, dashboard: str | None, on_advance: Any = None) -> None:
        from tqdm.auto import tqdm

        self.on_advance = on_advance
        show = _interactive() if progress is None else bool(progress)
        self._lock = threading.Lock()
        self.bars: dict[int, Any] = {}
        if show and dashboard:
            _show_link(dashboard)
        width = max((len(stages[i].name) for g in plan.groups for i in g.stage_indices),
                    default=8)
        position = 0
        for group in plan.groups:
            for i in group.stage_indices:
                self.bars[i] = tqdm(total=total, unit="source", desc=stages[i].name.ljust(width),
                                    disable=not show, position=position, leave=True)
                position += 1

    def advance(self, group: Any, n: int) -> None:
        with self._lock:
            for i in group.stage_indices:
                self.bars[i].update(n)
        if self.on_advance is not None:
            self.on_advance(group.stage_indices, n)

    def watch(self, future: Any, group: Any, n: int) -> None:
        def done(f: Any) -> None:
            if f.status == "finished":
                self.advance(group, n)

        future.add_done_callback(done)

    def close(self) -> None:
        with self._lock:
            for bar in self.bars.values():
                bar.close()


class _performance_report:
    """``distributed.performance_report`` for one run; a failure to save only logs a warning."""

    def __init__(self, client: Any, path: str | None) -> None:
        self.client, self.path = client, path
        self._stack = contextlib.ExitStack()

    def __enter__(self) -> None:
        if not self.path:
            return
        try:
            from distributed import performance_report

            self._stack.enter_context(self.client.as_current())
            self._stack.enter_context(performance_report(filename=self.path))
        except Exception as exc:  # noqa: BLE001 (bokeh missing, or an old distributed)
            logger.warning("no Dask performance report for this run: %s", exc)
            self._stack.close()

    def __exit__(self, *exc: object) -> None:
        try:
            self._stack.close()  # the report is saved here
        except Exception as error:  # noqa: BLE001 (the report must not fail the run)
            logger.warning("could not save the Dask performance report: %s", error)
