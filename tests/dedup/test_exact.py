"""``ExactDeduplicationWorkflow`` on a real 2-worker LocalCluster: NeMo's layout, ids that NeMo's
own reader and removal workflow use, the smallest id of each group kept, each distinct
(normalised) text once in the deduplicated corpus, and no Ray process."""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest

from curator_dask.dedup import ExactDeduplicationWorkflow
from curator_dask.ids import generator as ids
from tests.dedup.exact_corpus import read_corpus, write_corpus

pytestmark = pytest.mark.slow

BLOCKSIZE = "18kB"  # two of the corpus's 6 files (8 to 9 kB) per group: 3 file groups
ID = "_curator_dedup_id"


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    return write_corpus(tmp_path_factory.mktemp("exact") / "in")


def expected_removals(rows: list[dict], key: str, id_of) -> tuple[set, dict]:
    """The ids a correct run removes (all but the smallest per key) and the kept id per key."""
    frame = pd.DataFrame({"key": [r[key] for r in rows], "id": [id_of(r) for r in rows]})
    kept = frame.groupby("key")["id"].min()
    return set(frame["id"]) - set(kept), kept.to_dict()


def parts_of(folder: Path) -> dict[str, pd.DataFrame]:
    return {p.name: pq.read_table(p).to_pandas() for p in sorted(folder.glob("*.parquet"))}


def nemo_ids(executor, corpus: Path, generator_json: str) -> dict[str, int]:
    """{document id: the id NeMo's own reader assigns from the workflow's JSON}."""
    from nemo_curator.pipeline import Pipeline
    from nemo_curator.stages.deduplication.id_generator import (
        create_id_generator_actor,
        kill_id_generator_actor,
    )
    from nemo_curator.stages.text.io.reader import JsonlReader

    create_id_generator_actor(generator_json)
    try:
        tasks = Pipeline(name="nemo-ids", stages=[JsonlReader(
            file_paths=str(corpus), blocksize=BLOCKSIZE, _assign_ids=True)]).run(executor)
    finally:
        kill_id_generator_actor()
    frame = pd.concat([t.to_pandas() for t in tasks])
    return dict(zip(frame["id"], frame[ID].astype(int), strict=True))


def test_normalised_exact_dedup_with_nemo_ids_and_nemo_removal(executor, corpus, tmp_path):
    from nemo_curator.stages.deduplication.id_generator import IdGeneratorBase
    from nemo_curator.stages.text.deduplication.removal_workflow import (
        TextDuplicatesRemovalWorkflow,
    )

    from tests.nemo.no_ray import assert_no_ray

    out = tmp_path / "out"
    result = ExactDeduplicationWorkflow(
        output_path=str(out), input_path=str(corpus), input_filetype="jsonl",
        input_blocksize=BLOCKSIZE, text_field="text", normalize_text=True, total_nparts=3,
        perform_removal=True).run(executor=executor)

    # NeMo's layout: one Parquet file per part, the id column NeMo names, sorted ids
    assert sorted(os.listdir(out)) == ["ExactDuplicateIds", "deduplicated",
                                       "exact_id_generator.json"]
    parts = parts_of(out / "ExactDuplicateIds")
    assert sorted(parts) == ["part.0.parquet", "part.1.parquet", "part.2.parquet"]
    for name, frame in parts.items():
        assert list(frame.columns) == [ID] and frame[ID].dtype == "int64", name
        assert frame[ID].is_monotonic_increasing, name
    removed = [i for f in parts.values() for i in f[ID]]
    assert len(removed) == len(set(removed))

    # the ids are the ones NeMo's reader assigns from the JSON; the smallest per text is kept
    rows = read_corpus(corpus)
    generator_json = str(out / "exact_id_generator.json")
    assert IdGeneratorBase.from_disk(generator_json).next_id == len(rows)
    by_doc = nemo_ids(executor, corpus, generator_json)
    assert sorted(by_doc.values()) == list(range(len(rows)))
    want, kept = expected_removals(rows, "key", lambda r: by_doc[r["id"]])
    assert set(removed) == want and want

    # NeMo's own removal workflow, on the same executor, from those files
    removal = TextDuplicatesRemovalWorkflow(
        input_path=str(corpus), ids_to_remove_path=str(out / "ExactDuplicateIds"),
        output_path=str(tmp_path / "nemo-dedup"), input_filetype="jsonl",
        input_blocksize=BLOCKSIZE, duplicate_id_field=ID, id_generator_path=generator_json,
        output_filetype="jsonl").run(executor=executor)
    assert removal.metadata["num_duplicates_removed"] == len(want)
    survivors = read_corpus(tmp_path / "nemo-dedup")
    assert sorted(r["key"] for r in survivors) == sorted(kept)  # each text exactly once
    assert {r["key"]: r[ID] for r in survivors} == kept

    # perform_removal=True wrote the same corpus, without the generated id column
    ours = read_corpus(out / "deduplicated")
    assert sorted(r["id"] for r in ours) == sorted(r["id"] for r in survivors)
    assert all(set(r) == {"id", "text", "key", "raw"} for r in ours)

    # NeMo's result, with the phase times
    assert result.workflow_name == "exact_deduplication"
    meta = result.metadata
    assert meta["num_duplicates"] == len(want) == meta["num_duplicates_removed"]
    assert meta["id_generator_path"] == generator_json
    assert {"total_time", "identification_time", "hash_time", "duplicates_time",
            "removal_time"} <= set(meta)
    tasks = result.pipeline_tasks["identification"]
    assert sorted(t._metadata["partition_index"] for t in tasks) == [0, 1, 2]
    assert sum(t._metadata["num_removal_ids"] for t in tasks) == len(want)
    assert len(result.pipeline_tasks["input_filegroups"]) == 3
    assert_no_ray(executor.client)


def test_own_ids_without_normalisation(executor, corpus, tmp_path):
    out = tmp_path / "out"
    result = ExactDeduplicationWorkflow(
        output_path=str(out), input_path=str(corpus), input_filetype="jsonl",
        input_blocksize=BLOCKSIZE, assign_id=False, id_field="id",
        perform_removal=True).run(executor=executor)
    # total_nparts by NeMo's rule: a third of the file groups, at least one
    parts = parts_of(out / "ExactDuplicateIds")
    assert sorted(parts) == ["part.0.parquet"]
    assert list(parts["part.0.parquet"].columns) == ["id"]
    assert not (out / "exact_id_generator.json").exists()
    rows = read_corpus(corpus)
    want, kept = expected_removals(rows, "raw", lambda r: r["id"])
    assert set(parts["part.0.parquet"]["id"]) == want
    assert sorted(parts["part.0.parquet"]["id"]) == list(parts["part.0.parquet"]["id"])
    survivors = read_corpus(out / "deduplicated")
    assert {r["raw"]: r["id"] for r in survivors} == kept and len(survivors) == len(kept)
    assert result.metadata["id_generator_path"] is None
    assert result.metadata["num_duplicates"] == len(want)
    # without normalisation case and spaces count: more texts survive than normalised
    assert len(kept) > len({r["key"] for r in rows})


@pytest.mark.parametrize("own_ids", [False, True])
def test_ids_grouped_in_memory_equal_the_p2p_shuffles(executor, corpus, tmp_path, caplog,
                                                      own_ids):
    """The hashes of a corpus that fits in the workers' memory are grouped with Dask's task
    shuffle in memory; the same ids are removed as with the P2P shuffle, in the same number
    of parts, each sorted, those that no document fell into written empty (more parts than
    documents)."""
    import logging

    import dask

    rows = read_corpus(corpus)
    nparts = len(rows) + 3
    ids = {"assign_id": False, "id_field": "id"} if own_ids else {}
    column = "id" if own_ids else ID
    found = {}
    for fraction in (0.15, 0):
        out = tmp_path / f"out-{fraction}"
        with dask.config.set({"curator-dask.dedup.exact-in-memory-fraction": fraction}), \
                caplog.at_level(logging.INFO, logger="curator_dask.dedup.exact_ids"):
            caplog.clear()
            ExactDeduplicationWorkflow(
                output_path=str(out), input_path=str(corpus), input_filetype="jsonl",
                input_blocksize=BLOCKSIZE, total_nparts=nparts, **ids).run(executor=executor)
        said = [r.getMessage() for r in caplog.records if "grouping" in r.getMessage()]
        assert len(said) == 1 and ("in memory" in said[0]) == (fraction > 0), said
        parts = parts_of(out / "ExactDuplicateIds")
        assert sorted(parts) == sorted(f"part.{i}.parquet" for i in range(nparts))
        assert all(list(p.columns) == [column] for p in parts.values())
        assert all(list(p[column]) == sorted(p[column]) for p in parts.values())
        assert sum(p.empty for p in parts.values()) >= 3
        found[fraction] = sorted(v for p in parts.values() for v in p[column])
    assert found[0.15] == found[0] and found[0]
    if own_ids:
        assert set(found[0]) == expected_removals(rows, "raw", lambda r: r["id"])[0]


def test_initial_tasks_nemos_or_ours_in_any_order(executor, corpus, tmp_path):
    from nemo_curator.tasks import FileGroupTask as NemoFileGroupTask

    from curator_dask.tasks import FileGroupTask

    def run(out: str, tasks=None, **kw):
        ExactDeduplicationWorkflow(output_path=str(tmp_path / out), input_filetype="jsonl",
                                   total_nparts=2, **kw).run(initial_tasks=tasks,
                                                             executor=executor)
        return parts_of(tmp_path / out / "ExactDuplicateIds")

    files = sorted(str(p) for p in corpus.glob("*.jsonl"))
    # a file per group in listing order (with a blocksize the plan's order is by size,
    # docs/deduplication.md "Removal with another grouping"); the tasks, in any order, are
    # taken in the order of their paths
    planned = run("planned", input_path=str(corpus), input_blocksize=None)
    ours = run("ours", [FileGroupTask(dataset_name="c", data=[f]) for f in reversed(files)])
    nemo = run("nemo", [NemoFileGroupTask(dataset_name="c", data=[f]) for f in files])
    for got in (ours, nemo):
        assert sorted(got) == sorted(planned) == ["part.0.parquet", "part.1.parquet"]
        assert all(got[k].equals(planned[k]) for k in planned)
    assert sum(len(f) for f in planned.values()) > 0
    empty = run("empty", [])  # no documents: every part written, empty
    assert sorted(empty) == sorted(planned) and all(f.empty for f in empty.values())


def test_gpu_settings_are_accepted_and_ignored_with_one_warning(tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ExactDeduplicationWorkflow(output_path=str(tmp_path), input_path=str(tmp_path))
    with pytest.warns(UserWarning) as caught:
        ExactDeduplicationWorkflow(output_path=str(tmp_path), input_path=str(tmp_path),
                                   rmm_pool_size=2**30, env_vars={"UCX_TLS": "rc"},
                                   use_async_memory=False)
    assert len(caught) == 1
    text = str(caught[0].message)
    assert "rmm_pool_size=1073741824" in text and "env_vars={'UCX_TLS': 'rc'}" in text
    assert "use_async_memory=False" in text and "spill_memory_limit" not in text


def test_bad_arguments_are_refused_before_any_cluster(tmp_path):
    from curator_dask import DaskExecutor

    with pytest.raises(ValueError, match="id_field must be provided if assign_id is False"):
        ExactDeduplicationWorkflow(output_path=str(tmp_path), assign_id=False)
    with pytest.raises(ValueError, match="id_field must be None if assign_id is True"):
        ExactDeduplicationWorkflow(output_path=str(tmp_path), id_field="id")
    with pytest.raises(ValueError, match="input_filetype must be 'jsonl' or 'parquet'"):
        ExactDeduplicationWorkflow(output_path=str(tmp_path), input_filetype="csv")
    executor = DaskExecutor(n_workers=1, progress=False)
    with pytest.raises(ValueError, match="input_path to the dataset must be provided"):
        ExactDeduplicationWorkflow(output_path=str(tmp_path)).run(executor=executor)
    with pytest.raises(ValueError, match="must be of type FileGroupTask"):
        ExactDeduplicationWorkflow(output_path=str(tmp_path)).run(initial_tasks=["a.jsonl"],
                                                                  executor=executor)
    with pytest.raises(TypeError, match=r"the executor goes by keyword: run\(executor=\.\.\.\)"):
        ExactDeduplicationWorkflow(output_path=str(tmp_path), input_path=str(tmp_path)).run(
            executor)
    with pytest.raises(TypeError, match="runs on curator_dask's DaskExecutor, got dict"):
        ExactDeduplicationWorkflow(output_path=str(tmp_path), input_path=str(tmp_path)).run(
            executor={})
    ids.create_id_generator_actor()
    with pytest.raises(RuntimeError, match="kill_id_generator_actor"):
        ExactDeduplicationWorkflow(output_path=str(tmp_path), input_path=str(tmp_path)).run(
            executor=executor)
    assert executor.cluster is None
    assert json.loads(json.dumps(ids.current_id_generator().state()))["next_id"] == 0
