"""One run on a Dask cluster, from its options to its result: ``DaskRun`` owns its lifecycle.

prepare (refuse what cannot run, writers' outputs, root ids, the id registry, the array shard,
the plan) → the run's stop registered → the plan to the observers → the head on the driver (file
discovery: before the cluster) → connect → check resources → open the checkpoint → the head on
the cluster (given initial tasks) → select the sources (array shard, completed, changed inputs)
→ stage checkpoints → stream → wrap up (flush completions, record inputs) → result → every
observer's ``run_finished`` (the shard's, then the caller's). See docs/design/architecture.md
("One run, end to end", "The stop path").
"""

from __future__ import annotations

import itertools
import logging
import time
import uuid
from collections.abc import Iterator, Sequence
from typing import Any

from curator_dask.backends.base import (
    NullObserver,
    RunEnd,
    RunObserver,
    RunOptions,
    prepare_outputs,
)
from curator_dask.backends.dask import extensions, source_feed
from curator_dask.backends.dask.head import run_head, run_head_on_cluster, settle_source
from curator_dask.backends.dask.plan import ExecutionPlan, build_plan, plan_document
from curator_dask.backends.dask.progress import notice, showing
from curator_dask.backends.dask.resource_check import check_resources
from curator_dask.backends.dask.result import RunResult
from curator_dask.backends.dask.run_parts import RunReport, RunServices, RunSources
from curator_dask.backends.dask.run_stream import register_stage_host, stream_sources
from curator_dask.backends.dask.source_feed import (
    LazySourceTasks,
    SourceFeed,
    feed_or_list,
    whole_list_reason,
)
from curator_dask.backends.dask.stop import RUNS, StopSignal
from curator_dask.backends.dask.streaming import StreamSettings
from curator_dask.errors import (
    RunStopped,
    SchedulerLostError,
    StageError,
    nothing_started,
    run_interrupted,
    stop_summary,
    warn_partial_run,
    with_resume_hint,
)
from curator_dask.ids.run import ids_for_run
from curator_dask.lineage import is_empty_task, source_id_of
from curator_dask.tasks import EmptyTask
from curator_dask.utils.files import NoInputFilesError

logger = logging.getLogger(__name__)


class DaskRun:
    """One ``DaskExecutor.execute`` call, from its options to its result: made (and refused,
    :meth:`prepare`) before the executor starts anything, then :meth:`execute`.

    It notifies ``observers``: the array shard's (``slurm/run.py: ArrayShardRun``, made here
    from ``options``) and the caller's (a job, or ``NullObserver``); their ``run_finished``
    hears once how the run ended (:class:`~curator_dask.backends.base.RunEnd`), with whether a
    ``FailedTask`` was seen decided here (:meth:`saw_failed_task`).

    Its helpers in other modules get the typed parts they use (:mod:`.run_parts`): the
    ``services`` it connects and opens, the ``report`` it keeps, its ``sources``; they return
    what they learn (a lost scheduler is the ``SchedulerLostError`` the stream raises, recorded
    here), and none touches the run's own attributes.
    """

    def __init__(self, executor: Any, stages: Sequence[Any], options: RunOptions,
                 observer: RunObserver, initial_tasks: list[Any] | None = None) -> None:
        self.executor, self.stages, self.options, self.observer = (executor, stages, options,
                                                                   observer)
        self.observers: list[Any] = [observer]  # the shard's goes first, once made
        self.given = initial_tasks
        self.run_id = uuid.uuid4().hex[:12]
        self.stop = StopSignal(self.run_id)  # registered in RUNS while the run is in progress
        quiet = isinstance(observer, NullObserver)  # no consumer: skip building records
        self.report = RunReport.for_stages(stages, self.run_id,
                                           None if quiet else observer.event)
        self.services = RunServices()
        self.sources = RunSources()
        self.plan: ExecutionPlan  # made by prepare(), below: a run it refuses is never made
        self.initial: list[Any] = []
        self.summary: dict[str, Any] | None = None
        self.scheduler_lost: str | None = None  # set when the run gave up on its scheduler
        self.head_reported = False
        try:  # refused here, the executor starts nothing for the run
            self.prepare()
        except BaseException as exc:
            self.notify(None, exc)
            raise

    # -- the lifecycle ----------------------------------------------------------------------
    def execute(self) -> RunResult:
        """Run every step; the cluster is closed afterwards unless the executor is entered.

        Every way it ends reaches the observers once (:meth:`notify`); a stopped or
        interrupted run raises its error with the resume hint of ``options.resume_hint``.
        """
        RUNS.add(self.stop, self.executor)  # from here on (even during start) a stop is this run's
        try:
            outputs = self.steps()
        except (RunStopped, KeyboardInterrupt) as stop:
            self.wrap_up(run_completed=False)
            error = self.ended(stop)
            self.notify(None, error)
            raise with_resume_hint(error, self.options.resume_hint) from None
        except BaseException as exc:
            self.wrap_up(run_completed=False)
            self.notify(None, exc)
            raise
        self.wrap_up(run_completed=True)
        try:
            result = self.result(outputs)
        except BaseException as exc:
            self.notify(None, exc)
            raise
        self.notify(result, None)
        return result

    def prepare(self) -> None:
        """When the run is made, before anything starts: refuse what cannot run, check the id
        generator, give user-given initial tasks their root ids, make the array shard
        (``run.json``), and plan. The writers' output modes and folders wait for the inputs
        (:meth:`steps`)."""
        stages, options = self.stages, self.options
        # e.g. NeMo: Ray-only stages, its writers with mode="overwrite" in a checkpointed run
        extensions.notify("run_made", stages=stages, options=options)
        self.services.ids = ids_for_run(stages, options, self.run_id)  # no generator: fails here
        if self.given:  # the writers' folders once the inputs are found (steps)
            from curator_dask.lineage import assign_root_task_ids

            assign_root_task_ids(self.given)
        self.initial = list(self.given or [EmptyTask()])
        from curator_dask.slurm.run import ArrayShardRun

        shard = self.services.shard = ArrayShardRun.for_run(options)
        if shard is not None:
            self.observers.insert(0, shard)
        # Initial tasks given (URLs, archives, file groups): the head is real work, run on the
        # cluster; from the implicit EmptyTask it discovers files, on the driver.
        self.plan = build_plan(
            stages, fuse=self.executor.fuse, boundaries=options.stage_checkpoints.boundaries(
                stages), head_on_cluster=not all(is_empty_task(t) for t in self.initial))

    def steps(self) -> list[Any]:
        """From the observers' binding to the sink's outputs and the flushed checkpoint."""
        for observer in self.observers:
            observer.bind(stop=self.stop.request, progress=self.report.live.snapshot)
        document = plan_document(self.stages, self.plan, self.options.stage_checkpoints.to_dict(),
                                 self.options.max_concurrent_partitions)
        settings = self.executor.settings()
        for observer in self.observers:
            observer.plan_built(document, settings)
        settle_source(self.stages, self.plan, self.options,
                      strict=bool(getattr(self.observer, "resumed", False)))
        if self.plan.head_group is None:  # file discovery needs no cluster: first
            self.run_head_on_driver()
        # after every refusal, the inputs' included: a refused run has made and deleted nothing
        prepare_outputs(self.stages, self.options.checkpoint_path)
        self.connect()
        check_resources(self.services.client, self.stages, self.plan,
                        getattr(self.executor.cluster, "worker_resources", None))
        self.open_checkpoint()
        if self.plan.head_group is not None:
            initial, self.initial = self.initial, []
            self.sources.sources = run_head_on_cluster(
                self.services.client, self.stages, self.plan, initial, self.report.counts,
                run_id=self.run_id, window=self.executor.max_in_flight, stop=self.stop,
                register=register_stage_host)
            self.head_done()
        self.select_sources()
        self.prepare_stage_checkpoints()
        if self.plan.groups and self.sources.todo:
            outputs = self.stream()
        else:
            outputs = list(self.sources.todo)
        if self.services.completion is not None:
            self.summary = self.services.completion.close()
        return outputs

    def stream(self) -> list[Any]:
        """The stream step (:func:`~.run_stream.stream_sources`), given the run's parts and
        the executor's settings; a lost scheduler is recorded here (nothing can be flushed or
        removed there) and raised."""
        executor, sources = self.executor, self.sources
        cluster = executor.cluster
        settings = StreamSettings(
            window=executor.max_in_flight,
            max_concurrent_partitions=self.options.max_concurrent_partitions,
            max_sources_per_task=executor.max_sources_per_task,
            keep_outputs=executor.keep_outputs, drain_timeout=executor.drain_timeout,
            adaptive=executor.adapt is not None,
            embedded=hasattr(cluster, "curator_dask_start_method"))
        try:
            return stream_sources(
                self.stages, self.plan, sources.take(), run_id=self.run_id, stop=self.stop,
                services=self.services, report=self.report, settings=settings,
                progress=executor.progress,
                known_total=(sources.to_process if sources.feed is None
                             or sources.feed.planned is not None else None),
                failure=getattr(cluster, "failure", None),
                performance_report_path=self.options.performance_report)
        except SchedulerLostError as exc:
            self.scheduler_lost = str(exc)
            raise

    def notify(self, result: RunResult | None, error: BaseException | None) -> None:
        """Every observer's ``run_finished``, in order; one that raises (the shard's manifest
        could not be written) turns the end into that error for the observers after it, and
        the error is raised."""
        seen, raised = self.saw_failed_task(), None
        recorded = (self.summary or {}).get("completed_in_run")
        for observer in self.observers:
            try:
                observer.run_finished(RunEnd(result=result if error is None else None,
                                             error=error, failed_task_seen=seen,
                                             recorded=recorded))
            except Exception as exc:
                raised = raised or exc
                if error is None:
                    result, error = None, exc
        if raised is not None:
            raise raised

    def ended(self, stop: BaseException) -> BaseException:
        """The error a stopped or interrupted run ends with, counting what really completed
        (the checkpoint's count when there is one) and what may have been written besides
        (:func:`~curator_dask.errors.stop_summary`)."""
        live, sources = self.report.live, self.sources
        collected = live.sources["completed"]
        todo, skipped, more = sources.to_process, sources.skipped, False
        feed = sources.feed
        if feed is not None and not feed.exhausted and feed.planned is None:  # given so far
            todo, skipped, more = feed.total - feed.skipped, feed.skipped, True
        if todo == 0 and collected == 0 and not live.cut and not more:
            # before any source started (the cluster's start, the head): "0 of 0" says nothing
            counted = nothing_started(skipped=skipped, checkpoint=self.options.checkpoint_path)
            if isinstance(stop, KeyboardInterrupt):
                return run_interrupted(f"Interrupted (Ctrl+C) {counted}")
            return RunStopped(f"{stop}: stopped {counted}")
        counted = stop_summary(
            done=(self.summary or {}).get("completed_in_run", collected), todo=todo,
            skipped=skipped, collected=collected, cut=live.cut,
            checkpoint=self.options.checkpoint_path, more_to_come=more)
        if isinstance(stop, KeyboardInterrupt):  # uncaught in a script: this line only
            return run_interrupted(f"Interrupted (Ctrl+C): {counted}")
        return RunStopped(f"{stop}: stopped after {counted}")

    # -- the steps --------------------------------------------------------------------------
    def run_head_on_driver(self) -> None:
        """The head from ``EmptyTask`` (file discovery), on the driver, before the cluster
        starts: nothing in it needs the cluster, so an input path that names no file ends the
        run at once, as the ``NoInputFilesError`` itself (its message names the path and the
        fix; the ``StageError`` around it would only add a traceback of this process)."""
        initial, self.initial = self.initial, []
        try:
            self.sources.sources = run_head(self.stages, self.plan, initial, self.report.counts)
        except StageError as exc:
            if isinstance(exc.__cause__, NoInputFilesError):
                raise exc.__cause__ from None
            raise
        self.head_done()

    def head_done(self) -> None:
        if not isinstance(self.sources.sources, LazySourceTasks):  # else once it has given all
            self.report_head()
        self.report.mark("head")

    def report_head(self) -> None:
        """The head's counts into the live progress, once (a lazy source's when it is
        exhausted or the run ends: its count grows as it is pulled)."""
        if not self.head_reported:
            self.head_reported = True
            self.report.live.head_done({i: self.report.counts[i] for i in self.plan.head})

    def connect(self) -> None:
        client = self.services.client = self.executor.start()
        self.services.ids.install(client)  # the id generator on the scheduler, before a source
        self.report.mark("cluster")
        live = self.report.live
        live.scheduler = getattr(getattr(client, "scheduler", None), "address", None)
        live.dashboard = self.executor.dashboard_link()

    def open_checkpoint(self) -> None:
        """Register the completion plugin and load the completed set (checkpointed runs)."""
        options = self.options
        if options.checkpoint_path is None:
            return
        from curator_dask.resumability.client import CompletionClient
        from curator_dask.resumability.input_check import InputCheck

        services = self.services
        services.completion = CompletionClient(
            services.client, self.run_id, options.checkpoint_path,
            storage_options=options.checkpoint_storage_options)
        self.report.mark("checkpoint_loaded")
        check = InputCheck(options.verify_inputs, options.on_input_change,
                           options.checkpoint_path, options.checkpoint_storage_options)
        services.input_check = check if check.enabled else None
        # recorded at the end
        self.report.live.keep_finished_ids = services.input_check is not None

    def select_sources(self) -> None:
        """The array shard's sources, less those completed (unless their inputs changed); from
        a lazy source stage, a :class:`~.source_feed.SourceFeed` where the run allows one."""
        services, held = self.services, self.sources
        sources = held.sources
        completion = services.completion
        if isinstance(sources, LazySourceTasks):
            why = whole_list_reason(
                sharded=services.shard is not None, verify_inputs=services.input_check is not None,
                stage_checkpoints=bool(self.options.stage_checkpoints.enabled
                                       and self.plan.boundaries),
                sink_follows=bool(self.plan.groups))
            found = feed_or_list(
                sources, why, on_exhausted=self.feed_exhausted,
                completed=completion.completed_source_ids if completion is not None else None,
                check_groups=self.check_groups if completion is not None else None)
            if isinstance(found, SourceFeed):  # its totals when it ends: feed_exhausted
                held.feed, held.todo, held.sources = found, found, []
                if found.planned is not None:  # known already: file groups, all checked
                    self.sources_planned(*found.planned)
                return
            self.report_head()
            sources = held.sources = found  # the whole list (why: in the log)
        source_stage = self.stages[self.plan.head[-1]]
        if completion is not None:  # every source, before the shard filter
            completion.check_partitioning(source_stage, sources)
        if services.shard is not None:
            sources = services.shard.select(sources, source_stage.name)
        held.sources = held.todo = sources
        changed: list[str] = []
        if completion is not None:
            if services.input_check is not None:
                changed = services.input_check.changed_sources(
                    sources, completion.completed_ids(sources))
            held.todo, skipped = completion.open_sources(
                sources, reopen=changed, now=not (self.plan.groups and sources))
            self.sources_planned(len(sources), skipped, changed)
        else:
            self.sources_planned(len(sources), 0)

    def sources_planned(self, total: int, skipped: int, changed: Sequence[str] = ()) -> None:
        """The sources' totals, once known (a list's at once, a lazy source's when it has given
        its last): the notice, the live progress and the ``sources_planned`` event."""
        self.sources.planned(total, skipped)
        if self.services.completion is not None:
            self.report.mark("sources_opened")
            again = f" ({len(changed)} of them again: their inputs changed)" if changed else ""
            notice(f"{total} source partitions: {skipped} already complete (skipped), "
                   f"{total - skipped} to process{again}", showing(self.executor.progress),
                   logger)
        self.report.live.planned(total, skipped, total - skipped)
        self.report.events.emit("sources_planned", total=total, skipped=skipped,
                         to_process=total - skipped,
                         **({"reprocessed_changed_inputs": len(changed)} if changed else {}))

    def check_groups(self, tasks: Iterator[Any]) -> tuple[int, int]:
        """Every file group of a lazy source stage, made again before the first is sent:
        compared with the checkpoint's partition record (refused, or recorded) and counted,
        with those already complete; returns ``(total, skipped)``. None of them is kept."""
        completion = self.services.completion
        if completion is None:
            msg = "check_groups needs the run's checkpoint: call it after open_checkpoint"
            raise RuntimeError(msg)
        counts = [0, 0]

        def counted() -> Iterator[Any]:
            while block := list(itertools.islice(tasks, source_feed.CHECK_BLOCK)):
                ids = [t.get_source_id() for t in block]
                done = completion.completed_source_ids(ids)
                counts[0] += len(ids)
                counts[1] += sum(1 for i in ids if i in done)
                yield from block

        completion.check_partitioning(self.stages[self.plan.head[-1]], counted())
        return counts[0], counts[1]

    def feed_exhausted(self, total: int, skipped: int) -> None:
        """The lazy source stage has given its last task."""
        self.report_head()
        feed = self.sources.feed
        if feed is None or feed.planned is None:  # else planned when the run began
            self.sources_planned(total, skipped)

    def prepare_stage_checkpoints(self) -> None:
        ckpt = self.options.stage_checkpoints
        if not (ckpt.enabled and self.plan.boundaries):
            return
        url, sources, todo = self.options.checkpoint_path, self.sources.sources, self.sources.todo
        if url is None:  # RunOptions.checked refuses it; options made by hand may not be checked
            msg = (f"stage_checkpoints={ckpt.strategy!r} needs checkpoint_path (or a job, whose "
                   "checkpoint is in its folder): it works on the completion checkpoint")
            raise ValueError(msg)
        if isinstance(sources, LazySourceTasks) or isinstance(todo, SourceFeed):
            msg = ("stage checkpoints plan over every source: select_sources takes them all "
                   "(whole_list_reason), not a lazy source's feed")
            raise TypeError(msg)
        from curator_dask.resumability.stage_checkpoints import CheckpointPlanner

        planner = self.services.planner = CheckpointPlanner(
            ckpt, self.stages, self.plan, url, self.options.checkpoint_storage_options)
        planner.prepare(sources, todo)

    def wrap_up(self, run_completed: bool) -> None:
        """Also after a stop or a failure: flush completions, record inputs, end the run on
        its executor (whose cluster closes unless it is entered or runs another run)."""
        services, report = self.services, self.report
        if services.planner is not None:
            services.planner.close(run_completed=run_completed)
            report.events.checkpoint_totals()
        if self.scheduler_lost is not None and services.completion is not None:
            logger.error("%s; the completions it had already written to %s are kept, the "
                         "sources in flight stay pending", self.scheduler_lost,
                         self.options.checkpoint_path)
        elif services.completion is not None and self.summary is None:
            try:
                self.summary = services.completion.close()
            except Exception as exc:  # noqa: BLE001 (do not hide the run's own error)
                logger.error("resumability: could not flush the checkpoint: %s", exc)
        services.ids.bring_back(self.scheduler_lost is not None)  # after the last save
        if services.input_check is not None and self.summary is not None:
            try:  # sources that completed are recorded, whatever ended the run
                services.input_check.record(report.live.finished_ids,
                                        set(self.summary.get("failed_sources") or ()))
            except Exception as exc:  # noqa: BLE001 (their next run reprocesses them)
                logger.error("verify_inputs: could not record input fingerprints: %s", exc)
        if self.sources.feed is not None:
            self.sources.feed.close()  # the lazy source stage's teardown
            self.report_head()  # what it gave before the run ended
        RUNS.remove(self.stop)
        self.executor.run_ended()

    def saw_failed_task(self) -> bool:
        """Whether any stage returned a ``FailedTask`` (in the counts, or per the plugin): the
        one place this is decided (``RunEnd.failed_task_seen``)."""
        failed = (self.summary or {}).get("failed_sources")
        return bool(failed) or any(c.failed for c in self.report.counts.values())

    def failed_source_ids(self) -> tuple[str, ...]:
        """The sources that saw a ``FailedTask``: every one the checkpoint's plugin heard of,
        else those the driver collected, named by their source task (without a checkpoint
        the stream knows them by task id; the source id is its last segment)."""
        if self.summary is not None:
            return tuple(self.summary.get("failed_sources") or ())
        return tuple(sorted({source_id_of(i) for i in self.report.live.failed_ids}))

    def result(self, outputs: list[Any]) -> RunResult:
        summary = self.summary
        if summary and summary.get("errors"):
            from curator_dask.resumability.client import CheckpointError

            msg = "the completion plugin failed:\n" + "\n".join(summary["errors"])
            raise CheckpointError(msg)
        report, counts = self.report, self.report.counts
        result = RunResult(outputs)
        result.stage_counts = [(s.name, counts[i]) for i, s in enumerate(self.stages)]
        report.events.run_totals(counts, summary)
        result.num_sources = self.sources.total
        result.skipped_sources = self.sources.skipped
        result.checkpoint = summary
        result.stage_checkpoints = (report.events.checkpoint_summary()
                                    if self.services.planner is not None else None)
        result.wall_time = time.perf_counter() - report.started
        report.mark("end")
        result.timings = report.timings
        result.dashboard_link = self.executor.dashboard_link()
        result.num_outputs = counts[len(self.stages) - 1].tasks_out if self.stages else 0
        result.failed_sources = self.failed_source_ids()
        result.num_failed_sources = len(result.failed_sources)
        line = result.failures_line()
        if line is None:
            logger.info("Finished %d sources in %.2f s: %d output tasks", self.sources.to_process,
                        result.wall_time, result.num_outputs)
        else:  # and a warning, which a script or notebook shows with no logging set up
            logger.info("Finished in %.2f s, %d output tasks: %s", result.wall_time,
                        result.num_outputs, line)
            warn_partial_run(line)
        return result
