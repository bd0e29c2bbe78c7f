"""The driver's side of stage checkpoints: resume candidates per source, retention, cleanup.

Retention, precisely (``StageCheckpoints.retention``):

- ``cleanup_on_complete``: a source's entries are deleted as soon as its chain ends without a
  ``FailedTask``;
- ``keep_failed_only``: those deletions wait for the end of a run that completed;
- ``keep_all``: nothing is deleted;
- ``cleanup_all``: as ``cleanup_on_complete`` while the run runs; when it ends (completed,
  failed, stopped or interrupted: :meth:`CheckpointPlanner.close`), every entry that remains
  for the run's sources (failed, pending, cut short; any stage chain) is deleted too. Entries
  of sources outside the run (another SLURM array shard's) are left alone.

All but ``keep_all`` also delete, at the start, the entries of sources already complete.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from typing import Any

from curator_dask.resumability.stage_checkpoints.on_worker import CheckpointRuntime
from curator_dask.resumability.stage_checkpoints.records import Boundary, Candidate
from curator_dask.resumability.stage_checkpoints.store import (
    StageCheckpointStore,
    chain_fingerprint,
    entry_name,
    entry_source,
)
from curator_dask.resumability.stage_checkpoints.strategy import StageCheckpoints

logger = logging.getLogger(__name__)


class CheckpointPlanner:
    """The driver's side: which entries each source may resume from, retention, totals.

    ``plan`` is the executor's plan: its ``groups`` (each with ``index`` and
    ``stage_indices``) and ``boundaries`` (the stage indices that are checkpointed).

    Example:
        >>> from types import SimpleNamespace
        >>> from curator_dask.stages.text.io.reader import JsonlReader
        >>> from curator_dask.stages.text.io.writer import JsonlWriter
        >>> stages = [*JsonlReader(file_paths="memory://in").decompose(),
        ...           JsonlWriter(path="memory://out")]
        >>> plan = SimpleNamespace(boundaries=(1,), groups=[
        ...     SimpleNamespace(index=0, stage_indices=(1,)),
        ...     SimpleNamespace(index=1, stage_indices=(2,))])
        >>> planner = CheckpointPlanner(StageCheckpoints("every_stage"), stages, plan,
        ...                             "memory://planner-doc/ckpt")
        >>> planner.prepare(sources=[], todo=[])  # one listing; entries of done sources go
        >>> planner.candidates("a1b2")  # nothing saved yet: [Candidate(group, stage, ...)]
        []
        >>> planner.sources_finished(["a1b2"], failed=set())  # its entries are deleted
        >>> planner.close(run_completed=True)
    """

    def __init__(self, config: StageCheckpoints, stages: Sequence[Any], plan: Any,
                 checkpoint_url: str, storage_options: dict | None = None) -> None:
        from concurrent.futures import ThreadPoolExecutor

        self.config = config
        self.store = StageCheckpointStore(checkpoint_url, storage_options, config.format,
                                          config.compression)
        bounds: dict[int, Boundary] = {}
        for group in plan.groups:
            last = group.stage_indices[-1]
            if last in plan.boundaries:
                bounds[group.index] = Boundary(last, chain_fingerprint(stages, last),
                                               stages[last].name)
        self.runtime = CheckpointRuntime(self.store, bounds)
        self._valid = {(stage, fp): g for g, (stage, fp, _) in bounds.items()}
        self._listing: dict[str, list[tuple[int, str, str]]] = {}
        self._pool = ThreadPoolExecutor(2, thread_name_prefix="curator-dask-ckpt-cleanup")
        self._futures: list[Any] = []
        self._finished: list[str] = []
        self._run_sources: Any = None  # cleanup_all: the run's sources, as entry names' heads

    def prepare(self, sources: Sequence[Any], todo: Sequence[Any]) -> None:
        """List the store once; drop entries of sources already complete (unless keep_all).

        ``sources``: the run's source tasks (its array shard's), opened in the checkpoint;
        ``todo``: those it is to process, the others are complete. ``cleanup_all`` keeps the
        ids of ``todo`` (8 bytes an id) to delete what remains of theirs when the run ends.
        """
        self._listing = self.store.listing()
        todo_ids = {t._source_id for t in todo}
        done_source_ids = [t._source_id for t in sources if t._source_id not in todo_ids]
        if self.config.retention == "cleanup_all":
            from curator_dask.resumability.completed_set import CompletedSet

            self._run_sources = CompletedSet(entry_source(sid) for sid in todo_ids)
        if self.config.retention != "keep_all":
            # Only what the listing found: a source complete before this run made nothing now.
            self._delete(done_source_ids, made=False)

    def candidates(self, source_id: str) -> list[Candidate]:
        """The source's entries made by this stage chain (the first group tries them)."""
        return [Candidate(self._valid[(stage, fp)], stage, fp, name)
                for stage, fp, name in self._listing.get(entry_source(source_id), ())
                if (stage, fp) in self._valid]

    def _names(self, source_id: str, *, made: bool = True) -> list[str]:
        """Entries the listing found for the source, plus (``made``) those this run may have
        saved."""
        names = {name for _, _, name in self._listing.get(entry_source(source_id), ())}
        if made:
            names.update(entry_name(source_id, stage, fp)
                         for stage, fp, _ in self.runtime.boundaries.values())
        return sorted(names)

    def _delete(self, source_ids: Iterable[str], *, made: bool = True) -> None:
        names = [n for sid in source_ids for n in self._names(sid, made=made)]
        if names:
            self._futures.append(self._pool.submit(self.store.delete, names))

    def sources_finished(self, source_ids: Iterable[str], failed: set[str]) -> None:
        """Sources whose chain ended; those without a FailedTask are complete."""
        done = [sid for sid in source_ids if sid not in failed]
        if self.config.retention in ("cleanup_on_complete", "cleanup_all"):
            self._delete(done)
        elif self.config.retention == "keep_failed_only":
            self._finished.extend(done)

    def close(self, *, run_completed: bool) -> None:
        """Apply ``keep_failed_only`` at the end of a completed run and ``cleanup_all`` at
        the end of any run; wait for deletions."""
        if run_completed and self.config.retention == "keep_failed_only":
            self._delete(self._finished)
        if self._run_sources is not None:
            self._cleanup_all()
        deleted = 0
        for future in self._futures:
            try:
                deleted += future.result()
            except Exception as exc:  # noqa: BLE001 (a leftover entry is only disk space)
                logger.warning("could not delete stage checkpoints: %s", exc)
        self._pool.shutdown()
        logger.debug("stage checkpoints: %d entries deleted", deleted)

    def _cleanup_all(self) -> None:
        """Every entry of the run's sources that is still there: a second listing (it also
        sees what workers saved), after the deletions of completed sources finished."""
        for future in self._futures:
            future.exception()  # wait; close() reports the failures
        try:
            listing = self.store.listing()
        except OSError as exc:
            logger.warning("cleanup_all: could not list the stage checkpoints: %s", exc)
            return
        names = [name for source, found in listing.items() if source in self._run_sources
                 for _, _, name in found]
        if names:
            self._futures.append(self._pool.submit(self.store.delete, names))
