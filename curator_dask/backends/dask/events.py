"""``EventStream``: a run's events for its observer, bounded in volume at any number of sources.

The first ``detail_limit`` records describe each Dask task (``scope: "task"``: its sources
when it is submitted, its stages' durations, rows in, out and dropped when it finished); after
that, one record per stage per ``window`` seconds (``scope: "window"``) carries the same sums,
and one ``source_start`` / ``source_complete`` / ``source_failed`` per window the sources
submitted, completed and failed in it; at the end of a run, one record per stage
(``scope: "run"``) carries every :class:`StageCount` field. Each stage also gets one
``stage_start`` per run, the first time a Dask task that ran it is reported. Stage-checkpoint
saves, loads and fallbacks are totalled here too.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from curator_dask.backends.counts import StageCount
from curator_dask.resumability.stage_checkpoints.records import CheckpointTotals

# Stage-checkpoint notes sent as ``warning`` events; the rest are counted in one more.
NOTES_SENT = 100


class EventStream:
    """Turns per-chunk results into observer events.

    Example:
        >>> seen = []
        >>> class Stage: name = "reader"
        >>> stream = EventStream(lambda t, **f: seen.append(t), [Stage()])
        >>> stream.emit("sources_planned", total=1)
        >>> seen, stream.records
        (['sources_planned'], 1)
    """

    def __init__(self, on_event: Any, stages: Sequence[Any], *, detail_limit: int = 20_000,
                 window: float = 10.0) -> None:
        self.on_event = on_event
        self.names = [s.name for s in stages]
        self.detail_limit = detail_limit
        self.window = window
        self.records = 0
        self._window: dict[int, StageCount] = {}
        self._window_sources = [0, 0, 0]  # completed, failed, submitted
        self._stages_started: set[int] = set()
        self._window_start = time.time()
        self.checkpoints = CheckpointTotals()  # every chain's stage-checkpoint totals, summed

    def emit(self, type_: str, **fields: Any) -> None:
        if self.on_event is not None:
            self.on_event(type_, **fields)
            self.records += 1

    def chunk_submitted(self, ids: list[str]) -> None:
        """The chain of Dask tasks for the sources ``ids`` was submitted (``source_start``)."""
        if self.on_event is None:
            return
        if self.records < self.detail_limit:
            self.emit("source_start", scope="task", count=len(ids), task_id=_task_id(ids),
                      source_ids=ids[:20])
        else:
            self._window_sources[2] += len(ids)

    def chunk_done(self, ids: list[str], result: Any) -> None:
        """A Dask task of the last group finished ``ids`` with ``result`` (a GroupResult)."""
        self._checkpoint_totals(result)
        if self.on_event is None:
            return
        failed = [sid for sid in ids if sid in result.failed]
        done = len(ids) - len(failed)
        for i in sorted(set(result.counts) - self._stages_started):  # once per stage: bounded
            self._stages_started.add(i)
            self.emit("stage_start", stage=self.names[i], index=i, task_id=_task_id(ids))
        if self.records < self.detail_limit:
            self._task_records(ids, result, done, failed)
            return
        for i, c in result.counts.items():
            self._window.setdefault(i, StageCount()).merge(c)
        self._window_sources[0] += done
        self._window_sources[1] += len(failed)
        if time.time() - self._window_start >= self.window:
            self.flush_window()

    def _checkpoint_totals(self, result: Any) -> None:
        record = result.checkpoint
        if record is None:  # a run without stage checkpoints
            return
        sent = len(self.checkpoints.notes)
        self.checkpoints.merge(record.totals)
        for note in record.totals.notes[:max(0, NOTES_SENT - sent)]:
            self.emit("warning", message=note)

    def _task_records(self, ids: list[str], result: Any, done: int, failed: list[str]) -> None:
        task_id = _task_id(ids)
        for i, c in sorted(result.counts.items()):
            self.emit("stage_complete", scope="task", stage=self.names[i], index=i,
                      task_id=task_id, sources=len(ids), duration=round(c.seconds, 6),
                      rows_in=c.items_in, rows_out=c.items_out, rows_dropped=c.rows_dropped,
                      tasks_in=c.tasks_in, tasks_out=c.tasks_out, ended=result.ended.get(i))
        if done:
            self.emit("source_complete", scope="task", count=done, task_id=task_id,
                      source_ids=[sid for sid in ids if sid not in result.failed][:20])
        if failed:
            self.emit("source_failed", scope="task", count=len(failed), task_id=task_id,
                      source_ids=failed)

    def flush_window(self) -> None:
        now = time.time()
        for i, c in sorted(self._window.items()):
            self.emit("stage_complete", scope="window", stage=self.names[i], index=i,
                      window_start=self._window_start, ended=now, tasks=c.calls,
                      duration=round(c.seconds, 6), rows_in=c.items_in, rows_out=c.items_out,
                      rows_dropped=c.rows_dropped, tasks_in=c.tasks_in, tasks_out=c.tasks_out)
        done, failed, submitted = self._window_sources
        if submitted:
            self.emit("source_start", scope="window", count=submitted)
        if done:
            self.emit("source_complete", scope="window", count=done)
        if failed:
            self.emit("source_failed", scope="window", count=failed)
        self._window.clear()
        self._window_sources = [0, 0, 0]
        self._window_start = now

    def checkpoint_totals(self) -> None:
        """One ``checkpoint_save`` / ``checkpoint_load`` record per boundary stage."""
        totals = self.checkpoints
        for stage, saved in sorted(totals.saved.items()):
            self.emit("checkpoint_save", stage=self.names[stage], index=stage,
                      count=saved.entries, bytes=saved.bytes, seconds=round(saved.seconds, 3))
        for stage, n in sorted(totals.loaded.items()):
            self.emit("checkpoint_load", stage=self.names[stage], index=stage, count=n)
        if len(totals.notes) > NOTES_SENT:
            self.emit("warning", message=f"{len(totals.notes) - NOTES_SENT} more stage "
                      "checkpoint warnings (see the driver log)")

    def run_totals(self, counts: dict[int, StageCount], summary: dict[str, Any] | None) -> None:
        """The end of a run: the open window, one record per stage, failures and warnings."""
        self.close()
        for i, name in enumerate(self.names):
            self.emit("stage_complete", scope="run", stage=name, index=i, **asdict(counts[i]))
        failed = (summary or {}).get("failed_sources") or []
        if failed:
            self.emit("source_failed", count=len(failed), source_ids=failed[:100])
        for text in (summary or {}).get("warnings", {}):
            self.emit("warning", message=text)

    def close(self) -> None:
        """Flush the open window's sums."""
        if self._window or any(self._window_sources):
            self.flush_window()

    def checkpoint_summary(self) -> dict[str, Any]:
        """``RunResult.stage_checkpoints``: saves and loads per stage name, fallbacks."""
        return self.checkpoints.summary(self.names)


def _task_id(ids: list[str]) -> str:
    """How the records name a Dask task: its first source and how many more it holds."""
    return ids[0] + (f"+{len(ids) - 1}" if len(ids) > 1 else "")
