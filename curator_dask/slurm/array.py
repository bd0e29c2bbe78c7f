"""SLURM array configuration and source sharding, exactly as NeMo Curator 1.4.

See ``docs/design/contract.md §5.1-5.6``. The configuration is read once, on the driver, and
passed explicitly to where it is used: nothing here is re-read from a worker's environment
(NeMo Curator silently processes every source when the variables reach only the driver). This
module imports neither Dask nor LMDB.
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from curator_dask.tasks import Task

logger = logging.getLogger(__name__)

ENABLED_ENV = "NEMO_CURATOR_SLURM_ARRAY_ENABLED"
SHARD_INDEX_ENV = "NEMO_CURATOR_SLURM_ARRAY_SHARD_INDEX"
TOTAL_SHARDS_ENV = "NEMO_CURATOR_SLURM_ARRAY_TOTAL_SHARDS"
MINIMUM_SHARD_INDEX_ENV = "NEMO_CURATOR_SLURM_ARRAY_MINIMUM_SHARD_INDEX"
_TRUE_ENV_VALUES = {"1", "true", "yes", "on"}
_FALSE_ENV_VALUES = {"0", "false", "no", "off"}


def _read_int(env: Mapping[str, str], var: str, fallback: str | None,
              default: int | None = None) -> int:
    value, resolved = env.get(var), var
    if value is None and fallback is not None:
        value, resolved = env.get(fallback), fallback
    if value is None:
        if default is not None:
            return default
        if fallback is not None:
            msg = f"Environment variable {var} (or {fallback}) is not set"
        else:
            msg = f"Environment variable {var} is not set"
        raise ValueError(msg)
    try:
        return int(value)
    except ValueError:
        msg = f"Environment variable {resolved} must contain an integer, got {value!r}"
        raise ValueError(msg) from None


@dataclass(frozen=True)
class SlurmArrayConfig:
    """Which logical shard this array task processes.

    Example:
        >>> SlurmArrayConfig.from_env({"SLURM_ARRAY_TASK_ID": "7", "SLURM_ARRAY_TASK_COUNT": "11"})
        SlurmArrayConfig(shard_index=7, total_shards=11, minimum_shard_index=0)
    """

    shard_index: int
    total_shards: int
    minimum_shard_index: int = 0

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> SlurmArrayConfig | None:
        """Read the ``NEMO_CURATOR_SLURM_ARRAY_*`` variables (SLURM's as fallbacks).

        ``None`` when filtering is off: explicitly disabled, or no array variable present.
        Inside any SLURM array task it is on by default.
        """
        env = os.environ if environ is None else environ
        enabled = env.get(ENABLED_ENV, "1").strip().lower()
        if enabled in _FALSE_ENV_VALUES:
            return None
        if enabled not in _TRUE_ENV_VALUES:
            allowed = sorted(_TRUE_ENV_VALUES | _FALSE_ENV_VALUES)
            msg = f"Environment variable {ENABLED_ENV} must be one of {allowed}, got {enabled!r}"
            raise ValueError(msg)
        explicitly_configured = ENABLED_ENV in env
        has_shard_index = SHARD_INDEX_ENV in env or "SLURM_ARRAY_TASK_ID" in env
        has_total_shards = TOTAL_SHARDS_ENV in env or "SLURM_ARRAY_TASK_COUNT" in env
        if not (explicitly_configured or has_shard_index or has_total_shards):
            return None
        return cls(
            shard_index=_read_int(env, SHARD_INDEX_ENV, "SLURM_ARRAY_TASK_ID"),
            total_shards=_read_int(env, TOTAL_SHARDS_ENV, "SLURM_ARRAY_TASK_COUNT"),
            minimum_shard_index=_read_int(env, MINIMUM_SHARD_INDEX_ENV, None, default=0),
        )

    @property
    def maximum_shard_index(self) -> int:
        return self.minimum_shard_index + self.total_shards - 1

    def validate(self) -> SlurmArrayConfig:
        """Raise for impossible values; warn (only) for a shard outside the range."""
        self.check_values()
        if not self.minimum_shard_index <= self.shard_index <= self.maximum_shard_index:
            logger.warning(
                "shard_index=%s is outside the assignable shard range [%s, %s]. This task will "
                "not receive any source tasks.",
                self.shard_index, self.minimum_shard_index, self.maximum_shard_index,
            )
        return self

    def check_values(self) -> SlurmArrayConfig:
        """Raise ``ValueError`` for a non-positive total or a negative index.

        The checks and messages of ``docs/design/contract.md §5.3``.
        """
        if self.total_shards <= 0:
            msg = f"total_shards must be greater than 0, got {self.total_shards}"
            raise ValueError(msg)
        if self.minimum_shard_index < 0:
            msg = f"minimum_shard_index must be non-negative, got {self.minimum_shard_index}"
            raise ValueError(msg)
        if self.shard_index < 0:
            msg = f"shard_index must be non-negative, got {self.shard_index}"
            raise ValueError(msg)
        return self


def shard_for_task(task_id: str, total_shards: int, minimum_shard_index: int = 0) -> int:
    """``int(sha256(task_id)[:16], 16) % total_shards + minimum_shard_index``.

    Example:
        >>> shard_for_task("0_5ca81c9e2d3b", 4)
        3
    """
    digest = hashlib.sha256(task_id.encode("utf-8")).hexdigest()
    return int(digest[:16], 16) % total_shards + minimum_shard_index


def filter_slurm_array_source_tasks(
    tasks: Sequence[Task], config: SlurmArrayConfig | None, stage_name: str
) -> list[Task]:
    """Keep the source tasks of this shard, in order (``docs/design/contract.md §5.4``)."""
    if config is None:
        return list(tasks)
    ambiguous = [t.task_id for t in tasks if t.task_id.startswith("r")]
    if ambiguous:
        msg = (
            "Slurm array source filtering requires deterministic task IDs, but stage "
            f"{stage_name} emitted ambiguous source task IDs: {ambiguous[:5]}"
        )
        raise ValueError(msg)
    kept = [
        t for t in tasks
        if shard_for_task(t.task_id, config.total_shards, config.minimum_shard_index)
        == config.shard_index
    ]
    level = logging.WARNING if not kept and tasks else logging.INFO
    logger.log(
        level, "Slurm array shard %s/%s: assigned %s of %s source tasks for stage %s",
        config.shard_index, config.total_shards, len(kept), len(tasks), stage_name,
    )
    return kept


def is_slurm_array_driver_process(environ: Mapping[str, str] | None = None) -> bool:
    """Only node 0 of a multi-node array task writes manifests (a string comparison)."""
    env = os.environ if environ is None else environ
    return env.get("SLURM_NODEID", "0") == "0"
