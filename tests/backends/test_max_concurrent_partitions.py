"""``max_concurrent_partitions``: the most source partitions in flight, chunks included.

The stages count, in a file under an exclusive lock shared by every worker process, the
partitions between the first stage after the reader and the last before the writer (fused
into one Dask task, a chunk of sources passes each stage in turn, so all of a chunk's sources
are counted at once); the highest count is the most partitions that were really being
processed together. ``Enter`` holds each partition until more than the cap are inside (which
a cap that holds never allows) or ``hold`` seconds passed: without the cap, the 4 worker
threads run more than the cap at once, so the count exceeds it. The hold bounds the test's
time; no assertion depends on it.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from dataclasses import dataclass

import dask.config
import pytest

from curator_dask import JsonlReader, JsonlWriter, Pipeline
from curator_dask.backends.base import RunOptions
from curator_dask.cli.common import EXIT_USAGE
from curator_dask.cli.main import build_parser
from curator_dask.cli.run_command import partition_kwargs
from curator_dask.sample_data import generate_jsonl
from curator_dask.stages.base import ProcessingStage
from curator_dask.tasks import DocumentBatch
from tests.helpers import cli

# More worker threads (4) than the cap of the test (2), so a cap that did not hold would show.
EXECUTOR_KWARGS = {"threads_per_worker": 2}


def bump(path: str, delta: int) -> None:
    """Add ``delta`` to the partitions now between the two stages, keeping the highest."""
    with open(path + ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        state = {"now": 0, "max": 0, "entered": 0, "left": 0}
        if os.path.exists(path):
            with open(path) as f:
                state = json.load(f)
        state["now"] += delta
        state["max"] = max(state["max"], state["now"])
        state["entered" if delta > 0 else "left"] += 1
        with open(path, "w") as f:
            json.dump(state, f)


def now(path: str) -> int:
    with open(path + ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        with open(path) as f:
            return json.load(f)["now"]


@dataclass
class Enter(ProcessingStage[DocumentBatch, DocumentBatch]):
    counter: str = ""
    cap: int = 0
    hold: float = 0.5
    name: str = "enter"

    def process(self, task: DocumentBatch) -> DocumentBatch:
        bump(self.counter, 1)
        deadline = time.monotonic() + self.hold
        while now(self.counter) <= self.cap and time.monotonic() < deadline:
            time.sleep(0.01)
        return task


@dataclass
class Leave(ProcessingStage[DocumentBatch, DocumentBatch]):
    counter: str = ""
    name: str = "leave"

    def process(self, task: DocumentBatch) -> DocumentBatch:
        bump(self.counter, -1)
        return task


@pytest.mark.slow
def test_partitions_in_flight_never_exceed_the_cap_and_all_complete(executor, tmp_path):
    files, cap = 6, 2
    generate_jsonl(str(tmp_path / "in"), files=files, docs_per_file=1, seed=3)
    counter = str(tmp_path / "counter.json")
    p = Pipeline(name="cap").add_stage(JsonlReader(file_paths=str(tmp_path / "in"),
                                                   files_per_partition=1))
    p.add_stage(Enter(counter=counter, cap=cap)).add_stage(Leave(counter=counter))
    p.add_stage(JsonlWriter(path=str(tmp_path / "out")))
    with dask.config.set({"curator-dask.jobs.performance-report": False}):  # seconds of bokeh
        result = p.run(executor=executor, work_dir=str(tmp_path / "jobs"), job_id="cap",
                       max_concurrent_partitions=cap)
    with open(counter) as f:
        state = json.load(f)
    assert state["entered"] == state["left"] == files and state["now"] == 0
    assert 1 <= state["max"] <= cap
    assert result.num_sources == files and len(os.listdir(tmp_path / "out")) == files
    with open(tmp_path / "jobs" / "cap" / "dag_execution_plan.json") as f:
        assert json.load(f)["max_concurrent_partitions"] == cap


@pytest.mark.parametrize("bad", [0, -1, "many", True, 2.5, "3"])
def test_bad_values_are_refused_naming_the_valid_ones(tmp_path, bad):
    p = Pipeline(name="x").add_stage(JsonlReader(file_paths=str(tmp_path / "in")))
    p.add_stage(JsonlWriter(path=str(tmp_path / "out")))
    with pytest.raises(ValueError, match=r'max_concurrent_partitions must be "auto" or a whole '
                                         r"number of at least 1 .*, got " + repr(bad)):
        p.run(max_concurrent_partitions=bad)
    assert not list((tmp_path / "out").glob("*"))  # refused before anything ran


def test_the_config_key_is_the_default_also_of_nemo_curators_plain_call():
    assert RunOptions.plain().max_concurrent_partitions == "auto"
    with dask.config.set({"curator-dask.execution.max-concurrent-partitions": 2}):
        assert RunOptions.plain().max_concurrent_partitions == 2  # NeMo's Pipeline.run path
        assert RunOptions.build([], slurm_array=False).max_concurrent_partitions == 2
        assert RunOptions.build([], slurm_array=False, max_concurrent_partitions="auto"
                                ).max_concurrent_partitions == "auto"  # the argument wins
    with (dask.config.set({"curator-dask.execution.max-concurrent-partitions": "all"}),
          pytest.raises(ValueError, match="config curator-dask.execution.max-concurrent-"
                                          "partitions must be")):
        RunOptions.plain()


def test_cli_option():
    def kwargs(*argv: str) -> dict:
        return partition_kwargs(build_parser().parse_args(["run", "p.yaml", *argv]))

    assert kwargs() == {}  # config execution.max-concurrent-partitions
    assert kwargs("--max-concurrent-partitions", "4") == {"max_concurrent_partitions": 4}
    assert kwargs("--max-concurrent-partitions", "auto") == {"max_concurrent_partitions": "auto"}


def test_cli_refuses_a_bad_value_before_anything_starts(tmp_path):
    out = cli("run", "no-such-pipeline.yaml", "--max-concurrent-partitions", "many",
              cwd=tmp_path, timeout=60)
    assert out.returncode == EXIT_USAGE
    assert "--max-concurrent-partitions many: expected auto or a whole number of at least 1" \
        in out.stderr
