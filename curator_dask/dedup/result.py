"""The result of a workflow run and the workflows' base class: NeMo Curator's
``WorkflowRunResult`` and ``WorkflowBase`` when NeMo is installed (so ``isinstance`` checks of
NeMo users hold), else classes with the same fields and methods."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

try:  # NeMo's own classes, so isinstance checks of NeMo users hold
    from nemo_curator.pipeline.workflow import WorkflowBase, WorkflowRunResult
except ImportError:  # the own model without NeMo Curator

    class WorkflowBase(ABC):  # type: ignore[no-redef]  # NeMo's, when installed, above
        """A workflow: several pipeline runs behind one ``run``."""

        @abstractmethod
        def run(self, *args: Any, **kwargs: Any) -> WorkflowRunResult: ...

    @dataclass
    class WorkflowRunResult:  # type: ignore[no-redef]  # NeMo's, when installed, above
        """What a workflow returns: its name, the tasks of each pipeline, and metadata.

        Example:
            >>> r = WorkflowRunResult(workflow_name="exact_deduplication")
            >>> r.add_metadata("num_duplicates", 3); r.get_metadata("num_duplicates")
            3
        """

        workflow_name: str
        pipeline_tasks: dict[str, list[Any]] = field(default_factory=dict)
        metadata: dict[str, Any] = field(default_factory=dict)

        def add_pipeline_tasks(self, pipeline_name: str, tasks: list[Any] | None) -> None:
            """Record the tasks a pipeline returned (an empty list for ``None``)."""
            self.pipeline_tasks[pipeline_name] = list(tasks or [])

        def extend_metadata(self, updates: dict[str, Any] | None = None) -> None:
            """Update the metadata in place."""
            if updates:
                self.metadata.update(updates)

        def add_metadata(self, key: str, value: Any) -> None:
            """Set one metadata key."""
            self.metadata[key] = value

        def get_metadata(self, key: str) -> Any:
            """One metadata value, or ``None``."""
            return self.metadata.get(key)

__all__ = ["WorkflowBase", "WorkflowRunResult"]
