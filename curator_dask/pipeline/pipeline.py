"""``Pipeline``: an ordered list of stages with NeMo Curator's build rules (CONTRACT §1.9)."""

from __future__ import annotations

import inspect
import logging
from typing import TYPE_CHECKING, Any

from curator_dask import lineage
from curator_dask.stages.base import CompositeStage, ProcessingStage

if TYPE_CHECKING:
    from curator_dask.backends.base import BaseExecutor
    from curator_dask.tasks import Task

logger = logging.getLogger(__name__)


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
        """Append ``stage``; returns the pipeline so calls can be chained."""
        if not isinstance(stage, ProcessingStage):
            msg = f"add_stage expects a ProcessingStage, got {type(stage).__name__}: {stage!r}"
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
            if isinstance(stage, CompositeStage):
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
        verify_content: bool = False,
        command: str | None = None,
        stage_checkpoints: Any = None,
        verify_inputs: str | None = None,
        on_input_change: str | None = None,
    ) -> list[Task]:
        """Build and run the pipeline; returns the sink stage's output tasks.

        Args:
            executor: where to run; default: a ``DaskExecutor`` on an embedded LocalCluster.
            initial_tasks: tasks fed to the first stage instead of ``[EmptyTask()]``; they get
                the ids ``"0_<i>"``.
            checkpoint_path: skip sources completed by earlier runs with the same path and
                record completions (a local path, a network file system, or an fsspec URL
                such as ``s3://bucket/ckpt``); see docs/resumable-processing.md.
            checkpoint_storage_options: fsspec options for a remote ``checkpoint_path``.
            slurm_array: the array shard to process: a ``SlurmArrayConfig``, ``False`` to
                process every source, or ``None`` (default) to read the
                ``NEMO_CURATOR_SLURM_ARRAY_*`` / ``SLURM_ARRAY_*`` variables here, on the
                driver. The shard is filtered on the driver, so workers need no environment.
            work_dir, job_id, resume: run as a job in ``<work_dir>/<job_id>/`` (event log,
                job summary, saved fingerprints). ``resume=TOKEN`` continues a job after
                checking that its configuration and inputs are unchanged (it names what
                changed otherwise). A job's checkpoint defaults to ``<job dir>/checkpoint``.
            verify_content: fingerprint inputs by content (sha256) rather than size and mtime.
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
        """
        from curator_dask import config
        from curator_dask.resumability.stage_checkpoints import StageCheckpoints

        if stage_checkpoints is None:
            stage_checkpoints = {k.replace("-", "_"): v
                                 for k, v in config.get("stage-checkpoints").items()}
        ckpt_config = StageCheckpoints.coerce(stage_checkpoints)
        verify_inputs = config.get("checkpoint.verify-inputs", verify_inputs)
        on_input_change = config.get("checkpoint.on-input-change", on_input_change)
        self.build()
        ckpt_config.boundaries(self.stages)  # names checked before anything starts
        job = None
        if work_dir is not None or job_id is not None or resume is not None:
            from curator_dask.jobs.run import JobRun

            job = JobRun(self.stages, work_dir=work_dir or config.get("jobs.work-dir"),
                         job_id=job_id, resume=resume, checkpoint_path=checkpoint_path,
                         verify_content=verify_content, command=command,
                         settings={"stage_checkpoints": ckpt_config.to_dict(),
                                   "verify_inputs": verify_inputs,
                                   "on_input_change": on_input_change})
            checkpoint_path = job.checkpoint_path
            logger.info("job %s (%s)%s", job.job_id, job.directory.path,
                        f"; resume with: {job.resume_command}" if job.resume_command else "")
        try:
            result = self._run(executor, initial_tasks, checkpoint_path,
                               checkpoint_storage_options, slurm_array, job, ckpt_config,
                               verify_inputs, on_input_change)
        except BaseException as exc:
            if job is not None:
                from curator_dask.errors import RunStopped

                job.finish("stopped" if isinstance(exc, RunStopped | KeyboardInterrupt)
                           else "failed", error=exc)
            raise
        if job is not None:
            job.finish("completed", result)
            result.job_id = job.job_id
        return result

    def _run(self, executor, initial_tasks, checkpoint_path, checkpoint_storage_options,
             slurm_array, job, ckpt_config, verify_inputs, on_input_change):
        from curator_dask.resumability.input_check import InputCheck

        if checkpoint_path is None and (ckpt_config.enabled or verify_inputs != "off"):
            what = (f"stage_checkpoints={ckpt_config.strategy!r}" if ckpt_config.enabled
                    else f"verify_inputs={verify_inputs!r}")
            msg = (f"{what} needs checkpoint_path (or a job, whose checkpoint is in its "
                   "folder): it works on the completion checkpoint")
            raise ValueError(msg)
        input_check = None
        if checkpoint_path is not None:
            non_resumable = [s.name for s in self.stages if not s.is_resumable]
            if non_resumable:
                msg = (
                    f"checkpoint_path was set, but these stages are not marked resumable: "
                    f"{non_resumable}. Set is_resumable=True on a stage only once you've "
                    f"confirmed its input\u2192output mapping is resumability-safe."
                )
                raise ValueError(msg)
            from curator_dask.resumability.client import normalize_checkpoint_url

            checkpoint_path = normalize_checkpoint_url(checkpoint_path)
            input_check = InputCheck(verify_inputs, on_input_change, checkpoint_path,
                                     checkpoint_storage_options)
            if not input_check.enabled:
                input_check = None
        for stage in self.stages:
            prepare = getattr(stage, "prepare_output", None)
            if callable(prepare):
                prepare(checkpoint_path=checkpoint_path)
        if executor is None:
            from curator_dask.backends.dask import DaskExecutor

            executor = DaskExecutor()
        if job is not None and hasattr(executor, "request_stop"):
            job.attach(executor)
        if initial_tasks:
            lineage.assign_root_task_ids(initial_tasks)
        shard = None
        if slurm_array is None:
            from curator_dask.slurm.array import SlurmArrayConfig

            slurm_array = SlurmArrayConfig.from_env()
        if slurm_array:
            from curator_dask.slurm.run import ArrayShardRun

            shard = ArrayShardRun(slurm_array, checkpoint_path)
        logger.info("Running pipeline %r with %d stages", self.name, len(self.stages))
        extra: dict[str, Any] = {}
        if checkpoint_path is not None:
            extra.update(checkpoint_path=checkpoint_path,
                         checkpoint_storage_options=checkpoint_storage_options)
        if shard is not None:
            extra["slurm_array"] = shard.config
        if job is not None:
            extra["on_event"] = job.on_event
        if ckpt_config.enabled:
            extra["stage_checkpoints"] = ckpt_config
        if input_check is not None:
            extra["input_check"] = input_check
        params = inspect.signature(executor.execute).parameters
        missing = [k for k in extra if k not in params]
        if missing:
            msg = f"{type(executor).__name__} does not support {missing}; use DaskExecutor"
            raise TypeError(msg)
        result = executor.execute(self.stages, initial_tasks, **extra)
        if shard is not None:
            shard.finish(result)
        return result


def _decompose(stage: ProcessingStage) -> list[ProcessingStage]:
    if not isinstance(stage, CompositeStage):
        return [stage]
    out: list[ProcessingStage] = []
    for sub in stage.decompose():
        out.extend(_decompose(sub))
    return out
