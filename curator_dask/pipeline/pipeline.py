"""``Pipeline``: an ordered list of stages with NeMo Curator's build rules.

See docs/design/contract.md §1.9.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Protocol, TypeGuard

from curator_dask.backends.base import (
    BaseExecutor,
    RunEnd,
    RunOptions,
    prepare_outputs_and_root_ids,
)
from curator_dask.classes import class_named
from curator_dask.stages.base import ProcessingStage
from curator_dask.stages.model import is_stage_class

if TYPE_CHECKING:
    from curator_dask.tasks import Task

logger = logging.getLogger(__name__)


class _Composite(Protocol):
    """Either model's ``CompositeStage``: what this module asks of one."""

    def decompose(self) -> list[ProcessingStage]: ...


def _is_composite(stage: object) -> TypeGuard[_Composite]:
    return class_named(stage, "CompositeStage")  # either model's


class Pipeline:
    """Stages run in order over the tasks the source stage emits.

    Example:
        >>> from curator_dask.stages.text.io.reader import JsonlReader
        >>> from curator_dask.stages.text.io.writer import JsonlWriter
        >>> p = Pipeline(name="demo")
        >>> p = p.add_stage(JsonlReader(file_paths="in/")).add_stage(JsonlWriter(path="memory://o"))
        >>> p.build()
        >>> [(s.is_source_stage, s.is_sink_stage) for s in p.stages]
        [(True, False), (False, False), (False, True)]
    """

    def __init__(
        self,
        name: str = "pipeline",
        description: str | None = None,
        stages: list[ProcessingStage] | None = None,
        config: dict[str, Any] | None = None,
    ) -> None:
        self.name = name
        self.description = description
        self.stages: list[ProcessingStage] = list(stages or [])
        self.config = config or {}

    def add_stage(self, stage: ProcessingStage) -> Pipeline:
        """Append ``stage`` (curator_dask's or NeMo Curator's); returns the pipeline so calls
        can be chained."""
        if not is_stage_class(type(stage)):
            msg = (f"add_stage expects a ProcessingStage (curator_dask's or NeMo Curator's), "
                   f"got {type(stage).__name__}: {stage!r}")
            raise TypeError(msg)
        self.stages.append(stage)
        return self

    def build(self) -> None:
        """Decompose composite stages, then assign the source and sink roles."""
        if not self.stages:
            msg = f"Pipeline '{self.name}' has no stages"
            raise ValueError(msg)
        decomposed: list[ProcessingStage] = []
        for stage in self.stages:
            decomposed.extend(_decompose(stage))
        self.stages = decomposed
        self._assign_source_sink_roles()

    def _assign_source_sink_roles(self) -> None:
        sources = [s.name for s in self.stages if s.is_source_stage]
        if len(sources) > 1:
            msg = (
                f"Pipeline has multiple source stages marked: {sources}. At most one is "
                "supported."
            )
            raise ValueError(msg)
        if not sources:
            self.stages[0].is_source_stage = True
        sinks = [s.name for s in self.stages if s.is_sink_stage]
        if len(sinks) > 1:
            msg = f"Pipeline has multiple sink stages marked: {sinks}. At most one is supported."
            raise ValueError(msg)
        if not sinks:
            self.stages[-1].is_sink_stage = True

    def describe(self) -> str:
        """A readable summary of the stages, their roles and resources."""
        lines = [f"Pipeline: {self.name}"]
        if self.description:
            lines.append(f"Description: {self.description}")
        lines.append(f"Stages: {len(self.stages)}")
        for i, stage in enumerate(self.stages):
            roles = [r for r, on in (("source", stage.is_source_stage),
                                     ("sink", stage.is_sink_stage)) if on]
            role = f" [{', '.join(roles)}]" if roles else ""
            res = stage.resources
            lines.append(
                f"  {i + 1}. {stage.name} ({type(stage).__name__}){role}: cpus={res.cpus}, "
                f"gpus={res.gpus}, batch_size={stage.batch_size}"
            )
            if _is_composite(stage):
                for sub in stage.decompose():
                    lines.append(f"       - {sub.name} ({type(sub).__name__})")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"Pipeline(name={self.name!r}, stages={[s.name for s in self.stages]})"

    def run(
        self,
        executor: BaseExecutor | None = None,
        initial_tasks: list[Task] | None = None,
        checkpoint_path: str | None = None,
        checkpoint_storage_options: dict | None = None,
        slurm_array: Any = None,
        *,
        work_dir: str | None = None,
        job_id: str | None = None,
        resume: str | None = None,
        verify_content: bool | None = None,
        command: str | None = None,
        stage_checkpoints: Any = None,
        verify_inputs: str | None = None,
        on_input_change: str | None = None,
        max_concurrent_partitions: int | str | None = None,
    ) -> list[Task]:
        """Build and run the pipeline; returns the sink stage's output tasks.

        Args:
            executor: where to run; default: a ``DaskExecutor`` on an embedded LocalCluster.
            initial_tasks: tasks fed to the first stage instead of ``[EmptyTask()]``; they get
                the ids ``"0_<i>"``.
            checkpoint_path: skip sources completed by earlier runs with the same path and
                record completions (a local path, a network file system, or an fsspec URL
                such as ``s3://bucket/ckpt``); see docs/resumable-processing.md.
            checkpoint_storage_options: fsspec options for a remote ``checkpoint_path``
                (default: config ``io.storage-options``; see docs/object-stores.md).
            slurm_array: the array shard to process: a ``SlurmArrayConfig``, ``False`` to
                process every source, or ``None`` (default) to read the
                ``NEMO_CURATOR_SLURM_ARRAY_*`` / ``SLURM_ARRAY_*`` variables here, on the
                driver. The shard is filtered on the driver, so workers need no environment.
            work_dir, job_id, resume: run as a job in ``<work_dir>/<job_id>/`` (event log,
                job summary, saved fingerprints). ``resume=TOKEN`` continues a job after
                checking that its configuration and inputs are unchanged (it names what
                changed otherwise). A job's checkpoint defaults to ``<job dir>/checkpoint``.
            verify_content: fingerprint inputs by content (sha256) rather than size and mtime;
                ``None`` (default): off for a new job, the job's recorded mode on a resume
                (a resume given the other mode is refused).
            command: the command line that started the run, for the resume hint.
            stage_checkpoints: memoize chosen stage boundaries so a replayed source resumes
                from its deepest one: a strategy (``"every_stage"``, ``"manual"``, ...), a dict
                (``{"strategy": "every_n_stages", "n": 2, "retention": "keep_all"}``) or a
                ``StageCheckpoints``; default: config ``stage-checkpoints`` (disabled). Needs a
                checkpoint; see docs/stage-checkpoints.md.
            verify_inputs: ``"off"`` (default: config ``checkpoint.verify-inputs``),
                ``"fingerprint"`` (size and mtime or ETag) or ``"content"`` (sha256): check
                that the inputs of sources the checkpoint marks complete did not change.
            on_input_change: ``"reprocess"`` (default) or ``"error"``: what a changed,
                completed source gets.
            max_concurrent_partitions: the most source partitions in flight at once (a whole
                number; chunks of tiny sources are cut to fit), or ``"auto"``: as many as the
                executor's in-flight window of chains carries (default: config
                ``execution.max-concurrent-partitions``, ``"auto"``).
        """
        self.build()
        as_job = work_dir is not None or job_id is not None or resume is not None
        options = RunOptions.build(
            self.stages, checkpoint_path=checkpoint_path,
            checkpoint_storage_options=checkpoint_storage_options,
            stage_checkpoints=stage_checkpoints, verify_inputs=verify_inputs,
            on_input_change=on_input_change, slurm_array=slurm_array,
            max_concurrent_partitions=max_concurrent_partitions, job=as_job)
        if as_job and not initial_tasks:  # a typo in an input path: refused before a job exists
            check = getattr(self.stages[0], "check_inputs_exist", None) if self.stages else None
            if callable(check):
                check()
        job = self._start_job(options, checkpoint_path, work_dir, job_id, resume,
                              verify_content, command) if as_job else None
        try:  # the job's own checks, before the run exists: the run ends the job otherwise
            if job is not None:
                options = options.for_job(self.stages, job.checkpoint_path,
                                          job.performance_report, job.resume_command)
            if executor is None:
                from curator_dask.backends.dask import DaskExecutor

                executor = DaskExecutor()
            foreign = not isinstance(executor, BaseExecutor)
            if foreign:  # another project's executor: the plain call, nothing it cannot honour
                asked = options.requested() + (["a job"] if job is not None else [])
                if asked:
                    msg = f"{type(executor).__name__} does not support {asked}; use DaskExecutor"
                    raise TypeError(msg)
        except BaseException as exc:
            if job is not None:
                job.run_finished(RunEnd(error=exc))
            raise
        logger.info("Running pipeline %r with %d stages", self.name, len(self.stages))
        if foreign:
            return self._run_foreign(executor, initial_tasks, options)
        # The executor owns the run from here: the job hears how it ended (run_finished).
        result = executor.execute(self.stages, initial_tasks, options=options, observer=job)
        from curator_dask.backends.dask.result import RunResult

        # another BaseExecutor may return a plain list, which has no job_id to set
        if job is not None and isinstance(result, RunResult):
            result.job_id = job.job_id
        return result

    def _start_job(self, options: RunOptions, checkpoint_path: str | None,
                   work_dir: str | None, job_id: str | None, resume: str | None,
                   verify_content: bool | None, command: str | None) -> Any:
        from curator_dask import config
        from curator_dask.jobs.run import JobRun

        job = JobRun(self.stages, work_dir=work_dir or config.get("jobs.work-dir"),
                     job_id=job_id, resume=resume, checkpoint_path=checkpoint_path,
                     verify_content=verify_content, command=command,
                     settings=options.fingerprint_settings())
        logger.info("job %s (%s)%s", job.job_id, job.directory.path,
                    f"; resume with: {job.resume_command}" if job.resume_command else "")
        return job

    def _run_foreign(self, executor: Any, initial_tasks: list[Task] | None,
                     options: RunOptions) -> list[Task]:
        """Another project's executor (NeMo Curator's, say): what our executor's run does
        before it starts (writers' output modes, root ids), then its two-argument call."""
        prepare_outputs_and_root_ids(self.stages, options.checkpoint_path, initial_tasks)
        return executor.execute(self.stages, initial_tasks)


def _decompose(stage: ProcessingStage) -> list[ProcessingStage]:
    if not _is_composite(stage):
        return [stage]
    # NeMo's composites apply their with_() overrides while decomposing.
    decompose = getattr(stage, "decompose_and_apply_with", None) or stage.decompose
    out: list[ProcessingStage] = []
    for sub in decompose():
        out.extend(_decompose(sub))
    return out
