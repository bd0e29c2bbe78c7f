"""``ProcessingStage`` and ``CompositeStage``: the user-facing stage API.

See docs/design/contract.md §7.1.

A stage ported from NeMo Curator runs unchanged once its imports name ``curator_dask``.
"""

from __future__ import annotations

import copy
import typing
from abc import ABC
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from curator_dask.stages.resources import Resources
from curator_dask.tasks import Task

X = TypeVar("X", bound=Task)
Y = TypeVar("Y", bound=Task)


@dataclass
class NodeInfo:
    """The host a stage is set up on (``node_id`` is the host name here)."""

    node_id: str = ""


@dataclass
class WorkerMetadata:
    """The worker a stage is set up on (``worker_id`` is the Dask worker's name)."""

    worker_id: str = ""
    allocation: Any = None


class ProcessingStage(ABC, Generic[X, Y]):
    """One step of a pipeline: maps an input task to zero, one or many output tasks.

    Subclasses are usually dataclasses that set ``name`` and implement :meth:`process`.
    Return ``None`` to filter a task, a list to fan out, ``FailedTask()`` to mark a recoverable
    failure. Never set ``task_id``: the framework derives it.

    Example:
        >>> from dataclasses import dataclass
        >>> from curator_dask.tasks import DocumentBatch
        >>> @dataclass
        ... class KeepLong(ProcessingStage[DocumentBatch, DocumentBatch]):
        ...     name: str = "keep_long"
        ...     min_chars: int = 50
        ...     def process(self, task):
        ...         df = task.to_pandas()
        ...         return DocumentBatch(dataset_name=task.dataset_name,
        ...                              data=df[df["text"].str.len() > self.min_chars],
        ...                              _metadata=task._metadata, _stage_perf=task._stage_perf)
        >>> KeepLong().with_(batch_size=4).batch_size
        4
    """

    name: str = "ProcessingStage"
    resources: Resources = Resources(cpus=1.0)
    batch_size: int | None = 1
    is_source_stage: bool = False
    is_sink_stage: bool = False
    is_resumable: bool = True
    runtime_env: dict[str, Any] | None = None

    # -- processing -------------------------------------------------------------------------
    def process(self, task: X) -> Y | list[Y] | None:
        """Process one task. Override this (or :meth:`process_batch`)."""
        msg = f"{type(self).__name__} must implement process() or process_batch()"
        raise NotImplementedError(msg)

    def process_batch(self, tasks: list[X]) -> list[Y | None]:
        """Process several tasks; the default validates and calls :meth:`process` on each.

        List results are flattened and ``None`` results kept (the adapter turns them into
        ``NoneTask``). An override must keep a ``None`` in each filtered input's position.
        """
        results: list[Any] = []
        for task in tasks:
            if not self.validate_input(task):
                msg = f"Task {task!s} failed validation for stage {self}"
                raise ValueError(msg)
            result = self.process(task)
            if isinstance(result, list):
                results.extend(result)
            else:
                results.append(result)
        return results

    def supports_batch_processing(self) -> bool:
        return type(self).process_batch is not ProcessingStage.process_batch

    # -- lifecycle --------------------------------------------------------------------------
    def setup_on_node(
        self, node_info: NodeInfo | None = None, worker_metadata: WorkerMetadata | None = None
    ) -> None:
        """Runs once per host before any :meth:`setup` there (download a model, warm a cache)."""

    def setup(self, worker_metadata: WorkerMetadata | None = None) -> None:
        """Runs once per worker before the stage's first task there (load a model)."""

    def teardown(self) -> None:
        """Runs once per worker at the end of the run, where :meth:`setup` ran."""

    # -- declared inputs and outputs --------------------------------------------------------
    def inputs(self) -> tuple[list[str], list[str]]:
        """``(task attributes, data columns)`` the stage needs."""
        return [], []

    def outputs(self) -> tuple[list[str], list[str]]:
        """``(task attributes, data columns)`` the stage produces."""
        return [], []

    def validate_input(self, task: Task) -> bool:
        """True when ``task`` has the attributes and data columns of :meth:`inputs`."""
        attrs, columns = self.inputs()
        if not all(hasattr(task, a) for a in attrs):
            return False
        if not columns:
            return True
        have = getattr(task, "columns", None)
        if have is None:
            return all(hasattr(task.data, c) for c in columns)
        return set(columns) <= set(have)

    # -- sizing and specs (NeMo compatibility) ----------------------------------------------
    def num_workers(self) -> int | None:
        return None

    def num_workers_per_node(self) -> int | None:
        return None

    def xenna_stage_spec(self) -> dict[str, Any]:
        return {}

    def ray_stage_spec(self) -> dict[str, Any]:
        try:
            ret = typing.get_type_hints(type(self).process).get("return")
        except Exception:  # noqa: BLE001 (unresolvable annotations mean "not a fan-out")
            ret = None
        return {"is_fanout_stage": typing.get_origin(ret) is list}

    # -- metrics ----------------------------------------------------------------------------
    def _log_metric(self, name: str, value: float) -> None:
        """Record a custom metric for the current call; it lands in ``StagePerfStats``."""
        metrics = self.__dict__.setdefault("_custom_metrics", {})
        metrics[name] = metrics.get(name, 0) + value

    def _consume_custom_metrics(self) -> dict[str, float]:
        return self.__dict__.pop("_custom_metrics", {})

    # -- copies -----------------------------------------------------------------------------
    def with_(
        self,
        name: str | None = None,
        resources: Resources | None = None,
        batch_size: int | None = None,
    ) -> ProcessingStage[X, Y]:
        """A copy of this stage with a new name, resources or batch size."""
        new = copy.copy(self)
        if name is not None:
            new.name = name
        if resources is not None:
            new.resources = resources
        if batch_size is not None:
            new.batch_size = batch_size
        return new

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"


class CompositeStage(ProcessingStage[X, Y]):
    """A stage made of other stages; ``Pipeline.build`` replaces it by :meth:`decompose`.

    Example:
        >>> from curator_dask.stages.text.io.reader import JsonlReader
        >>> [s.name for s in JsonlReader(file_paths="in/").decompose()]
        ['file_partitioning', 'jsonl_reader']
    """

    def decompose(self) -> list[ProcessingStage]:
        msg = f"{type(self).__name__} must implement decompose()"
        raise NotImplementedError(msg)

    def process(self, task: X) -> Y:
        msg = f"CompositeStage {self.name!r} must be decomposed before it runs (Pipeline.build)"
        raise RuntimeError(msg)

    def inputs(self) -> tuple[list[str], list[str]]:
        return self.decompose()[0].inputs()

    def outputs(self) -> tuple[list[str], list[str]]:
        return self.decompose()[-1].outputs()
