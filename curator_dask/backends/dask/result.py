"""``RunResult``: the sink's output tasks of one run, plus what the run did."""

from __future__ import annotations

from dataclasses import asdict
from html import escape
from typing import Any

from curator_dask.backends.counts import StageCount

# (key, heading) of the columns a counts table shows, in order; every key is a StageCount field.
COUNT_COLUMNS = (("tasks_in", "tasks in"), ("tasks_out", "tasks out"), ("items_in", "items in"),
                 ("items_out", "items out"), ("rows_dropped", "rows dropped"),
                 ("filtered", "tasks filtered"), ("failed", "tasks failed"),
                 ("seconds", "busy s"))
COUNTS_LEGEND = ("items: rows of document batches, files of file groups; rows dropped: rows a "
                 "stage that maps document batches to document batches did not pass on; tasks "
                 "filtered: tasks a stage returned None for; busy s: the stage's own processing "
                 "time, summed over workers")


_SHOWN_IDS = 10  # failed source ids a notebook shows under the table


def _cell(row: dict[str, Any], key: str) -> str:
    value = row.get(key, 0)
    return f"{float(value or 0):.2f}" if key == "seconds" else str(value)


class CountsTable(list):
    """One dict per stage (``stage`` plus every :class:`StageCount` field): a plain list for
    ``pandas.DataFrame`` and JSON, that prints as an aligned table and renders as an HTML
    table in Jupyter.

    Example:
        >>> table = CountsTable([{"stage": "reader", **asdict(StageCount(
        ...     tasks_in=1, tasks_out=2, items_in=2, items_out=40, seconds=0.5))},
        ...     {"stage": "keep_long", **asdict(StageCount(
        ...     tasks_in=2, tasks_out=2, items_in=40, items_out=31, rows_dropped=9))}])
        >>> print(table)
        stage      tasks in  tasks out  items in  items out  rows dropped  tasks filtered  tasks failed  busy s
        reader            1          2         2         40             0               0             0    0.50
        keep_long         2          2        40         31             9               0             0    0.00
        >>> table[1]["rows_dropped"], isinstance(table, list)
        (9, True)
    """  # noqa: E501 (the table as it prints)

    def lines(self) -> list[str]:
        """The header and one line per stage, columns aligned (numbers right-aligned)."""
        rows = [[str(r.get("stage", ""))] + [_cell(r, key) for key, _ in COUNT_COLUMNS]
                for r in self]
        header = ["stage"] + [heading for _, heading in COUNT_COLUMNS]
        widths = [max(len(line[i]) for line in [header, *rows]) for i in range(len(header))]

        def fmt(line: list[str]) -> str:
            cells = [line[0].ljust(widths[0])]
            cells += [v.rjust(w) for v, w in zip(line[1:], widths[1:], strict=True)]
            return "  ".join(cells).rstrip()

        return [fmt(header)] + [fmt(line) for line in rows]

    def __str__(self) -> str:
        return "\n".join(self.lines()) if self else "(no stages)"

    __repr__ = __str__

    def _repr_html_(self, caption: str = "") -> str:
        """An HTML table; ``caption`` is inserted as it is (already HTML)."""
        head = "".join(f"<th>{escape(h)}</th>" for h in ["stage"] + [h for _, h in COUNT_COLUMNS])
        body = "".join(
            "<tr><td style='text-align:left'>" + escape(str(r.get("stage", ""))) + "</td>"
            + "".join(f"<td>{_cell(r, key)}</td>" for key, _ in COUNT_COLUMNS) + "</tr>"
            for r in self)
        caption = f"<caption>{caption}</caption>" if caption else ""
        return (f"<table>{caption}<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
                f"<p><small>{escape(COUNTS_LEGEND)}</small></p>")


class RunResult(list):
    """The sink's output tasks (a plain list), plus what the run did.

    Attributes:
        stage_counts: ``[(stage name, StageCount), ...]`` in pipeline order.
        num_sources: source tasks the head produced.
        num_outputs: output tasks of the sink (also when ``keep_outputs=False`` left the list
            empty).
        skipped_sources: sources a checkpoint marked complete (not processed again).
        checkpoint: the completion plugin's summary (completed, pending, failed sources, ...).
        timings: seconds from the start of ``execute`` to ``head`` (sources known: before
            ``cluster`` when the head ran on the driver, after ``checkpoint_loaded`` when it ran
            on the cluster), ``cluster`` (connected), ``checkpoint_loaded``,
            ``sources_opened``, ``first_submit`` and ``end``.
        wall_time: seconds from the start of ``execute`` to its end.
        dashboard_link: the Dask dashboard URL, when there was one.
        stage_checkpoints: with stage checkpoints, entries saved and loaded per stage and the
            number of fallbacks (unusable entries).
        job_id: the job (resume token) when the run was a job.
        failed_sources: the ids of the sources a stage returned ``FailedTask`` for (sorted):
            they did not complete; with a checkpoint they stay pending and the next run with
            it retries them. Without a checkpoint these are the last segment of each source
            task's id, the id a checkpoint would record.
        num_failed_sources: ``len(failed_sources)``; see also :meth:`failures_line`.

    Example:
        >>> result = RunResult(["t1", "t2"])
        >>> result.stage_counts = [("reader", StageCount(tasks_in=1, tasks_out=2))]
        >>> len(result), result.counts_table()[0]["tasks_out"]
        (2, 2)
        >>> result.num_sources, result.failed_sources, result.num_failed_sources = 3, ("b",), 1
        >>> result.checkpoint = {"failed_sources": ["b"]}
        >>> print(result.failures_line())
        2 of 3 sources completed, 1 failed (a stage returned FailedTask) and stay pending: run again with the same checkpoint to retry them
    """  # noqa: E501 (the line as it prints)

    stage_counts: list[tuple[str, StageCount]]
    num_sources: int = 0
    num_outputs: int = 0
    skipped_sources: int = 0
    checkpoint: dict[str, Any] | None = None
    timings: dict[str, float]
    wall_time: float = 0.0
    dashboard_link: str | None = None
    stage_checkpoints: dict[str, Any] | None = None
    job_id: str | None = None
    failed_sources: tuple[str, ...] = ()
    num_failed_sources: int = 0

    @property
    def completed_with_failures(self) -> bool:
        """Whether some sources did not complete because a stage returned ``FailedTask``."""
        return self.num_failed_sources > 0

    def failures_line(self, retry: str | None = None) -> str | None:
        """What the failed sources mean and how to retry them; ``None`` when none failed.

        ``retry`` replaces "run again with the same checkpoint" (the CLI names the command
        that resumes its job). Without a checkpoint nothing recorded the sources that
        completed, so the line says that a rerun processes every source again.
        """
        failed = self.num_failed_sources
        if not failed:
            return None
        todo = self.num_sources - self.skipped_sources
        before = (f" ({self.skipped_sources} more were already complete)"
                  if self.skipped_sources else "")
        text = (f"{todo - failed} of {todo} sources completed{before}, {failed} failed (a "
                "stage returned FailedTask)")
        if self.checkpoint is None:
            return (f"{text}: the run had no checkpoint, so nothing recorded them and a rerun "
                    "processes every source again (give it a checkpoint to retry only them)")
        return (f"{text} and stay pending: {retry or 'run again with the same checkpoint'} to "
                "retry them")

    def counts_table(self) -> CountsTable:
        """One dict per stage, ready for ``pandas.DataFrame``; prints as an aligned table."""
        return CountsTable({"stage": name, **asdict(c)} for name, c in self.stage_counts)

    def _repr_html_(self) -> str:
        """The per-stage table for Jupyter, captioned with the sources and the wall time."""
        failed = (f", <b>{self.num_failed_sources} failed</b>" if self.num_failed_sources
                  else "")
        caption = (f"{self.num_sources} sources ({self.skipped_sources} skipped{failed}), "
                   f"{max(len(self), self.num_outputs)} output tasks, {self.wall_time:.2f} s")
        if self.dashboard_link:
            caption += f' &middot; <a href="{escape(self.dashboard_link)}">dashboard</a>'
        html = self.counts_table()._repr_html_(caption)
        line = self.failures_line()
        if line is None:
            return html
        shown = ", ".join(self.failed_sources[:_SHOWN_IDS]) + (
            f" (+{self.num_failed_sources - _SHOWN_IDS} more)"
            if self.num_failed_sources > _SHOWN_IDS else "")
        return (html + f"<p style='color:#b35900'>{escape(line)}.</p>"
                f"<p><small>failed sources (<code>result.failed_sources</code>): "
                f"{escape(shown)}</small></p>")
