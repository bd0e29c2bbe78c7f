"""Fuzzy (MinHash + LSH) deduplication on CPU Dask: NeMo Curator 1.4's
``FuzzyDeduplicationWorkflow`` with its parameters, its cache layout and its outputs.

``minhash``: signatures (phase 1, per partition). ``lsh``: band buckets through the P2P
shuffle, buckets to edges. ``jaccard``: the optional check of candidate pairs on their texts.
``components``: connected components and the ids to remove. ``workflow``: the phases in order,
with commit markers. Importing this package does no work. See docs/deduplication.md.
"""

from __future__ import annotations

from curator_dask.utils.lazy import lazy_exports

__all__ = ["FuzzyDeduplicationWorkflow"]

__getattr__, __dir__ = lazy_exports(
    __name__, {"FuzzyDeduplicationWorkflow": "curator_dask.dedup.fuzzy.workflow"})
