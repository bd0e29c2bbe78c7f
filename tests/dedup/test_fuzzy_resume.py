"""A checkpointed FuzzyDeduplicationWorkflow killed with SIGKILL (the whole process group of a
real subprocess: driver, scheduler, workers) and run again with the same paths gives the same
FuzzyDuplicateIds as a clean run: killed in the minhash phase (the completed partitions are
skipped, their files untouched), and killed after the LSH phase committed (LSH is skipped).

The subprocess slows a phase down so the kill lands inside it: each minhash partition sleeps
``SLOW_MINHASH`` seconds before computing its real signatures, and the driver sleeps
``SLOW_EDGES`` seconds before the buckets-to-edges phase. The state on disk is the real one."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import lmdb
import pyarrow.parquet as pq
import pytest

from curator_dask.dedup.phases import group_key
from curator_dask.dedup.synthetic import planted_corpus
from curator_dask.lineage import get_deterministic_hash
from tests.helpers import cli_env, completed_ids, poll_for

pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs POSIX SIGKILL")

FILES = 16

SCRIPT = '''
import os, sys, time
from dataclasses import dataclass

from curator_dask import DaskExecutor
from curator_dask.dedup.fuzzy import steps
from curator_dask.dedup.fuzzy.minhash import MinHashSignature
from curator_dask.dedup.fuzzy.workflow import FuzzyDeduplicationWorkflow


@dataclass(frozen=True)
class SlowMinHash(MinHashSignature):
    def __call__(self, frame):
        time.sleep(float(os.environ.get("SLOW_MINHASH", "0")))
        return super().__call__(frame)


class Workflow(FuzzyDeduplicationWorkflow):
    def minhash_spec(self):
        spec = super().minhash_spec()
        return SlowMinHash(**{name: getattr(spec, name) for name in spec.__dataclass_fields__})


if os.environ.get("SLOW_EDGES"):
    edges = steps.FuzzyRun._edges

    def slow_edges(self):
        time.sleep(float(os.environ["SLOW_EDGES"]))
        return edges(self)

    steps.FuzzyRun._edges = slow_edges


def slow_removal(seconds):
    from curator_dask.dedup import removal

    process = removal.TextDuplicatesRemovalStage.process

    def slow_process(self, task):
        time.sleep(seconds)
        return process(self, task)

    removal.TextDuplicatesRemovalStage.process = slow_process


if __name__ == "__main__":
    inp, root, ckpt = sys.argv[1:4]
    executor = DaskExecutor(n_workers=2, progress=False, max_in_flight=2, max_sources_per_task=1)
    if os.environ.get("SLOW_REMOVAL"):  # on the workers, where the removal stage runs
        executor.__enter__()
        executor.client.run(slow_removal, float(os.environ["SLOW_REMOVAL"]))
    result = Workflow(cache_path=root + "/cache", output_path=root + "/out", input_path=inp,
                      input_filetype="jsonl", input_blocksize=None, bands_per_iteration=10,
                      perform_removal=bool(os.environ.get("REMOVE")),
                      checkpoint_path=None if ckpt == "-" else ckpt).run(executor=executor)
    print("SKIPPED", ",".join(result.get_metadata("phases_skipped")), flush=True)
    print("DONE", result.get_metadata("num_duplicates"), flush=True)
    print("REMOVED", result.get_metadata("num_duplicates_removed"), flush=True)
'''


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """The corpus, the script, and a clean run's duplicate ids."""
    root = tmp_path_factory.mktemp("fuzzy-resume")
    planted = planted_corpus(320, seed=13, words=(80, 200), cluster_fraction=0.3)
    paths = planted.write_jsonl(str(root / "in"), n_files=FILES)
    (root / "run_fuzzy.py").write_text(SCRIPT)
    out = finish(start(root, root / "clean", "-"))
    assert "DONE" in out, out[-3000:]
    return root, paths, duplicate_ids(root / "clean")


def start(root: Path, work: Path, ckpt: str, **env: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(root / "run_fuzzy.py"), str(root / "in"),
                             str(work), ckpt], cwd=root, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True,
                            env=cli_env(env))


def finish(proc: subprocess.Popen) -> str:
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, out[-3000:]
    return out


def kill(proc: subprocess.Popen) -> None:
    os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=60)


def duplicate_ids(work: Path) -> list[int]:
    return pq.read_table(work / "out" / "FuzzyDuplicateIds").column(
        "_curator_dedup_id").to_pylist()


def test_killed_in_the_minhash_phase_resumes_to_the_clean_result(setup, tmp_path):
    root, paths, clean = setup
    ckpt = tmp_path / "ckpt"
    minhash_ckpt = ckpt / "minhash"
    proc = start(root, tmp_path, str(ckpt), SLOW_MINHASH="0.6")
    done = poll_for(lambda: len(completed_ids(minhash_ckpt)) >= 2 and completed_ids(
        minhash_ckpt), 120, "no minhash partition completed", on_timeout=proc.kill,
        ignore=(FileNotFoundError, lmdb.Error, UnicodeDecodeError))
    kill(proc)
    finished = completed_ids(minhash_ckpt)
    assert done <= finished and len(finished) < FILES, "the minhash phase ended before the kill"
    assert not (tmp_path / "out" / "FuzzyDuplicateIds").exists()
    source_of = {get_deterministic_hash([p]): p for p in paths}
    signature_files = {s: tmp_path / "cache" / "MinHashStage" / f"{group_key([source_of[s]])}"
                       ".parquet" for s in finished}
    before = {s: f.stat().st_mtime_ns for s, f in signature_files.items()}

    out = finish(start(root, tmp_path, str(ckpt)))
    assert "SKIPPED \n" in out  # nothing after phase 1 had been committed
    assert {s: f.stat().st_mtime_ns for s, f in signature_files.items()} == before
    assert duplicate_ids(tmp_path) == clean and clean


def test_killed_after_the_lsh_phase_resumes_without_redoing_it(setup, tmp_path):
    root, _, clean = setup
    ckpt = tmp_path / "ckpt"
    markers = tmp_path / "cache" / ".curator_dask" / "fuzzy"
    proc = start(root, tmp_path, str(ckpt), SLOW_EDGES="120")
    poll_for(lambda: (markers / "lsh.json").exists(), 180, "the LSH phase did not commit",
             on_timeout=proc.kill)
    kill(proc)
    assert sorted(p.name for p in markers.iterdir()) == ["lsh.json"]
    buckets = {p: p.stat().st_mtime_ns for p in (tmp_path / "cache" / "LSHStage").rglob("*")}

    out = finish(start(root, tmp_path, str(ckpt)))
    assert "SKIPPED lsh\n" in out
    assert {p: p.stat().st_mtime_ns for p in buckets} == buckets
    assert duplicate_ids(tmp_path) == clean

    # a third run finds every phase committed and changes nothing
    out = finish(start(root, tmp_path, str(ckpt)))
    assert "SKIPPED lsh,edges,components,identify\n" in out
    assert duplicate_ids(tmp_path) == clean


def kept_ids(work: Path) -> list[int]:
    return sorted(json.loads(line)["id"] for p in (work / "out" / "deduplicated").iterdir()
                  for line in p.read_text().splitlines() if line)


def test_killed_in_the_removal_resumes_and_reports_every_removal(setup, tmp_path):
    """Issue 32, item 10f: the sources the first run removed from count too."""
    root, _, clean = setup
    out = finish(start(root, tmp_path / "clean", "-", REMOVE="1"))
    assert f"REMOVED {len(clean)}\n" in out, out[-2000:]
    ckpt = tmp_path / "ckpt"
    proc = start(root, tmp_path, str(ckpt), REMOVE="1", SLOW_REMOVAL="0.6")
    poll_for(lambda: len(completed_ids(ckpt / "removal")) >= 2, 180,
             "no removal partition completed", on_timeout=proc.kill,
             ignore=(FileNotFoundError, lmdb.Error, UnicodeDecodeError))
    kill(proc)
    assert len(completed_ids(ckpt / "removal")) < FILES, "the removal ended before the kill"

    out = finish(start(root, tmp_path, str(ckpt), REMOVE="1"))
    assert "SKIPPED lsh,edges,components,identify\n" in out  # only the removal resumed
    assert f"REMOVED {len(clean)}\n" in out, out[-2000:]
    assert kept_ids(tmp_path) == kept_ids(tmp_path / "clean")
    out = finish(start(root, tmp_path, str(ckpt), REMOVE="1"))  # all committed: reported again
    assert "SKIPPED lsh,edges,components,identify,removal\n" in out
    assert f"REMOVED {len(clean)}\n" in out, out[-2000:]
