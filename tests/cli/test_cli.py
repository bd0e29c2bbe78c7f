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
    assert "writer files: 2" in out.stdout and "UNREADABLE" in out.stdout
    assert "completed sources (union): 3" in out.stdout
    assert "input: 4 partitions: 3 complete, 1 pending" in out.stdout
    assert "pending " in out.stdout and "part-99999.jsonl" in out.stdout
    report = json.loads(cli("checkpoint", "inspect", "ckpt", "--json", cwd=tmp_path).stdout)
    assert len(report["completed"]) == 3
    assert sorted(w["completed"] is None for w in report["writers"]) == [False, True]


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
    # a job with a checkpoint of its own: --resume finds it without --checkpoint-path
    own = cli("run", "p.yaml", "--workers", "1", "--job-id", "demo-2", "--checkpoint-path",
              "own-ckpt", cwd=tmp_path)
    assert own.returncode == 0, own.stderr
    resumed = cli("run", "p.yaml", "--workers", "1", "--resume", "demo-2", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert "2 source partitions: 2 already complete (skipped), 0 to process" in resumed.stderr
    assert not (tmp_path / "curator-dask-jobs" / "demo-2" / "checkpoint").exists()


# -- exit codes (docs/guarantees.md "Exit codes of python -m curator_dask") --------------------

BUILD = "from curator_dask import Pipeline\n\ndef build():\n    return Pipeline(name='x')\n"


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("from curator_dask import Pipeline\n\ndef build(:\n    pass\n",
         "bad_pipe.py, line 3: SyntaxError: invalid syntax"),
        ("def build():\n    return 1\n  x = 2\n",
         "bad_pipe.py, line 3: IndentationError: unindent does not match"),
        ("import os\nimport no_such_module_zz\n" + BUILD,
         "bad_pipe.py, line 2: ModuleNotFoundError: No module named 'no_such_module_zz'"),
        ("SETTINGS = {}\nLIMIT = SETTINGS['limit']\n" + BUILD,
         "bad_pipe.py, line 2: KeyError: 'limit' (while importing the pipeline file)"),
        ("def build():\n    raise ValueError('no input configured')\n",
         "bad_pipe.py, line 2: ValueError: no input configured (while calling build())"),
    ],
    ids=["syntax", "indentation", "import", "import-time-exception", "build-raises"],
)
def test_a_broken_pipeline_file_is_a_usage_error_naming_file_and_line(tmp_path, source,
                                                                      expected):
    (tmp_path / "bad_pipe.py").write_text(source)
    out = cli("run", "bad_pipe.py:build", "--no-job", cwd=tmp_path, timeout=60)
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in out.stderr, out.stderr
    assert lines[0].startswith("python -m curator_dask run: error: ")
    assert expected in lines[0], lines[0]


def test_a_module_reference_with_a_syntax_error_is_a_usage_error(tmp_path):
    (tmp_path / "broken_mod_zz.py").write_text("def build(:\n    pass\n")
    out = run_cli("run", "broken_mod_zz:build", "--no-job", cwd=tmp_path, timeout=60,
                  pythonpath=[tmp_path])
    assert out.returncode == 2, out.stderr
    assert "broken_mod_zz.py, line 1: SyntaxError" in out.stderr
    assert "Traceback" not in out.stderr


def test_resume_of_an_unknown_token_is_a_usage_error_naming_token_and_folder(tmp_path):
    (tmp_path / "p.py").write_text(BUILD)
    work = tmp_path / "curator-dask-jobs"
    out = cli("run", "p.py:build", "--resume", "no-such-job", cwd=tmp_path, timeout=60)
    assert out.returncode == 2, out.stderr
    assert "--resume no-such-job: no job 'no-such-job' in " + str(work) in out.stderr
    assert str(work / "no-such-job" / "config_fingerprint.json") in out.stderr
    assert "that folder does not exist; give --work-dir" in out.stderr
    (work / "20260101_000000_abcdef").mkdir(parents=True)
    (work / "20260101_000000_abcdef" / "config_fingerprint.json").write_text("{}")
    out = cli("run", "p.py:build", "--resume", "no-such-job", cwd=tmp_path, timeout=60)
    assert out.returncode == 2, out.stderr
    assert "jobs there: 20260101_000000_abcdef" in out.stderr
    assert not (work / "no-such-job").exists()  # nothing was made for it


def test_resume_of_a_job_of_another_work_dir_names_that_folder(tmp_path):
    from curator_dask.jobs.index import record_job
    from curator_dask.jobs.job import JobDirectory

    (tmp_path / "p.py").write_text(BUILD)
    job = JobDirectory(str(tmp_path / "elsewhere"), "indexed-job-zz")
    job.create({}, {})
    record_job("indexed-job-zz", job.path)  # the tests' own job index (tests/conftest.py)
    out = cli("run", "p.py:build", "--resume", "indexed-job-zz", cwd=tmp_path, timeout=60)
    assert out.returncode == 2, out.stderr
    assert f"has it in {job.path}: add --work-dir {tmp_path / 'elsewhere'}" in out.stderr


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--resume", "../elsewhere"], "--resume: job id '../elsewhere' must be a plain token"),
        (["--job-id", ".hidden"], "--job-id: job id '.hidden' must be a plain token"),
        (["--job-id", "a", "--resume", "b"], "--job-id 'a' and --resume 'b' disagree"),
    ],
)
def test_malformed_job_tokens_are_usage_errors(tmp_path, args, expected):
    (tmp_path / "p.py").write_text(BUILD)
    out = cli("run", "p.py:build", *args, cwd=tmp_path, timeout=60)
    assert out.returncode == 2, out.stderr
    assert expected in out.stderr
    assert "Traceback" not in out.stderr


def test_checkpoint_inspect_of_a_missing_path_is_a_usage_error(tmp_path):
    out = cli("checkpoint", "inspect", "no-such-ckpt", cwd=tmp_path, timeout=60)
    assert out.returncode == 2, out.stdout + out.stderr
    assert "no checkpoint at no-such-ckpt: the path does not exist" in out.stderr
    assert "completed" not in out.stdout
    assert cli("checkpoint", "inspect", "no-such-ckpt", "--json", cwd=tmp_path,
               timeout=60).returncode == 2
    (tmp_path / "a-file").write_text("x")
    out = cli("checkpoint", "inspect", "a-file", cwd=tmp_path, timeout=60)
    assert out.returncode == 2 and "a-file is a file, not a checkpoint folder" in out.stderr
    (tmp_path / "ckpt" / ".nemo_curator_metadata").mkdir(parents=True)
    out = cli("checkpoint", "inspect", "ckpt/.nemo_curator_metadata", cwd=tmp_path, timeout=60)
    assert out.returncode == 2 and "the metadata folder inside a checkpoint" in out.stderr
    out = cli("checkpoint", "inspect", "ckpt", "--input", "no-such-input", cwd=tmp_path,
              timeout=60)
    assert out.returncode == 2 and "--input no-such-input: No input files" in out.stderr
    # an existing checkpoint folder that no run has written to yet is not an error
    (tmp_path / "fresh").mkdir()
    out = cli("checkpoint", "inspect", "fresh", cwd=tmp_path, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "writer files: 0 (no run has recorded a completion" in out.stdout


def _cli_actions():
    """Every (command path, action) of the parser, subcommands included."""
    import argparse

    from curator_dask.cli.main import build_parser

    def walk(parser, path):
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    yield from walk(sub, (*path, name))
            else:
                yield path, action

    return list(walk(build_parser(), ()))


def test_every_option_of_every_command_has_help():
    import argparse

    actions = _cli_actions()
    assert {p for p, _ in actions} >= {("run",), ("slurm", "submit"), ("slurm", "retry"),
                                       ("checkpoint", "inspect"), ("status",), ("stop",)}
    missing = [f"{' '.join(path)} {action.option_strings or action.dest}"
               for path, action in actions
               if action.help is not argparse.SUPPRESS and not (action.help or "").strip()]
    assert not missing, f"options without help text: {missing}"


def test_slurm_options_say_what_their_value_means():
    helps = {(path, opt): action.help for path, action in _cli_actions()
             for opt in action.option_strings}
    assert "default 0" in helps[(("slurm", "submit"), "--minimum-shard-index")]
    assert "default curator-array" in helps[(("slurm", "submit"), "--job-name")]
    fmt = helps[(("slurm", "retry"), "--format")]
    assert "array" in fmt and "fields" in fmt and "default" in fmt
