"""The example recipe, examples/dj_recipe.yaml (issue 21, item 7), run by the command as a user
runs it: Data-Juicer's ``partition: manual`` (3 row ranges of one JSONL file),
``checkpoint: every_op`` and ``intermediate_storage: parquet / snappy / keep_all`` reach the
run; a resume of the job skips every partition, and one with a changed section is refused.
The mapping itself, and its refusals, are tests/cli/test_recipe.py."""

from __future__ import annotations

import json
import shutil

import pyarrow.parquet as pq
import pytest

from curator_dask.sample_data import generate_jsonl
from tests.helpers import REPO_ROOT, cli


def rows(folder):
    return [json.loads(line) for path in sorted(folder.glob("*.jsonl"))
            for line in path.read_text().splitlines()]


@pytest.mark.slow
def test_the_example_recipe_runs_and_resumes(tmp_path):
    for name in ("dj_recipe.yaml", "stages.py"):
        shutil.copy(REPO_ROOT / "examples" / name, tmp_path / name)
    generate_jsonl(str(tmp_path / "input"), files=1, docs_per_file=30, short_fraction=0.2,
                   seed=4)
    run = ("run", "dj_recipe.yaml", "--workers", "2", "--no-progress")
    out = cli(*run, cwd=tmp_path, timeout=240)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "3 sources, 3 output tasks" in out.stdout
    assert "executor_type ray_partitioned runs on Dask here" in out.stderr
    # partition: manual, num_of_partitions 3 -> one output file per row range, every kept
    # row once
    written = sorted((tmp_path / "output-recipe").glob("*.jsonl"))
    assert len(written) == 3
    expected = [r["id"] for r in rows(tmp_path / "input") if len(r["text"]) > 50]
    assert sorted(r["id"] for r in rows(tmp_path / "output-recipe")) == sorted(expected)
    (job,) = (tmp_path / "curator-dask-jobs").iterdir()
    plan = json.loads((job / "dag_execution_plan.json").read_text())
    assert plan["max_concurrent_partitions"] == 2
    # checkpoint: every_op -> after the reader and the filter, for each of the 3 partitions;
    # intermediate_storage: parquet with snappy, kept after the run (keep_all)
    entries = sorted((job / "checkpoint" / ".curator_dask" / "stage_checkpoints").iterdir())
    manifests = [json.loads((e / "manifest.json").read_text()) for e in entries]
    assert sorted(m["stage"] for m in manifests) == ["jsonl_reader"] * 3 + [
        "keep_long_documents"] * 3
    assert sum(m["rows"] for m in manifests if m["stage"] == "jsonl_reader") == 30
    parts = [e / f["file"] for e, m in zip(entries, manifests, strict=True) for f in m["files"]]
    assert parts and all(p.suffix == ".parquet" for p in parts)
    assert {(f["format"], f["compression"]) for m in manifests for f in m["files"]} == {
        ("parquet", "snappy")}
    assert {pq.ParquetFile(p).metadata.row_group(0).column(0).compression
            for p in parts} == {"SNAPPY"}

    # The same recipe resumed: every partition is complete, nothing runs again; the command
    # line's --max-concurrent-partitions wins over the recipe's (and is no part of the
    # fingerprint)
    before = {p: p.stat().st_mtime_ns for p in written}
    again = cli(*run, "--resume", job.name, "--max-concurrent-partitions", "1", cwd=tmp_path,
                timeout=240)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "3 already complete (skipped), 0 to process" in again.stderr
    assert "0 output tasks" in again.stdout
    assert {p: p.stat().st_mtime_ns for p in written} == before
    assert json.loads((job / "dag_execution_plan.json").read_text())[
        "max_concurrent_partitions"] == 1

    # A changed checkpoint: section is a changed configuration: refused, nothing deleted
    recipe = tmp_path / "dj_recipe.yaml"
    recipe.write_text(recipe.read_text().replace(
        "strategy: every_op", "strategy: manual\n  op_names: [keep_long_documents]"))
    changed = cli(*run, "--resume", job.name, cwd=tmp_path, timeout=240)
    assert changed.returncode == 2, changed.stderr[-3000:]
    assert 'settings.stage_checkpoints.strategy: "every_stage" -> "manual"' in changed.stderr
    assert sorted((job / "checkpoint" / ".curator_dask" / "stage_checkpoints").iterdir()) \
        == entries
