"""`report JOB` of a job with several attempts: every section names the attempts it covers, the
header gives the first attempt's start, one attempt's counts agree across sections, and the
plots' legends sit beside the data, not on it."""

from __future__ import annotations

import json
import re
import signal
from html.parser import HTMLParser
from pathlib import Path

import pytest

from curator_dask.jobs.events import read_events
from curator_dask.jobs.report import render_report
from curator_dask.sample_data import generate_jsonl
from tests.helpers import cli, poll_for, slow_pipeline, start_cli

COVERS = re.compile(r"\((attempt \d+ of (\d+)|all (\d+) attempts|"
                    r"each of the (\d+) attempts, and all \4 attempts)\)$")


class Sections(HTMLParser):
    """The report's ``<h2>`` headings, the header paragraph, and each table's rows (cell
    texts) under the heading it follows."""

    def __init__(self) -> None:
        super().__init__()
        self.headings: list[str] = []
        self.header = ""
        self.tables: dict[str, list[list[str]]] = {}
        self._text: list[str] | None = None
        self._row: list[str] | None = None
        self._in: str | None = None

    def handle_starttag(self, tag, attrs):
        if tag == "h2" or (tag == "p" and ("class", "header") in attrs):
            self._in, self._text = tag, []
        elif tag == "table":
            self.tables.setdefault(self._heading, [])
        elif tag == "tr":
            self._row = []
        elif tag in ("td", "th"):
            self._text = []

    @property
    def _heading(self) -> str:
        return self.headings[-1] if self.headings else ""  # a table before any heading

    def handle_data(self, data):
        if self._text is not None:
            self._text.append(data)

    def handle_endtag(self, tag):
        text = "".join(self._text or [])
        if tag == "h2" and self._in == "h2":
            self.headings.append(text)
            self._in, self._text = None, None
        elif tag == "p" and self._in == "p":
            self.header = text
            self._in, self._text = None, None
        elif tag in ("td", "th") and self._row is not None:
            self._row.append(text)
            self._text = None
        elif tag == "tr" and self._row is not None:
            self.tables[self._heading].append(self._row)
            self._row = None


def parse(html: str) -> Sections:
    body = html.split("</head>", 1)[1]  # the head holds bokeh's JavaScript, tags and all
    parser = Sections()
    parser.feed(re.sub(r"<script.*?</script>", "", body, flags=re.S))
    return parser


def table(sections: Sections, title: str) -> list[dict[str, str]]:
    """The rows of the table under the heading that starts with ``title``, as dicts."""
    heading = next(h for h in sections.headings if h.startswith(title))
    header, *rows = sections.tables[heading]
    return [dict(zip(header, row, strict=True)) for row in rows]


def figures(html: str) -> list[dict]:
    """The bokeh figures of the report's embedded document."""
    docs = json.loads(re.search(r"docs_json = '(.*?)';\n", html, re.S).group(1))
    found: list[dict] = []

    def walk(node):
        if isinstance(node, dict):
            if node.get("name") == "Figure":
                found.append(node["attributes"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(docs)
    return found


@pytest.fixture(scope="module")
def two_attempts(tmp_path_factory) -> Path:
    """A real CLI job: stopped with SIGUSR1 after a few sources, then resumed to the end."""
    root = tmp_path_factory.mktemp("attempts")
    (root / "pipe.py").write_text(slow_pipeline(0.5, "attempts"))
    generate_jsonl(str(root / "input"), files=10, docs_per_file=2, seed=20)
    run = ("run", "pipe.py:build", "--workers", "1", "--no-progress")
    proc = start_cli(*run, "--job-id", "two", cwd=root)
    poll_for(lambda: len(list((root / "output").glob("*.jsonl"))) >= 3, 90,
             "fewer than 3 outputs appeared", on_timeout=proc.kill)
    proc.send_signal(signal.SIGUSR1)
    _, stderr = proc.communicate(timeout=90)
    assert proc.returncode == 3, stderr[-2000:]
    again = cli(*run, "--resume", "two", cwd=root, timeout=180)
    assert again.returncode == 0, again.stderr[-2000:]
    report = cli("report", "two", cwd=root, timeout=120)
    assert report.returncode == 0, report.stderr
    return root / "curator-dask-jobs" / "two"


@pytest.mark.slow
def test_every_section_names_its_attempts_and_the_header_the_first_start(two_attempts):
    html = (two_attempts / "report.html").read_text()
    sections = parse(html)
    events = read_events(str(two_attempts / "events.jsonl"))
    starts = [e for e in events if e["type"] in ("job_start", "run_resume")]
    assert [e["type"] for e in starts] == ["job_start", "run_resume"]
    assert len(sections.headings) >= 5
    for heading in sections.headings:
        m = COVERS.search(heading)
        assert m, f"the section {heading!r} does not say which attempts it covers"
        assert {g for g in m.groups()[1:] if g} == {"2"}, heading
    # the first attempt's start, and the last one's, to the second
    assert f"the first started {starts[0]['ts'][:19]}Z" in sections.header
    assert f"the last (attempt 2 of 2) started {starts[1]['ts'][:19]}Z" in sections.header
    attempts = table(sections, "Attempts")
    assert [(a["attempt"], a["run id"], a["outcome"]) for a in attempts] == [
        ("1 of 2", starts[0]["run_id"], "stopped"), ("2 of 2", starts[1]["run_id"], "completed")]
    assert attempts[1]["sources skipped"] == attempts[0]["sources completed"]
    assert sum(int(a["sources completed"]) for a in attempts) == 10


@pytest.mark.slow
def test_counts_of_one_attempt_agree_across_sections(two_attempts):
    sections = parse((two_attempts / "report.html").read_text())
    assert any(h == "Stages (attempt 2 of 2)" for h in sections.headings), sections.headings
    stages = {r["stage"]: r for r in table(sections, "Stages")}
    durations = table(sections, "Dask task durations per stage")
    attempts = {a["attempt"]: a for a in table(sections, "Attempts")}
    by = {(r["attempt"], r["stage"]): r for r in durations}
    timed = ["jsonl_reader", "slow", "jsonl_writer"]  # file_partitioning runs on the driver
    assert sorted({s for _, s in by}) == sorted(timed)
    for stage in timed:
        # the stage table (attempt 2) and the durations table's attempt-2 rows: same tasks in
        assert by[("2 of 2", stage)]["tasks in"] == stages[stage]["tasks in"]
        # all attempts = the sum of each attempt, for Dask tasks and tasks in alike
        for column in ("Dask tasks", "tasks in"):
            assert int(by[("all 2", stage)][column]) == sum(
                int(by[(f"{n} of 2", stage)][column]) for n in (1, 2))
        for n in (1, 2):
            assert by[(f"{n} of 2", stage)]["Dask tasks"] == attempts[f"{n} of 2"]["Dask tasks"]
    # every source was read once over the two attempts: the drain finished what was running
    assert int(by[("all 2", "jsonl_reader")]["tasks in"]) == 10


@pytest.mark.slow
def test_plot_legends_sit_beside_the_data_and_attempt_starts_are_marked(two_attempts):
    figs = figures((two_attempts / "report.html").read_text())
    assert len(figs) == 2
    for fig in figs:  # in the side panel to the right, not in the plot area ("center")
        assert [r["name"] for r in fig.get("right", [])] == ["Legend"]
        assert "Legend" not in [r["name"] for r in fig.get("center", [])]
    titles = [f["title"]["attributes"]["text"] for f in figs]
    assert titles == ["Rows processed by fusion group (cumulative), all 2 attempts",
                      "Task durations (one point per Dask task and stage), all 2 attempts"]
    for fig in figs:
        spans = [r for r in fig["center"] if r["name"] == "Span"]
        assert len(spans) == 2  # one dashed line where each attempt started


def test_attempts_from_records_of_three_attempts_one_killed(tmp_path):
    """Written records (no cluster): the second attempt's driver was killed (no end record);
    the report says so, and counts each attempt's own records."""
    job = tmp_path / "job"
    job.mkdir()

    def rec(seq, run, type_, ts, **fields):
        return {"seq": seq, "job_id": "job", "run_id": run, "type": type_,
                "ts": f"2026-12-01T10:{ts}.000Z", **fields}

    def task(seq, run, ts, task_id, ended):
        return rec(seq, run, "stage_complete", ts, scope="task", stage="read", index=1,
                   task_id=task_id, duration=0.5, rows_in=1, rows_out=3, tasks_in=2,
                   ended=ended)

    events = [rec(1, "r1", "job_start", "00:00"), rec(2, "r1", "sources_planned", "00:01",
                                                      total=3, skipped=0, to_process=3),
              task(3, "r1", "00:02", "a", 1.0),
              rec(4, "r1", "source_complete", "00:02", scope="task", count=1),
              rec(5, "r1", "job_failed", "00:03", error="StageError: boom"),
              rec(6, "r2", "run_resume", "01:00"), task(7, "r2", "01:02", "b", 2.0),
              rec(8, "r3", "run_resume", "02:00"), task(9, "r3", "02:02", "c", 3.0),
              task(10, "r3", "02:03", "d", 4.0),
              rec(11, "r3", "source_complete", "02:03", scope="task", count=2),
              rec(12, "r3", "job_complete", "02:04")]
    (job / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    summary = {"job_id": "job", "run_id": "r3", "state": "completed", "host": "h",
               "started": "2026-12-01T10:02:00Z", "ended": "2026-12-01T10:02:04Z",
               "stages": [{"stage": "read", "tasks_in": 4}]}
    (job / "job_summary.json").write_text(json.dumps(summary))
    sections = parse(render_report(str(job)))
    assert all(COVERS.search(h) for h in sections.headings), sections.headings
    assert "the first started 2026-12-01T10:00:00Z" in sections.header
    assert "Error (attempt" not in " ".join(sections.headings)  # the job completed
    by = {(r["attempt"], r["stage"]): r for r in table(sections, "Dask task durations")}
    assert [by[(k, "read")]["Dask tasks"] for k in ("1 of 3", "2 of 3", "3 of 3", "all 3")] == [
        "1", "1", "2", "4"]
    assert by[("3 of 3", "read")]["tasks in"] == "4" == table(sections, "Stages")[0]["tasks in"]
    notes = table(sections, "Warnings and failures (all 3 attempts)")
    assert [(n["attempt"], n["type"]) for n in notes] == [("1 of 3 (r1)", "job_failed")]
    attempts = {r["attempt"]: r for r in table(sections, "Attempts")}
    assert [(a["outcome"], a["sources completed"], a["Dask tasks"]) for a in attempts.values()
            ] == [("failed", "1", "1"), ("no end recorded", "0", "1"), ("completed", "2", "2")]

    from curator_dask.jobs.report_data import job_attempts

    assert [(a.label, a.outcome, a.completed, a.dask_tasks)
            for a in job_attempts(events, summary)] == [
        ("attempt 1 of 3", "failed", 1, 1), ("attempt 2 of 3", "no end recorded", 0, 1),
        ("attempt 3 of 3", "completed", 2, 2)]
