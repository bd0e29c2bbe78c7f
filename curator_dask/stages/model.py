"""The model of tasks and stages the engine runs: curator_dask's own, or NeMo Curator's.

The engine (plan, adapter, worker plugin, scheduler plugin, stores) is duck-typed over both
models: it recognises classes by name (:func:`class_named`) and reads Dask resources from
``resources.gpus`` (:func:`dask_resources`). Where it must *make* an object of a model (a
``NoneTask`` for a filtered slot, the performance record a stage call appends to
``_stage_perf``, the ``NodeInfo``/``WorkerMetadata`` handed to ``setup_on_node``), it asks
:func:`model_of`. This module holds the own model; NeMo Curator's is
:mod:`curator_dask.nemo.model`, imported only for objects that came from NeMo Curator. See
docs/design/architecture.md ("Two models, one engine").
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from functools import cache
from typing import Any

from curator_dask.classes import is_nemo


def is_stage_class(cls: Any) -> bool:
    """Whether ``cls`` is a ``ProcessingStage`` class of curator_dask or of NeMo Curator.

    NeMo Curator is imported only for a class that comes from it.

    Example:
        >>> from curator_dask.stages.text.io.writer import JsonlWriter
        >>> is_stage_class(JsonlWriter), is_stage_class(dict), is_stage_class(len)
        (True, False, False)
    """
    from curator_dask.stages.base import ProcessingStage

    if not isinstance(cls, type):
        return False
    if issubclass(cls, ProcessingStage):
        return True
    if is_nemo(cls):
        from nemo_curator.stages.base import ProcessingStage as NemoProcessingStage

        return issubclass(cls, NemoProcessingStage)
    return False


def dask_resources(resources: Any) -> dict[str, float]:
    """The Dask worker resources one task of a stage holds while it runs: ``{"GPU": n}`` for
    a stage that needs GPUs (either model's ``Resources``), else nothing.

    Example:
        >>> from curator_dask.stages.resources import Resources
        >>> dask_resources(Resources(gpus=1)), dask_resources(Resources(cpus=4))
        ({'GPU': 1}, {})
    """
    gpus = float(getattr(resources, "gpus", 0) or 0)
    return {"GPU": resources.gpus} if gpus > 0 else {}


class StageTimer:
    """curator_dask's record of one stage call: wall time, items in, custom metrics.

    Example:
        >>> from curator_dask.stages.base import ProcessingStage
        >>> from curator_dask.tasks import StagePerfStats
        >>> timer = StageTimer(ProcessingStage(), StagePerfStats)
        >>> with timer.measure(3):
        ...     pass
        >>> timer.stats().num_items_processed
        3
    """

    def __init__(self, stage: Any, perf_class: type) -> None:
        self.stage, self.perf_class = stage, perf_class
        self._items, self._seconds, self._start = 0, 0.0, 0.0

    def measure(self, items: int) -> StageTimer:
        """A context that times the call it wraps, for ``items`` items (a plain class: the
        generator-based ``contextlib`` form cost a few microseconds a call)."""
        self._items = items
        return self

    def __enter__(self) -> None:
        self._start = time.perf_counter()

    def __exit__(self, *exc: object) -> None:
        self._seconds = time.perf_counter() - self._start

    def stats(self) -> Any:
        return self.perf_class(stage_name=self.stage.name, process_time=self._seconds,
                               num_items_processed=self._items,
                               custom_metrics=self.stage._consume_custom_metrics())


@dataclass(frozen=True)
class Model:
    """What the engine makes for one model: its classes, and its recorder of stage calls.

    Attributes:
        name: the model's package (``curator_dask`` or ``nemo_curator``).
        none_task, node_info, worker_metadata, perf_stats: the model's classes.
        timer_class: made once per stage adapter as ``timer_class(stage, perf_stats)``.
    """

    name: str
    none_task: type
    node_info: type
    worker_metadata: type
    perf_stats: type
    timer_class: type = StageTimer

    def timer(self, stage: Any) -> Any:
        """A per-adapter recorder of stage calls (``measure(items)``, then ``stats()``)."""
        return self.timer_class(stage, self.perf_stats)


@cache
def own_model() -> Model:
    """curator_dask's own model.

    Example:
        >>> own_model().none_task.__module__
        'curator_dask.tasks.sentinels'
    """
    from curator_dask.stages.base import NodeInfo, WorkerMetadata
    from curator_dask.tasks import NoneTask, StagePerfStats

    return Model("curator_dask", NoneTask, NodeInfo, WorkerMetadata, StagePerfStats)


def model_of(obj: object) -> Model:
    """The model a stage (or task) belongs to.

    Example:
        >>> from curator_dask.stages.base import ProcessingStage
        >>> model_of(ProcessingStage()).name
        'curator_dask'
    """
    if is_nemo(obj):
        from curator_dask.nemo.model import nemo_model

        return nemo_model()
    return own_model()
