"""Pipeline files with NeMo Curator's own classes (``_target_: nemo_curator.…``), with NeMo
Curator installed: NeMo's stages and nested filters are built into a curator_dask ``Pipeline``;
only classes are called."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from nemo_curator.stages.base import ProcessingStage as NemoStage
from nemo_curator.stages.text.filters import ScoreFilter
from nemo_curator.stages.text.filters.heuristic import WordCountFilter
from nemo_curator.stages.text.io.reader import JsonlReader
from nemo_curator.stages.text.io.writer import JsonlWriter
from nemo_curator.stages.text.modifiers import Modify, UrlRemover

from curator_dask.classes import is_nemo
from curator_dask.cli import loader
from curator_dask.cli.loader import PipelineDefinitionError, load_pipeline
from curator_dask.pipeline import Pipeline
from tests.helpers import cli

ROOT = Path(__file__).resolve().parents[2]

NEMO_YAML = textwrap.dedent("""\
    name: nemo-yaml
    stages:
      - _target_: nemo_curator.stages.text.io.reader.JsonlReader
        file_paths: ./input
        fields: [id, text]
      - _target_: nemo_curator.stages.text.filters.ScoreFilter
        filter_obj:
          _target_: nemo_curator.stages.text.filters.heuristic.WordCountFilter
          min_words: MIN_WORDS
        text_field: text
      - _target_: nemo_curator.stages.text.modifiers.Modify
        modifier_fn:
          _target_: nemo_curator.stages.text.modifiers.UrlRemover
      - _target_: nemo_curator.stages.text.io.writer.JsonlWriter
        path: ./output
""")


def write_yaml(folder: Path, min_words: int = 5) -> Path:
    path = folder / "p.yaml"
    path.write_text(NEMO_YAML.replace("MIN_WORDS", str(min_words)))
    return path


def test_nemo_stages_and_nested_filters_load_into_a_curator_dask_pipeline(tmp_path):
    pipeline = load_pipeline(str(write_yaml(tmp_path)))
    assert isinstance(pipeline, Pipeline) and pipeline.name == "nemo-yaml"
    assert [type(s) for s in pipeline.stages] == [JsonlReader, ScoreFilter, Modify, JsonlWriter]
    assert all(is_nemo(s) and isinstance(s, NemoStage) for s in pipeline.stages)
    (word_count,) = pipeline.stages[1].filter_obj
    assert type(word_count) is WordCountFilter and word_count._min_words == 5
    assert [type(m) for m in pipeline.stages[2].modifier_fn] == [UrlRemover]
    pipeline.build()
    assert [s.name for s in pipeline.stages] == ["file_partitioning", "jsonl_reader",
                                                 "word_count", "UrlRemover", "jsonl_writer"]


@pytest.mark.parametrize("where", ["stage", "nested"])
def test_a_function_target_is_refused_without_being_called(tmp_path, where):
    marker = tmp_path / "called"
    if where == "stage":
        body = f"stages:\n  - _target_: os.system\n    command: touch {marker}\n"
        expected = "stages[0]._target_: os.system is not a ProcessingStage class"
    else:
        body = ("stages:\n  - _target_: nemo_curator.stages.text.filters.ScoreFilter\n"
                "    filter_obj:\n      _target_: os.system\n"
                f"      command: touch {marker}\n")
        expected = "stages[0].filter_obj._target_: os.system is not a class"
    (tmp_path / "p.yaml").write_text(body)
    with pytest.raises(PipelineDefinitionError) as info:
        load_pipeline(str(tmp_path / "p.yaml"))
    assert expected in str(info.value) and "\n" not in str(info.value)
    assert not marker.exists()


def test_without_nemo_curator_the_mirrors_are_used(tmp_path, monkeypatch):
    monkeypatch.setattr(loader, "nemo_installed", lambda: False)
    (tmp_path / "p.yaml").write_text(
        "stages:\n  - _target_: nemo_curator.stages.text.io.reader.JsonlReader\n"
        "    file_paths: in\n")
    stage = load_pipeline(str(tmp_path / "p.yaml")).stages[0]
    assert type(stage).__module__.startswith("curator_dask.") and not is_nemo(stage)
    (tmp_path / "q.yaml").write_text(
        "stages:\n  - _target_: nemo_curator.stages.text.filters.ScoreFilter\n")
    with pytest.raises(PipelineDefinitionError,
                       match=r"NeMo Curator is not installed .*pip install 'curator_dask\[nemo\]'"):
        load_pipeline(str(tmp_path / "q.yaml"))


def test_a_curator_dask_pipeline_file_does_not_import_nemo_curator(tmp_path):
    (tmp_path / "p.yaml").write_text(
        "stages:\n  - _target_: curator_dask.stages.text.io.reader.JsonlReader\n"
        "    file_paths: in\n  - _target_: curator_dask.stages.text.io.writer.JsonlWriter\n"
        "    path: out\n")
    code = (f"import sys; from curator_dask.cli.loader import load_pipeline; "
            f"load_pipeline({str(tmp_path / 'p.yaml')!r}).build(); "
            "print(sorted(m for m in ('nemo_curator', 'ray') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.slow
def test_cli_runs_a_nemo_pipeline_file_and_resume_sees_a_filter_parameter(tmp_path):
    from curator_dask.sample_data import generate_jsonl

    generate_jsonl(str(tmp_path / "input"), files=2, docs_per_file=10, seed=1)
    write_yaml(tmp_path, min_words=5)
    first = cli("run", "p.yaml", "--workers", "1", "--no-progress", "--job-id",
                "20260101_000000_abcdef", cwd=tmp_path, timeout=240)
    assert first.returncode == 0, first.stderr
    assert "2 sources, 2 output tasks" in first.stdout
    assert len(list((tmp_path / "output").iterdir())) == 2
    write_yaml(tmp_path, min_words=6)
    again = cli("run", "p.yaml", "--workers", "1", "--no-progress", "--resume",
                "20260101_000000_abcdef", cwd=tmp_path, timeout=240)
    assert again.returncode != 0
    assert "stages[2] (word_count).params.filter_obj[0]._min_words: 5 -> 6" in again.stderr
