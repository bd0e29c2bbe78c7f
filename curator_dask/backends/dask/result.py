"""``RunResult``: the sink's output tasks of one run, plus what the run did."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from curator_dask.backends.dask.adapter import StageCount


class RunResult(list):
    """The sink's output tasks (a plain list), plus what the run did.

    Attributes:
        stage_counts: ``[(stage name, StageCount), ...]`` in pipeline order.
        num_sources: source tasks the head produced.
        skipped_sources: sources a checkpoint marked complete (not processed again).
        checkpoint: the completion plugin's summary (completed, pending, failed sources, ...).
        timings: seconds from the start of ``execute`` to ``cluster`` (connected),
            ``checkpoint_loaded``, ``head`` (sources known), ``sources_opened``,
            ``first_submit`` and ``end``.
        wall_time: seconds from the start of ``execute`` to its end.
        dashboard_link: the Dask dashboard URL, when there was one.
        stage_checkpoints: with stage checkpoints, entries saved and loaded per stage and the
            number of fallbacks (unusable entries).
        job_id: the job (resume token) when the run was a job.

    Example:
        >>> result = RunResult(["t1", "t2"])
        >>> result.stage_counts = [("reader", StageCount(tasks_in=1, tasks_out=2))]
        >>> len(result), result.counts_table()[0]["tasks_out"]
        (2, 2)
    """

    stage_counts: list[tuple[str, StageCount]]
    num_sources: int = 0
    skipped_sources: int = 0
    checkpoint: dict[str, Any] | None = None
    timings: dict[str, float]
    wall_time: float = 0.0
    dashboard_link: str | None = None
    stage_checkpoints: dict[str, Any] | None = None
    job_id: str | None = None

    def counts_table(self) -> list[dict[str, Any]]:
        """One dict per stage, ready for ``pandas.DataFrame``."""
        return [{"stage": name, **asdict(c)} for name, c in self.stage_counts]

    def _repr_html_(self) -> str:
        """A small per-stage table for Jupyter."""
        from html import escape

        columns = ["stage", "tasks_in", "tasks_out", "items_in", "items_out", "filtered",
                   "failed", "seconds"]
        head = "".join(f"<th>{c.replace('_', ' ')}</th>" for c in columns)
        rows = []
        for row in self.counts_table():
            cells = [escape(str(row["stage"]))] + [
                f"{row[c]:.2f}" if c == "seconds" else str(row[c]) for c in columns[1:]]
            rows.append("<tr>" + "".join(f"<td>{v}</td>" for v in cells) + "</tr>")
        caption = (f"{self.num_sources} sources ({self.skipped_sources} skipped), "
                   f"{len(self)} output tasks, {self.wall_time:.2f} s")
        if self.dashboard_link:
            caption += f' &middot; <a href="{escape(self.dashboard_link)}">dashboard</a>'
        return (f"<table><caption>{caption}</caption><thead><tr>{head}</tr></thead>"
                f"<tbody>{''.join(rows)}</tbody></table>")
