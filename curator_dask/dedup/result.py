"""The result of a workflow run and the workflows' base class: NeMo Curator's
``WorkflowRunResult`` and ``WorkflowBase`` in a process that uses NeMo Curator (so ``isinstance``
checks of NeMo users hold), else classes with the same fields and methods.

NeMo's classes live in ``nemo_curator.pipeline.workflow``, whose package loads NeMo's pipeline
and Ray's Python package: about 1.5 s, a tenth of a 1,000,000-document exact run. So they are
not imported for a process that has not loaded NeMo Curator itself: a run's result
(:func:`new_result`) is NeMo's class once any ``nemo_curator`` module is loaded, and then
curator_dask's workflows are registered as (virtual) subclasses of NeMo's ``WorkflowBase``.
"""

from __future__ import annotations

import sys
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

NEMO_WORKFLOW_MODULE = "nemo_curator.pipeline.workflow"


class WorkflowBase(ABC):
    """A workflow: several pipeline runs behind one ``run`` (NeMo's ``WorkflowBase``; an
    instance is one of NeMo's too in a process that uses NeMo Curator)."""

    @abstractmethod
    def run(self, *args: Any, **kwargs: Any) -> WorkflowRunResult: ...


@dataclass
class WorkflowRunResult:
    """What a workflow returns: its name, the tasks of each pipeline, and metadata (NeMo's
    ``WorkflowRunResult``, whose class :func:`new_result` uses when NeMo Curator is loaded).

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


def nemo_workflow_module() -> Any:
    """NeMo's workflow module when this process uses NeMo Curator (any ``nemo_curator``
    module loaded), imported then; ``None`` otherwise, or without NeMo Curator."""
    if "nemo_curator" not in sys.modules:
        return None
    try:
        import importlib

        module = importlib.import_module(NEMO_WORKFLOW_MODULE)
    except ImportError:
        return None
    base = getattr(module, "WorkflowBase", None)
    if isinstance(base, type) and hasattr(base, "register") and not issubclass(
            WorkflowBase, base):
        base.register(WorkflowBase)  # isinstance(<our workflow>, NeMo's WorkflowBase)
    return module


def new_result(workflow_name: str) -> Any:
    """The result of a run named ``workflow_name``: NeMo's ``WorkflowRunResult`` in a process
    that uses NeMo Curator, else :class:`WorkflowRunResult`.

    Example:
        >>> new_result("fuzzy_deduplication").workflow_name
        'fuzzy_deduplication'
    """
    module = nemo_workflow_module()
    cls = WorkflowRunResult if module is None else module.WorkflowRunResult
    return cls(workflow_name=workflow_name)


nemo_workflow_module()  # a NeMo user's process: the workflows are NeMo's at once

__all__ = ["WorkflowBase", "WorkflowRunResult", "new_result"]
