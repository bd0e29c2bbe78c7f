"""Whole-corpus deduplication on CPU Dask: NeMo Curator's exact and fuzzy workflows, its id
generator and its removal workflow, without a GPU or Ray (docs/deduplication.md).

Names are imported on first use, so ``import curator_dask.dedup`` does no work.
"""

from __future__ import annotations

from curator_dask.utils.lazy import lazy_exports

_EXPORTS = {
    "CURATOR_DEDUP_ID_STR": "curator_dask.ids.generator",
    "IdGeneratorBase": "curator_dask.ids.generator",
    "create_id_generator_actor": "curator_dask.ids.generator",
    "write_id_generator_to_disk": "curator_dask.ids.generator",
    "kill_id_generator_actor": "curator_dask.ids.generator",
    "ExactDeduplicationWorkflow": "curator_dask.dedup.exact",
    "FuzzyDeduplicationWorkflow": "curator_dask.dedup.fuzzy.workflow",
    "TextDuplicatesRemovalWorkflow": "curator_dask.dedup.removal",
    "TextDuplicatesRemovalStage": "curator_dask.dedup.removal",
    "WorkflowRunResult": "curator_dask.dedup.result",
    "normalize_text": "curator_dask.dedup.text",
}

__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
