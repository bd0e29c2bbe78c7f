"""Progress of a run: the live snapshot a job's heartbeat reads, and one bar per stage."""

from __future__ import annotations

import sys
import threading
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from curator_dask.backends.dask.adapter import StageCount
from curator_dask.backends.dask.keys import run_token


def interactive() -> bool:
    """A notebook, or a terminal on stderr: where bars and the dashboard help someone."""
    if "ipykernel" in sys.modules:
        return True
    return sys.stderr.isatty()


class LiveProgress:
    """What a running ``execute`` has done so far; a job's summary heartbeat reads it.

    Example:
        >>> live = LiveProgress([], "run1")
        >>> live.planned(10, 2, 8)
        >>> live.snapshot()["sources"]["to_process"]
        8
    """

    def __init__(self, stages: Sequence[Any], run_id: str) -> None:
        self.stage_names = [s.name for s in stages]
        self.run_id = run_id
        self.scheduler: str | None = None
        self.dashboard: str | None = None
        self.counts: dict[int, StageCount] = {}
        self.sources = {"total": 0, "skipped": 0, "to_process": 0, "completed": 0,
                        "failed": 0, "in_flight": 0}
        self.finished_ids: list[str] = []
        self.first_submit: float | None = None
        self.stage_sources: dict[int, int] = {}  # sources that passed each stage
        self._lock = threading.Lock()

    def stage_advanced(self, stage_indices: Sequence[int], n: int) -> None:
        with self._lock:
            for i in stage_indices:
                self.stage_sources[i] = self.stage_sources.get(i, 0) + n

    def planned(self, total: int, skipped: int, to_process: int) -> None:
        self.sources.update(total=total, skipped=skipped, to_process=to_process)

    def in_flight(self, n: int) -> None:
        with self._lock:
            self.sources["in_flight"] += n

    def chunk_done(self, ids: list[str], failed: set[str], counts: dict[int, StageCount]) -> None:
        with self._lock:
            self.finished_ids.extend(ids)
            n_failed = sum(1 for sid in ids if sid in failed)
            self.sources["failed"] += n_failed
            self.sources["completed"] += len(ids) - n_failed
            for i, c in counts.items():
                self.counts.setdefault(i, StageCount()).merge(c)

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            return {
                "run_key_token": run_token(self.run_id),
                "scheduler": self.scheduler,
                "dashboard": self.dashboard,
                "sources": dict(self.sources),
                "processing_started": self.first_submit,
                "stages": [{"stage": self.stage_names[i], **asdict(self.counts.get(
                               i, StageCount())), "sources_done": self.stage_sources.get(i)}
                           for i in sorted(set(self.counts) | set(self.stage_sources))],
            }


def show_link(url: str) -> None:
    """The dashboard link: a clickable link in Jupyter, a line on stderr elsewhere."""
    if "ipykernel" in sys.modules:
        try:
            from html import escape

            from IPython.display import HTML, display

            link = escape(url)
            display(HTML(f'Dask dashboard: <a href="{link}" target="_blank">{link}</a>'))
            return
        except ImportError:
            pass
    from tqdm.auto import tqdm

    tqdm.write(f"Dask dashboard: {url}")


class StageBars:
    """One progress bar per stage after the source (tqdm.auto: widgets in Jupyter).

    Stages fused into one Dask task advance together; a bar counts the sources that passed it.
    """

    def __init__(self, stages: Sequence[Any], plan: Any, total: int,
                 progress: bool | None, dashboard: str | None, on_advance: Any = None) -> None:
        from tqdm.auto import tqdm

        self.on_advance = on_advance
        show = interactive() if progress is None else bool(progress)
        self._lock = threading.Lock()
        self.bars: dict[int, Any] = {}
        if show and dashboard:
            show_link(dashboard)
        width = max((len(stages[i].name) for g in plan.groups for i in g.stage_indices),
                    default=8)
        position = 0
        for group in plan.groups:
            for i in group.stage_indices:
                self.bars[i] = tqdm(total=total, unit="source", desc=stages[i].name.ljust(width),
                                    disable=not show, position=position, leave=True)
                position += 1

    def advance(self, group: Any, n: int) -> None:
        with self._lock:
            for i in group.stage_indices:
                self.bars[i].update(n)
        if self.on_advance is not None:
            self.on_advance(group.stage_indices, n)

    def watch(self, future: Any, group: Any, n: int) -> None:
        """Advance ``group``'s bars when ``future`` (not the chain's last task) finishes."""
        def done(f: Any) -> None:
            if f.status == "finished":
                self.advance(group, n)

        future.add_done_callback(done)

    def close(self) -> None:
        with self._lock:
            for bar in self.bars.values():
                bar.close()
