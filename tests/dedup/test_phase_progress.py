"""Every phase of both deduplication workflows reports its progress (dedup/progress.py): a line
per phase with its counts where no bar is drawn, a bar per phase where one is, and, in a job,
phase events in ``events.jsonl`` that ``python -m curator_dask status JOB`` shows.

Real runs on the shared executor, on a small planted corpus (curator_dask/dedup/synthetic.py).
"""

from __future__ import annotations

import logging
import re

import pytest

from curator_dask.dedup import ExactDeduplicationWorkflow, FuzzyDeduplicationWorkflow
from curator_dask.dedup.synthetic import planted_corpus
from curator_dask.jobs.events import read_job_events

N_DOCS = 60
FUZZY_PHASES = {"minhash": "documents", "lsh": "documents", "edges": "files",
                "jaccard": "pairs", "components": "edges", "identify": "ids"}


@pytest.fixture(scope="module")
def corpus_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("progress-corpus")
    corpus = planted_corpus(N_DOCS, seed=3, words=(150, 300), similarity=0.9)
    corpus.write_jsonl(str(folder), n_files=3)
    return folder


def _by_phase(events, type_):
    return {e["phase"]: e for e in events if e["type"] == type_}


def test_fuzzy_phases_say_their_progress_and_write_job_events(executor, corpus_dir, tmp_path,
                                                               caplog, capsys):
    from curator_dask.cli.main import main

    work_dir = tmp_path / "jobs"
    wf = FuzzyDeduplicationWorkflow(
        cache_path=str(tmp_path / "cache"), output_path=str(tmp_path / "out"),
        input_path=str(corpus_dir), input_filetype="jsonl", input_blocksize="64KiB",
        false_positive_check=True, jaccard_threshold=0.7)
    with caplog.at_level(logging.INFO, logger="curator_dask.dedup"):
        result = wf.run(executor=executor, work_dir=str(work_dir), job_id="fuzzy-progress")
    assert result.get_metadata("num_duplicates") > 0

    # a line per phase, with its counts (the shared executor draws no bars: lines instead)
    lines = [r.getMessage() for r in caplog.records if r.name == "curator_dask.dedup.progress"]
    for phase, unit in FUZZY_PHASES.items():
        ends = [line for line in lines if line.startswith(
            f"fuzzy deduplication phase {phase} completed: ")]
        assert len(ends) == 1, (phase, lines)
        assert re.search(rf"completed: [\d,]+ {unit} in [\d.]+ s, [\d,]+ {unit}/s$", ends[0])
    assert f"phase minhash completed: {N_DOCS} documents" in "\n".join(lines)
    assert f"phase lsh completed: {N_DOCS} documents" in "\n".join(lines)
    # while it ran: done of total, with the share and an ETA (said at the first partition)
    assert any(re.search(r"phase jaccard: [\d,]+/[\d,]+ pairs \(\d+%\), [\d,]+ pairs/s, "
                         r"ETA \d+:\d\d:\d\d$", line) for line in lines), lines

    job = work_dir / "fuzzy-progress"
    events = read_job_events(str(job))
    started, finished = _by_phase(events, "phase_started"), _by_phase(events, "phase_finished")
    assert set(started) == set(finished) == set(FUZZY_PHASES)
    assert [e["phase"] for e in events if e["type"] == "phase_started"] == list(FUZZY_PHASES)
    for phase, unit in FUZZY_PHASES.items():
        end = finished[phase]
        assert (end["state"], end["unit"], end["workflow"]) == (
            "completed", unit, "fuzzy deduplication")
        assert end["rate"] is not None
        assert events.index(end) > events.index(started[phase])  # order, not time
    phases = list(FUZZY_PHASES)
    for before, after in zip(phases, phases[1:], strict=False):  # one phase at a time
        assert events.index(finished[before]) < events.index(started[after])
    for phase in ("lsh", "edges", "jaccard"):  # followed partition by partition: all of them
        assert finished[phase]["done"] == finished[phase]["total"] > 0, finished[phase]
    assert finished["lsh"]["done"] == N_DOCS
    pairs = finished["jaccard"]["total"]
    assert pairs >= result.get_metadata("num_candidate_pairs") > 0
    progress = [e for e in events if e["type"] == "phase_progress" and e["phase"] == "jaccard"]
    assert progress and all(0 <= e["done"] <= pairs == e["total"] for e in progress)
    assert events[-1]["type"] == "job_complete"

    # `status JOB` shows the phases as the events recorded them
    capsys.readouterr()
    assert main(["status", "fuzzy-progress", "--work-dir", str(work_dir)]) == 0
    shown = capsys.readouterr().out
    assert "fuzzy deduplication: 6 phases" in shown
    assert f"phase jaccard: completed, {pairs:,}/{pairs:,} pairs (100%)" in shown
    assert f"phase lsh: completed, {N_DOCS}/{N_DOCS} documents (100%)" in shown
    assert "sources:" not in shown  # a deduplication job has phases, not a pipeline's sources


def test_exact_phases_draw_a_bar_each(executor, corpus_dir, tmp_path, capsys):
    """Where bars are shown, each phase gets one (tqdm.auto, as the engine's stage bars), with
    its counts; the job's events say the same."""
    work_dir = tmp_path / "jobs"
    wf = ExactDeduplicationWorkflow(output_path=str(tmp_path / "out"),
                                    input_path=str(corpus_dir), input_filetype="jsonl",
                                    input_blocksize="64KiB", perform_removal=True)
    shown = executor.progress
    executor.progress = True  # the shared executor's bars, for this run only
    try:
        wf.run(executor=executor, work_dir=str(work_dir), job_id="exact-progress")
    finally:
        executor.progress = shown
    err = capsys.readouterr().err
    for phase in ("hash", "duplicate_ids", "removal"):
        bar = [line for line in re.split(r"[\r\n]", err) if line.startswith(phase)]
        assert any(f"{N_DOCS}/{N_DOCS} [" in line and "documents/s]" in line for line in bar), (
            phase, err[-2000:])
    finished = _by_phase(read_job_events(str(work_dir / "exact-progress")), "phase_finished")
    assert {p: (e["done"], e["total"]) for p, e in finished.items()} == {
        p: (N_DOCS, N_DOCS) for p in ("hash", "duplicate_ids", "removal")}


def test_status_shows_the_phase_running(tmp_path):
    """While a phase runs, the job's summary names it with its done, total and ETA (no cluster
    needed: the reporter and the job are the real ones, the phase's work is counted by hand)."""
    from curator_dask.dedup.progress import job_reporter
    from curator_dask.jobs.status import status

    work_dir = tmp_path / "jobs"
    with job_reporter("fuzzy deduplication", {"num_bands": 20}, None, work_dir=str(work_dir),
                      job_id="running-phase", checkpoint_path=None) as reporter:
        with reporter.phase("lsh", "documents") as lsh:
            lsh.start(total=10, per=20)
            lsh.advance(200, say=False)
        with reporter.phase("jaccard", "pairs") as jaccard:
            jaccard.start(total=1000)  # writes the summary at once
            shown = str(status("running-phase", work_dir=str(work_dir)))
            jaccard.advance(1000, say=False)
    assert "fuzzy deduplication: phase jaccard running (2 so far)" in shown
    assert "phase jaccard: running, 0/1,000 pairs (0%)" in shown and "ETA" in shown
    assert "phase lsh: completed, 10/10 documents (100%)" in shown
    done = str(status("running-phase", work_dir=str(work_dir)))
    assert "phase jaccard: completed, 1,000/1,000 pairs (100%)" in done
    assert "completed" in done.splitlines()[0]
    # a workflow given no checkpoint_path names none (its phases keep their own records)
    from curator_dask.jobs.summary import read_summary

    job_dir = work_dir / "running-phase"
    assert read_summary(str(job_dir / "job_summary.json"))["checkpoint"] is None
    assert not (job_dir / "checkpoint").exists()
    start = [e for e in read_job_events(str(job_dir)) if e["type"] == "job_start"]
    assert [e["checkpoint"] for e in start] == [None]
