"""The records of stage checkpoints that travel between the driver and the workers.

- :class:`Boundary`: a fusion group's checkpointed last stage (what the worker saves under);
  :class:`~.on_worker.CheckpointRuntime` holds one per group that has one.
- :class:`Candidate`: an entry a source may resume from, made by
  :meth:`~.planner.CheckpointPlanner.candidates` and handed to the first group's Dask task.
- :class:`CheckpointRecord`: what a chain's ``GroupResult`` carries for stage checkpoints from
  group to group: per source, the completion deltas emitted so far (stored with each
  checkpoint) and the input digest, plus the chain's :class:`CheckpointTotals`.
- :class:`CheckpointTotals` and :class:`SavedTotals`: entries saved and loaded per boundary
  stage, and the fallbacks and failed saves as warned; the driver sums those of every chain
  (``EventStream``) into ``RunResult.stage_checkpoints``.

Pure: no Dask, no store.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

Delta = tuple[str, str, int]  # (task id, source id, delta): resumability/counters.py


class Boundary(NamedTuple):
    """A fusion group's last stage, when it is checkpointed: where the group saves."""

    stage: int  # index of the stage in the run's stages
    fingerprint: str  # of the stage chain up to and including it (store.chain_fingerprint)
    stage_name: str


class Candidate(NamedTuple):
    """An entry one source may resume from. Sorted as a tuple, the deepest comes last.

    Example:
        >>> sorted([Candidate(1, 2, "f", "s--002-f"), Candidate(2, 4, "g", "s--004-g")],
        ...        reverse=True)[0].stage
        4
    """

    group: int  # the fusion group whose boundary made it; its tasks go to the next group
    stage: int
    fingerprint: str
    entry: str  # the entry's name in the store


@dataclass
class SavedTotals:
    """The entries saved at one boundary stage, their bytes and the time the saves took.

    Example:
        >>> total = SavedTotals()
        >>> total.add(SavedTotals(1, 2048, 0.25)).add(SavedTotals(1, 1024, 0.25))
        SavedTotals(entries=2, bytes=3072, seconds=0.5)
    """

    entries: int = 0
    bytes: int = 0
    seconds: float = 0.0

    def add(self, other: SavedTotals) -> SavedTotals:
        self.entries += other.entries
        self.bytes += other.bytes
        self.seconds += other.seconds
        return self


@dataclass
class CheckpointTotals:
    """Saves and loads per boundary stage (its index), and the notes: each unusable entry a
    source fell back from and each save that failed, as logged.

    Example:
        >>> chain = CheckpointTotals()
        >>> chain.saved_one(2, size=4096, seconds=0.5)
        >>> chain.loaded_one(2)
        >>> run = CheckpointTotals()
        >>> run.merge(chain)
        >>> run.summary(["reader", "split", "filter"])
        {'saved': {'filter': {'count': 1, 'bytes': 4096, 'seconds': 0.5}}, \
'loaded': {'filter': 1}, 'fallbacks': 0}
    """

    saved: dict[int, SavedTotals] = field(default_factory=dict)
    loaded: dict[int, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def saved_one(self, stage: int, *, size: int, seconds: float) -> None:
        self.saved.setdefault(stage, SavedTotals()).add(SavedTotals(1, size, seconds))

    def loaded_one(self, stage: int) -> None:
        self.loaded[stage] = self.loaded.get(stage, 0) + 1

    def merge(self, other: CheckpointTotals) -> None:
        """Add ``other``'s saves, loads and notes to these."""
        for stage, saved in other.saved.items():
            self.saved.setdefault(stage, SavedTotals()).add(saved)
        for stage, n in other.loaded.items():
            self.loaded[stage] = self.loaded.get(stage, 0) + n
        self.notes.extend(other.notes)

    def copy(self) -> CheckpointTotals:
        return CheckpointTotals(
            {k: SavedTotals(v.entries, v.bytes, v.seconds) for k, v in self.saved.items()},
            dict(self.loaded), list(self.notes))

    def summary(self, names: Sequence[str]) -> dict[str, Any]:
        """``RunResult.stage_checkpoints``: saves and loads by stage name, fallbacks counted."""
        return {
            "saved": {names[i]: {"count": s.entries, "bytes": s.bytes,
                                 "seconds": round(s.seconds, 3)}
                      for i, s in sorted(self.saved.items())},
            "loaded": {names[i]: n for i, n in sorted(self.loaded.items())},
            "fallbacks": len(self.notes),
        }


@dataclass
class CheckpointRecord:
    """What a chain of fusion groups carries for stage checkpoints (``GroupResult.checkpoint``).

    Attributes:
        history: per source id, every completion delta its chain emitted so far (a restored
            entry's stored deltas first); saved with each checkpoint of the source.
        inputs: per source id, the digest of its input files (``source_input_digest``), taken
            by the first group: an entry saved from other inputs is not used.
        totals: the chain's saves, loads and notes.

    Each group works on a :meth:`copy` of the record it received: the one it received may
    still be in the worker's memory, as the previous group's result.
    """

    history: dict[str, list[Delta]] = field(default_factory=dict)
    inputs: dict[str, str | None] = field(default_factory=dict)
    totals: CheckpointTotals = field(default_factory=CheckpointTotals)

    def copy(self) -> CheckpointRecord:
        return CheckpointRecord(dict(self.history), dict(self.inputs), self.totals.copy())

    def add_history(self, source_id: str, deltas: Sequence[Delta]) -> list[Delta]:
        """Append ``deltas`` to the source's history (a new list); returns the history."""
        history = self.history[source_id] = [*self.history.get(source_id, ()), *deltas]
        return history
