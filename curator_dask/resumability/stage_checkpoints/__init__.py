"""Stage checkpoints: a chosen stage boundary memoizes each source's outputs.

See ``docs/design/architecture.md``. A checkpointed boundary ends a fusion group. When the group
finishes a source, the outputs it produced for that source are stored under ``(source id,
fingerprint of the stage chain up to the boundary)`` (:mod:`.store`). A source that is replayed
later resumes from its deepest checkpoint that still verifies; a checkpoint that does not
(missing manifest, truncated file, changed stage or input) is skipped with a warning and the
next shallower one, or the source itself, is used (:mod:`.planner` on the driver,
:mod:`.on_worker` on the workers, with the records of :mod:`.records`). No stage is ever skipped:
the completion deltas stored with a checkpoint are replayed, so task ids and completion counts
are identical with and without checkpoints. Which boundaries are checkpointed, in which format
and for how long is :class:`StageCheckpoints` (:mod:`.strategy`); how one table is stored
(Arrow IPC, Parquet or JSON Lines, compressed or not) is :mod:`.formats`.
"""

from __future__ import annotations

from curator_dask.resumability.layout import STAGE_CHECKPOINTS_SUBDIR as SUBDIR
from curator_dask.resumability.stage_checkpoints.formats import COMPRESSIONS
from curator_dask.resumability.stage_checkpoints.on_worker import CheckpointRuntime
from curator_dask.resumability.stage_checkpoints.planner import CheckpointPlanner
from curator_dask.resumability.stage_checkpoints.records import (
    Boundary,
    Candidate,
    CheckpointRecord,
    CheckpointTotals,
    SavedTotals,
)
from curator_dask.resumability.stage_checkpoints.store import (
    FORMAT_VERSION,
    MANIFEST,
    CheckpointUnusable,
    StageCheckpointStore,
    chain_fingerprint,
    entry_name,
    parse_entry_name,
    source_input_digest,
)
from curator_dask.resumability.stage_checkpoints.strategy import (
    FORMATS,
    RETENTIONS,
    STRATEGIES,
    StageCheckpoints,
)

__all__ = [
    "COMPRESSIONS",
    "FORMATS",
    "FORMAT_VERSION",
    "MANIFEST",
    "RETENTIONS",
    "STRATEGIES",
    "SUBDIR",
    "Boundary",
    "Candidate",
    "CheckpointPlanner",
    "CheckpointRecord",
    "CheckpointRuntime",
    "CheckpointTotals",
    "CheckpointUnusable",
    "SavedTotals",
    "StageCheckpointStore",
    "StageCheckpoints",
    "chain_fingerprint",
    "entry_name",
    "parse_entry_name",
    "source_input_digest",
]
