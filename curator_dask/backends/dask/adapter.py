"""``StageAdapter``: one stage call in the contract's order of operations.

See docs/design/contract.md §7.2.

This is the only place that assigns task ids at stage boundaries. It imports no Dask, so the
same code runs on the driver (source stage) and on workers (everything after it). What it
counts is a :class:`~curator_dask.backends.counts.StageCount` per stage.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Sequence
from typing import Any

from curator_dask import lineage
from curator_dask.backends.counts import StageCount
from curator_dask.classes import class_named
from curator_dask.errors import StageError
from curator_dask.resumability.counters import DeltaLog, stage_deltas
from curator_dask.stages.base import ProcessingStage
from curator_dask.stages.model import model_of
from curator_dask.tasks import Task


def items_of(tasks: Sequence[Task]) -> int:
    """The items (rows, files) of ``tasks``; a task without a usable size counts 0."""
    total = 0
    for t in tasks:
        try:
            total += int(t.num_items)
        except Exception:  # noqa: BLE001 (a custom task without a usable size counts as 0)
            continue
    return total


def rows_dropped(tasks: Sequence[Task], results: Sequence[Task]) -> int:
    """Rows one stage call did not pass on, when it maps document batches to document batches:
    ``max(0, rows in - rows out)``; the rows of inputs it failed (a ``FailedTask`` in their
    position) are not counted. 0 when any input or output is another kind of task (a reader's
    files become rows, a writer's rows become files: their items change meaning).

    ``results`` are the stage's outputs with sentinels still in place (``None`` already a
    ``NoneTask``).

    Example:
        >>> import pyarrow as pa
        >>> from curator_dask.tasks import DocumentBatch, FileGroupTask
        >>> batch = DocumentBatch(dataset_name="d", data=pa.table({"text": ["a", "bb", "c"]}))
        >>> kept = DocumentBatch(dataset_name="d", data=pa.table({"text": ["bb"]}))
        >>> rows_dropped([batch], [kept])
        2
        >>> rows_dropped([batch], [FileGroupTask(dataset_name="d", data=["out.jsonl"])])
        0
    """
    if not tasks or not all(class_named(t, "DocumentBatch") for t in tasks):
        return 0
    failed_in = 0
    if len(results) == len(tasks):  # positional: an input's own output is in its slot
        failed_in = items_of([t for t, r in zip(tasks, results, strict=True)
                            if lineage.is_failed_task(r)])
    kept = [r for r in results if not lineage.is_sentinel(r)]
    if not all(class_named(r, "DocumentBatch") for r in kept):
        return 0
    return max(0, items_of(tasks) - failed_in - items_of(kept))


def source_files(tasks: Sequence[Task]) -> list[str]:
    """The input files the tasks came from, for error messages: the ``source_files`` their
    reader left in ``_metadata`` (as writers name outputs, docs/design/contract.md §6.2), or a
    file group's own files; each file once, in order.

    Example:
        >>> from curator_dask.tasks import FileGroupTask
        >>> source_files([FileGroupTask(dataset_name="d", data=["/in/a.jsonl", "/in/b.jsonl"])])
        ['/in/a.jsonl', '/in/b.jsonl']
    """
    files: dict[str, None] = {}
    for task in tasks:
        found = (getattr(task, "_metadata", None) or {}).get("source_files")
        if not found and class_named(task, "FileGroupTask"):
            found = task.data
        if isinstance(found, (list, tuple)):
            files.update(dict.fromkeys(str(f) for f in found))
    return list(files)


def _shipped_files(exc: BaseException) -> dict[tuple[str, int | None], str]:
    """``{(function, line): file}`` of the frames of ``exc`` (and its causes) whose code
    cloudpickle shipped by value: it names their file ``<dynamic-code>``, and keeps the
    module's ``__file__`` in their globals."""
    found: dict[tuple[str, int | None], str] = {}  # looked up by FrameSummary (lineno: int | None)
    seen: set[int] = set()
    todo: list[BaseException | None] = [exc]
    while todo:
        e = todo.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        for frame, line in traceback.walk_tb(e.__traceback__):
            file = frame.f_globals.get("__file__")
            if frame.f_code.co_filename == "<dynamic-code>" and isinstance(file, str):
                found[(frame.f_code.co_name, line)] = file
        todo += [e.__cause__, e.__context__, *getattr(e, "exceptions", ())]
    return found


def traceback_text(exc: BaseException) -> str:
    """``exc``'s traceback as ``traceback.format_exception`` writes it, with the real file of
    stage code shipped by value (a pipeline file the workers cannot import,
    docs/design/architecture.md "The worker plugin: StageHost") instead of ``<dynamic-code>``.

    Example:
        >>> try:
        ...     {}["missing"]
        ... except KeyError as exc:
        ...     print(traceback_text(exc).splitlines()[-1])
        KeyError: 'missing'
    """
    tbe = traceback.TracebackException.from_exception(exc)
    files = _shipped_files(exc)
    if files:
        todo: list[traceback.TracebackException | None] = [tbe]
        seen: set[int] = set()
        while todo:
            t = todo.pop()
            if t is None or id(t) in seen:
                continue
            seen.add(id(t))
            for i, f in enumerate(t.stack):
                file = files.get((f.name, f.lineno))
                if f.filename == "<dynamic-code>" and file:
                    t.stack[i] = traceback.FrameSummary(
                        file, f.lineno, f.name, end_lineno=f.end_lineno, colno=f.colno,
                        end_colno=f.end_colno)
            todo += [t.__cause__, t.__context__, *(getattr(t, "exceptions", None) or ())]
    return "".join(tbe.format())


class StageAdapter:
    """Wraps a stage: calls ``process_batch``, assigns ids, strips sentinels, records stats.

    Example:
        >>> from curator_dask.stages.base import ProcessingStage
        >>> from curator_dask.tasks import FileGroupTask
        >>> class Split(ProcessingStage):
        ...     name = "split"
        ...     def process(self, task):
        ...         return [FileGroupTask(dataset_name="d", data=[p]) for p in task.data]
        >>> parent = FileGroupTask(dataset_name="d", data=["a", "b"])
        >>> parent._set_task_id("0", "x")
        >>> [t.task_id for t in StageAdapter(Split()).process_batch([parent])]
        ['0_x_0', '0_x_1']
    """

    def __init__(self, stage: ProcessingStage) -> None:
        self.stage = stage
        self.model = model_of(stage)  # whose NoneTask and performance records to make
        self.timer = self.model.timer(stage)

    def process_batch(
        self, tasks: list[Task], count: StageCount | None = None, deltas: DeltaLog | None = None,
        failed: set[str] | None = None,
    ) -> list[Task]:
        """Process one batch; add what happened to ``count``, completion deltas to ``deltas``.

        Without ``deltas`` (a run with no checkpoint: tasks carry no source id), ``failed``
        collects the task ids of the inputs a ``FailedTask`` came from: each extends the id
        of the source it descends from (docs/design/contract.md §1.2), which is how the
        driver names the failed sources.
        """
        stage = self.stage
        start = time.perf_counter()
        try:
            with self.timer.measure(items_of(tasks)):
                results = list(stage.process_batch(tasks))
        except Exception as exc:
            raise StageError(
                stage.name, [t.task_id for t in tasks], f"{type(exc).__name__}: {exc}",
                traceback_text(exc), source_files=source_files(tasks),
            ) from exc
        return self.finish_call(tasks, results, time.perf_counter() - start, count, deltas,
                                failed)

    def finish_call(self, tasks: list[Task], results: list[Any], elapsed: float,
                  count: StageCount | None, deltas: DeltaLog | None, failed: set[str] | None,
                  ) -> list[Task]:
        """What follows a stage call (``process_batch``'s, or a source's that gave a list,
        ``source_feed.process_source``): ids, sentinels, deltas, performance records, counts."""
        stage = self.stage
        if any(r is None for r in results):
            none_task = self.model.none_task
            results = [none_task() if r is None else r for r in results]
        lineage.assign_task_ids(tasks, results, is_source=stage.is_source_stage)
        # each result's class names once (cached per class): sentinels are the exception;
        # map(type, ...): mypy takes type(r) for unhashable (mypy#20409)
        names = [lineage.class_names(cls) for cls in map(type, results)]
        sentinels = sum(1 for k in names if not k.isdisjoint(lineage.SENTINEL_NAMES))
        n_failed = n_filtered = 0
        if sentinels:
            n_failed = sum(1 for k in names if "FailedTask" in k)
            n_filtered = sum(1 for k in names if "NoneTask" in k)
        if stage.is_source_stage and n_failed:
            msg = f"Source stage {stage.name} emitted FailedTask, which is not supported."
            raise ValueError(msg)
        dropped = rows_dropped(tasks, results) if count is not None else 0
        # Deltas are taken while sentinels are still in place (docs/design/contract.md §7.2).
        # Array shards are filtered on the driver before streaming, and a shard's failure is
        # decided from the deltas the completion plugin received (slurm/run.py), so neither
        # needs a hook here.
        if deltas is not None and not stage.is_source_stage:
            deltas.add(stage_deltas(type(stage).__name__, tasks, results,
                                    is_sink=stage.is_sink_stage))
        elif n_failed and failed is not None:
            failed.update(failed_parents(tasks, results))
        if sentinels:
            results = [r for r, k in zip(results, names, strict=True)
                       if k.isdisjoint(lineage.SENTINEL_NAMES)]
        stats = self.timer.stats()
        for r in results:
            r.add_stage_perf(stats)
        if count is None:
            return results
        c = count
        c.calls += 1
        c.tasks_in += len(tasks)
        c.tasks_out += len(results)
        c.items_in += stats.num_items_processed
        c.items_out += items_of(results)
        c.rows_dropped += dropped
        c.filtered += n_filtered
        c.failed += n_failed
        c.seconds += elapsed
        return results


def failed_parents(tasks: Sequence[Task], results: Sequence[Task]) -> set[str]:
    """The task ids of the inputs of one stage call that a ``FailedTask`` came from: the input
    at its position (N:N), else every input (one input, or M→K: not attributable further).

    Example:
        >>> from curator_dask.tasks import FailedTask, FileGroupTask
        >>> a, b = (FileGroupTask(dataset_name="d", data=[p]) for p in "ab")
        >>> a.task_id, b.task_id = "0_a", "0_b"
        >>> sorted(failed_parents([a, b], [a, FailedTask()]))
        ['0_b']
    """
    if len(tasks) == len(results) > 1:
        return {t.task_id for t, r in zip(tasks, results, strict=True)
                if lineage.is_failed_task(r)}
    return {t.task_id for t in tasks}


def failed_among(ids: list[str], failed: set[str]) -> set[str]:
    """The ids of a chain's sources that saw a ``FailedTask``. ``failed`` holds source ids (a
    run with a checkpoint) or the task ids of the inputs a ``FailedTask`` came from (without
    one); each of those is its source task's id or extends it with ``_<suffix>``
    (docs/design/contract.md §1.2), so its longest prefix among ``ids`` is its source. An id
    an M→K stage made at random descends from no source it can name and is left out.

    Example:
        >>> sorted(failed_among(["0_a", "0_b"], {"0_b_0_3", "r12ab"}))
        ['0_b']
    """
    if not failed:
        return set()
    own, found = set(ids), set()
    for task_id in failed:
        parts = task_id.split("_")
        for end in range(len(parts), 0, -1):
            prefix = "_".join(parts[:end])
            if prefix in own:
                found.add(prefix)
                break
    return found


def run_stages(
    adapters: Sequence[StageAdapter],
    batches: list[list[Task]],
    deltas: DeltaLog | None = None,
    failed: set[str] | None = None,
) -> tuple[list[list[Task]], list[StageCount]]:
    """Run ``adapters`` in order over ``batches`` (tasks grouped by the call that made them).

    Each stage slices every group into batches of ``batch_size`` (``None`` → 1); tasks made by
    different upstream calls are never batched together. Returns the last stage's outputs,
    grouped by the call that produced them, and one ``StageCount`` per adapter. ``deltas`` and
    ``failed``: as for :meth:`StageAdapter.process_batch`.
    """
    counts = [StageCount() for _ in adapters]
    for adapter, count in zip(adapters, counts, strict=True):
        size = adapter.stage.batch_size or 1
        produced: list[list[Task]] = []
        for group in batches:
            for i in range(0, len(group), size):
                out = adapter.process_batch(group[i : i + size], count, deltas, failed)
                if out:
                    produced.append(out)
        batches = produced
    return batches, counts
