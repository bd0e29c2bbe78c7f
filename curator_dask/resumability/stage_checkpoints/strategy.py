"""``StageCheckpoints``: which stage boundaries memoize their outputs, in which format and
compression, and for how long."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from curator_dask.resumability.stage_checkpoints.formats import (
    COMPRESSIONS,
    FORMATS,
    check_compression,
)

STRATEGIES = ("disabled", "every_stage", "every_n_stages", "manual")
RETENTIONS = ("cleanup_on_complete", "keep_all", "keep_failed_only", "cleanup_all")
FIELDS = ("strategy", "n", "stages", "format", "retention", "compression")

@dataclasses.dataclass(frozen=True)
class StageCheckpoints:
    """Which stage boundaries memoize their outputs, in which format, and for how long.

    Args:
        strategy: ``disabled`` (default), ``every_stage``, ``every_n_stages`` (with ``n``),
            or ``manual`` (with ``stages``: stage names).
        n: for ``every_n_stages``: checkpoint after every n-th stage after the source.
        stages: for ``manual``: names of the stages after which to checkpoint.
        format: ``arrow`` (Arrow IPC, default: fastest to write and read), ``parquet``
            (smaller on disk) or ``jsonl`` (JSON Lines, readable with any tool; the Arrow
            schema is kept in the manifest, so the table comes back with its types).
        retention: ``cleanup_on_complete`` (default: a source's checkpoints are deleted as
            soon as it completes), ``keep_failed_only`` (kept until the run ends, then deleted
            for every source that completed), ``keep_all``, or ``cleanup_all`` (as
            ``cleanup_on_complete`` while the run runs; when it ends, however it ends, every
            remaining checkpoint of its sources is deleted too).
        compression: of the data files, one the format supports: ``arrow``: ``none``
            (default), ``lz4``, ``zstd``; ``parquet``: ``snappy`` (default), ``gzip``,
            ``zstd``, ``none``; ``jsonl``: ``none`` (default), ``gzip``. ``None``: the
            format's default.

    The sink is never a boundary (its output is the result), nor is the source (it only lists
    files). Unknown values are rejected, naming the valid ones.

    Example:
        >>> StageCheckpoints("every_n_stages", n=2).strategy
        'every_n_stages'
        >>> StageCheckpoints("every_op")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: stage checkpoint strategy 'every_op' is not one of disabled, every_stage, ...
    """

    strategy: str = "disabled"
    n: int | None = None
    stages: tuple[str, ...] = ()
    format: str = "arrow"
    retention: str = "cleanup_on_complete"
    compression: str | None = None

    def __post_init__(self) -> None:
        if self.strategy not in STRATEGIES:
            msg = (f"stage checkpoint strategy {self.strategy!r} is not one of "
                   f"{', '.join(STRATEGIES)}")
            raise ValueError(msg)
        if self.retention not in RETENTIONS:
            msg = (f"stage checkpoint retention {self.retention!r} is not one of "
                   f"{', '.join(RETENTIONS)}")
            raise ValueError(msg)
        if self.format not in FORMATS:
            msg = f"stage checkpoint format {self.format!r} is not one of {', '.join(FORMATS)}"
            raise ValueError(msg)
        object.__setattr__(self, "compression", check_compression(self.format,
                                                                  self.compression))
        if self.strategy == "every_n_stages":
            if not isinstance(self.n, int) or isinstance(self.n, bool) or self.n < 1:
                msg = f"every_n_stages needs n, a whole number of at least 1 (got {self.n!r})"
                raise ValueError(msg)
        elif self.n is not None:
            msg = f"n={self.n!r} is only used with strategy every_n_stages, not {self.strategy!r}"
            raise ValueError(msg)
        object.__setattr__(self, "stages", tuple(self.stages or ()))
        if self.strategy == "manual" and not self.stages:
            msg = "the manual strategy needs stages=[...]: the stage names to checkpoint after"
            raise ValueError(msg)
        if self.strategy != "manual" and self.stages:
            msg = f"stages={list(self.stages)} is only used with strategy manual"
            raise ValueError(msg)

    @classmethod
    def coerce(cls, value: Any) -> StageCheckpoints:
        """From ``None``, a strategy name, a mapping of the fields, or an instance."""
        if value is None:
            return cls()
        if isinstance(value, cls):
            return value
        if isinstance(value, str):
            return cls(strategy=value)
        if isinstance(value, dict):
            unknown = sorted(set(value) - set(FIELDS))
            if unknown:
                msg = (f"unknown stage checkpoint settings {unknown}; known: "
                       f"{', '.join(FIELDS)}")
                raise ValueError(msg)
            return cls(**value)
        msg = (f"stage_checkpoints must be a strategy name, a dict or StageCheckpoints, "
               f"got {value!r}")
        raise TypeError(msg)

    @property
    def enabled(self) -> bool:
        return self.strategy != "disabled"

    def to_dict(self) -> dict[str, Any]:
        return {"strategy": self.strategy, "n": self.n, "stages": list(self.stages),
                "format": self.format, "compression": self.compression,
                "retention": self.retention}

    def fingerprint(self) -> dict[str, Any]:
        """What a job's strict resume compares: :meth:`to_dict`, less a compression that is
        the format's default, so that a job recorded before ``compression`` existed (with
        the same settings) still resumes."""
        settings = self.to_dict()
        if settings["compression"] == COMPRESSIONS[self.format][0]:
            del settings["compression"]
        return settings

    def boundaries(self, stages: Sequence[Any]) -> tuple[int, ...]:
        """Indices of the built ``stages`` after which outputs are checkpointed."""
        if not self.enabled:
            return ()
        source = next((i for i, s in enumerate(stages) if s.is_source_stage), 0)
        candidates = [i for i in range(source + 1, len(stages)) if not stages[i].is_sink_stage]
        if self.strategy == "every_stage":
            return tuple(candidates)
        if self.strategy == "every_n_stages" and self.n is not None:  # always set: __post_init__
            return tuple(i for i in candidates if (i - source) % self.n == 0)
        names = {s.name: i for i, s in enumerate(stages)}
        unknown = [n for n in self.stages if n not in names]
        if unknown:
            msg = (f"stage checkpoints: no stage named {unknown} in this pipeline; its stages "
                   f"are {[s.name for s in stages]}")
            raise ValueError(msg)
        chosen = sorted({names[n] for n in self.stages})
        bad = [stages[i].name for i in chosen if i not in candidates]
        if bad:
            msg = (f"stage checkpoints: {bad} cannot be checkpointed: the source stage and the "
                   "stages before it run on the driver, and the sink's output is the result "
                   "itself; choose stages in between")
            raise ValueError(msg)
        return tuple(chosen)
