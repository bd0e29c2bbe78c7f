"""Sources pulled from a lazy source stage as the run's window frees: :class:`SourceFeed`.

A source stage of curator_dask's own model may give its tasks as an iterator (``process_iter``,
or ``process`` returning a generator; :class:`~curator_dask.backends.dask.adapter.
LazySourceTasks` makes each one). Then the driver never holds every source: the stream pulls
blocks from the feed (``streaming.py``), the feed pulls from the stage, and a checkpointed run
asks the completion plugin which of each block are complete (one call per block of
``CHECK_BLOCK``). The totals are known once the stage is exhausted (``on_exhausted``).

Runs that need every source before the first is sent take the whole list instead
(``DaskRun.select_sources`` says why in the log): an array shard, ``verify_inputs``, stage
checkpoints, a pipeline with nothing after its source stage, and file groups in a checkpointed
run (the partition record compares every group with the completed ones before anything runs;
``resumability/partitioning.py``). Only the first block is looked at for file groups.

Example:
    >>> feed = SourceFeed(iter(["a", "b", "c"]))
    >>> list(feed), feed.total, feed.skipped, feed.exhausted
    (['a', 'b', 'c'], 3, 0, True)
"""

from __future__ import annotations

import collections
import itertools
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from curator_dask.resumability.counters import set_source_id

CHECK_BLOCK = 4096  # sources pulled (and checked against the checkpoint) at a time


class SourceFeed(Iterator[Any]):
    """The sources of a run, pulled on demand from ``tasks``: those the checkpoint marks
    complete are skipped (``completed(ids)``: the plugin's lookup) and counted.

    Args:
        tasks: the source stage's iterator (a ``LazySourceTasks``).
        completed: ``ids -> the completed ones`` (``CompletionClient.completed_source_ids``),
            or ``None`` without a checkpoint.
        first: sources already pulled from ``tasks`` (the block the run looked at).
        on_exhausted: called once with ``(total, skipped)`` when ``tasks`` ends.
    """

    def __init__(self, tasks: Iterator[Any], *,
                 completed: Callable[[list[str]], Iterable[str]] | None = None,
                 first: Iterable[Any] = (),
                 on_exhausted: Callable[[int, int], None] | None = None) -> None:
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
