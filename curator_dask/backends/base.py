"""The executor interface shared by every backend (CONTRACT §7.1)."""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any

from curator_dask.stages.base import NodeInfo, WorkerMetadata

if TYPE_CHECKING:
    from curator_dask.stages.base import ProcessingStage
    from curator_dask.tasks import Task

__all__ = ["BaseExecutor", "NodeInfo", "WorkerMetadata"]


class BaseExecutor(ABC):
    """Runs built stages over initial tasks and returns the sink's outputs."""

    def __init__(self, config: dict[str, Any] | None = None, ignore_head_node: bool = False):
        self.config = config or {}
        env = os.environ.get("CURATOR_IGNORE_RAY_HEAD_NODE", "").strip().lower()
        self.ignore_head_node = ignore_head_node or env in {"1", "true", "yes"}

    @abstractmethod
    def execute(
        self, stages: list[ProcessingStage], initial_tasks: list[Task] | None = None
    ) -> list[Task]:
        """Run ``stages`` (already built) and return the last stage's output tasks."""
