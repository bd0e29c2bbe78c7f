"""``status`` from Python: what ``python -m curator_dask status [JOB]`` shows, as objects that
render as HTML tables in a notebook and print as the command's text anywhere else.

The command prints text for a terminal; captured in a notebook cell it is a fixed-width table
whose headers a narrow output area cuts short. :func:`status` returns the same content as
:class:`JobStatus` (one job) or :class:`JobList` (the jobs table): Jupyter shows their
``_repr_html_`` (a real ``<table>``, every header in full), ``print`` and ``repr`` give the
command's text, and rich renders them as the command does.
"""

from __future__ import annotations

import io
import os
from html import escape
from typing import Any

from curator_dask.jobs import view
from curator_dask.jobs.index import checked_state, find_job, index_path, job_rows
from curator_dask.jobs.summary import SUMMARY_FILE, read_summary

_HTML_COLORS = {"yellow": "#b58900", "green": "#2a7d2a", "red": "#c0392b", "magenta": "#a03ca0",
                "white": "inherit"}


def _text(renderable: Any, width: int) -> str:
    from rich.console import Console

    buffer = io.StringIO()
    console = Console(file=buffer, width=width, color_system=None, force_jupyter=False,
                      force_terminal=False)
    console.print(renderable)
    return buffer.getvalue().rstrip("\n")


def _state_html(state: str) -> str:
    color = _HTML_COLORS[view.STATE_COLORS.get(state.split(" ")[0], "white")]
    return f"<b style='color:{color}'>{escape(state)}</b>"


def _table_html(header: list[str], rows: list[list[str]], numbers: range) -> str:
    """A ``<table>`` whose columns ``numbers`` are right-aligned (cells are HTML already)."""
    align = ["right" if i in numbers else "left" for i in range(len(header))]
    head = "".join(f"<th style='text-align:{a}'>{escape(h)}</th>" for a, h in zip(
        align, header, strict=True))
    body = "".join("<tr>" + "".join(f"<td style='text-align:{a}'>{cell}</td>" for a, cell in zip(
        align, row, strict=True)) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


class JobStatus:
    """One job's status (``status JOB``): HTML in a notebook, the command's text when printed.

    Example:
        >>> s = JobStatus({"job_id": "j1", "state": "stopped", "error": "RunStopped: received "
        ...                "SIGUSR1: stopped after 2 of 8 source partitions completed"})
        >>> "<b style='color:#a03ca0'>stopped</b>" in s._repr_html_()
        True
        >>> print(str(s).splitlines()[-1])
        stopped: received SIGUSR1; 2 of 8 source partitions completed
    """

    def __init__(self, summary: dict[str, Any]) -> None:
        self.summary = summary

    def __rich__(self) -> Any:
        return view.render(self.summary)

    def __str__(self) -> str:
        return _text(self.__rich__(), 160)

    __repr__ = __str__

    def _repr_html_(self) -> str:
        s = self.summary
        parts = [f"<p><b>job <code>{escape(str(s.get('job_id')))}</code></b> "
                 f"{_state_html(str(s.get('state', '?')))} pid {escape(str(s.get('pid')))} on "
                 f"{escape(str(s.get('host')))}, started {escape(str(s.get('started')))}, "
                 f"updated {escape(str(s.get('updated')))}</p>",
                 f"<p>{escape(view.sources_line(s))}</p>"]
        phases = view.phase_lines(s)
        if phases:  # a deduplication job: its phases instead of sources and stages
            parts[1] = "<p>" + "<br>".join(escape(line) for line in phases) + "</p>"
        rows = [[escape(r["stage"]) + (" <b style='color:#c0392b'>(raised)</b>" if r["raised"]
                                       else ""),
                 f"<progress max='{max(r['total'], 1)}' value='{r['done']}'></progress> "
                 f"{r['done']}/{r['total']}", *(escape(c) for c in r["cells"])]
                for r in view.stage_rows(s)]
        if phases:
            rows = []
        if rows:
            parts += [_table_html(list(view.STAGE_COLUMNS), rows, range(2, len(rows[0]))),
                      f"<p><small>{escape(view.LEGEND)}</small></p>"]
        elif not phases:
            parts.append("<p>stages: none ran yet</p>")
        if s.get("job_dir"):
            parts.append(f"<p>folder: <code>{escape(str(s['job_dir']))}</code></p>")
        if s.get("dashboard") and s.get("state") == "running":
            link = escape(str(s["dashboard"]))
            parts.append(f"<p>dashboard: <a href='{link}'>{link}</a></p>")
        reason = view.stop_reason(s)
        if reason is not None:
            parts.append(f"<p>{_state_html('stopped')}: {escape(reason)}</p>")
        elif s.get("error"):  # with its traceback: preformatted
            parts.append(f"<pre style='color:#c0392b'>error: {escape(str(s['error']))}</pre>")
        if s.get("resume_command") and s.get("state") != "completed":
            parts.append(f"<p>resume with: <code>{escape(str(s['resume_command']))}</code></p>")
        return "<div class='curator-dask-status'>" + "".join(parts) + "</div>"


class JobList:
    """The jobs table (``status`` without JOB): HTML in a notebook, the command's text when
    printed. ``hidden`` counts the index's jobs left out (other work dirs, not running);
    ``prog`` is the command the hints name.

    Example:
        >>> jobs = JobList([], hidden=2, work_dir="/data/jobs", index="/home/u/jobs.json")
        >>> print(jobs)
        no jobs in /data/jobs and none running; the job index /home/u/jobs.json has 2 more: `python -m curator_dask status --all` lists them
    """  # noqa: E501 (the line as it prints)

    def __init__(self, rows: list[dict[str, Any]], *, hidden: int, work_dir: str, index: str,
                 prog: str = "python -m curator_dask") -> None:
        self.rows, self.hidden, self.prog = rows, hidden, prog
        self.work_dir, self.index = os.path.abspath(work_dir), index

    def empty_line(self) -> str:
        """What ``status`` says when it lists no job: where it looked."""
        if not self.hidden:
            return f"no jobs in {self.work_dir} or in the job index {self.index}"
        return (f"no jobs in {self.work_dir} and none running; the job index {self.index} has "
                f"{self.hidden} more: `{self.prog} status --all` lists them")

    def __rich__(self) -> Any:
        from rich.console import Group
        from rich.text import Text

        if not self.rows:
            return Text(self.empty_line())
        parts = [view.jobs_table(self.rows)]
        if self.hidden:
            parts.append(Text(view.hidden_line(self.hidden, self.prog), style="dim"))
        return Group(*parts)

    def __str__(self) -> str:
        return _text(self.__rich__(), 150)

    __repr__ = __str__

    def _repr_html_(self) -> str:
        if not self.rows:
            return f"<p>{escape(self.empty_line())}</p>"
        rows = []
        for r in self.rows:
            src = r.get("sources") or {}
            rows.append([f"<code>{escape(r['job_id'])}</code>", _state_html(r["state"]),
                         escape(view.short_time(r.get("started"))),
                         escape(view.short_time(r.get("ended"), r.get("started"))),
                         *(escape(str(src.get(k, ""))) for k in ("total", "skipped",
                                                                 "completed", "failed")),
                         f"<code>{escape(os.path.dirname(r['job_dir']))}</code>"])
        hint = f"<p><small>{escape(view.hidden_line(self.hidden, self.prog))}</small></p>" if (
            self.hidden) else ""
        return _table_html(list(view.JOB_COLUMNS), rows, range(4, 8)) + hint


def load_job(job_dir: str) -> dict[str, Any] | None:
    """The job's summary with its state checked and ``job_dir`` added; ``None`` when it has
    none (yet)."""
    summary = read_summary(os.path.join(job_dir, SUMMARY_FILE))
    if summary is None:
        return None
    return {**summary, "state": checked_state(summary), "job_dir": job_dir}


def status(job: str | None = None, *, work_dir: str | os.PathLike[str] | None = None,
           all_jobs: bool = False) -> JobStatus | JobList:
    """What ``python -m curator_dask status [JOB] [--work-dir DIR] [--all]`` shows, for a
    notebook (the last line of a cell renders it as HTML) or ``print``.

    Args:
        job: a job id: that job's state and per-stage table. ``None``: the jobs table (the
            work dir's jobs and the running ones of the job index).
        work_dir: where job folders are (default: config ``jobs.work-dir``); ``JOB`` is looked
            up there, then in the job index.
        all_jobs: without ``job``, every job of the job index (``status --all``).

    Raises:
        FileNotFoundError: no job ``job`` in ``work_dir`` or in the index, or it has no summary.
        ValueError: the index has job ``job`` in several folders (give ``work_dir``).

    Example:
        >>> from curator_dask.jobs.status import status
        >>> status("resume-demo", work_dir="jobs")  # doctest: +SKIP
    """
    from curator_dask import config

    work_dir = os.fspath(work_dir) if work_dir is not None else config.get("jobs.work-dir")
    if job is None:
        rows, hidden = job_rows(work_dir, all_jobs=all_jobs)
        return JobList(rows, hidden=hidden, work_dir=work_dir, index=index_path())
    found = find_job(job, work_dir)
    if not found:
        msg = (f"no job {job!r} in {os.path.abspath(work_dir)} or in the job index "
               f"{index_path()}: give work_dir= the folder the job ran in")
        raise FileNotFoundError(msg)
    if len(found) > 1:
        msg = (f"job {job!r} is in several folders: {', '.join(found)}; give work_dir= the "
               "folder above the job's")
        raise ValueError(msg)
    summary = load_job(found[0])
    if summary is None:
        msg = f"job {job!r} in {found[0]} has no summary yet: it has not started"
        raise FileNotFoundError(msg)
    return JobStatus(summary)
