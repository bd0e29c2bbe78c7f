"""Whole-corpus deduplication on CPU Dask: NeMo Curator's exact and fuzzy workflows, its id
generator and its removal workflow, without a GPU or Ray (docs/deduplication.md).

Names are imported on first use, so ``import curator_dask.dedup`` does no work.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "CURATOR_DEDUP_ID_STR": "curator_dask.dedup.id_generator",
    "IdGeneratorBase": "curator_dask.dedup.id_generator",
    "create_id_generator_actor": "curator_dask.dedup.id_generator",
    "write_id_generator_to_disk": "curator_dask.dedup.id_generator",
    "kill_id_generator_actor": "curator_dask.dedup.id_generator",
    "ExactDeduplicationWorkflow": "curator_dask.dedup.exact",
    "FuzzyDeduplicationWorkflow": "curator_dask.dedup.fuzzy.workflow",
    "TextDuplicatesRemovalWorkflow": "curator_dask.dedup.removal",
    "TextDuplicatesRemovalStage": "curator_dask.dedup.removal",
    "WorkflowRunResult": "curator_dask.dedup.result",
    "normalize_text": "curator_dask.dedup.text",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        msg = f"module 'curator_dask.dedup' has no attribute {name!r}"
        raise AttributeError(msg)
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
