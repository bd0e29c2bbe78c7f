"""Progress of a run: the live snapshot a job's heartbeat reads, and one bar per stage."""

from __future__ import annotations

import contextlib
import logging
import sys
import threading
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from curator_dask.backends.counts import StageCount
from curator_dask.utils.run_keys import run_token

logger = logging.getLogger(__name__)


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
        self.finished_ids: list[str] = []  # only with keep_finished_ids (input checks)
        self.keep_finished_ids = False
        self.failed_ids: list[str] = []  # sources that saw a FailedTask, as the stream names them
        # Sources of chains cancelled while they may have been running: on the workers they can
        # still finish and write their outputs after the driver stopped waiting for them.
        self.cut = 0
        self.first_submit: float | None = None
        self.stage_sources: dict[int, int] = {}  # sources that passed each stage
        self._lock = threading.Lock()

    def stage_advanced(self, stage_indices: Sequence[int], n: int) -> None:
        with self._lock:
            for i in stage_indices:
                self.stage_sources[i] = self.stage_sources.get(i, 0) + n

    def head_done(self, counts: dict[int, StageCount]) -> None:
        """The counts of the stages that ran on the driver (up to the source stage)."""
        with self._lock:
            for i, c in counts.items():
                self.counts.setdefault(i, StageCount()).merge(c)

    def planned(self, total: int, skipped: int, to_process: int) -> None:
        self.sources.update(total=total, skipped=skipped, to_process=to_process)

    def in_flight(self, n: int) -> None:
        with self._lock:
            self.sources["in_flight"] += n

    def chain_raised(self, ids: list[str]) -> None:
        """The sources of a Dask task whose stage raised (the run fails with its error)."""
        with self._lock:
            self.sources["failed"] += len(ids)

    def cut_short(self, n: int) -> None:
        """``n`` sources of chains cancelled while they may have been running."""
        with self._lock:
            self.cut += n

    def chunk_done(self, ids: list[str], failed: set[str], counts: dict[int, StageCount]) -> None:
        with self._lock:
            if self.keep_finished_ids:
                self.finished_ids.extend(ids)
            failed_here = [sid for sid in ids if sid in failed]
            self.failed_ids.extend(failed_here)
            self.sources["failed"] += len(failed_here)
            self.sources["completed"] += len(ids) - len(failed_here)
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
                "stages": [{"stage": self.stage_names[i], "index": i, **asdict(self.counts.get(
                               i, StageCount())), "sources_done": self.stage_sources.get(i)}
                           for i in sorted(set(self.counts) | set(self.stage_sources))],
            }


def showing(progress: bool | None) -> bool:
    """Whether a run with this ``progress`` setting shows bars and notices (``None``: where
    someone looks, see :func:`interactive`)."""
    return interactive() if progress is None else bool(progress)


def notice(text: str, shown: bool, log: logging.Logger = logger) -> None:
    """A line about the run that a person should see, with no logging set up, once.

    Where bars are shown: above them (a notebook's cell output, or stderr in a terminal).
    Else an INFO record when logging would print one (the CLI logs at INFO), or a line on
    stderr when it would not (a script without a logging set-up, a batch job's log).
    """
    if not shown:
        if log.isEnabledFor(logging.INFO) and log.hasHandlers():
            log.info("%s", text)
        else:
            print(text, file=sys.stderr, flush=True)
        return
    log.debug("%s", text)
    if "ipykernel" in sys.modules:
        print(text, flush=True)
        return
    from tqdm.auto import tqdm

    tqdm.write(text, file=sys.stderr)


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
    notice(f"Dask dashboard: {url}", shown=True)


class _AboveBars:
    """A stream for a logging handler: each record is written above the progress bars."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream

    def write(self, text: str) -> None:
        from tqdm.auto import tqdm

        tqdm.write(text, file=self.stream, end="")

    def flush(self) -> None:
        self.stream.flush()


@contextlib.contextmanager
def logs_above_bars(names: Sequence[str] = ("", "distributed")) -> Any:
    """While bars are drawn on a terminal, log records go above them, not through them.

    The console handlers of the loggers ``names`` (the root logger and distributed's own,
    which does not propagate) and Python's last-resort handler keep their level, format
    and filters; only their stream is wrapped (tqdm's ``logging_redirect_tqdm`` replaces
    the handlers and loses the level distributed sets on its own).
    """
    swapped: list[tuple[logging.StreamHandler, Any]] = []
    for name in names:
        for handler in logging.getLogger(name).handlers:
            if (type(handler) is logging.StreamHandler
                    and handler.stream in (sys.stderr, sys.stdout)):
                swapped.append((handler, handler.setStream(_AboveBars(handler.stream))))
    last_resort = logging.lastResort
    if last_resort is not None:
        above = logging.StreamHandler(_AboveBars(sys.stderr))
        above.setLevel(last_resort.level)
        logging.lastResort = above
    try:
        yield
    finally:
        logging.lastResort = last_resort
        for handler, stream in swapped:
            handler.setStream(stream)


class StageBars:
    """One progress bar per stage after the source (tqdm.auto: widgets in Jupyter).

    Stages fused into one Dask task advance together; a bar counts the sources that passed it.
    """

    def __init__(self, stages: Sequence[Any], plan: Any, total: int | None,
                 progress: bool | None, dashboard: str | None, on_advance: Any = None) -> None:
        from tqdm.auto import tqdm

        self.on_advance = on_advance
        show = showing(progress)
        self._lock = threading.Lock()
        self.bars: dict[int, Any] = {}
        self._logs = contextlib.ExitStack()
        if show and "ipykernel" not in sys.modules:
            self._logs.enter_context(logs_above_bars())
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
                if bar.total is None:  # a lazy source's count is known now: "8/8", not "8/?"
                    bar.total = bar.n
                    bar.refresh()
                bar.close()
        self._logs.close()
