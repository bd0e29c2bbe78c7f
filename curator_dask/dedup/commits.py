"""The deduplication phases' committed records, and the one rule by which a phase resumes.

A phase after phase 1 (each fuzzy phase, the exact workflow's ids, the removal) has a key: a
digest of its parameters and of the key of the phase before it, so a key names exactly the
inputs that made the phase's outputs. When its outputs are complete the phase writes, last, its
:class:`PhaseRecord` (a committed record, ``utils/records.py``)::

    {"kind": "dedup_phase", "version": 1, "phase": "lsh", "key": "<sha256>", "done": true,
     "counts": {...}}

The rule (:func:`run_phase`), as datatrove's completion markers:

- the record exists with this key (and this version), and the phase's outputs are there:
  the phase is **skipped**, its counts read back;
- anything else (no record, another key, an unreadable record, outputs missing): the record
  is removed, then the phase's outputs, and the phase **runs again from scratch** and
  commits. A run killed inside a phase leaves no record for it: the rerun redoes that phase
  and keeps the ones before.

A phase that is a checkpointed pipeline (the removal; phase 1 always runs its pipeline) keeps
the sources its pipeline checkpoint completed: it writes a record with ``"done": false`` when
it starts from scratch, and a rerun that finds that record with its key resumes through the
pipeline checkpoint instead of removing it (:meth:`PhaseRecord.begun`).

Records written before they named their kind (the fuzzy markers ``{"phase", "key",
"counts"}``, ``removal.json``'s ``{"key", "done", "counts"}``, the exact marker's
``{"version", "parameters", "parts"}``) are read as version 1. See docs/deduplication.md.
"""

from __future__ import annotations

import hashlib
import json
import logging
import posixpath
from collections.abc import Callable
from typing import Any, ClassVar

import fsspec

from curator_dask.utils.records import CommittedRecord, Policy

logger = logging.getLogger(__name__)

MARKER_DIR = posixpath.join(".curator_dask", "fuzzy")  # the fuzzy phases' records
Outputs = list[tuple[str, dict[str, Any]]]  # (directory or file, its fsspec options)


def phase_key(phase: str, params: dict[str, Any], upstream: str) -> str:
    """The digest a phase's record must hold: its name, parameters and upstream key.

    Example:
        >>> phase_key("lsh", {"num_bands": 20}, "x") == phase_key("lsh", {"num_bands": 20}, "x")
        True
    """
    text = json.dumps({"phase": phase, "params": params, "upstream": upstream},
                      sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def parameters_key(parameters: dict[str, Any]) -> str:
    """The digest of ``parameters`` alone (the exact workflow's ids are keyed by theirs)."""
    text = json.dumps(parameters, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


class PhaseRecord(CommittedRecord):
    """The committed record of one deduplication phase at ``url``; an unreadable one is
    redone (policy ``redo``): the phase's outputs can always be computed again.

    Example:
        >>> record = PhaseRecord("memory://doc-cache/.curator_dask/fuzzy/lsh.json", phase="lsh")
        >>> record.committed("k") is None
        True
        >>> record.commit("k", {"buckets": 3}); record.committed("k")
        {'buckets': 3}
        >>> record.committed("other") is None  # other inputs or parameters
        True
    """

    kind = "dedup_phase"
    version = 1
    on_unreadable: ClassVar[Policy] = "redo"
    what = "deduplication phase record"
    fix = "use a new cache_path and checkpoint_path"

    def __init__(self, url: str, storage_options: dict[str, Any] | None = None, *,
                 phase: str) -> None:
        super().__init__(url, storage_options)
        self.phase = phase

    def _matching(self, key: str) -> dict[str, Any] | None:
        record = self.read()
        if record is None:
            return None
        if "key" not in record and "parameters" in record:  # the exact marker before kinds
            record = {"key": parameters_key(record["parameters"]), "done": True,
                      "counts": {"parts": record.get("parts") or []}}
        if record.get("key") != key:
            logger.info("deduplication phase %s was committed with other inputs or "
                        "parameters: it is redone", self.phase)
            return None
        return record

    def committed(self, key: str) -> dict[str, Any] | None:
        """The counts of the phase if it is committed with ``key``, else ``None``."""
        record = self._matching(key)
        if record is None or not record.get("done", True):  # fuzzy markers had no "done"
            return None
        return dict(record.get("counts") or {})

    def begun(self, key: str) -> bool:
        """Whether a run with ``key`` started this (pipeline) phase and did not commit it."""
        record = self._matching(key)
        return record is not None and record.get("done") is False

    def begin(self, key: str) -> None:
        """Record that the phase started from scratch with ``key`` (a pipeline phase)."""
        self.write({"phase": self.phase, "key": key, "done": False})

    def commit(self, key: str, counts: dict[str, Any], **details: Any) -> None:
        """Write the record (atomically, last): the phase is complete."""
        self.write({**details, "phase": self.phase, "key": key, "done": True,
                    "counts": counts})


def start_over(record: PhaseRecord | None, outputs: Outputs, *, recreate: bool = True) -> None:
    """Start a phase from scratch: its record removed first (so a crash in between leaves no
    record beside partial outputs), then each output removed (and, with ``recreate``, made
    again as an empty folder)."""
    if record is not None:
        record.remove()
    for where, options in outputs:
        fs, path = fsspec.core.url_to_fs(str(where), **options)
        if fs.exists(path):
            fs.rm(path, recursive=True)
        if recreate:
            fs.makedirs(path, exist_ok=True)


def run_phase(record: PhaseRecord | None, key: str, outputs: Outputs,
              work: Callable[[], dict[str, Any]], *, resume: bool = True,
              present: Callable[[dict[str, Any]], bool] | None = None,
              details: dict[str, Any] | None = None) -> tuple[dict[str, Any], bool]:
    """The rule (module docstring): ``(counts, skipped)``.

    ``record``: ``None`` without a checkpoint (nothing is recorded, the phase always runs);
    ``resume``: whether a committed record may skip the phase (the fuzzy workflow without
    ``checkpoint_path=`` records but never skips, as NeMo redoes every phase); ``present``:
    whether the committed phase's outputs are still all there (given its counts); ``details``:
    kept in the record beside the key, for people (never compared).
    """
    if record is not None and resume:
        counts = record.committed(key)
        if counts is not None and (present is None or present(counts)):
            return counts, True
        if counts is not None:
            logger.info("deduplication phase %s: outputs of the committed phase are missing; "
                        "it is redone", record.phase)
    start_over(record, outputs)
    counts = work()
    if record is not None:
        record.commit(key, counts, **(details or {}))
    return counts, False


class PhaseCommits:
    """The fuzzy workflow's records, one per phase under ``<cache_path>/.curator_dask/fuzzy/``.

    Without ``resume`` (no ``checkpoint_path=``) every record is removed at the start and every
    phase is redone, as NeMo does.

    Example:
        >>> commits = PhaseCommits("memory://doc-cache", {}, resume=True)
        >>> commits.record("lsh").url
        'memory://doc-cache/.curator_dask/fuzzy/lsh.json'
    """

    def __init__(self, cache_path: str, storage_options: dict[str, Any], *,
                 resume: bool) -> None:
        self.cache_path = str(cache_path).rstrip("/")
        self.storage_options = dict(storage_options)
        self.resume = resume
        fs, root = fsspec.core.url_to_fs(self.cache_path, **self.storage_options)
        folder = posixpath.join(root, MARKER_DIR)
        if not resume and fs.exists(folder):
            fs.rm(folder, recursive=True)

    def record(self, phase: str) -> PhaseRecord:
        return PhaseRecord(posixpath.join(self.cache_path, MARKER_DIR, f"{phase}.json"),
                           self.storage_options, phase=phase)

    def run(self, phase: str, key: str, outputs: Outputs,
            work: Callable[[], dict[str, Any]]) -> tuple[dict[str, Any], bool]:
        """``phase`` by the rule (:func:`run_phase`): ``(counts, skipped)``."""
        return run_phase(self.record(phase), key, outputs, work, resume=self.resume)


__all__ = ["MARKER_DIR", "PhaseCommits", "PhaseRecord", "parameters_key", "phase_key",
           "run_phase", "start_over"]
