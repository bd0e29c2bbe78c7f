"""Which classes a YAML pipeline's nested ``_target_``s may name (``cli/loader.py``,
``TargetRule``): classes of curator_dask and nemo_curator, of modules in the pipeline file's
folder, and of modules the user allows (``--allow-target-module``, config
``pipeline-files.allowed-modules``). Anything else, ``subprocess.Popen`` first of all, is
refused before anything is called. Stage targets may come from any module."""

from __future__ import annotations

import textwrap
import uuid
from pathlib import Path

import dask.config
import pytest

from curator_dask.cli.loader import PipelineDefinitionError, load_pipeline
from curator_dask.sample_data import generate_jsonl
from tests.helpers import cli, wait_for_job
from tests.slurm.local_slurm import local_slurm

READER = "curator_dask.stages.text.io.reader.JsonlReader"
WRITER = "curator_dask.stages.text.io.writer.JsonlWriter"

# A stage that holds whatever its arguments are and, when it runs, writes their repr to `seen`:
# the run's evidence that the nested objects were made and reached the workers.
STAGES = textwrap.dedent("""\
    from dataclasses import dataclass
    from typing import Any

    from curator_dask.stages.base import ProcessingStage


    @dataclass
    class Holder(ProcessingStage):
        value: Any = None
        extra: Any = None
        seen: str = ""
        name: str = "holder"

        def process(self, task):
            if self.seen:
                with open(self.seen, "w") as f:
                    f.write(repr((self.value, self.extra)))
            return task


    class Threshold:
        def __init__(self, limit):
            self.limit = limit

        def __repr__(self):
            return f"Threshold({self.limit})"
    """)


def holder_yaml(value: str, extra: str = "null", seen: str = "") -> str:
    """A pipeline: read ``input``, a ``Holder`` with the nested YAML ``value`` and ``extra``,
    write ``output``. The stage module is ``target_stages`` (beside the file)."""
    value, extra = (textwrap.indent(v, " " * 6) for v in (value, extra))
    return (f"stages:\n  - _target_: {READER}\n    file_paths: ./input\n"
            f"  - _target_: target_stages.Holder\n    seen: '{seen}'\n"
            f"    value:\n{value}\n    extra:\n{extra}\n"
            f"  - _target_: {WRITER}\n    path: ./output\n")


def popen(marker: Path, target: str = "subprocess.Popen") -> str:
    return f"_target_: {target}\nargs: [touch, '{marker}']"


def project(folder: Path, body: str) -> Path:
    """``folder`` with the stage module, one input file and ``p.yaml`` holding ``body``."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "target_stages.py").write_text(STAGES)
    generate_jsonl(str(folder / "input"), files=1, docs_per_file=3, seed=3)
    (folder / "p.yaml").write_text(body)
    return folder / "p.yaml"


def test_cli_refuses_a_nested_popen_before_calling_it(tmp_path):
    marker = tmp_path / "pwned"
    project(tmp_path, holder_yaml(popen(marker)))
    out = cli("run", "p.yaml", "--no-job", "--no-progress", "--workers", "1", cwd=tmp_path,
              pythonpath=[tmp_path], timeout=120)
    assert out.returncode == 2, out.stderr
    (line,) = out.stderr.strip().splitlines()
    assert "p.yaml: stages[1].value._target_: subprocess.Popen is refused" in line
    assert "--allow-target-module subprocess" in line
    assert "pipeline-files.allowed-modules" in line
    assert not marker.exists()
    assert not (tmp_path / "output").exists()


def test_cli_allows_the_modules_named_by_the_option_and_the_files_folder(tmp_path):
    seen = tmp_path / "seen.txt"
    body = holder_yaml("_target_: fractions.Fraction\nnumerator: 1\ndenominator: 3",
                       "- _target_: target_stages.Threshold\n  limit: 5\n"
                       "- _target_: decimal.Decimal\n  value: '2.5'", seen=str(seen))
    project(tmp_path, body)
    common = ("--no-job", "--no-progress", "--workers", "1")
    refused = cli("run", "p.yaml", *common, "--allow-target-module", "fractions",
                  cwd=tmp_path, pythonpath=[tmp_path], timeout=120)
    # fractions is allowed and target_stages lies in the file's folder: decimal is refused.
    assert refused.returncode == 2, refused.stderr
    assert "stages[1].extra[1]._target_: decimal.Decimal is refused" in refused.stderr
    assert "--allow-target-module decimal" in refused.stderr
    ran = cli("run", "p.yaml", *common, "--allow-target-module", "fractions",
              "--allow-target-module", "decimal", cwd=tmp_path, pythonpath=[tmp_path],
              timeout=240)
    assert ran.returncode == 0, ran.stderr
    assert seen.read_text() == "(Fraction(1, 3), [Threshold(5), Decimal('2.5')])"
    assert len(list((tmp_path / "output").iterdir())) == 1


@pytest.fixture
def importable(tmp_path, monkeypatch):
    """A folder on ``sys.path`` and a fresh module name in it (loaded in this process)."""
    folder = tmp_path / "lib"
    folder.mkdir()
    monkeypatch.syspath_prepend(str(folder))
    return folder, f"target_mod_{uuid.uuid4().hex[:8]}"


def nested(value: str) -> str:
    return f"stages:\n  - _target_: {READER}\n    file_paths: in\n    read_kwargs:\n" + \
        textwrap.indent(value, " " * 6) + "\n"


def test_a_module_of_the_files_own_folder_is_allowed_and_only_there(importable, tmp_path):
    folder, name = importable
    (folder / f"{name}.py").write_text(STAGES)
    body = nested(f"_target_: {name}.Threshold\nlimit: 3")
    (folder / "p.yaml").write_text(body)
    stage = load_pipeline(str(folder / "p.yaml")).stages[0]
    assert repr(stage.read_kwargs) == "Threshold(3)"
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "p.yaml").write_text(body)
    with pytest.raises(PipelineDefinitionError) as info:
        load_pipeline(str(tmp_path / "elsewhere" / "p.yaml"))
    assert f"{name}.Threshold is refused: module '{name}' is not allowed" in str(info.value)
    assert f"--allow-target-module {name}" in str(info.value)
    assert f"folder ({tmp_path / 'elsewhere'})" in str(info.value)


def test_a_reexported_class_is_judged_by_the_module_that_defines_it(importable):
    folder, name = importable
    marker = folder / "pwned"
    (folder / f"{name}.py").write_text("from subprocess import Popen as Runner\n")
    (folder / "p.yaml").write_text(nested(popen(marker, f"{name}.Runner")))
    with pytest.raises(PipelineDefinitionError) as info:
        load_pipeline(str(folder / "p.yaml"))
    message = str(info.value)
    assert f"{name}.Runner is refused: it is subprocess.Popen, of module 'subprocess'" in message
    assert "--allow-target-module subprocess" in message and "\n" not in message
    # The same through a stage library's module: curator_dask's namespace is no pass.
    (folder / "q.yaml").write_text(nested(
        "_target_: curator_dask.slurm.run_config.Path"))
    with pytest.raises(PipelineDefinitionError,
                       match=r"run_config\.Path is refused: it is pathlib\.Path, of module "
                             r"'pathlib'"):
        load_pipeline(str(folder / "q.yaml"))
    assert not marker.exists()


def test_allowed_names_are_whole_dotted_prefixes_from_the_option_or_the_config(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text(nested("_target_: xml.dom.minidom.Document"))
    for allowed in (["xml"], ["xml.dom"], ["xml.dom.minidom.Document"]):
        stage = load_pipeline(str(path), allowed).stages[0]
        assert type(stage.read_kwargs).__name__ == "Document"
    for allowed in ([], ["xm"], ["xml.do"], ["xml.dom.minidom.Doc"], ["fractions"]):
        with pytest.raises(PipelineDefinitionError,
                           match="--allow-target-module xml.dom.minidom "):
            load_pipeline(str(path), allowed)
    with dask.config.set({"curator-dask.pipeline-files.allowed-modules": ["xml.dom"]}):
        assert type(load_pipeline(str(path)).stages[0].read_kwargs).__name__ == "Document"
    for bad in ("xml dom", "xml.", ""):
        with pytest.raises(PipelineDefinitionError,
                           match=f"--allow-target-module '{bad}': expected dotted module names"):
            load_pipeline(str(path), [bad])
    with dask.config.set({"curator-dask.pipeline-files.allowed-modules": [3]}), \
            pytest.raises(PipelineDefinitionError,
                          match="config pipeline-files.allowed-modules 3: expected dotted"):
        load_pipeline(str(path))


def test_stage_targets_still_come_from_any_module(importable, tmp_path):
    folder, name = importable
    (folder / f"{name}.py").write_text(STAGES)
    other = tmp_path / "other"  # not the module's folder
    other.mkdir()
    (other / "p.yaml").write_text(
        f"stages:\n  - _target_: {name}.Holder\n    value:\n      _target_: {name}.Holder\n")
    (outer,) = load_pipeline(str(other / "p.yaml")).stages
    assert type(outer).__name__ == type(outer.value).__name__ == "Holder"
    # ... but not a class of that module that is not a stage.
    (other / "q.yaml").write_text(
        f"stages:\n  - _target_: {name}.Holder\n    value:\n      _target_: {name}.Threshold\n"
        "      limit: 1\n")
    with pytest.raises(PipelineDefinitionError, match=f"{name}.Threshold is refused"):
        load_pipeline(str(other / "q.yaml"))


def test_slurm_submit_passes_the_option_to_every_array_task(tmp_path):
    script = cli("slurm", "submit", "p.yaml", "--array", "0-1", "--checkpoint-path", "ckpt",
                 "--dry-run", "--allow-target-module", "fractions", "--allow-target-module",
                 "decimal", cwd=tmp_path)
    assert script.returncode == 0, script.stderr
    (run_line,) = [ln for ln in script.stdout.splitlines() if "-m curator_dask run" in ln]
    assert "--allow-target-module fractions --allow-target-module decimal" in run_line


_slurm = local_slurm()


@pytest.mark.slurm
@pytest.mark.slow
@pytest.mark.skipif(_slurm is not None, reason=_slurm or "")
def test_an_array_task_on_real_slurm_loads_with_the_option(tmp_path):
    seen = tmp_path / "seen.txt"
    project(tmp_path, holder_yaml("_target_: fractions.Fraction\nnumerator: 2", seen=str(seen)))
    (tmp_path / "logs").mkdir()
    submitted = cli("slurm", "submit", "p.yaml", "--array", "0-0", "--checkpoint-path", "ckpt",
                    "--cpus-per-task", "1", "--time", "00:05:00", "--output",
                    str(tmp_path / "logs" / "%A_%a.log"), "--allow-target-module", "fractions",
                    cwd=tmp_path, pythonpath=[tmp_path])
    assert submitted.returncode == 0, submitted.stderr
    wait_for_job(submitted.stdout.strip())
    logs = "\n".join(p.read_text() for p in sorted((tmp_path / "logs").iterdir()))
    assert seen.exists(), logs
    assert seen.read_text() == "(Fraction(2, 1), None)", logs
