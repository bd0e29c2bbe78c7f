"""NeMo Curator's model, as the engine makes its objects (:func:`nemo_model`).

:func:`curator_dask.stages.model.model_of` imports this module only for a stage or task that
came from NeMo Curator, so nothing imports ``nemo_curator`` (or Ray) unless the user handed
over a NeMo object. What the engine makes for a NeMo stage is NeMo's own: its ``NoneTask`` for
a filtered slot, its ``NodeInfo`` / ``WorkerMetadata`` for ``setup_on_node`` / ``setup``, and
the ``StagePerfStats`` its ``StageTimer`` records, so that ``_stage_perf`` is exactly what
NeMo's stage adapters append. See docs/design/architecture.md ("Two models, one engine").
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from functools import cache
from typing import Any

from curator_dask.classes import NEMO_PACKAGE
from curator_dask.stages.model import Model


class NemoStageTimer:
    """NeMo Curator's own ``StageTimer``, used the way its stage adapters use it, so that
    ``_stage_perf`` entries (process and idle time, input size, items, custom metrics) are
    exactly NeMo's. ``perf_class`` is unused: NeMo's timer makes its own records."""

    def __init__(self, stage: Any, perf_class: type | None = None) -> None:
        from nemo_curator.utils.performance_utils import StageTimer

        self.stage = stage
        self._timer = StageTimer(stage)

    @contextlib.contextmanager
    def measure(self, items: int) -> Iterator[None]:
        self._timer.reinit(items)
        with self._timer.time_process(items):
            yield

    def stats(self) -> Any:
        _, stats = self._timer.log_stats()
        custom = self.stage._consume_custom_metrics()
        if custom:
            stats.custom_metrics.update(custom)
        return stats


@cache
def nemo_model() -> Model:
    """NeMo Curator's model (imports ``nemo_curator``).

    Example (with NeMo Curator installed):
        >>> nemo_model().none_task.__module__
        'nemo_curator.tasks.sentinels'
    """
    from nemo_curator.backends.base import NodeInfo, WorkerMetadata
    from nemo_curator.tasks import NoneTask
    from nemo_curator.utils.performance_utils import StagePerfStats

    return Model(NEMO_PACKAGE, NoneTask, NodeInfo, WorkerMetadata, StagePerfStats,
                 timer_class=NemoStageTimer)
