"""A YAML pipeline runs the same from any directory (issue 20, item 6): its folder goes first on
``sys.path`` and the relative path arguments of the stage libraries' readers and writers are
taken from that folder (``cli/targets.py``, ``PATH_ARGUMENTS``); paths given on the command
line, and the job folder, stay the current directory's. The rule is stated in
docs/getting-started.md "A YAML file's paths and modules are its folder's"."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import sys
import textwrap
import uuid
from pathlib import Path

import pytest

from curator_dask.cli.loader import load_pipeline
from curator_dask.sample_data import generate_jsonl
from tests.helpers import REPO_ROOT, cli, wait_for_job
from tests.slurm.local_slurm import local_slurm

EXAMPLES = REPO_ROOT / "examples"


def demo_project(folder: Path) -> Path:
    """``examples/demo_pipeline.yaml`` and its ``stages.py`` copied to ``folder``, with an
    ``input`` folder beside them (3 files of 6 documents, some shorter than 50 characters)."""
    folder.mkdir(parents=True)
    for name in ("demo_pipeline.yaml", "stages.py"):
        shutil.copy(EXAMPLES / name, folder / name)
    generate_jsonl(str(folder / "input"), files=3, docs_per_file=6, short_fraction=0.3, seed=5)
    return folder / "demo_pipeline.yaml"


def long_documents(folder: Path) -> int:
    rows = [json.loads(line) for path in sorted(folder.glob("*.jsonl"))
            for line in path.read_text().splitlines()]
    return sum(len(row["text"]) > 50 for row in rows)


@pytest.mark.slow
def test_the_demo_pipeline_runs_from_another_directory(tmp_path):
    yaml_file = demo_project(tmp_path / "project")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    out = cli("run", os.path.relpath(yaml_file, elsewhere), "--workers", "1", "--no-progress",
              "--checkpoint-path", "ckpt", cwd=elsewhere, timeout=240)
    assert out.returncode == 0, out.stderr[-3000:]
    # The YAML's `./input` and `./output-filtered` are the project's ...
    written = sorted((tmp_path / "project" / "output-filtered").glob("*.jsonl"))
    assert len(written) == 3
    kept = [json.loads(line) for path in written for line in path.read_text().splitlines()]
    assert len(kept) == long_documents(tmp_path / "project" / "input") > 0
    assert all(len(row["text"]) > 50 for row in kept)
    # ... the command line's checkpoint and the job folder are the current directory's.
    assert not (elsewhere / "output-filtered").exists()
    assert (elsewhere / "ckpt" / ".nemo_curator_metadata").is_dir()
    (job,) = (elsewhere / "curator-dask-jobs").iterdir()
    assert json.loads((job / "job_summary.json").read_text())["state"] == "completed"
    assert not (tmp_path / "project" / "curator-dask-jobs").exists()
    assert f"job {job.name}" in out.stdout


@pytest.fixture
def fresh_path(monkeypatch):
    """This process's ``sys.path`` restored after the test (loading a file puts its folder
    first on it)."""
    monkeypatch.setattr(sys, "path", list(sys.path))


STAGES = textwrap.dedent("""\
    from dataclasses import dataclass

    from curator_dask.stages.base import ProcessingStage
    from curator_dask.stages.text.io.writer import JsonlWriter


    @dataclass
    class Keeps(ProcessingStage):
        path: str = ""
        name: str = "keeps"


    @dataclass
    class MyWriter(JsonlWriter):
        name: str = "my_writer"
    """)


def test_relative_path_arguments_are_taken_from_the_files_folder(tmp_path, fresh_path,
                                                                 monkeypatch):
    folder = tmp_path / "project"
    folder.mkdir()
    module = f"folder_stages_{uuid.uuid4().hex[:8]}"
    (folder / f"{module}.py").write_text(STAGES)
    (folder / "p.yaml").write_text(textwrap.dedent(f"""\
        stages:
          - _target_: curator_dask.stages.text.io.reader.JsonlReader
            file_paths: [./in, sub/more.jsonl, /abs/in, "s3://bucket/in", "~/in", "memory://m/"]
          - _target_: curator_dask.stages.file_partitioning.FilePartitioningStage
            file_paths: ../shared/
          - _target_: curator_dask.stages.text.io.reader.ParquetReader
            file_paths: "data/*.parquet"
          - _target_: {module}.Keeps
            path: ./not-a-known-path-argument
          - _target_: {module}.MyWriter
            path: out-sub
          - _target_: curator_dask.stages.text.io.writer.ParquetWriter
            path: ./parquet-out
        """))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    stages = load_pipeline(os.path.join("..", "project", "p.yaml")).stages
    reader, partitioning, parquet, keeps, mine, parquet_writer = stages
    assert reader.file_paths == [str(folder / "in"), str(folder / "sub" / "more.jsonl"),
                                 "/abs/in", "s3://bucket/in", "~/in", "memory://m/"]
    assert partitioning.file_paths == str(tmp_path / "shared") + os.sep
    assert parquet.file_paths == str(folder / "data" / "*.parquet")
    assert keeps.path == "./not-a-known-path-argument"  # not a library class: as written
    assert mine.path == str(folder / "out-sub")  # a subclass of a library writer
    assert parquet_writer.path == str(folder / "parquet-out")
    # Loading makes no folder, where the file says or where it was loaded from: the writers
    # make theirs when a run has found its inputs (issue 32, item 3).
    assert not (folder / "out-sub").exists() and not (folder / "parquet-out").exists()
    assert sorted(p.name for p in elsewhere.iterdir()) == []
    assert sys.path[0] == str(folder)


def test_nemo_readers_and_writers_paths_are_the_files_folders(tmp_path, fresh_path):
    pytest.importorskip("nemo_curator", reason="the NeMo variant needs NeMo Curator")
    folder = tmp_path / "nemo"
    folder.mkdir()
    (folder / "p.yaml").write_text(textwrap.dedent("""\
        stages:
          - _target_: nemo_curator.stages.text.io.reader.JsonlReader
            file_paths: ./input
          - _target_: nemo_curator.stages.text.io.reader.ParquetReader
            file_paths: [a.parquet, /abs/b.parquet]
          - _target_: nemo_curator.stages.text.io.writer.JsonlWriter
            path: ./output
          - _target_: nemo_curator.stages.text.io.writer.ParquetWriter
            path: "memory://nemo-bucket/out"
        """))
    jsonl, parquet, writer, remote = load_pipeline(str(folder / "p.yaml")).stages
    assert type(jsonl).__module__.startswith("nemo_curator.")
    assert jsonl.file_paths == str(folder / "input")
    assert parquet.file_paths == [str(folder / "a.parquet"), "/abs/b.parquet"]
    assert writer.path == str(folder / "output")
    assert remote.path == "memory://nemo-bucket/out"


def test_slurm_submit_names_the_pipeline_file_by_its_absolute_path(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    for reference, expected in (
            ("../project/p.yaml", str(tmp_path / "project" / "p.yaml")),
            ("../project/build.py:build", f"{tmp_path / 'project' / 'build.py'}:build"),
            ("mypackage.pipelines:build", "mypackage.pipelines:build")):
        out = cli("slurm", "submit", reference, "--array", "0-1", "--checkpoint-path", "ckpt",
                  "--dry-run", cwd=elsewhere)
        assert out.returncode == 0, out.stderr
        lines = out.stdout.splitlines()
        assert f"cd {shlex.quote(str(elsewhere))}" in lines
        (run_line,) = [ln for ln in lines if "-m curator_dask run " in ln]
        args = shlex.split(run_line)
        assert args[args.index("run") + 1] == expected
        assert args[args.index("--checkpoint-path") + 1] == str(elsewhere / "ckpt")


_slurm = local_slurm()


@pytest.mark.slurm
@pytest.mark.slow
@pytest.mark.skipif(_slurm is not None, reason=_slurm or "")
def test_an_array_task_runs_a_yaml_file_of_another_directory(tmp_path):
    yaml_file = demo_project(tmp_path / "project")
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "logs").mkdir(parents=True)
    submitted = cli("slurm", "submit", os.path.relpath(yaml_file, elsewhere), "--array", "0-0",
                    "--checkpoint-path", "ckpt", "--cpus-per-task", "1", "--time", "00:05:00",
                    "--output", str(elsewhere / "logs" / "%A_%a.log"), cwd=elsewhere)
    assert submitted.returncode == 0, submitted.stderr
    wait_for_job(submitted.stdout.strip())
    logs = "\n".join(p.read_text() for p in sorted((elsewhere / "logs").iterdir()))
    written = sorted((tmp_path / "project" / "output-filtered").glob("*.jsonl"))
    assert len(written) == 3, logs
    assert (elsewhere / "ckpt" / ".nemo_curator_metadata").is_dir(), logs
    assert len(list((elsewhere / "curator-dask-jobs").iterdir())) == 1, logs
    assert not (elsewhere / "output-filtered").exists()
