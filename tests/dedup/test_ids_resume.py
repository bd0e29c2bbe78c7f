"""A checkpointed run that generates ids, killed with SIGKILL part-way and resumed: the
registry saved with the checkpoint gives every completed source the same ids as the first run,
and the resumed run's new ranges do not overlap them."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import lmdb
import pytest

from curator_dask.ids.generator import CURATOR_DEDUP_ID_STR, IdGeneratorBase
from curator_dask.ids.run import checkpoint_file
from curator_dask.lineage import get_deterministic_hash
from curator_dask.sample_data import generate_jsonl
from tests.helpers import cli_env, completed_ids, poll_for

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs POSIX SIGKILL"),
]

FILES, DOCS = 12, 4

SCRIPT = '''
import sys, time
from dataclasses import dataclass

from curator_dask import DaskExecutor, JsonlReader, JsonlWriter, Pipeline
from curator_dask.ids import generator as ids
from curator_dask.stages.base import ProcessingStage


@dataclass
class Slow(ProcessingStage):
    seconds: float = 0.0
    name: str = "slow"

    def process(self, task):
        time.sleep(self.seconds)
        return task


if __name__ == "__main__":
    inp, out, ckpt, final, seconds = sys.argv[1:6]
    ids.create_id_generator_actor()  # empty, as in the first run: the checkpoint holds the rest
    stages = [JsonlReader(file_paths=inp, files_per_partition=1, _generate_ids=True),
              Slow(seconds=float(seconds)), JsonlWriter(path=out)]
    executor = DaskExecutor(n_workers=2, progress=False, max_in_flight=2, max_sources_per_task=1)
    Pipeline(name="ids", stages=stages).run(executor, checkpoint_path=ckpt)
    ids.write_id_generator_to_disk(final)
    print("DONE", flush=True)
'''


def start(root: Path, seconds: float) -> subprocess.Popen:
    args = [str(root / "in"), str(root / "out"), str(root / "ckpt"), str(root / "final.json"),
            str(seconds)]
    return subprocess.Popen([sys.executable, str(root / "run_ids.py"), *args], cwd=root,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True, env=cli_env())


def outputs(root: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((root / "out").glob("*.jsonl"))}


def test_killed_checkpointed_run_resumes_with_the_same_ids(tmp_path):
    root = tmp_path
    (root / "run_ids.py").write_text(SCRIPT)
    paths = generate_jsonl(str(root / "in"), files=FILES, docs_per_file=DOCS, seed=2)
    source_of = {get_deterministic_hash([p]): p for p in paths}  # source id -> its file

    proc = start(root, seconds=0.5)
    done = poll_for(lambda: len(completed_ids(root / "ckpt")) >= 3 and completed_ids(
        root / "ckpt"), 120, lambda: "no completions reached the checkpoint",
        on_timeout=proc.kill, ignore=(FileNotFoundError, lmdb.Error, UnicodeDecodeError))
    os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=60)
    finished = completed_ids(root / "ckpt")
    assert done <= finished and len(finished) < FILES, "the run ended before the kill"
    saved = IdGeneratorBase.from_disk(checkpoint_file(str(root / "ckpt")))
    # every source recorded complete has its range on disk (saved before the completion)
    assert {saved.hash_files([source_of[s]]) for s in finished} <= set(saved.batch_registry)
    kept = outputs(root)

    proc = start(root, seconds=0.0)
    out, _ = proc.communicate(timeout=180)
    assert proc.returncode == 0 and "DONE" in out, out[-3000:]
    final = IdGeneratorBase.from_disk(str(root / "final.json"))
    for source in finished:  # the same ranges as the first run gave them
        key = final.hash_files([source_of[source]])
        assert final.batch_registry[key] == saved.batch_registry[key]
    now = outputs(root)
    first_run = {name for name, data in kept.items() if data == now.get(name)}
    assert len(first_run) >= len(finished)  # completed sources were skipped, files untouched
    rows = [json.loads(line) for data in now.values() for line in data.decode().splitlines()]
    assert len(rows) == FILES * DOCS
    got = [r[CURATOR_DEDUP_ID_STR] for r in rows]
    assert len(set(got)) == len(got), "a resumed run gave ids the first run had given"
    by_file: dict[str, list[int]] = {}
    for row in rows:
        by_file.setdefault(paths[int(row["id"].split("-")[0])], []).append(
            row[CURATOR_DEDUP_ID_STR])
    for path, values in by_file.items():
        low, high = final.get_batch_range([path])
        assert sorted(values) == list(range(low, high + 1))
    assert len(final.batch_registry) == FILES
