"""Lazy sources: a source stage's tasks pulled as the run's window frees.

A source stage of curator_dask's own model may give its tasks as an iterator (``process_iter``,
or ``process`` returning a generator): :func:`process_source` calls it, and
:class:`LazySourceTasks` makes each task as it is pulled, :class:`SourceFeed` skips the
completed ones. Then the driver never holds every source: the stream pulls
blocks from the feed (``streaming.py``), the feed pulls from the stage, and a checkpointed run
asks the completion plugin which of each block are complete (one call per block of
``CHECK_BLOCK``). The totals are known once the stage is exhausted (``on_exhausted``).

Runs that need every source before the first is sent take the whole list instead
(:func:`feed_or_list` says why in the log): an array shard, ``verify_inputs``, stage
checkpoints, and a pipeline with nothing after its source stage. File groups in a checkpointed
run (seen in the first block) are compared with the partition record before anything runs
(``partitions/groups.py``): from the stage's tasks made again (:meth:`LazySourceTasks.replay`,
``FilePartitioningStage``), a block at a time, none kept; from a stage that cannot make them
again, by taking the whole list.

Example:
    >>> feed = SourceFeed(iter(["a", "b", "c"]))
    >>> list(feed), feed.total, feed.skipped, feed.exhausted
    (['a', 'b', 'c'], 3, 0, True)
"""

from __future__ import annotations

import collections
import itertools
import logging
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from curator_dask import lineage
from curator_dask.backends.counts import StageCount
from curator_dask.backends.dask.adapter import StageAdapter, items_of, traceback_text
from curator_dask.errors import StageError
from curator_dask.resumability.counters import set_source_id
from curator_dask.tasks import Task

logger = logging.getLogger(__name__)

CHECK_BLOCK = 4096  # sources pulled (and checked against the checkpoint) at a time


def process_source(adapter: StageAdapter, task: Task, count: StageCount,
                   ) -> list[Task] | LazySourceTasks:
    """The source stage (``adapter``'s) over the one initial task (file discovery, on the
    driver): its outputs as ``StageAdapter.process_batch`` makes them, or, when the stage
    gives an iterator (``process_iter``, or ``process`` returning a generator: curator_dask's
    own model), a :class:`LazySourceTasks` that makes each output as the run pulls it."""
    stage = adapter.stage
    produce = getattr(stage, "process_iter", None)
    if not callable(produce):
        if adapter.model.name != "curator_dask" or stage.supports_batch_processing():
            return adapter.process_batch([task], count)  # NeMo's stages: NeMo's own path
        produce = stage.process
    start = time.perf_counter()
    try:
        if not stage.validate_input(task):
            msg = f"Task {task!s} failed validation for stage {stage}"
            raise ValueError(msg)
        with adapter.timer.measure(items_of([task])):
            out = produce(task)
    except Exception as exc:
        raise StageError(stage.name, [task.task_id], f"{type(exc).__name__}: {exc}",
                         traceback_text(exc)) from exc
    if isinstance(out, Iterator):
        count.calls += 1
        count.tasks_in += 1
        count.items_in += items_of([task])
        count.seconds += time.perf_counter() - start
        return LazySourceTasks(adapter, task, out, count, adapter.timer.stats())
    # a list (or one task, or None), as the default process_batch would have collected it
    return adapter.finish_call([task], out if isinstance(out, list) else [out],
                               time.perf_counter() - start, count, None, None)


class LazySourceTasks(Iterator[Task]):
    """The outputs of a source stage that gives an iterator, made one at a time as the run
    pulls them: each gets its lineage id (``"<parent>_<content id or position>"``, as
    ``assign_task_ids`` gives a list's outputs, docs/design/contract.md §1.8) and the call's
    performance record, and is counted; ``None`` and ``NoneTask`` outputs are skipped (and
    counted as filtered, keeping their positions); a ``FailedTask`` is refused, as from a
    list. The stage's ``_stage_perf`` record times the call that returned the iterator; the
    pulls happen while the run goes and are in the stage's count's ``seconds``.

    ``close()`` (also at exhaustion) closes the stage's iterator and calls ``on_close``.

    Example:
        >>> from curator_dask.backends.dask.adapter import StageAdapter
        >>> from curator_dask.stages.base import ProcessingStage
        >>> from curator_dask.tasks import EmptyTask, FileGroupTask
        >>> class Files(ProcessingStage):
        ...     name = "files"
        ...     def process(self, task):
        ...         return (FileGroupTask(dataset_name="d", data=[f"{i}.jsonl"]) for i in range(3))
        >>> lazy = process_source(StageAdapter(Files()), EmptyTask(), StageCount())
        >>> [t.task_id for t in lazy], lazy.produced  # a file group's id: its files' hash
        (['0_02e4a8e95a2d', '0_88496f09ad1b', '0_6344231e6c29'], 3)
    """

    def __init__(self, adapter: StageAdapter, parent: Task, iterator: Iterator[Any],
                 count: StageCount, stats: Any) -> None:
        self.adapter, self.parent, self.count, self.stats = adapter, parent, count, stats
        self._iterator: Iterator[Any] | None = iterator
        self._position = 0
        self.produced = 0
        self.on_close: Any = None

    def replay(self) -> Iterator[Task] | None:
        """The stage's outputs made again from the first, with the ids the run gives them,
        neither counted nor timed, while this iterator stays where it is; ``None`` when the
        stage's iterator cannot make them again (an ``again()`` method, as
        ``FilePartitioningStage``'s has). A checkpointed run compares every file group with
        its partition record this way before the first source is sent."""
        again = getattr(self._iterator, "again", None)
        return self._replayed(again()) if callable(again) else None

    def _replayed(self, iterator: Iterator[Any]) -> Iterator[Task]:
        stage = self.adapter.stage
        position = -1
        while True:
            try:
                task = next(iterator)
            except StopIteration:
                return
            except Exception as exc:
                raise StageError(stage.name, [self.parent.task_id],
                                 f"{type(exc).__name__}: {exc}", traceback_text(exc)) from exc
            position += 1
            if task is None or lineage.is_none_task(task):
                continue
            if lineage.is_sentinel(task):
                msg = f"Source stage {stage.name} emitted {type(task).__name__}, which is not "
                msg += "supported."
                raise ValueError(msg)
            task._set_task_id(self.parent.task_id, task.get_deterministic_id() or position)
            yield task

    def __next__(self) -> Task:
        stage = self.adapter.stage
        while self._iterator is not None:
            start = time.perf_counter()
            try:
                task = next(self._iterator)
            except StopIteration:
                self.close()
                break
            except Exception as exc:
                self.close()
                raise StageError(stage.name, [self.parent.task_id],
                                 f"{type(exc).__name__}: {exc}", traceback_text(exc)) from exc
            finally:
                self.count.seconds += time.perf_counter() - start
            position, self._position = self._position, self._position + 1
            if task is None or lineage.is_none_task(task):
                self.count.filtered += 1
                continue
            if lineage.is_sentinel(task):
                self.close()
                msg = f"Source stage {stage.name} emitted {type(task).__name__}, which is not "
                msg += "supported."
                raise ValueError(msg)
            task._set_task_id(self.parent.task_id, task.get_deterministic_id() or position)
            task.add_stage_perf(self.stats)
            self.produced += 1
            self.count.tasks_out += 1
            self.count.items_out += items_of([task])
            return task
        raise StopIteration

    def close(self) -> None:
        """Stop pulling: the stage's iterator is closed (a generator's ``finally`` runs), then
        ``on_close`` (the head's teardown); a second call does nothing."""
        iterator, self._iterator = self._iterator, None
        if iterator is None:
            return
        try:
            closing = getattr(iterator, "close", None)
            if callable(closing):
                closing()
        finally:
            if self.on_close is not None:
                self.on_close()


class SourceFeed(Iterator[Any]):
    """The sources of a run, pulled on demand from ``tasks``: those the checkpoint marks
    complete are skipped (``completed(ids)``: the plugin's lookup) and counted.

    Args:
        tasks: the source stage's iterator (a ``LazySourceTasks``).
        completed: ``ids -> the completed ones`` (``CompletionClient.completed_source_ids``),
            or ``None`` without a checkpoint.
        first: sources already pulled from ``tasks`` (the block the run looked at).
        on_exhausted: called once with ``(total, skipped)`` when ``tasks`` ends.
        planned: ``(total, skipped)`` when known before the first is pulled (file groups the
            partition check counted, :func:`feed_or_list`), else ``None``.
    """

    def __init__(self, tasks: Iterator[Any], *,
                 completed: Callable[[list[str]], Iterable[str]] | None = None,
                 first: Iterable[Any] = (),
                 on_exhausted: Callable[[int, int], None] | None = None,
                 planned: tuple[int, int] | None = None) -> None:
        self.planned = planned
        self._source = tasks
        self._tasks = itertools.chain(first, tasks)
        self._completed = completed
        self._on_exhausted = on_exhausted
        self._block: collections.deque[Any] = collections.deque()
        self.total = self.skipped = 0
        self.exhausted = False

    def __next__(self) -> Any:
        while not self._block:
            if self.exhausted:
                raise StopIteration
            self._refill()
        return self._block.popleft()

    def _refill(self) -> None:
        block = list(itertools.islice(self._tasks, CHECK_BLOCK))
        if not block:
            self.exhausted = True
            if self._on_exhausted is not None:
                self._on_exhausted(self.total, self.skipped)
            return
        self.total += len(block)
        if self._completed is not None:
            done = set(self._completed([set_source_id(t) for t in block]))
            if done:
                kept = [t for t in block if t._source_id not in done]
                self.skipped += len(block) - len(kept)
                block = kept
        self._block.extend(block)

    def close(self) -> None:
        """Stop pulling from the stage (its iterator is closed, its teardown runs)."""
        closing = getattr(self._source, "close", None)
        if callable(closing):
            closing()


def feed_or_list(lazy: Iterator[Any], why: str | None, *,
                 completed: Callable[[list[str]], Iterable[str]] | None = None,
                 on_exhausted: Callable[[int, int], None] | None = None,
                 check_groups: Callable[[Iterator[Any]], tuple[int, int]] | None = None,
                 ) -> SourceFeed | list[Any]:
    """A feed over ``lazy``, or every source as a list where the run needs them all before
    the first is sent: ``why`` (:func:`whole_list_reason`), or, in a checkpointed run
    (``completed``: the checkpoint's lookup of completed ids), file groups in the first block
    that the stage cannot make again (the partition record compares every group first). The
    reason goes to the log and the stage is closed. ``on_exhausted(total, skipped)`` hears a
    feed's totals when it ends.

    File groups that the stage can make again (``lazy.replay()``) go to ``check_groups``
    first, every one of them, made anew and not kept; it returns the totals ``(total,
    skipped)``, which the feed carries as ``planned`` (known before the first is sent).

    Example:
        >>> feed_or_list(iter(["a", "b"]), "an array shard selects among all sources")
        ['a', 'b']
    """
    first: list[Any] = []
    planned: tuple[int, int] | None = None
    if why is None and completed is not None:
        from curator_dask.partitions.groups import file_groups

        first = list(itertools.islice(lazy, CHECK_BLOCK))
        replay = getattr(lazy, "replay", None)
        if file_groups(first):
            again = replay() if callable(replay) and check_groups is not None else None
            if check_groups is None or again is None:
                why = ("the checkpoint's partitioning check (partitioning.json) compares every "
                       "file group first")
            else:
                logger.debug("the checkpoint's partitioning check (partitioning.json) compares "
                             "every file group first, as the source stage makes them again")
                try:
                    planned = check_groups(again)
                except BaseException:
                    _close(lazy)  # refused: the stage is torn down, as after a list
                    raise
                finally:
                    _close(again)
    # engine detail, not what a user asked: DEBUG (the CLI's -v shows it)
    if why is not None:
        logger.debug("the source stage gives its tasks lazily; taking them all at once: %s", why)
        try:
            return first + list(lazy)
        finally:
            _close(lazy)
    logger.debug("the source stage gives its tasks lazily: they are pulled as the run goes, and "
                 "counted when the last has come")
    return SourceFeed(lazy, first=first, on_exhausted=on_exhausted, completed=completed,
                      planned=planned)


def _close(iterator: Iterator[Any]) -> None:
    closing = getattr(iterator, "close", None)
    if callable(closing):
        closing()


def whole_list_reason(*, sharded: bool = False, verify_inputs: bool = False,
                      stage_checkpoints: bool = False, sink_follows: bool = True) -> str | None:
    """Why a run must have every source before the first is sent, or ``None`` (file groups
    in a checkpointed run: :func:`feed_or_list`, from the first block).

    Example:
        >>> whole_list_reason(), whole_list_reason(sink_follows=False)
        (None, "the source stage's tasks are the run's outputs")
    """
    if sharded:
        return "an array shard selects among all sources"
    if verify_inputs:
        return "verify_inputs fingerprints every source first"
    if stage_checkpoints:
        return "stage checkpoints plan over every source"
    if not sink_follows:
        return "the source stage's tasks are the run's outputs"
    return None
