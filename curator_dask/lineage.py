"""Task identity rules of NeMo Curator 1.4 (docs/design/contract.md §1), in one pure module.

Every id the package assigns comes from here: the executor's adapter, the writers' file names
and the root ids of ``Pipeline.run``. This module imports neither Dask nor LMDB.
"""

from __future__ import annotations

import functools
import hashlib
import uuid
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from curator_dask.tasks import Task

# the class names of sentinel tasks (either package)
SENTINEL_NAMES = frozenset({"NoneTask", "FailedTask", "EmptyTask", "SentinelTask"})


def get_deterministic_hash(inputs: Iterable[str], seed: str = "") -> str:
    """12 hex characters of ``sha256("|".join(sorted(inputs)) + "|" + seed)``.

    Order does not matter, duplicates do.

    Example:
        >>> get_deterministic_hash(["a.parquet"])
        '5ca81c9e2d3b'
    """
    combined = "|".join(sorted(inputs)) + "|" + seed
    return hashlib.sha256(combined.encode()).hexdigest()[:12]


def row_range_id(pieces: Iterable[tuple[str, int, int]]) -> str:
    """The id of a row-range partition: :func:`get_deterministic_hash` of its pieces, each
    ``"<path>#rows=<start>-<end>"`` (start row included, end excluded; docs/design/contract.md
    §2.6). Files outside the partition play no part, so adding or removing other files leaves
    it unchanged; 12 hex characters, no ``_``.

    Example:
        >>> row_range_id([("/data/in/a.jsonl", 0, 5000)])
        '2318ff57c281'
    """
    return get_deterministic_hash(f"{path}#rows={start}-{end}" for path, start, end in pieces)


def child_task_id(parent_task_id: str, suffix: str | int) -> str:
    """``"<parent>_<suffix>"``, or ``str(suffix)`` when the parent id is empty.

    See docs/design/contract.md §1.2.
    """
    return f"{parent_task_id}_{suffix}" if parent_task_id else str(suffix)


def source_id_of(task_id: str) -> str:
    """The last ``_``-separated segment of a task id (docs/design/contract.md §1.3)."""
    return task_id.rsplit("_", 1)[-1]


def random_task_id() -> str:
    """An ``r`` id for an ambiguous M→K batch: ``"r"`` + 32 hex characters, no ``_``."""
    return "r" + uuid.uuid4().hex


def is_random_task_id(task_id: str) -> bool:
    """True for an id made by :func:`random_task_id` (non-deterministic lineage)."""
    return task_id.startswith("r")


@functools.lru_cache(maxsize=4096)
def class_names(cls: type) -> frozenset[str]:
    """The names of ``cls`` and its bases, computed once per class (a bounded cache: a class
    redefined again and again in a notebook does not pile up): the predicates below and
    ``stages.model.class_named`` run several times per task at every stage call, and walking
    the MRO each time was a measurable part of a no-op stage's cost.

    Example:
        >>> from curator_dask.tasks import NoneTask
        >>> "SentinelTask" in class_names(NoneTask)
        True
    """
    return frozenset(c.__name__ for c in cls.__mro__)


def is_none_task(task: object) -> bool:
    """True for a ``NoneTask`` of this package or of ``nemo_curator`` (matched by class name)."""
    cls: type = type(task)  # `type`: mypy takes type[object] for unhashable (mypy#20409)
    return "NoneTask" in class_names(cls)


def is_failed_task(task: object) -> bool:
    """True for a ``FailedTask`` of this package or of ``nemo_curator``."""
    cls: type = type(task)  # `type`: mypy takes type[object] for unhashable (mypy#20409)
    return "FailedTask" in class_names(cls)


def is_empty_task(task: object) -> bool:
    """True for an ``EmptyTask`` of this package or of ``nemo_curator``."""
    cls: type = type(task)  # `type`: mypy takes type[object] for unhashable (mypy#20409)
    return "EmptyTask" in class_names(cls)


def is_sentinel(task: object) -> bool:
    """True for any sentinel task (``SentinelTask`` and its subclasses, either package)."""
    cls: type = type(task)  # `type`: mypy takes type[object] for unhashable (mypy#20409)
    return not SENTINEL_NAMES.isdisjoint(class_names(cls))


def assign_root_task_ids(initial_tasks: Sequence[Task]) -> None:
    """Give user-supplied initial tasks the ids ``"0_<i>"`` (docs/design/contract.md §1.7).

    ``EmptyTask`` elements are skipped and keep ``"0"``, but still count in the index.
    """
    for i, task in enumerate(initial_tasks):
        if not is_empty_task(task):
            task._set_task_id("0", i)


def assign_task_ids(inputs: Sequence[Task], outputs: Sequence[Task], *, is_source: bool) -> None:
    """Assign lineage ids to ``outputs`` of one stage call, in place (docs/design/contract.md §1.8).

    - one input: ``"<parent>_<i>"`` per output (fan-out, 1:1, and source fan-out from the root,
      where a source output uses ``get_deterministic_id()`` when it has one);
    - N:N positional: ``"<parent_i>_0"`` (or the content id at a source stage);
    - M→K with M > 1 and M ≠ K: ``"r" + uuid4().hex``.

    Example:
        >>> from curator_dask.tasks import EmptyTask, FileGroupTask
        >>> out = [FileGroupTask(dataset_name="d", data=["a.parquet"])]
        >>> assign_task_ids([EmptyTask()], out, is_source=True)
        >>> out[0].task_id
        '0_5ca81c9e2d3b'
    """
    if len(inputs) == 1:
        parent_id = inputs[0].task_id
        for i, task in enumerate(outputs):
            suffix = (task.get_deterministic_id() or i) if is_source else i
            task._set_task_id(parent_id, suffix)
    elif len(outputs) == len(inputs):
        for parent, task in zip(inputs, outputs, strict=True):
            suffix = (task.get_deterministic_id() or 0) if is_source else 0
            task._set_task_id(parent.task_id, suffix)
    else:
        for task in outputs:
            task.task_id = random_task_id()


def output_basename(source_files: Sequence[str] | None, task_id: str) -> str | None:
    """The writer's base file name for an input task, made replay-safe.

    See docs/design/contract.md §6.2.

    With ``source_files``: ``get_deterministic_hash(source_files, task_id)``. Without them,
    NeMo Curator falls back to a uuid; here a lineage id hashes to a stable name instead, so a
    replayed source rewrites the same file. Returns ``None`` for an ``r`` id (or an empty id),
    whose lineage is not deterministic: the caller must then use a random name.
    """
    if source_files:
        return get_deterministic_hash(list(source_files), task_id)
    if not task_id or is_random_task_id(task_id):
        return None
    return get_deterministic_hash([], "lineage:" + task_id)
