"""A checkpointed ``ExactDeduplicationWorkflow`` killed with SIGKILL in each phase and run again
with the same paths gives the ``ExactDuplicateIds`` of a clean run; a committed duplicates phase
is reused, one with other parameters redone without stale parts."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import lmdb
import pyarrow.parquet as pq
import pytest

from curator_dask.dedup import ExactDeduplicationWorkflow
from tests.dedup.exact_corpus import write_corpus
from tests.helpers import REPO_ROOT, cli_env, completed_ids, poll_for

pytestmark = pytest.mark.slow

FILES, NPARTS = 6, 4
OPTIONS = dict(input_filetype="jsonl", input_blocksize="1kB",  # each file its own group
               normalize_text=True, total_nparts=NPARTS)
SUMMARY = re.compile(r"(\d+) source partitions: (\d+) already complete \(skipped\), (\d+) to")
MARKER = "exact_cache/ExactDuplicateIds.committed.json"

# The workflow in a fresh interpreter, as a user's script runs it. ``slow`` makes one phase
# take seconds (a sleep in each worker before every hash partition or every part written:
# only so that the kill lands in that phase; the kill itself is a real SIGKILL).
RUNNER = textwrap.dedent("""
    import logging, sys
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    logging.getLogger("curator_dask").setLevel(logging.INFO)
    from curator_dask import DaskExecutor
    from curator_dask.dedup import ExactDeduplicationWorkflow

    def slow_down(where, seconds):
        import time
        from curator_dask.dedup import exact_ids
        cls = exact_ids.ExactHash if where == "hash" else exact_ids._PartWriter
        original = cls.__call__
        def delayed(self, *args, **kwargs):
            time.sleep(seconds)
            return original(self, *args, **kwargs)
        cls.__call__ = delayed

    if __name__ == "__main__":
        inp, out, ckpt, slow = sys.argv[1:5]
        with DaskExecutor(n_workers=2, progress=False) as executor:
            if slow != "none":
                executor.client.run(slow_down, slow, 1.5)
            result = ExactDeduplicationWorkflow(output_path=out, input_path=inp,
                                                checkpoint_path=ckpt, **OPTIONS).run(
                executor=executor)
        print("DUPLICATES", result.metadata["num_duplicates"])
""").replace("**OPTIONS", ", ".join(f"{k}={v!r}" for k, v in OPTIONS.items()))


def start(corpus: Path, root: Path, slow: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", RUNNER, str(corpus), str(root / "out"), str(root / "ckpt"),
         slow], cwd=REPO_ROOT, env=cli_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True, start_new_session=True)


def rerun(corpus: Path, root: Path) -> str:
    """The same run again, not slowed down, to its end; its output."""
    proc = start(corpus, root, "none")
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, out[-4000:]
    return out


def kill(proc: subprocess.Popen) -> None:
    os.killpg(proc.pid, signal.SIGKILL)  # the driver, its cluster and its workers
    proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL


def parts(out: Path) -> dict[str, list]:
    folder = out / "ExactDuplicateIds"
    return {p.name: pq.read_table(p).column("_curator_dedup_id").to_pylist()
            for p in sorted(folder.glob("*.parquet"))}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    return write_corpus(tmp_path_factory.mktemp("resume") / "in", files=FILES)


@pytest.fixture(scope="module")
def clean(executor, corpus) -> dict[str, list]:
    """A clean run's parts (ids hash absolute paths: the same input folder for every run)."""
    out = corpus.parent / "clean"
    ExactDeduplicationWorkflow(output_path=str(out), input_path=str(corpus),
                               **OPTIONS).run(executor=executor)
    found = parts(out)
    assert len(found) == NPARTS and sum(map(len, found.values())) > 0
    return found


def test_killed_while_hashing_resumes_with_the_clean_runs_ids(corpus, clean, tmp_path):
    root = tmp_path
    proc = start(corpus, root, "hash")
    poll_for(lambda: completed_ids(root / "ckpt" / "exact"), 120,
             "no file group was recorded complete", on_timeout=proc.kill,
             ignore=(FileNotFoundError, lmdb.Error, UnicodeDecodeError))
    kill(proc)
    finished = completed_ids(root / "ckpt" / "exact")
    assert 1 <= len(finished) < FILES
    assert not (root / "out" / "ExactDuplicateIds").exists()  # killed in phase 1

    text = rerun(corpus, root)
    assert SUMMARY.search(text).groups() == (str(FILES), str(len(finished)),
                                             str(FILES - len(finished))), text[-4000:]
    assert parts(root / "out") == clean


def test_killed_while_writing_ids_redoes_that_phase_only(corpus, clean, tmp_path):
    root = tmp_path
    proc = start(corpus, root, "parts")
    poll_for(lambda: list((root / "out" / "ExactDuplicateIds").glob("part.*.parquet")), 180,
             "no part was written", on_timeout=proc.kill)
    kill(proc)
    assert not (root / "ckpt" / MARKER).exists()  # killed before the phase committed
    assert len(list((root / "out" / "ExactDuplicateIds").glob("part.*.parquet"))) < NPARTS

    text = rerun(corpus, root)
    # phase 1 was complete: nothing hashed again; the ids were written again, as a clean run's
    assert SUMMARY.search(text).groups() == (str(FILES), str(FILES), "0"), text[-4000:]
    assert (root / "ckpt" / MARKER).exists()
    assert parts(root / "out") == clean


def test_a_committed_phase_is_reused_and_other_parameters_redo_it(executor, corpus, clean,
                                                                   tmp_path):
    out, ckpt = tmp_path / "out", str(tmp_path / "ckpt")

    def run(**kw):
        return ExactDeduplicationWorkflow(output_path=str(out), input_path=str(corpus),
                                          checkpoint_path=ckpt, **{**OPTIONS, **kw}).run(
                                              executor=executor)

    first = run()
    assert parts(out) == clean
    stamps = {p.name: p.stat().st_mtime_ns for p in (out / "ExactDuplicateIds").iterdir()}
    again = run()
    assert again.metadata["num_duplicates"] == first.metadata["num_duplicates"]
    assert {p.name: p.stat().st_mtime_ns
            for p in (out / "ExactDuplicateIds").iterdir()} == stamps  # not rewritten
    # a removed part is noticed: the phase is redone
    (out / "ExactDuplicateIds" / "part.1.parquet").unlink()
    run()
    assert parts(out) == clean
    # other parameters: redone, and no part of the earlier run is left
    run(total_nparts=2)
    assert sorted(parts(out)) == ["part.0.parquet", "part.1.parquet"]
    assert sorted(i for p in parts(out).values() for i in p) == sorted(
        i for p in clean.values() for i in p)
