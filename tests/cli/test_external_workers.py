"""Stages defined in a pipeline file reach workers that cannot import that file (issue 12,
item 2): a real ``dask scheduler`` and ``dask worker`` started elsewhere, as a separate
scheduler or SLURMCluster workers are."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from curator_dask.sample_data import generate_jsonl
from tests.helpers import cli, poll_for, stop_process_group

pytestmark = pytest.mark.slow

DASK = str(Path(sys.executable).with_name("dask"))

SHOUT_STAGES = textwrap.dedent("""
    from dataclasses import dataclass
    from curator_dask import ProcessingStage
    from shout_helpers import shout

    @dataclass
    class Shout(ProcessingStage):
        name: str = "shout"
        def process(self, task):
            frame = task.to_pandas()
            frame["text"] = frame["text"].map(shout)
            task.data = frame
            return task
""")
PIPELINE = "import os\n" + SHOUT_STAGES + textwrap.dedent("""
    from curator_dask import JsonlReader, JsonlWriter, Pipeline

    def build():
        return (Pipeline(name="external").add_stage(JsonlReader(file_paths="input"))
                .add_stage(Shout()).add_stage(JsonlWriter(path=os.path.abspath("output"))))
""")
HELPERS = "def shout(text):\n    return text.upper()\n"


@pytest.fixture
def external_cluster(tmp_path_factory, request) -> str:
    """A scheduler and one worker (1 thread) in their own folder, with a ``PYTHONPATH`` that
    holds no pipeline folder; both process groups are ended when the test ends."""
    home = tmp_path_factory.mktemp("cluster")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DASK_", "PYTHONPATH"))}
    env["PYTHONPATH"] = str(home)
    scheduler_file = home / "scheduler.json"
    procs: list[subprocess.Popen] = []

    def start(*args: str, log: str) -> None:
        with open(home / log, "w") as out:
            procs.append(subprocess.Popen([DASK, *args], cwd=home, env=env, stdout=out,
                                          stderr=subprocess.STDOUT, start_new_session=True))

    def stop_all() -> None:
        for proc in reversed(procs):
            stop_process_group(proc)

    request.addfinalizer(stop_all)

    def logs() -> str:
        return "\n".join(p.read_text()[-2000:] for p in sorted(home.glob("*.log")))

    start("scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard",
          "--scheduler-file", str(scheduler_file), log="scheduler.log")
    address = poll_for(lambda: json.loads(scheduler_file.read_text())["address"], 60,
                       lambda: "the scheduler wrote no scheduler file: " + logs(),
                       interval=0.2, ignore=(OSError, ValueError, KeyError))
    start("worker", "--scheduler-file", str(scheduler_file), "--nworkers", "1", "--nthreads",
          "1", "--no-dashboard", "--host", "127.0.0.1", log="worker.log")
    from distributed import Client

    with Client(address, timeout=30) as client:
        try:
            client.wait_for_workers(1, timeout=60)
        except TimeoutError:
            pytest.fail("the worker did not join: " + logs())
    return address


def test_stages_of_a_pipeline_file_reach_workers_that_cannot_import_it(tmp_path,
                                                                       external_cluster):
    (tmp_path / "external_pipe.py").write_text(PIPELINE)
    (tmp_path / "shout_helpers.py").write_text(HELPERS)
    generate_jsonl(str(tmp_path / "input"), files=3, docs_per_file=2, seed=31)
    out = cli("run", "external_pipe.py:build", "--address", external_cluster, "--no-progress",
              "--no-job", cwd=tmp_path, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "ModuleNotFoundError" not in out.stderr
    written = sorted((tmp_path / "output").glob("*.jsonl"))
    assert len(written) == 3
    texts = [json.loads(line)["text"] for p in written for line in p.read_text().splitlines()]
    assert len(texts) == 6 and all(t == t.upper() for t in texts)


SHOUT_YAML = textwrap.dedent("""
    stages:
      - _target_: curator_dask.stages.text.io.reader.JsonlReader
        file_paths: ./input
      - _target_: shout_stages.Shout
      - _target_: curator_dask.stages.text.io.writer.JsonlWriter
        path: ./output
""")


def test_stages_beside_a_yaml_file_reach_workers_that_cannot_import_them(tmp_path,
                                                                        external_cluster):
    """A YAML file's `_target_: shout_stages.Shout` (and the module it imports) travel by
    value, as a pipeline file's stages do (issue 20, item 6)."""
    (tmp_path / "p.yaml").write_text(SHOUT_YAML)
    (tmp_path / "shout_stages.py").write_text(SHOUT_STAGES)
    (tmp_path / "shout_helpers.py").write_text(HELPERS)
    generate_jsonl(str(tmp_path / "input"), files=2, docs_per_file=2, seed=32)
    out = cli("run", "p.yaml", "--address", external_cluster, "--no-progress", "--no-job",
              cwd=tmp_path, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "ModuleNotFoundError" not in out.stderr
    written = sorted((tmp_path / "output").glob("*.jsonl"))
    assert len(written) == 2
    texts = [json.loads(line)["text"] for p in written for line in p.read_text().splitlines()]
    assert len(texts) == 4 and all(t == t.upper() for t in texts)
