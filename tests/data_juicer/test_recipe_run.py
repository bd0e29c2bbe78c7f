"""A Data-Juicer recipe on Dask gives, byte for byte, what Data-Juicer's default executor
gives: the 12-operator recipe of issue 34 on real text, over 1 to 5 partitions, with and
without curator_dask's fast operators, through the command line and the Python class, JSONL
(one file or shards) and Parquet."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.data_juicer.helpers import (
    TWELVE_OPS,
    corpus,
    run_cli,
    run_dj_default,
    run_in_process,
    same_files,
    write_recipe,
)


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return corpus(tmp_path_factory.mktemp("dj-corpus"))


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory, data: Path) -> Path:
    """Data-Juicer's default executor's result of the 12-operator recipe."""
    root = tmp_path_factory.mktemp("dj-default")
    recipe = write_recipe(root / "recipe.yaml", data, root / "out" / "result.jsonl",
                          TWELVE_OPS)
    run_dj_default(recipe)
    return root / "out"


def test_the_command_line_gives_data_juicers_result(tmp_path: Path, data: Path,
                                                     reference: Path) -> None:
    recipe = write_recipe(tmp_path / "recipe.yaml", data, tmp_path / "out" / "result.jsonl",
                          TWELVE_OPS, executor_type="default")
    proc = run_cli(recipe, "--partition.mode", "manual", "--partition.num_of_partitions", "3")
    same_files(reference / "result.jsonl", tmp_path / "out" / "result.jsonl")
    same_files(reference / "result_stats.jsonl", tmp_path / "out" / "result_stats.jsonl")
    assert "Resume token: " in proc.stdout
    assert "runs on Dask here" in proc.stderr  # executor_type: default said once
    assert proc.stdout.count("document_deduplicator") == 1  # the per-operator counts
    assert not list((tmp_path / "out").glob(".*parts*"))  # no part file left behind


@pytest.mark.parametrize("partitions", [1, 2, 5])
@pytest.mark.parametrize("fast_ops", [True, False])
def test_any_partitioning_gives_the_same_rows(tmp_path: Path, data: Path, reference: Path,
                                              executor: object, partitions: int,
                                              fast_ops: bool) -> None:
    recipe = write_recipe(tmp_path / "recipe.yaml", data, tmp_path / "out" / "result.jsonl",
                          TWELVE_OPS, executor_type="dask")
    result = run_in_process(recipe, executor, "--partition.mode", "manual",
                            "--partition.num_of_partitions", str(partitions),
                            fast_ops=fast_ops)
    same_files(reference / "result.jsonl", tmp_path / "out" / "result.jsonl")
    same_files(reference / "result_stats.jsonl", tmp_path / "out" / "result_stats.jsonl")
    assert result.partitions == partitions
    rows = len((reference / "result.jsonl").read_bytes().splitlines())
    assert result.rows_out == rows
    assert [c.name for c in result.ops] == [next(iter(op)) for op in TWELVE_OPS]
    # each operator's rows in are the rows out of the one before it
    for before, after in zip(result.ops, result.ops[1:], strict=False):
        assert after.rows_in == before.rows_out
    assert result.ops[-1].rows_out == rows
    assert bool(result.fast_ops) is fast_ops


def test_shards_and_parquet_as_data_juicer_writes_them(tmp_path: Path, data: Path,
                                                       executor: object) -> None:
    ops = TWELVE_OPS[:6]
    for name, extra in (("shards", {"export_shard_size": 300_000}),
                        ("parquet", {"export_type": "parquet"})):
        suffix = "parquet" if name == "parquet" else "jsonl"
        ref = write_recipe(tmp_path / f"ref-{name}.yaml", data,
                           tmp_path / f"ref-{name}" / f"result.{suffix}", ops, **extra)
        run_dj_default(ref)
        ours = write_recipe(tmp_path / f"ours-{name}.yaml", data,
                            tmp_path / f"ours-{name}" / f"result.{suffix}", ops, **extra)
        run_in_process(ours, executor, "--partition.mode", "manual",
                       "--partition.num_of_partitions", "3")
        theirs = sorted(p.name for p in (tmp_path / f"ref-{name}").glob("result*"))
        mine = sorted(p.name for p in (tmp_path / f"ours-{name}").glob("result*"))
        assert mine == theirs
        for file in theirs:
            if file.endswith(".parquet"):
                assert (pq.read_table(tmp_path / f"ours-{name}" / file).to_pylist()
                        == pq.read_table(tmp_path / f"ref-{name}" / file).to_pylist())
            else:
                same_files(tmp_path / f"ref-{name}" / file, tmp_path / f"ours-{name}" / file)
    assert len(theirs) > 1 or name == "parquet"


@pytest.mark.parametrize("dedup", [
    {"document_minhash_deduplicator": {"tokenization": "space", "window_size": 5,
                                       "jaccard_threshold": 0.7}},
    {"document_simhash_deduplicator": {"tokenization": "space", "window_size": 6,
                                       "num_blocks": 6, "hamming_distance": 4}},
], ids=["minhash", "simhash"])
def test_fuzzy_dedup_recipes_keep_data_juicers_rows(tmp_path: Path, data: Path,
                                                    executor: object, dedup: dict) -> None:
    """Near-duplicates across files and partitions: the rows kept are Data-Juicer's (its own
    tokenisation, hashes, permutations and bands), mappers before and a filter after."""
    process = [*TWELVE_OPS[:2], dedup, {"text_length_filter": {"min_len": 50}}]
    near = data.parent / "near"
    if not near.exists():
        import json
        import shutil

        shutil.copytree(data, near)
        first = sorted(near.glob("part-*.jsonl"))[0]
        rows = [json.loads(line) for line in first.read_text("utf-8").splitlines()]
        with open(near / "more" / "near.jsonl", "w", encoding="utf-8") as f:
            for i, row in enumerate(rows[5:25]):  # one word changed: near, not exact
                words = row["text"].split(" ")
                words[len(words) // 2] = "changed"
                f.write(json.dumps({"text": " ".join(words), "id": f"near-{i}"}) + "\n")
    ref = write_recipe(tmp_path / "ref.yaml", near, tmp_path / "ref" / "result.jsonl", process)
    run_dj_default(ref)
    ours = write_recipe(tmp_path / "ours.yaml", near, tmp_path / "ours" / "result.jsonl",
                        process, executor_type="dask")
    result = run_in_process(ours, executor, "--partition.mode", "manual",
                            "--partition.num_of_partitions", "4")
    same_files(tmp_path / "ref" / "result.jsonl", tmp_path / "ours" / "result.jsonl")
    same_files(tmp_path / "ref" / "result_stats.jsonl", tmp_path / "ours" / "result_stats.jsonl")
    dedup_count = result.ops[2]
    assert dedup_count.rows_out < dedup_count.rows_in  # the near-duplicates went


def test_data_juicers_config_object_swaps_one_class(tmp_path: Path, data: Path,
                                                    reference: Path, executor: object) -> None:
    """A Data-Juicer Python user builds the config with Data-Juicer's own init_configs and
    hands it to DataJuicerDaskExecutor instead of DefaultExecutor."""
    import os

    from data_juicer.config import init_configs

    from curator_dask.data_juicer import DataJuicerDaskExecutor

    recipe = write_recipe(tmp_path / "recipe.yaml", data, tmp_path / "out" / "result.jsonl",
                          TWELVE_OPS)  # executor_type default: Data-Juicer's parser knows it
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        cfg = init_configs(["--config", str(recipe)], load_configs_only=True)
        result = DataJuicerDaskExecutor(cfg, executor=executor).run()
    finally:
        os.chdir(cwd)
    same_files(reference / "result.jsonl", tmp_path / "out" / "result.jsonl")
    assert result.rows_out == len((reference / "result.jsonl").read_bytes().splitlines())
