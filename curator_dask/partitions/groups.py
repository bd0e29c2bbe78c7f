"""Whole-file groups: refuse a run that groups completed input files differently.

A source id hashes the paths of its partition's files (``docs/design/contract.md §1.4``), so
another ``files_per_partition``, ``blocksize`` or file list (a changed glob, a file added in
the middle of the sorted list with more than one file per partition) gives the same files new
source ids. The checkpoint does not know them, the files are processed again, and every
document of theirs is written twice (the old output files are kept, the new ones have other
names).

Each checkpointed run with file-group sources therefore records, next to the completion
store, how its source stage grouped which files:
``<checkpoint>/.curator_dask/partitioning.json`` (``GroupsRecord``, ``partitions/record.py``;
row-range partitions have a record of their own, checked by ``partitions/resume.py``).

``groups`` leaves out the partitions of one file whose source id is the hash of that file
(``get_deterministic_hash([path])``, a ``FileGroupTask``'s own id): with one file per
partition, the default, that is every partition, and a record of 10^6 files would otherwise
be ~100 MB. A file that ``groups`` does not name is taken to have been such a partition, so
its old source id is known without the record. The next run refuses
(``PartitioningChangedError``, before anything is processed) when a file that belonged to a
**completed** partition now belongs to another partition that is not complete: a file named
in ``groups`` under another id, or a file of a new partition of several files whose
single-file id is complete. Added files that form partitions of their own (always the case
with one file per partition), removed files, and changed parameters that keep every completed
group intact are accepted. A checkpoint without the record (an older one, or one NeMo Curator
wrote) is accepted and the record is written, as is one that cannot be read (a warning).
Groups of files missing from a run are kept in the record, so a file that comes back is still
checked. A version 1 record (every group listed) is read the same way and rewritten compact.
NeMo Curator reads only ``*.mdb`` files in ``.nemo_curator_metadata``, so the record does not
affect interchange.
"""

from __future__ import annotations

import heapq
import itertools
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from curator_dask.errors import PartitioningChangedError
from curator_dask.partitions.record import GroupsRecord, source_parameters

GROUPING_OPTIONS = ("files_per_partition", "blocksize", "file_paths", "file_extensions")
_SHOWN = 3
BLOCK = 4096  # sources compared at a time when they come as an iterator


@dataclass(frozen=True)
class Regrouped:
    """One input file of a completed partition that this run puts in another partition."""

    path: str
    old: str
    old_files: int
    new: str
    new_files: int


def file_groups(sources: Sequence[Any]) -> dict[str, list[str]]:
    """``{source id: files}`` of the sources that are file groups (either model's). Row-range
    partitions are not: several share a file, and ``partitioning_info.json`` checks them
    (``curator_dask/partitions/resume.py``)."""
    from curator_dask.classes import class_named

    return {t.get_source_id(): [str(p) for p in t.data] for t in sources
            if class_named(t, "FileGroupTask") and not class_named(t, "RowRangeTask")
            and isinstance(t.data, list)}


def single_file_id(path: str) -> str:
    """The source id of a partition of ``path`` alone (docs/design/contract.md §1.4, §1.5).

    Example:
        >>> single_file_id("/data/in/a.jsonl")
        '1f82e4a37355'
    """
    from curator_dask.lineage import get_deterministic_hash

    return get_deterministic_hash([path])


def _own_id_types(sources: Sequence[Any], groups: dict[str, list[str]],
                  decided: tuple[set[type], set[type]] | None = None) -> set[type]:
    """The task classes whose single-file partitions have the file's own hash as their source
    id: ``FileGroupTask``'s ``get_deterministic_id`` (either model), checked on one task.
    ``decided``: ``(found, rejected)`` of earlier blocks of the same run, updated here."""
    found, rejected = decided if decided is not None else (set(), set())
    for task in sources:
        kind = type(task)
        if kind in found or kind in rejected or not isinstance(task.data, list) or len(
                task.data) != 1:
            continue
        method = getattr(kind, "get_deterministic_id", None)
        sid = task.get_source_id()
        own = (getattr(method, "__qualname__", "") == "FileGroupTask.get_deterministic_id"
               and sid in groups and sid == single_file_id(str(task.data[0])))
        (found if own else rejected).add(kind)
    return found


def compact_groups(sources: Sequence[Any], groups: dict[str, list[str]],
                   decided: tuple[set[type], set[type]] | None = None) -> dict[str, list[str]]:
    """``groups`` less the single-file partitions whose id is their file's own hash
    (``decided``: as :func:`_own_id_types`)."""
    own = _own_id_types(sources, groups, decided)
    kept = (t.get_source_id() for t in sources if not (type(t) in own and len(t.data) == 1))
    return {sid: groups[sid] for sid in kept if sid in groups}


def owners(groups: dict[str, list[str]]) -> dict[str, str]:
    """``{file: source id}`` of ``groups``."""
    return {path: sid for sid, files in groups.items() for path in files}


def find_regrouped(old: dict[str, list[str]], new: dict[str, list[str]],
                   completed: Any, *, implied: bool = False,
                   before: dict[str, str] | None = None) -> list[Regrouped]:
    """Files of completed ``old`` partitions that ``new`` puts in a partition not complete.

    ``completed(ids)`` answers which of ``ids`` the checkpoint marks complete; it is called
    once, and only when some file changed partition. With ``implied`` (``old`` is a record
    that leaves out single-file partitions), a file of a new partition of several files that
    ``old`` does not name was in the partition :func:`single_file_id` names, if any.
    ``before``: ``owners(old)``, when the caller has it (one block of many).

    Example:
        >>> old = {"A": ["a"], "B": ["b"]}
        >>> new = {"AB": ["a", "b"]}
        >>> [r.path for r in find_regrouped(old, new, lambda ids: {"A"})]
        ['a']
        >>> find_regrouped(old, {"A": ["a"], "B": ["b"], "C": ["c"]}, lambda ids: {"A", "B"})
        []
    """
    before = owners(old) if before is None else before
    moved = [(path, before[path], sid) for sid, files in new.items() for path in files
             if path in before and before[path] != sid]
    if implied:
        moved += [(path, single_file_id(path), sid) for sid, files in new.items()
                  if len(files) > 1 for path in files if path not in before]
    if not moved:
        return []
    done = set(completed(sorted({o for _, o, _ in moved} | {n for _, _, n in moved})))
    return [Regrouped(path, o, len(old.get(o, [path])), n, len(new[n])) for path, o, n in moved
            if o in done and n not in done]


def merged_groups(old: dict[str, list[str]], new: dict[str, list[str]],
                  seen: set[str] | None = None) -> dict[str, list[str]]:
    """``new``, plus the groups of ``old`` for the files this run did not see (``seen``, by
    default the files of ``new``), less single-file groups named by their file's own hash."""
    seen = set(owners(new)) if seen is None else seen
    merged = {sid: list(files) for sid, files in new.items()}
    for sid, files in old.items():
        rest = [p for p in files if p not in seen]
        if rest and sid not in merged and not (
                len(files) == 1 and len(rest) == 1 and sid == single_file_id(rest[0])):
            merged[sid] = rest
    return merged


def check_partitioning(source_stage: Any, sources: Iterable[Any], completed: Any,
                       checkpoint_url: str, storage_options: dict | None = None) -> None:
    """Refuse a run that regroups files of completed partitions; record its partitioning.

    ``sources`` are every source of the run (before an array shard's filter, so that each
    shard writes the same record): a list, taken as one block, or an iterator, taken a block
    at a time (:class:`PartitioningCheck`); ``completed(ids)`` is the checkpoint's completed
    lookup. Sources that are not file groups are not checked and leave no record.
    """
    check = PartitioningCheck(source_stage, completed, checkpoint_url, storage_options)
    if isinstance(sources, Sequence):
        check.add(sources)
    else:
        iterator = iter(sources)
        while block := list(itertools.islice(iterator, BLOCK)):
            check.add(block)
    check.finish()


class PartitioningCheck:
    """:func:`check_partitioning` over the run's sources given a block at a time: ``add``
    each block, then ``finish`` refuses (``PartitioningChangedError``) or writes the record.

    It keeps what the record needs, not the sources: the old record's files, the groups the
    new record will name (none with one file per partition), counts and three example
    paths. So a lazy source stage's file groups are compared as they are made, before the
    first is sent, without holding 10^6 tasks (``backends/dask/source_feed.py``). Files and
    partitions are counted per block: a file in groups of two blocks counts twice (a source
    stage that lists a file twice; ``FilePartitioningStage`` does not).

    Example:
        >>> import tempfile
        >>> from curator_dask.stages.file_partitioning import FilePartitioningStage
        >>> from curator_dask.tasks import FileGroupTask
        >>> tasks = [FileGroupTask(dataset_name="d", data=[f"/in/{n}.jsonl"]) for n in "ab"]
        >>> for t in tasks:
        ...     t.task_id = f"0_{t.get_deterministic_id()}"
        >>> check = PartitioningCheck(FilePartitioningStage("/in/"), lambda ids: set(),
        ...                           tempfile.mkdtemp())
        >>> check.add(tasks[:1]), check.add(tasks[1:]), check.finish()
        (None, None, None)
        >>> check.record.read()["files"], check.record.read()["groups"]
        (2, {})
    """

    def __init__(self, source_stage: Any, completed: Any, checkpoint_url: str,
                 storage_options: dict | None = None) -> None:
        self.record = GroupsRecord(checkpoint_url, storage_options)
        self.checkpoint_url, self.completed = checkpoint_url, completed
        self.old = self.record.read()
        self.old_groups: dict[str, list[str]] = self.old["groups"] if self.old else {}
        self.before = owners(self.old_groups)
        self.params = source_parameters(source_stage)
        self.regrouped: list[Regrouped] = []
        self.groups: dict[str, list[str]] = {}  # for the record: compact
        self.seen_before: set[str] = set()  # files of the old record this run has
        self.files = self.partitions = self.added = 0
        self.added_shown: list[str] = []  # the first added paths, in order
        self.any = False
        self._decided: tuple[set[type], set[type]] = (set(), set())

    def add(self, sources: Sequence[Any]) -> None:
        """Compare one block of the run's sources with the record."""
        groups = file_groups(sources)
        if not groups:
            return
        self.any = True
        regrouped = find_regrouped(self.old_groups, groups, self.completed,
                                   implied=self.old is not None, before=self.before)
        self.regrouped += regrouped
        files = owners(groups)
        self.files += len(files)
        self.partitions += len(groups)
        self.seen_before.update(p for p in files if p in self.before)
        moved = {r.path for r in regrouped}
        added = [p for p in files if p not in self.before and p not in moved]
        self.added += len(added)
        self.added_shown = heapq.nsmallest(_SHOWN, [*self.added_shown, *added])
        if not self.regrouped:  # the record is not written otherwise
            self.groups.update(compact_groups(sources, groups, self._decided))

    def finish(self) -> None:
        """Refuse the run, or write the record (when it changed)."""
        if not self.any:
            return
        if self.regrouped:
            raise PartitioningChangedError(describe(
                self.old or {}, self.params, self.regrouped, self.checkpoint_url,
                added=(self.added, self.added_shown),
                missing=len(self.before) - len(self.seen_before)))
        merged = merged_groups(self.old_groups, self.groups, self.seen_before)
        new = {"version": GroupsRecord.version, "parameters": self.params,
               "files": self.files, "partitions": self.partitions, "groups": merged}
        if self.old is not None and all(self.old.get(k) == v for k, v in new.items()):
            return
        self.record.write({**new, "written": time.time()})


def _changed_parameters(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    return [name for name in ("type", "stage", *GROUPING_OPTIONS)
            if name in old and old.get(name) != new.get(name)]


def _files(n: int) -> str:
    return f"{n} file{'' if n == 1 else 's'}"


def _examples(paths: Sequence[str], n: int) -> str:
    """The first of ``paths`` (sorted), and how many more of ``n``."""
    more = f" and {n - _SHOWN} more" if n > _SHOWN else ""
    return ", ".join(paths[:_SHOWN]) + more


def describe(old: dict[str, Any], params: dict[str, Any], regrouped: list[Regrouped],
             checkpoint_url: str, *, added: tuple[int, Sequence[str]], missing: int) -> str:
    """The refusal: what changed (old and new values), which files, and the two fixes.
    ``added``: how many files the record does not name (not regrouped ones) and the first
    of them in order; ``missing``: how many files of the record this run does not have."""
    old_params = old.get("parameters") or {}
    changed = _changed_parameters(old_params, params)
    options = [n for n in changed if n in GROUPING_OPTIONS]
    what = [", ".join(f"{n} was {old_params.get(n)!r}, now {params.get(n)!r}"
                      for n in changed)] if changed else []
    fixes = [f"run with {', '.join(f'{n}={old_params.get(n)!r}' for n in options)} again, as "
             "the checkpoint was made"] if options else []
    count, shown = added
    if count or missing or not options:
        what.append(f"the input file list changed ({_files(count)} added"
                    + (f": {_examples(shown, count)}" if count else "")
                    + f"; {_files(missing)} of the record not in this run's input)")
        fixes.append("restore the input file list the checkpoint was made with (and process "
                     "new files with a checkpoint and output folder of their own)")
    first = regrouped[0]
    return (
        f"the input is partitioned differently from the runs recorded in checkpoint "
        f"{checkpoint_url}: {'; '.join(what)}. {len(regrouped)} input files of completed "
        f"partitions now fall into other partitions (e.g. {first.path}: was in completed "
        f"partition {first.old} of {_files(first.old_files)}, now in {first.new} of "
        f"{_files(first.new_files)}), so they would be processed again and their output "
        f"written twice. Nothing was processed. Either {' or '.join(fixes)}, or use a new "
        "checkpoint path and a new output folder."
    )
