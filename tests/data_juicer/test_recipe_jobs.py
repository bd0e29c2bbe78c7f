"""A recipe run is a Data-Juicer job: its folder read by Data-Juicer's own tools, killed with
SIGKILL and resumed to the clean run's bytes (re-running only the partitions in flight), a
changed input refused on resume, no Ray process, one-line refusals of bad recipes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.data_juicer.helpers import (
    SRC,
    TWELVE_OPS,
    corpus,
    run_cli,
    same_files,
    write_recipe,
)

PARTS = ["--partition.mode", "manual", "--partition.num_of_partitions", "4",
         "--checkpoint.strategy", "every_op"]


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return corpus(tmp_path_factory.mktemp("dj-jobs-corpus"), max_bytes=800_000)


@pytest.fixture(scope="module")
def clean(tmp_path_factory: pytest.TempPathFactory, data: Path) -> Path:
    """A clean curator_dask run of the 12-operator recipe, 4 partitions, every_op."""
    root = tmp_path_factory.mktemp("dj-clean")
    recipe = write_recipe(root / "recipe.yaml", data, root / "out" / "result.jsonl",
                          TWELVE_OPS, executor_type="dask")
    run_cli(recipe, *PARTS, "--job_id", "clean-job")
    return root


def _events(job_dir: Path) -> list[dict]:
    newest = max(job_dir.glob("events_*.jsonl"), key=lambda p: p.stat().st_mtime_ns)
    return [json.loads(line) for line in newest.read_text().splitlines()]


def test_data_juicers_tools_read_the_job(clean: Path) -> None:
    from data_juicer.utils.job.common import JobUtils

    job_dir = clean / "out" / "clean-job"
    utils = JobUtils("clean-job", base_dir=str(clean / "out"))
    summary = utils.load_job_summary()
    assert summary["status"] == "completed"
    assert summary["total_partitions"] == 4
    types = {e["event_type"] for e in _events(job_dir)}
    assert {"job_start", "partition_start", "op_start", "op_complete", "checkpoint_save",
            "partition_complete", "job_complete"} <= types
    info = json.loads((job_dir / "checkpoints" / "partitioning_info.json").read_text())
    assert info["num_partitions"] == 4 and info["hash_algorithm"] == "sha256-sequence-v1"
    env = dict(os.environ, PYTHONPATH=SRC)
    monitor = subprocess.run([sys.executable, "-m", "data_juicer.utils.job.monitor",
                              "clean-job", "--base-dir", str(clean / "out")],
                             capture_output=True, text=True, env=env, timeout=120)
    assert monitor.returncode == 0, monitor.stderr[-2000:]
    assert "100" in monitor.stdout  # every partition completed


def test_the_content_hash_is_data_juicers(clean: Path, data: Path) -> None:
    """partitioning_info.json's hashes equal Data-Juicer's own function's over the rows."""
    import pyarrow as pa
    from data_juicer.core.executor.ray_executor_partitioned import (
        _combine_partition_hash_partials,
        _hash_partition_batch,
    )

    from curator_dask.data_juicer.io import dataset_files, read_file

    info = json.loads((clean / "out" / "clean-job" / "checkpoints" /
                       "partitioning_info.json").read_text())
    tables = [read_file(f, ["text"]) for f in dataset_files(str(data), str(data))]
    rows = pa.concat_tables(tables, promote_options="default")
    for part in info["partitions"]:
        table = rows.slice(part["start_row"], part["row_count"])
        # as Ray's take_all() hands them back: one row of Python values a batch
        partials = [_hash_partition_batch(pa.Table.from_batches([b])).to_pylist()[0]
                    for b in table.to_batches(max_chunksize=7)]
        assert _combine_partition_hash_partials(partials)[0] == part["content_hash"]


@pytest.mark.parametrize("after_files", [2, 20])
def test_killed_and_resumed_equals_a_clean_run(tmp_path: Path, data: Path, clean: Path,
                                               after_files: int) -> None:
    recipe = write_recipe(tmp_path / "recipe.yaml", data, tmp_path / "out" / "result.jsonl",
                          TWELVE_OPS, executor_type="dask")
    ckpt = tmp_path / "out" / "killed" / "checkpoints"
    env = dict(os.environ, PYTHONPATH=SRC)
    proc = subprocess.Popen([sys.executable, "-m", "curator_dask", "run", str(recipe), *PARTS,
                             "--job_id", "killed"], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)
    deadline = time.monotonic() + 300
    while proc.poll() is None and time.monotonic() < deadline:
        if ckpt.is_dir() and len(list(ckpt.glob("checkpoint_op_*.parquet"))) >= after_files:
            break
        time.sleep(0.02)
    assert proc.poll() is None, "the run ended before it could be killed"
    os.killpg(proc.pid, signal.SIGKILL)  # the driver and its cluster, at once
    proc.wait(timeout=60)
    from curator_dask.data_juicer.job_folder import DJJobFolder

    at_kill = DJJobFolder(str(tmp_path / "out"), "killed").latest_checkpoints()
    resumed = run_cli(recipe, *PARTS, "--resume", "killed")
    assert "Resume token" not in resumed.stdout  # printed for a new job only
    same_files(clean / "out" / "result.jsonl", tmp_path / "out" / "result.jsonl")
    same_files(clean / "out" / "result_stats.jsonl", tmp_path / "out" / "result_stats.jsonl")
    # a partition ran again only from the operator after its last checkpoint
    dedup = len(TWELVE_OPS) - 1
    events = _events(tmp_path / "out" / "killed")
    loaded = {e["partition_id"] for e in events if e["event_type"] == "checkpoint_load"}
    assert loaded == set(at_kill)
    for event in events:
        if event["event_type"] == "op_start" and event["operation_idx"] != dedup:
            assert event["operation_idx"] > at_kill.get(event["partition_id"], -1), event


def test_a_changed_input_is_refused_on_resume(tmp_path: Path, data: Path) -> None:
    import shutil

    data = Path(shutil.copytree(data, tmp_path / "input"))
    recipe = write_recipe(tmp_path / "recipe.yaml", data, tmp_path / "out" / "result.jsonl",
                          TWELVE_OPS[:3], executor_type="dask")
    run_cli(recipe, *PARTS, "--job_id", "changed")
    ckpt = tmp_path / "out" / "changed" / "checkpoints"
    before = sorted(p.name for p in ckpt.iterdir())
    info = json.loads((ckpt / "partitioning_info.json").read_text())
    second = info["partitions"][1]
    from curator_dask.data_juicer.io import dataset_files

    first_file = Path(dataset_files(str(data), str(data))[0])
    lines = first_file.read_text("utf-8").splitlines()
    row = json.loads(lines[second["start_row"]])
    row["text"] += " changed"
    lines[second["start_row"]] = json.dumps(row)
    first_file.write_text("\n".join(lines) + "\n", "utf-8")
    proc = run_cli(recipe, *PARTS, "--resume", "changed", check=False)
    assert proc.returncode == 2, proc.stderr
    message = proc.stderr.strip().splitlines()[-1]
    assert "partition 1" in message and f"rows {second['start_row']}" in message, message
    assert "Traceback" not in proc.stderr
    assert sorted(p.name for p in ckpt.iterdir()) == before  # checkpoints kept


def test_no_ray_process_starts(tmp_path: Path, data: Path) -> None:
    recipe = write_recipe(tmp_path / "recipe.yaml", data, tmp_path / "out" / "result.jsonl",
                          TWELVE_OPS, executor_type="ray_partitioned")
    env = dict(os.environ, PYTHONPATH=SRC)
    proc = subprocess.Popen([sys.executable, "-m", "curator_dask", "run", str(recipe)],
                            cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    seen: set[str] = set()
    root = psutil.Process(proc.pid)
    while proc.poll() is None:
        try:
            for p in [root, *root.children(recursive=True)]:
                seen.add(" ".join(p.cmdline()[:3]))
        except psutil.Error:
            pass
        time.sleep(0.05)
    out, err = proc.communicate()
    assert proc.returncode == 0, err
    assert any("curator_dask" in c for c in seen)  # the watch saw the run's processes
    assert not [c for c in seen if "ray" in c.lower().split("/")[-1] or "raylet" in c
                or "gcs_server" in c], seen
    assert "runs on Dask here" in err


BAD = {
    "unknown operator": ([{"text_lenght_filter": None}],
                         ["text_lenght_filter", "did you mean", "text_length_filter"]),
    "misspelled parameter": ([{"text_length_filter": {"min_lenn": 3}}],
                             ["min_lenn", "min_len"]),
    "GPU operator": ([{"text_length_filter": {"accelerator": "cuda"}}],
                     ["text_length_filter", "GPU"]),
    "dataset-level operator": ([{"topk_specified_field_selector": {"field_key": "x"}}],
                               ["topk_specified_field_selector", "Selector"]),
    "resource": ([{"flagged_words_filter": None}],
                 ["flagged_words_filter", "flagged_words.json", "DATA_JUICER_ASSETS_CACHE"]),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_bad_recipe_gets_one_line_and_nothing_runs(tmp_path: Path, data: Path,
                                                     case: str) -> None:
    process, words = BAD[case]
    recipe = write_recipe(tmp_path / "recipe.yaml", data, tmp_path / "out" / "result.jsonl",
                          process)
    env = dict(os.environ, PYTHONPATH=SRC,
               # downloads fail here at once (a real refusal of the connection), and the
               # cache is empty: the resource case is what a machine without network sees
               HTTP_PROXY="http://127.0.0.1:9", HTTPS_PROXY="http://127.0.0.1:9",
               DATA_JUICER_CACHE_HOME=str(tmp_path / "empty-cache"))
    proc = subprocess.run([sys.executable, "-m", "curator_dask", "run", str(recipe)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    for word in words:
        assert word in lines[0], lines[0]
    assert not (tmp_path / "out").exists()  # nothing written: no job folder, no output


def test_a_missing_dataset_path_gets_one_line(tmp_path: Path) -> None:
    recipe = write_recipe(tmp_path / "recipe.yaml", tmp_path / "nowhere",
                          tmp_path / "out" / "result.jsonl", TWELVE_OPS[:1])
    proc = run_cli(recipe, check=False)
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "nowhere" in proc.stderr
    assert not (tmp_path / "out").exists()


def test_slurm_submit_refuses_a_recipe_naming_the_way_that_works(tmp_path: Path) -> None:
    recipe = write_recipe(tmp_path / "recipe.yaml", tmp_path, tmp_path / "out" / "r.jsonl",
                          TWELVE_OPS[:1])
    env = dict(os.environ, PYTHONPATH=SRC)
    proc = subprocess.run([sys.executable, "-m", "curator_dask", "slurm", "submit",
                           str(recipe), "--array", "0-1", "--checkpoint-path",
                           str(tmp_path / "ckpt"), "--dry-run"],
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 2
    assert "--cluster slurm" in proc.stderr and "#SBATCH" not in proc.stdout
