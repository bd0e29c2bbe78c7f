"""FuzzyDeduplicationWorkflow end to end on the module's real 2-worker LocalCluster, on real
files of a planted near-duplicate corpus (curator_dask/dedup/synthetic.py): clusters reduced to
their smallest id, unrelated documents kept, NeMo's layout and metadata, the Jaccard check,
determinism, the removal; no Ray."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from curator_dask.dedup import FuzzyDeduplicationWorkflow
from curator_dask.dedup.synthetic import planted_corpus, shingle_jaccard
from tests.nemo.no_ray import assert_no_ray

ID = "_curator_dedup_id"
NEMO_KEYS = {"minhash_time", "id_generator_path", "lsh_time",
             "connected_components_pipeline_time", "num_duplicates", "total_time"}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("fuzzy-corpus")
    planted = planted_corpus(600, seed=21, words=(80, 250), cluster_fraction=0.3)
    planted.write_jsonl(str(root / "in"), n_files=4)
    return planted, root / "in"


def removed_ids(output: Path) -> np.ndarray:
    return pq.read_table(output / "FuzzyDuplicateIds").column(ID).to_numpy()


def run(executor, root: Path, inp: Path, **kwargs):
    options = {"input_filetype": "jsonl", "input_blocksize": None, **kwargs}
    wf = FuzzyDeduplicationWorkflow(cache_path=str(root / "cache"), output_path=str(root / "out"),
                                    input_path=str(inp), **options)
    return wf.run(executor=executor)


def test_planted_clusters_are_reduced_to_their_smallest_id(executor, corpus, tmp_path):
    planted, inp = corpus
    result = run(executor, tmp_path, inp)
    assert result.workflow_name == "fuzzy_deduplication"
    assert set(result.metadata) >= NEMO_KEYS
    removed = removed_ids(tmp_path / "out")
    score = planted.score(removed)  # ids are the documents' indices (files in id order)
    assert score.recall >= 0.95 and score.precision >= 0.98, score
    assert score.unrelated_removed == 0 and score.far_pairs_hit == 0, score
    assert result.get_metadata("num_duplicates") == len(removed) == score.removed
    (task,) = result.pipeline_tasks["connected_components"]  # NeMo's counts per ids file
    assert task._metadata["num_removal_ids"] == len(removed)
    assert len(result.pipeline_tasks["minhash"]) == 4  # one per file group
    kept = np.setdiff1d(np.arange(len(planted.texts)), removed)
    for c in range(planted.n_clusters):  # one survivor per cluster: its smallest id
        members = np.flatnonzero(planted.cluster == c)
        assert np.intersect1d(members, kept).tolist() == [members.min()]
    assert_no_ray(executor.client)


def test_nemos_layout_and_id_generator(executor, corpus, tmp_path):
    from nemo_curator.stages.deduplication.id_generator import IdGeneratorBase as NemoIds

    planted, inp = corpus
    result = run(executor, tmp_path, inp, bands_per_iteration=10)
    out, cache = tmp_path / "out", tmp_path / "cache"
    ids_file = pq.read_table(out / "FuzzyDuplicateIds" / "part.0.parquet")
    assert ids_file.schema == pa.schema([(ID, pa.int64())])
    assert sorted({p.name for p in cache.iterdir()}) == [
        ".curator_dask", "BucketsToEdgesStage", "ConnectedComponentsStage", "LSHStage",
        "MinHashStage"]
    assert sorted(p.name for p in (cache / "LSHStage").iterdir()) == [
        "band_0-band_10", "band_10-band_20"]
    minhash = pq.read_table(next((cache / "MinHashStage").glob("*.parquet")))
    assert minhash.schema.field("_minhash_signature").type == pa.list_(pa.uint32())
    assert pq.read_table(cache / "ConnectedComponentsStage").column_names == [
        ID, "_duplicate_group_id"]
    # NeMo's own class reads the id generator; each file's range is its documents' indices
    path = result.get_metadata("id_generator_path")
    assert path == str(out / "fuzzy_id_generator.json")
    nemo = NemoIds.from_disk(path)
    files = sorted(str(p) for p in inp.iterdir())
    sizes = [len(Path(f).read_text().splitlines()) for f in files]
    starts = np.cumsum([0, *sizes])
    assert [list(nemo.get_batch_range([f], None)) for f in files] == [
        [int(a), int(b) - 1] for a, b in zip(starts[:-1], starts[1:], strict=True)]
    assert json.loads(Path(path).read_text())["next_id"] == len(planted.texts)


def test_the_jaccard_check_removes_no_pair_below_the_threshold(executor, tmp_path):
    """Pairs planted just below 0.8 share LSH buckets at 20 x 5 bands (0.72^5 per band): the
    unchecked run removes some of them; the checked one removes none, and every document it
    removes is linked to the one kept by pairs at or above 0.8."""
    planted = planted_corpus(400, seed=5, words=(100, 300), similarity=0.9,
                             far_similarity=0.72, far_pair_fraction=0.3)
    planted.write_parquet(str(tmp_path / "in"), n_files=3)
    options = dict(num_bands=20, minhashes_per_band=5, bands_per_iteration=10,
                   input_filetype="parquet")
    run(executor, tmp_path / "plain", tmp_path / "in", **options)
    plain = planted.score(removed_ids(tmp_path / "plain" / "out"))
    below = planted.far_pairs[planted.far_jaccard < 0.8]
    assert np.isin(below, removed_ids(tmp_path / "plain" / "out")).any(axis=1).sum() > 5, plain

    wf_root = tmp_path / "checked"
    result = FuzzyDeduplicationWorkflow(
        cache_path=str(wf_root / "cache"), output_path=str(wf_root / "out"),
        input_path=str(tmp_path / "in"), input_blocksize=None, false_positive_check=True,
        jaccard_threshold=0.8, **options).run(executor=executor)
    removed = removed_ids(wf_root / "out")
    assert not np.isin(below, removed).any(), "a pair below the threshold was removed"
    score = planted.score(removed)
    assert score.recall >= 0.95 and score.unrelated_removed <= len(planted.far_pairs) - len(
        below), score
    assert result.get_metadata("num_verified_pairs") < result.get_metadata(
        "num_candidate_pairs")
    checked = pq.read_table(wf_root / "cache" / "JaccardSimilarityStage").to_pandas()
    for x, y, sim in checked.sample(20, random_state=0).itertuples(index=False):
        assert sim == pytest.approx(shingle_jaccard(planted.texts[x], planted.texts[y]),
                                    abs=1e-6)
    groups = pq.read_table(wf_root / "cache" / "ConnectedComponentsStage").to_pandas()
    for group, members in groups.groupby("_duplicate_group_id")[ID]:
        assert linked_by_verified_pairs(planted.texts, int(group), members.tolist(), 0.8)


def linked_by_verified_pairs(texts: list[str], kept: int, members: list[int],
                             threshold: float) -> bool:
    """Whether every member reaches ``kept`` through pairs of true Jaccard >= threshold."""
    reached, frontier = {kept}, [kept]
    while frontier:
        node = frontier.pop()
        for other in members:
            if other not in reached and shingle_jaccard(texts[node], texts[other]) >= threshold:
                reached.add(other)
                frontier.append(other)
    return reached == set(members)


def test_runs_are_deterministic_and_the_seed_matters(executor, corpus, tmp_path):
    """Two runs with one seed (the second given its file groups as ``initial_tasks``) write
    the same signatures and ids; another seed other signatures, on this clear corpus the same
    ids."""
    from curator_dask.stages.file_partitioning import FilePartitioningStage
    from curator_dask.tasks import EmptyTask

    _, inp = corpus
    run(executor, tmp_path / "a", inp, seed=3, use_64_bit_hash=True)
    tasks = FilePartitioningStage(file_paths=str(inp), file_extensions=[".jsonl"]).process(
        EmptyTask())
    assert len(tasks) == 4
    FuzzyDeduplicationWorkflow(
        cache_path=str(tmp_path / "b" / "cache"), output_path=str(tmp_path / "b" / "out"),
        input_filetype="jsonl", seed=3, use_64_bit_hash=True,
    ).run(initial_tasks=tasks, executor=executor)
    run(executor, tmp_path / "c", inp, seed=4, use_64_bit_hash=True)

    def signatures(name: str) -> dict[str, list]:
        folder = tmp_path / name / "cache" / "MinHashStage"
        return {p.name: pq.read_table(p).column(0).to_pylist() for p in folder.glob("*.parquet")}

    assert signatures("a") == signatures("b")
    assert signatures("a") != signatures("c")
    one = removed_ids(tmp_path / "a" / "out")
    assert np.array_equal(one, removed_ids(tmp_path / "b" / "out"))
    assert np.array_equal(one, removed_ids(tmp_path / "c" / "out"))  # a clear corpus


def test_perform_removal_writes_the_corpus_without_the_duplicates(executor, corpus, tmp_path):
    """Partitions of several files (1 MiB blocks): the removal reads them with the same
    partitioning, so its ids are the identification's; the corpus's own ``id`` field then says
    which documents survived."""
    planted, inp = corpus
    result = run(executor, tmp_path, inp, perform_removal=True, input_blocksize="1MiB")
    assert len(list((tmp_path / "cache" / "MinHashStage").glob("*.parquet"))) < 4
    num_removed = len(removed_ids(tmp_path / "out"))
    rows = [json.loads(line) for p in sorted((tmp_path / "out" / "deduplicated").iterdir())
            for line in p.read_text().splitlines()]
    assert len(rows) == len(planted.texts) - num_removed
    assert all(planted.texts[r["id"]] == r["text"] and ID not in r for r in rows)
    gone = sorted(set(range(len(planted.texts))) - {r["id"] for r in rows})
    score = planted.score(gone)
    assert score.recall >= 0.95 and score.precision >= 0.98 and score.clusters_emptied == 0
    assert result.get_metadata("num_duplicates_removed") == num_removed


def test_gpu_only_parameters_are_ignored_with_one_warning(caplog):
    with caplog.at_level(logging.WARNING, logger="curator_dask.dedup.fuzzy.workflow"):
        FuzzyDeduplicationWorkflow(cache_path="c", output_path="o", input_path="i")
        assert not caplog.records
        FuzzyDeduplicationWorkflow(cache_path="c", output_path="o", input_path="i",
                                   lsh_rmm_pool_size=2**30, use_async_memory=False)
    (record,) = caplog.records
    assert "lsh_rmm_pool_size=1073741824" in record.message
    assert "use_async_memory=False" in record.message


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"bands_per_iteration": 21}, "bands_per_iteration=21 must be between 1 and num_bands"),
    ({"input_filetype": "csv"}, "input_filetype='csv'"),
    ({"jaccard_threshold": 0}, "jaccard_threshold=0"),
])
def test_bad_parameters_are_refused(kwargs, match):
    with pytest.raises(ValueError, match=match):
        FuzzyDeduplicationWorkflow(cache_path="c", output_path="o", input_path="i", **kwargs)


def test_a_non_dask_executor_is_refused(tmp_path):
    wf = FuzzyDeduplicationWorkflow(cache_path=str(tmp_path), output_path=str(tmp_path),
                                    input_path=str(tmp_path))
    with pytest.raises(TypeError, match="DaskExecutor"):
        wf.run(executor=object())
    with pytest.raises(ValueError, match="input_path"):
        FuzzyDeduplicationWorkflow(cache_path="c", output_path="o").run()


def test_nemos_removal_workflow_removes_what_the_fuzzy_workflow_found(executor, corpus,
                                                                       tmp_path):
    from nemo_curator.stages.text.deduplication.removal_workflow import (
        TextDuplicatesRemovalWorkflow as NemoRemoval,
    )

    planted, inp = corpus
    result = run(executor, tmp_path, inp)
    removed = set(removed_ids(tmp_path / "out").tolist())
    NemoRemoval(input_path=str(inp), ids_to_remove_path=str(tmp_path / "out" /
                                                             "FuzzyDuplicateIds"),
                output_path=str(tmp_path / "nemo"), input_filetype="jsonl",
                id_field=ID, duplicate_id_field=ID,
                id_generator_path=result.get_metadata("id_generator_path"),
                output_filetype="jsonl").run(executor)
    rows = [json.loads(line) for p in sorted((tmp_path / "nemo").iterdir())
            for line in p.read_text().splitlines()]
    assert sorted(r["id"] for r in rows) == sorted(set(range(len(planted.texts))) - removed)
    assert_no_ray(executor.client)
