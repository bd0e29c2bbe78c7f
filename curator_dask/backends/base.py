"""The run contract between ``Pipeline.run``, the job layer and executors.

``Pipeline.run`` validates everything a run asks for once, into a frozen :class:`RunOptions`,
and hands it to ``executor.execute(stages, initial_tasks, options=..., observer=...)`` together
with a :class:`RunObserver` (the job layer, or nothing). The plain two-argument call
``execute(stages, initial_tasks)`` is NeMo Curator's and keeps working. The executor owns the
run from its options to its result and tells every observer once how it ended
(:meth:`RunObserver.run_finished`, a :class:`RunEnd`). See docs/design/architecture.md ("The
run contract").
"""

from __future__ import annotations

import dataclasses
import os
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from curator_dask.stages.base import NodeInfo, WorkerMetadata

if TYPE_CHECKING:
    from curator_dask.resumability.stage_checkpoints import StageCheckpoints
    from curator_dask.slurm.array import SlurmArrayConfig
    from curator_dask.stages.base import ProcessingStage
    from curator_dask.tasks import Task

__all__ = ["BaseExecutor", "NodeInfo", "NullObserver", "RunEnd", "RunObserver", "RunOptions",
           "prepare_outputs", "prepare_outputs_and_root_ids",
           "WorkerMetadata", "check_max_concurrent_partitions"]


def _no_stage_checkpoints() -> StageCheckpoints:
    # imported on first use: importing this module loads no checkpoint code
    from curator_dask.resumability.stage_checkpoints import StageCheckpoints

    return StageCheckpoints()


@dataclasses.dataclass(frozen=True)
class RunOptions:
    """What one run asks of its executor, validated once by :meth:`build`.

    Attributes:
        checkpoint_path: the completion checkpoint (normalized: an absolute local path or a
            URL), or ``None`` for a run that records nothing.
        checkpoint_storage_options: fsspec options for a remote checkpoint (default: config
            ``io.storage-options``, see docs/object-stores.md).
        stage_checkpoints: the coerced :class:`StageCheckpoints` (disabled by default).
        verify_inputs: ``off``, ``fingerprint`` or ``content``.
        on_input_change: ``reprocess`` or ``error``.
        slurm_array: the array shard to process, or ``None`` for every source.
        performance_report: where to save Dask's performance report of the run, if anywhere.
        failed_task_dir: where to leave NeMo Curator's empty ``failed_tasks.json`` marker
            when a task failed (NeMo's own ``Pipeline.run`` reads it there afterwards).
        max_concurrent_partitions: ``"auto"`` (the executor's in-flight window of chains,
            each over a chunk of sources) or the most source partitions in flight at once
            (chunks are cut to fit); see :func:`check_max_concurrent_partitions`.
        resume_hint: the command that resumes the run (a job's), appended to the message of a
            stopped or interrupted run (``; resume with: ...``).
        array_manifest: whether the run writes the array shard's ``run.json`` and completion
            manifest (curator_dask's ``Pipeline.run``; NeMo Curator's writes its own).

    Example:
        >>> RunOptions().requested()
        []
        >>> RunOptions(checkpoint_path="/tmp/ckpt").requested()
        ['checkpoint_path']
    """

    checkpoint_path: str | None = None
    checkpoint_storage_options: dict | None = None
    stage_checkpoints: StageCheckpoints = dataclasses.field(
        default_factory=_no_stage_checkpoints)
    verify_inputs: str = "off"
    on_input_change: str = "reprocess"
    slurm_array: SlurmArrayConfig | None = None
    performance_report: str | None = None
    failed_task_dir: str | None = None
    max_concurrent_partitions: int | str = "auto"
    resume_hint: str | None = None
    array_manifest: bool = False

    def __post_init__(self) -> None:
        check_max_concurrent_partitions(self.max_concurrent_partitions)
        if self.stage_checkpoints is None:  # given as None: the default (disabled)
            object.__setattr__(self, "stage_checkpoints", _no_stage_checkpoints())

    @classmethod
    def build(
        cls,
        stages: Sequence[Any],
        *,
        checkpoint_path: str | None = None,
        checkpoint_storage_options: dict | None = None,
        stage_checkpoints: Any = None,
        verify_inputs: str | None = None,
        on_input_change: str | None = None,
        slurm_array: Any = None,
        performance_report: str | None = None,
        max_concurrent_partitions: int | str | None = None,
        job: bool = False,
    ) -> RunOptions:
        """Resolve config defaults and check every value against the built ``stages``.

        ``slurm_array=None`` reads the array variables of this (driver) process; ``False``
        processes every source. With ``job=True`` the checkpoint comes later, from the job
        (:meth:`for_job`), so the checks that need one wait until then.
        """
        from curator_dask import config
        from curator_dask.resumability.input_check import MODES, ON_CHANGE
        from curator_dask.resumability.stage_checkpoints import StageCheckpoints

        if stage_checkpoints is None:
            stage_checkpoints = config.section("stage-checkpoints")
        ckpt = StageCheckpoints.coerce(stage_checkpoints)
        ckpt.boundaries(stages)  # stage names are checked before anything starts
        verify_inputs = config.get("checkpoint.verify-inputs", verify_inputs)
        on_input_change = config.get("checkpoint.on-input-change", on_input_change)
        if verify_inputs not in MODES:
            msg = f"verify_inputs must be one of {', '.join(MODES)} (got {verify_inputs!r})"
            raise ValueError(msg)
        if on_input_change not in ON_CHANGE:
            msg = (f"on_input_change must be one of {', '.join(ON_CHANGE)} "
                   f"(got {on_input_change!r})")
            raise ValueError(msg)
        if slurm_array is None:
            from curator_dask.slurm.array import SlurmArrayConfig

            slurm_array = SlurmArrayConfig.from_env()
        options = cls(checkpoint_path=checkpoint_path,
                      checkpoint_storage_options=checkpoint_storage_options,
                      stage_checkpoints=ckpt, verify_inputs=verify_inputs,
                      on_input_change=on_input_change, slurm_array=slurm_array or None,
                      performance_report=performance_report, array_manifest=True,
                      max_concurrent_partitions=partition_cap(max_concurrent_partitions))
        return options if job else options.checked(stages)

    @classmethod
    def plain(cls, checkpoint_path: str | None = None) -> RunOptions:
        """NeMo Curator's call, ``execute(stages, initial_tasks)``: the array shard and the
        failed-task folder come from this (driver) process's environment, as NeMo's own
        adapters read them; a checkpoint only through NeMo's ``Pipeline.run`` hook; the cap
        on partitions in flight from config ``execution.max-concurrent-partitions``."""
        from curator_dask.slurm.array import SlurmArrayConfig
        from curator_dask.slurm.failed_tasks import FAILED_TASKS_DIR_ENV_VAR

        return cls(checkpoint_path=checkpoint_path, slurm_array=SlurmArrayConfig.from_env(),
                   failed_task_dir=os.environ.get(FAILED_TASKS_DIR_ENV_VAR) or None,
                   max_concurrent_partitions=partition_cap(None))

    def for_job(self, stages: Sequence[Any], checkpoint_path: str,
                performance_report: str | None, resume_hint: str | None = None) -> RunOptions:
        """The options with the job's checkpoint, report path and resume command, checked."""
        return dataclasses.replace(self, checkpoint_path=checkpoint_path,
                                   performance_report=performance_report,
                                   resume_hint=resume_hint).checked(stages)

    def checked(self, stages: Sequence[Any]) -> RunOptions:
        """Check what depends on the checkpoint; returns a copy with its URL normalized."""
        ckpt = self.stage_checkpoints
        if self.checkpoint_path is None:
            if ckpt.enabled or self.verify_inputs != "off":
                what = (f"stage_checkpoints={ckpt.strategy!r}" if ckpt.enabled
                        else f"verify_inputs={self.verify_inputs!r}")
                msg = (f"{what} needs checkpoint_path (or a job, whose checkpoint is in its "
                       "folder): it works on the completion checkpoint")
                raise ValueError(msg)
            return self
        non_resumable = [s.name for s in stages if not s.is_resumable]
        if non_resumable:
            msg = (
                f"checkpoint_path was set, but these stages are not marked resumable: "
                f"{non_resumable}. Set is_resumable=True on a stage only once you've "
                f"confirmed its input\u2192output mapping is resumability-safe."
            )
            raise ValueError(msg)
        from curator_dask.resumability.client import normalize_checkpoint_url
        from curator_dask.utils.storage_options import default_storage_options

        url = normalize_checkpoint_url(self.checkpoint_path)
        # A remote checkpoint given no options takes config io.storage-options, resolved
        # here on the driver: the scheduler's plugin gets plain values, not the config.
        return dataclasses.replace(self, checkpoint_path=url, checkpoint_storage_options=(
            default_storage_options(url, self.checkpoint_storage_options)))

    def fingerprint_settings(self) -> dict[str, Any]:
        """The settings a job's strict resume compares (besides stages and checkpoint).

        Not ``max_concurrent_partitions``: how many partitions run at once changes no output,
        so a job may resume with another value (on a larger allocation, say)."""
        return {"stage_checkpoints": self.stage_checkpoints.fingerprint(),
                "verify_inputs": self.verify_inputs, "on_input_change": self.on_input_change}

    def requested(self) -> list[str]:
        """Names of the options that differ from a plain run (what a foreign executor lacks)."""
        plain = RunOptions()
        ignored = ("performance_report", "failed_task_dir", "resume_hint", "array_manifest")
        return [f.name for f in dataclasses.fields(self)
                if f.name not in ignored and getattr(self, f.name) != getattr(plain, f.name)]


def check_max_concurrent_partitions(value: Any, given: str = "max_concurrent_partitions"
                                    ) -> int | str:
    """``value`` if it is ``"auto"`` or a whole number of at least 1, else a ``ValueError``
    naming the valid values (``given``: what the user wrote, e.g. the CLI option).

    Example:
        >>> check_max_concurrent_partitions("auto"), check_max_concurrent_partitions(4)
        ('auto', 4)
        >>> check_max_concurrent_partitions(0)
        Traceback (most recent call last):
        ...
        ValueError: max_concurrent_partitions must be "auto" or a whole number of at least 1 \
(the most source partitions in flight at once), got 0
    """
    if value == "auto" or (isinstance(value, int) and not isinstance(value, bool)
                           and value >= 1):
        return value
    msg = (f'{given} must be "auto" or a whole number of at least 1 (the most source '
           f"partitions in flight at once), got {value!r}")
    raise ValueError(msg)


def partition_cap(value: Any = None) -> int | str:
    """``value`` checked, or for ``None`` config ``execution.max-concurrent-partitions``
    (an error then names the config key)."""
    if value is not None:
        return check_max_concurrent_partitions(value)
    from curator_dask import config

    return check_max_concurrent_partitions(
        config.get("execution.max-concurrent-partitions"),
        given="config curator-dask.execution.max-concurrent-partitions")


def prepare_outputs_and_root_ids(stages: Sequence[Any], checkpoint_path: str | None,
                                 initial_tasks: Sequence[Task] | None) -> None:
    """What every run does on the driver before it starts, whatever its executor: each
    writer's ``prepare_output`` (:func:`prepare_outputs`), then the root ids of user-given
    initial tasks (docs/design/contract.md §1.7)."""
    prepare_outputs(stages, checkpoint_path)
    if initial_tasks:
        from curator_dask.lineage import assign_root_task_ids

        assign_root_task_ids(initial_tasks)


def prepare_outputs(stages: Sequence[Any], checkpoint_path: str | None) -> None:
    """Each writer's ``prepare_output``: temp files of dead writers removed, ``mode=
    "overwrite"`` applied (or refused with a checkpoint), the folder made and checked
    writable. ``DaskExecutor`` calls it once the driver found the inputs, so a run refused
    for its inputs has made and deleted nothing."""
    for stage in stages:
        prepare = getattr(stage, "prepare_output", None)
        if callable(prepare):
            prepare(checkpoint_path=checkpoint_path)


@dataclasses.dataclass(frozen=True)
class RunEnd:
    """How a run ended, as every observer's :meth:`RunObserver.run_finished` hears it once.

    Attributes:
        result: the run's result (a ``RunResult``) when it raised nothing, else ``None``.
        error: what ended it otherwise: the run's own error (a stopped run's ``RunStopped``
            and an interrupted run's ``KeyboardInterrupt`` without the resume hint the caller
            sees appended), else ``None``.
        failed_task_seen: whether a stage returned a ``FailedTask`` (decided once, by the
            run, from the completion plugin's summary and the stage counts), also when the
            run failed or stopped.
        recorded: the sources the run's checkpoint recorded complete in this run (its
            completion plugin's count, the one a stopped or interrupted run's line gives:
            chains recorded but never collected by the driver included); ``None`` without a
            checkpoint or when it could not be flushed.

    Example:
        >>> RunEnd(error=RuntimeError("boom")).completed
        False
    """

    result: Any = None
    error: BaseException | None = None
    failed_task_seen: bool = False
    recorded: int | None = None

    @property
    def completed(self) -> bool:
        """Whether the run raised nothing."""
        return self.error is None


@runtime_checkable
class RunObserver(Protocol):
    """What an executor tells the one who started the run (the job layer implements it; an
    array shard's bookkeeping, ``slurm/run.py: ArrayShardRun``, too).

    ``bind`` comes first, at the start of ``execute``: ``stop(reason)`` asks the run to drain
    and stop (it is the run's own ``StopSignal.request``), ``progress()`` returns a live
    snapshot (a dict). ``plan_built`` receives the execution plan the run actually built (its
    JSON form) and the executor's settings; ``event`` receives each run event
    (``sources_planned``, ``stage_complete``, ...); ``run_finished`` comes last, once, however
    the run ended (also when it failed before it started).
    """

    def bind(self, *, stop: Callable[[str], None], progress: Callable[[], dict]) -> None: ...

    def plan_built(self, plan: dict[str, Any], settings: dict[str, Any]) -> None: ...

    def event(self, type_: str, **fields: Any) -> None: ...

    def run_finished(self, end: RunEnd) -> None: ...


class NullObserver:
    """A :class:`RunObserver` that ignores everything (runs that are not jobs)."""

    def bind(self, *, stop: Callable[[str], None], progress: Callable[[], dict]) -> None:
        """Nothing to bind."""

    def plan_built(self, plan: dict[str, Any], settings: dict[str, Any]) -> None:
        """Nothing to record."""

    def event(self, type_: str, **fields: Any) -> None:
        """Nothing to record."""

    def run_finished(self, end: RunEnd) -> None:
        """Nothing to finish."""


class BaseExecutor(ABC):
    """Runs built stages over initial tasks and returns the sink's outputs."""

    def __init__(self, config: dict[str, Any] | None = None, ignore_head_node: bool = False):
        self.config = config or {}
        env = os.environ.get("CURATOR_IGNORE_RAY_HEAD_NODE", "").strip().lower()
        self.ignore_head_node = ignore_head_node or env in {"1", "true", "yes"}

    @abstractmethod
    def execute(
        self,
        stages: list[ProcessingStage],
        initial_tasks: list[Task] | None = None,
        options: RunOptions | None = None,
        observer: RunObserver | None = None,
    ) -> list[Task]:
        """Run ``stages`` (already built) and return the last stage's output tasks.

        The executor owns the run: it applies ``options`` and calls ``observer.run_finished``
        once, however the run ends."""
