"""``python -m curator_dask`` through a subprocess: exit codes, messages, real runs."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap

import pytest

from curator_dask.cli.loader import PipelineDefinitionError, load_pipeline
from tests.helpers import cli as run_cli

EXAMPLES = os.path.abspath(os.path.join(os.path.dirname(__file__), os.pardir, os.pardir,
                                        "examples"))


def cli(*args: str, cwd, timeout: float = 180) -> subprocess.CompletedProcess:
    """The shared CLI helper with examples/ importable (pipelines there name its modules)."""
    return run_cli(*args, cwd=cwd, timeout=timeout, pythonpath=[EXAMPLES])


def test_help_imports_nothing_heavy(tmp_path):
    out = cli("run", "--help", cwd=tmp_path)
    assert out.returncode == 0 and "PIPELINE" in out.stdout and "--checkpoint-path" in out.stdout
    probe = subprocess.run(
        [sys.executable, "-c", "import sys; import curator_dask.__main__; "
         "from curator_dask.cli.main import build_parser; build_parser(); "
         "print(sorted(m for m in ('distributed', 'pandas', 'pyarrow', 'dask', "
         "'nemo_curator', 'ray') if m in sys.modules))"],
        capture_output=True, text=True, check=True)
    assert probe.stdout.strip() == "[]"


def test_no_command_is_usage_error(tmp_path):
    out = cli(cwd=tmp_path)
    assert out.returncode == 2 and "usage:" in out.stderr


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("stages: [\n  - _target_: x\n", "invalid YAML (line"),
        ("stages:\n  - _target_: no_such_module.Stage\n", "stages[0]._target_: cannot import"),
        ("stages:\n  - _target_: curator_dask.stages.text.io.reader.JsonlReader\n"
         "    file_paths: in\n  - _target_: curator_dask.stages.text.io.writer.NoSuchWriter\n"
         "    path: out\n", "stages[1]._target_: cannot import"),
        ("stages:\n  - _target_: curator_dask.stages.text.io.reader.JsonlReader\n"
         "    nonsense: 1\n", "stages[0] (curator_dask.stages.text.io.reader.JsonlReader)"),
        ("name: x\nstagez: []\n", "unknown key(s) ['stagez']"),
        ("stages: []\n", "'stages' must be a non-empty list"),
        ("stages:\n  - _target_: curator_dask.tasks.EmptyTask\n", "is not a ProcessingStage"),
        ("stages:\n  - _target_: os.system\n    command: 'true'\n",
         "stages[0]._target_: os.system is not a ProcessingStage class"),
    ],
)
def test_bad_pipeline_file_is_one_line_usage_error(tmp_path, body, expected):
    (tmp_path / "p.yaml").write_text(body)
    out = cli("run", "p.yaml", cwd=tmp_path, timeout=60)
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert expected in lines[0] and "p.yaml" in lines[0]
    assert "Traceback" not in out.stderr


def test_missing_file_and_bad_reference(tmp_path):
    assert cli("run", "nope.yaml", cwd=tmp_path).returncode == 2
    out = cli("run", "not-a-reference", cwd=tmp_path)
    assert out.returncode == 2 and "file.py:function" in out.stderr
    out = cli("run", "--workers", "0", "x.yaml", cwd=tmp_path)
    assert out.returncode == 2 and "--workers must be at least 1" in out.stderr


@pytest.mark.slow
def test_run_yaml_pipeline_end_to_end(tmp_path):
    from curator_dask.sample_data import generate_jsonl

    generate_jsonl(str(tmp_path / "input"), files=4, docs_per_file=20, seed=3)
    shutil.copy(os.path.join(EXAMPLES, "demo_pipeline.yaml"), tmp_path / "p.yaml")
    out = cli("run", "p.yaml", "--workers", "2", "--no-progress", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "4 sources, 4 output tasks" in out.stdout
    assert "keep_long_documents" in out.stdout
    assert len(os.listdir(tmp_path / "output-filtered")) == 4


@pytest.mark.slow
def test_run_python_function_and_failure_exit_code(tmp_path):
    from curator_dask.sample_data import generate_jsonl

    generate_jsonl(str(tmp_path / "input"), files=2, docs_per_file=5)
    (tmp_path / "my_pipeline.py").write_text(textwrap.dedent("""
        from dataclasses import dataclass
        from curator_dask import Pipeline, ProcessingStage, JsonlReader, JsonlWriter

        @dataclass
        class Boom(ProcessingStage):
            name: str = "boom"
            def process(self, task):
                raise RuntimeError("kaboom")

        def good():
            return (Pipeline(name="good").add_stage(JsonlReader(file_paths="input"))
                    .add_stage(JsonlWriter(path="out")))

        def bad():
            return Pipeline(name="bad").add_stage(JsonlReader(file_paths="input")).add_stage(Boom())
    """))
    ok = cli("run", "my_pipeline.py:good", "--workers", "1", cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr
    assert len(os.listdir(tmp_path / "out")) == 2
    failed = cli("run", "my_pipeline.py:bad", "--workers", "1", cwd=tmp_path)
    assert failed.returncode == 1
    assert "Stage 'boom' failed" in failed.stderr and "kaboom" in failed.stderr


def test_nemo_curator_import_paths_fall_back(tmp_path, monkeypatch):
    from curator_dask.cli import loader

    monkeypatch.setattr(loader, "nemo_installed", lambda: False)  # as without NeMo Curator
    (tmp_path / "p.yaml").write_text(
        "stages:\n  - _target_: nemo_curator.stages.text.io.reader.JsonlReader\n"
        "    file_paths: in\n")
    pipeline = load_pipeline(str(tmp_path / "p.yaml"))
    assert type(pipeline.stages[0]).__module__.startswith("curator_dask.")
    with pytest.raises(PipelineDefinitionError, match="not a Pipeline"):
        (tmp_path / "f.py").write_text("def make():\n    return 3\n")
        load_pipeline(f"{tmp_path / 'f.py'}:make")


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        ("  - _target_: os.system\n    command: touch {marker}\n",
         "stages[0]._target_: os.system is not a ProcessingStage class"),
        ("  - _target_: curator_dask.stages.text.io.reader.JsonlReader\n    file_paths: in\n"
         "    read_kwargs:\n      _target_: builtins.open\n      file: {marker}\n"
         "      mode: w\n", "stages[0].read_kwargs._target_: builtins.open is not a class"),
    ],
)
def test_only_classes_are_called(tmp_path, entry, expected):
    marker = tmp_path / "called"
    (tmp_path / "p.yaml").write_text("stages:\n" + entry.format(marker=marker))
    with pytest.raises(PipelineDefinitionError) as info:
        load_pipeline(str(tmp_path / "p.yaml"))
    assert expected in str(info.value)
    assert not marker.exists()  # refused before anything was called


@pytest.mark.slow
def test_run_with_checkpoint_then_inspect(tmp_path):
    import json

    from curator_dask.sample_data import generate_jsonl

    generate_jsonl(str(tmp_path / "input"), files=3, docs_per_file=4)
    shutil.copy(os.path.join(EXAMPLES, "demo_pipeline.yaml"), tmp_path / "p.yaml")
    first = cli("run", "p.yaml", "--workers", "1", "--checkpoint-path", "ckpt", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    assert "3 source partitions: 0 already complete (skipped), 3 to process" in first.stderr
    again = cli("run", "p.yaml", "--workers", "1", "--checkpoint-path", "ckpt", cwd=tmp_path)
    assert "3 source partitions: 3 already complete (skipped), 0 to process" in again.stderr
    meta = tmp_path / "ckpt" / ".nemo_curator_metadata"
    (meta / "garbage.mdb").write_bytes(b"not an lmdb file" * 100)
    (tmp_path / "input" / "part-99999.jsonl").write_text('{"id": "x", "text": "y"}\n')
    out = cli("checkpoint", "inspect", "ckpt", "--input", "input", cwd=tmp_path, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "writer files: 3" in out.stdout and "UNREADABLE" in out.stdout
    assert "completed sources (union): 3" in out.stdout
    assert "input: 4 partitions: 3 complete, 1 pending" in out.stdout
    assert "pending " in out.stdout and "part-99999.jsonl" in out.stdout
    report = json.loads(cli("checkpoint", "inspect", "ckpt", "--json", cwd=tmp_path).stdout)
    assert len(report["completed"]) == 3
    assert sorted(w["completed"] is None for w in report["writers"]) == [False, False, True]


@pytest.mark.slow
def test_cli_runs_are_jobs_with_a_resume_token(tmp_path):
    from curator_dask.sample_data import generate_jsonl

    generate_jsonl(str(tmp_path / "input"), files=2, docs_per_file=3)
    shutil.copy(os.path.join(EXAMPLES, "demo_pipeline.yaml"), tmp_path / "p.yaml")
    first = cli("run", "p.yaml", "--workers", "1", "--job-id", "demo-1", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    assert "job demo-1" in first.stdout
    assert "resume with: python -m curator_dask run p.yaml --workers 1 --resume demo-1" in (
        first.stderr)
    assert (tmp_path / "curator-dask-jobs" / "demo-1" / "events.jsonl").is_file()
    again = cli("run", "p.yaml", "--workers", "1", "--resume", "demo-1", cwd=tmp_path)
    assert "2 source partitions: 2 already complete (skipped), 0 to process" in again.stderr
    text = (tmp_path / "p.yaml").read_text().replace("min_chars: 50", "min_chars: 70")
    (tmp_path / "p.yaml").write_text(text)
    refused = cli("run", "p.yaml", "--workers", "1", "--resume", "demo-1", cwd=tmp_path)
    assert refused.returncode == 2
    assert "params.min_chars: 50 -> 70" in refused.stderr and "Nothing was deleted" in (
        refused.stderr)
    plain = cli("run", "p.yaml", "--workers", "1", "--no-job", cwd=tmp_path)
    assert plain.returncode == 0 and "job " not in plain.stdout
