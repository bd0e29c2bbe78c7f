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

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from curator_dask.errors import PartitioningChangedError
from curator_dask.partitions.record import GroupsRecord, source_parameters

GROUPING_OPTIONS = ("files_per_partition", "blocksize", "file_paths", "file_extensions")
_SHOWN = 3


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


def _own_id_types(sources: Sequence[Any], groups: dict[str, list[str]]) -> set[type]:
    """The task classes whose single-file partitions have the file's own hash as their source
    id: ``FileGroupTask``'s ``get_deterministic_id`` (either model), checked on one task."""
    found: set[type] = set()
    rejected: set[type] = set()
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


def compact_groups(sources: Sequence[Any], groups: dict[str, list[str]]
                   ) -> dict[str, list[str]]:
    """``groups`` less the single-file partitions whose id is their file's own hash."""
    own = _own_id_types(sources, groups)
    kept = (t.get_source_id() for t in sources if not (type(t) in own and len(t.data) == 1))
    return {sid: groups[sid] for sid in kept if sid in groups}


def owners(groups: dict[str, list[str]]) -> dict[str, str]:
    """``{file: source id}`` of ``groups``."""
    return {path: sid for sid, files in groups.items() for path in files}


def find_regrouped(old: dict[str, list[str]], new: dict[str, list[str]],
                   completed: Any, *, implied: bool = False) -> list[Regrouped]:
    """Files of completed ``old`` partitions that ``new`` puts in a partition not complete.

    ``completed(ids)`` answers which of ``ids`` the checkpoint marks complete; it is called
    once, and only when some file changed partition. With ``implied`` (``old`` is a record
    that leaves out single-file partitions), a file of a new partition of several files that
    ``old`` does not name was in the partition :func:`single_file_id` names, if any.

    Example:
        >>> old = {"A": ["a"], "B": ["b"]}
        >>> new = {"AB": ["a", "b"]}
        >>> [r.path for r in find_regrouped(old, new, lambda ids: {"A"})]
        ['a']
        >>> find_regrouped(old, {"A": ["a"], "B": ["b"], "C": ["c"]}, lambda ids: {"A", "B"})
        []
    """
    before = owners(old)
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


def check_partitioning(source_stage: Any, sources: Sequence[Any], completed: Any,
                       checkpoint_url: str, storage_options: dict | None = None) -> None:
    """Refuse a run that regroups files of completed partitions; record its partitioning.

    ``sources`` are every source of the run (before an array shard's filter, so that each
    shard writes the same record); ``completed(ids)`` is the checkpoint's completed lookup.
    Sources that are not file groups are not checked and leave no record.
    """
    groups = file_groups(sources)
    if not groups:
        return
    record = GroupsRecord(checkpoint_url, storage_options)
    old = record.read()
    params = source_parameters(source_stage)
    old_groups = old["groups"] if old is not None else {}
    regrouped = find_regrouped(old_groups, groups, completed, implied=old is not None)
    if regrouped:
        raise PartitioningChangedError(
            describe(old or {}, params, groups, regrouped, checkpoint_url))
    seen = set(owners(groups))
    merged = merged_groups(old_groups, compact_groups(sources, groups), seen)
    new = {"version": GroupsRecord.version, "parameters": params, "files": len(seen),
           "partitions": len(groups), "groups": merged}
    if old is not None and all(old.get(k) == v for k, v in new.items()):
        return
    record.write({**new, "written": time.time()})


def _changed_parameters(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    return [name for name in ("type", "stage", *GROUPING_OPTIONS)
            if name in old and old.get(name) != new.get(name)]


def _files(n: int) -> str:
    return f"{n} file{'' if n == 1 else 's'}"


def _examples(paths: Iterable[str]) -> str:
    paths = sorted(paths)
    more = f" and {len(paths) - _SHOWN} more" if len(paths) > _SHOWN else ""
    return ", ".join(paths[:_SHOWN]) + more


def describe(old: dict[str, Any], params: dict[str, Any], groups: dict[str, list[str]],
             regrouped: list[Regrouped], checkpoint_url: str) -> str:
    """The refusal: what changed (old and new values), which files, and the two fixes."""
    old_params = old.get("parameters") or {}
    changed = _changed_parameters(old_params, params)
    options = [n for n in changed if n in GROUPING_OPTIONS]
    what = [", ".join(f"{n} was {old_params.get(n)!r}, now {params.get(n)!r}"
                      for n in changed)] if changed else []
    fixes = [f"run with {', '.join(f'{n}={old_params.get(n)!r}' for n in options)} again, as "
             "the checkpoint was made"] if options else []
    before, now = set(owners(old.get("groups") or {})), set(owners(groups))
    # a regrouped file was in a completed partition (named, or of that file alone): not added
    added, missing = sorted(now - before - {r.path for r in regrouped}), before - now
    if added or missing or not options:
        what.append(f"the input file list changed ({_files(len(added))} added"
                    + (f": {_examples(added)}" if added else "")
                    + f"; {_files(len(missing))} of the record not in this run's input)")
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
