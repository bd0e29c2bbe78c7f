"""Retry plans: which array shards wrote no completion manifest, and how to resubmit them.

Byte-for-byte NeMo Curator 1.4 (``docs/design/contract.md §5.11-5.13``): the same checks and
error messages, the same windows below ``MaxArraySize`` and the same ``--array`` expressions.
Pure (no Dask, no LMDB).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass

from curator_dask.resumability.layout import SLURM_ARRAY_COMPLETION_DIRNAME
from curator_dask.slurm.completion import (
    SLURM_ARRAY_COMPLETION_MANIFEST_NAMESPACE,
    read_completion_manifests,
)
from curator_dask.slurm.run_config import read_run_config, run_config_path


@dataclass(frozen=True)
class SlurmArrayRetryPlan:
    """The logical shards still to run, with the original run's shard range."""

    shard_indices: tuple[int, ...]
    total_shards: int
    minimum_shard_index: int


@dataclass(frozen=True)
class SlurmArrayRetrySubmission:
    """One ``sbatch --array`` window: indices relative to ``shard_index_offset``."""

    array_indices: tuple[int, ...]
    shard_index_offset: int


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def find_slurm_array_retries(checkpoint_path: str | os.PathLike) -> SlurmArrayRetryPlan | None:
    """The shards without a completion manifest, or ``None`` when there is no ``run.json``."""
    records = read_completion_manifests(
        checkpoint_path, namespace=SLURM_ARRAY_COMPLETION_MANIFEST_NAMESPACE,
        completion_dirname=SLURM_ARRAY_COMPLETION_DIRNAME,
    )
    path = run_config_path(checkpoint_path)
    if not path.exists():
        if records:
            msg = "Slurm array completion manifests exist without run.json"
            raise ValueError(msg)
        return None
    config = read_run_config(path)
    for field_name in ("total_shards", "minimum_shard_index"):
        if not _is_int(config.get(field_name)):
            msg = f"Slurm array manifest {path} must contain an integer {field_name}"
            raise TypeError(msg)
    total, minimum = config["total_shards"], config["minimum_shard_index"]
    if total <= 0:
        msg = f"Slurm array run configuration must have total_shards greater than 0, got {total}"
        raise ValueError(msg)
    if minimum < 0:
        msg = ("Slurm array run configuration must have a non-negative minimum_shard_index, "
               f"got {minimum}")
        raise ValueError(msg)
    completed = set()
    for record in records:
        p = record.payload
        if not (_is_int(p.get("total_shards")) and _is_int(p.get("minimum_shard_index"))
                and p["total_shards"] == total and p["minimum_shard_index"] == minimum
                and _is_int(p.get("shard_index"))):
            msg = (f"Slurm array completion manifest {record.path} does not match the run "
                   "configuration")
            raise ValueError(msg)
        completed.add(p["shard_index"])
    maximum = minimum + total - 1
    outside = sorted(i for i in completed if not minimum <= i <= maximum)
    if outside:
        msg = (f"Completed Slurm array shard indices {outside} are outside the original shard "
               f"range [{minimum}, {maximum}]")
        raise ValueError(msg)
    expected = set(range(minimum, maximum + 1))
    return SlurmArrayRetryPlan(shard_indices=tuple(sorted(expected - completed)),
                               total_shards=total, minimum_shard_index=minimum)


def build_slurm_array_retry_submissions(
    plan: SlurmArrayRetryPlan, max_array_size: int | None = None
) -> tuple[SlurmArrayRetrySubmission, ...]:
    """Split a plan into ``sbatch --array`` submissions below ``max_array_size`` (§5.12).

    Example:
        >>> plan = SlurmArrayRetryPlan((1, 1005), total_shards=2000, minimum_shard_index=0)
        >>> [(s.array_indices, s.shard_index_offset)
        ...  for s in build_slurm_array_retry_submissions(plan, 1000)]
        [((1,), 0), ((5,), 1000)]
    """
    if max_array_size is not None:
        if not _is_int(max_array_size):
            msg = "max_array_size must be an integer"
            raise TypeError(msg)
        if max_array_size <= 0:
            msg = "max_array_size must be greater than 0"
            raise ValueError(msg)
    if any(i < 0 for i in plan.shard_indices):
        msg = "Slurm array shard indices must be non-negative"
        raise ValueError(msg)
    if not plan.shard_indices:
        return ()
    if max_array_size is None:
        return (SlurmArrayRetrySubmission(array_indices=tuple(plan.shard_indices),
                                          shard_index_offset=0),)
    groups: dict[int, list[int]] = {}
    for index in plan.shard_indices:
        offset = index // max_array_size * max_array_size
        groups.setdefault(offset, []).append(index - offset)
    return tuple(SlurmArrayRetrySubmission(array_indices=tuple(groups[o]), shard_index_offset=o)
                 for o in sorted(groups))


def format_slurm_array_indices(indices: Iterable[int]) -> str:
    """``[1, 2, 5, 6, 7, 99]`` → ``"1-2,5-7,99"`` (sorted, deduplicated).

    Example:
        >>> format_slurm_array_indices([99, 5, 1, 2, 6, 7, 5])
        '1-2,5-7,99'
    """
    values = list(indices)
    if any(not _is_int(v) for v in values):
        msg = "Slurm array indices must be integers"
        raise TypeError(msg)
    if any(v < 0 for v in values):
        msg = "Slurm array indices must be non-negative integers"
        raise ValueError(msg)
    parts: list[str] = []
    ordered = sorted(set(values))
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        parts.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ",".join(parts)
