"""One run at a time in a deduplication cache (issue 32, item 10d): a second run on a cache that
a live run holds is refused at once, naming the owner's host and pid, and the first run's result
is a clean run's; a lock left by a killed process of this host is taken over with a warning; a
lock of another host is refused with the file to delete. The first run is a real subprocess;
the lock files are the real ones."""

from __future__ import annotations

import json
import logging
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from curator_dask.dedup import ExactDeduplicationWorkflow, FuzzyDeduplicationWorkflow
from curator_dask.dedup.synthetic import planted_corpus
from curator_dask.errors import CuratorDaskError
from tests.helpers import cli_env, poll_for

LOCK = Path(".curator_dask") / "lock.json"

# A fuzzy run in a fresh interpreter whose minhash partitions each sleep a second (only so that
# the second run lands while it holds the cache).
RUNNER = textwrap.dedent("""
    import sys, time
    from dataclasses import dataclass
    from curator_dask import DaskExecutor
    from curator_dask.dedup.fuzzy.minhash import MinHashSignature
    from curator_dask.dedup.fuzzy.workflow import FuzzyDeduplicationWorkflow

    @dataclass(frozen=True)
    class SlowMinHash(MinHashSignature):
        def __call__(self, frame):
            time.sleep(1.0)
            return super().__call__(frame)

    class Workflow(FuzzyDeduplicationWorkflow):
        def minhash_spec(self):
            spec = super().minhash_spec()
            return SlowMinHash(**{k: getattr(spec, k) for k in spec.__dataclass_fields__})

    if __name__ == "__main__":
        inp, cache, out = sys.argv[1:4]
        executor = DaskExecutor(n_workers=1, progress=False, max_sources_per_task=1)
        result = Workflow(cache_path=cache, output_path=out, input_path=inp,
                          input_filetype="jsonl", input_blocksize=None).run(executor=executor)
        print("DONE", result.get_metadata("num_duplicates"), flush=True)
""")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("lock")
    planted_corpus(160, seed=3, words=(60, 120), cluster_fraction=0.3).write_jsonl(
        str(root / "in"), n_files=8)
    return root / "in"


def fuzzy(cache: Path, out: Path, inp: Path) -> FuzzyDeduplicationWorkflow:
    return FuzzyDeduplicationWorkflow(cache_path=str(cache), output_path=str(out),
                                      input_path=str(inp), input_filetype="jsonl",
                                      input_blocksize=None)


def ids(out: Path) -> list[int]:
    return pq.read_table(out / "FuzzyDuplicateIds").column("_curator_dedup_id").to_pylist()


def test_a_second_run_on_a_cache_in_use_is_refused_and_the_first_is_right(executor, corpus,
                                                                          tmp_path):
    (tmp_path / "runner.py").write_text(RUNNER)
    cache = tmp_path / "cache"
    first = subprocess.Popen([sys.executable, str(tmp_path / "runner.py"), str(corpus),
                              str(cache), str(tmp_path / "first")], cwd=tmp_path,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             env=cli_env())
    try:
        poll_for(lambda: (cache / "MinHashStage").exists(), 120, "the first run did not start",
                 on_timeout=first.kill)
        with pytest.raises(RuntimeError, match="in use") as caught:
            fuzzy(cache, tmp_path / "second", corpus).run(executor=executor)
        message = str(caught.value)
        assert isinstance(caught.value, CuratorDaskError)
        assert f"pid {first.pid}" in message and socket.gethostname() in message, message
        assert "another cache_path" in message
        assert not (tmp_path / "second").exists()
        out, _ = first.communicate(timeout=300)
    finally:
        if first.poll() is None:
            first.kill()
    assert first.returncode == 0 and "DONE" in out, out[-3000:]
    assert not (cache / LOCK).exists()  # released at the end
    fuzzy(tmp_path / "clean-cache", tmp_path / "clean", corpus).run(executor=executor)
    assert ids(tmp_path / "first") == ids(tmp_path / "clean")


def test_a_lock_left_by_a_killed_process_is_taken_over(executor, corpus, tmp_path, caplog):
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    dead_pid = int(gone.stdout)  # that process has exited
    cache = tmp_path / "cache"
    (cache / LOCK).parent.mkdir(parents=True)
    (cache / LOCK).write_text(json.dumps({"host": socket.gethostname(), "pid": dead_pid,
                                          "token": "x", "workflow": "fuzzy_deduplication",
                                          "started": "2026-01-01T00:00:00"}))
    with caplog.at_level(logging.WARNING, logger="curator_dask.dedup"):
        fuzzy(cache, tmp_path / "out", corpus).run(executor=executor)
    assert any(f"pid {dead_pid}" in r.getMessage() and "taking it over" in r.getMessage()
               for r in caplog.records), [r.getMessage() for r in caplog.records]
    assert (tmp_path / "out" / "FuzzyDuplicateIds").exists()
    assert not (cache / LOCK).exists()


def test_a_lock_of_another_host_is_refused_with_the_file_to_delete(executor, corpus, tmp_path):
    cache = tmp_path / "cache"
    (cache / LOCK).parent.mkdir(parents=True)
    (cache / LOCK).write_text(json.dumps({"host": "node-elsewhere", "pid": 4242,
                                          "token": "x", "workflow": "exact_deduplication",
                                          "started": "2026-01-01T00:00:00"}))
    workflow = ExactDeduplicationWorkflow(output_path=str(tmp_path / "out"),
                                          input_path=str(corpus), input_filetype="jsonl",
                                          cache_path=str(cache))
    with pytest.raises(RuntimeError, match="node-elsewhere, pid 4242") as caught:
        workflow.run(executor=executor)
    assert str(cache / LOCK) in str(caught.value)
    assert (cache / LOCK).exists()  # not ours to remove
