"""Identification and removal never disagree: ids resolve through each file's own range, so
removal works whatever block size, files per partition or row ranges the identification used
(NeMo Curator's removal fails with a ``KeyError`` there: NVIDIA-NeMo/Curator#2092), and phase 1
reads row ranges of big files (``partition=``) with the same deterministic ids as whole files.

Real parts: curator_dask's exact and fuzzy workflows, curator_dask's and NeMo Curator's own
``TextDuplicatesRemovalWorkflow`` on the shared 2-worker LocalCluster, NeMo's
``IdGeneratorBase`` reading the JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

# imported before any DaskExecutor starts, as a script does: a NeMo module imported later
# needs curator_dask.nemo.install() (docs/migrating-from-nemo-curator.md)
from nemo_curator.stages.deduplication.id_generator import IdGeneratorBase as NemoIdGenerator
from nemo_curator.stages.text.deduplication.removal_workflow import (
    TextDuplicatesRemovalWorkflow as NemoRemoval,
)

from curator_dask.dedup import ExactDeduplicationWorkflow
from curator_dask.dedup.removal import TextDuplicatesRemovalWorkflow
from curator_dask.ids.generator import CURATOR_DEDUP_ID_STR

pytestmark = pytest.mark.slow

FILES, DOCS, TEXTS = 6, 1500, 4000  # about 420 KB a file; every text planted 2-3 times


def write_corpus(root: Path) -> Path:
    """``FILES`` JSONL files; ``text`` repeats across files, ``id`` is unique."""
    root.mkdir(parents=True)
    n = 0
    for f in range(FILES):
        with open(root / f"part-{f}.jsonl", "w") as out:
            for _ in range(DOCS):
                k = (n * 7919) % TEXTS
                text = f"document {k} " + " ".join(f"w{(k * j) % 997}" for j in range(40))
                out.write(json.dumps({"id": f"doc-{n:05d}", "text": text}) + "\n")
                n += 1
    return root


def read_rows(folder: Path) -> pd.DataFrame:
    frames = [pd.read_json(p, lines=True) for p in sorted(folder.glob("*.jsonl"))]
    frames += [pd.read_parquet(p) for p in sorted(folder.glob("*.parquet"))]
    return pd.concat(frames, ignore_index=True)


@pytest.fixture(scope="module")
def identified(executor, tmp_path_factory) -> dict[str, Path]:
    """The corpus, identified at a 1 MiB block size (groups of 2-3 files)."""
    root = tmp_path_factory.mktemp("any_grouping")
    data = write_corpus(root / "in")
    result = ExactDeduplicationWorkflow(
        output_path=str(root / "ident"), input_path=str(data), input_filetype="jsonl",
        input_blocksize="1MiB", assign_id=True).run(executor=executor)
    assert result.metadata["num_duplicates"] == FILES * DOCS - TEXTS
    return {"root": root, "data": data, "ids": root / "ident" / "exact_id_generator.json",
            "remove": root / "ident" / "ExactDuplicateIds", "executor": executor}


def removal(identified: dict[str, Path], out: Path, remove: Path | None = None,
            ids_json: Path | None = None, **grouping: object) -> Path:
    TextDuplicatesRemovalWorkflow(
        input_path=str(identified["data"]), ids_to_remove_path=str(remove or identified["remove"]),
        output_path=str(out), input_filetype="jsonl", output_filetype="jsonl",
        id_generator_path=str(ids_json or identified["ids"]),
        duplicate_id_field=CURATOR_DEDUP_ID_STR, **grouping).run(identified["executor"])
    return out


@pytest.fixture(scope="module")
def reference(identified) -> set[str]:
    """The documents kept by a removal with the identification's own grouping."""
    kept = read_rows(removal(identified, identified["root"] / "same", input_blocksize="1MiB"))
    return set(kept["id"])


def assert_right_rows_removed(out: Path, reference: set[str]) -> None:
    kept = read_rows(out)
    assert len(kept) == TEXTS  # one document of every text, and no text lost
    assert kept["text"].is_unique
    assert set(kept["id"]) == reference  # the same document of each: the same ids


def test_identification_groups_files_otherwise_than_removal(identified):
    groups = json.loads(identified["ids"].read_text())["batch_registry"]
    # the 1 MiB groups and each file's own range (6 files)
    assert len(groups) > FILES


@pytest.mark.parametrize("grouping", [{"input_blocksize": "64KiB"},
                                      {"input_blocksize": "8MiB"},
                                      {"input_files_per_partition": 4}])
def test_curator_dask_removal_at_another_grouping(identified, reference, grouping):
    name = "-".join(f"{k}{v}" for k, v in grouping.items())
    out = removal(identified, identified["root"] / f"ours-{name}", **grouping)
    assert_right_rows_removed(out, reference)


@pytest.mark.parametrize("grouping", [{"input_blocksize": "64KiB"},
                                      {"input_blocksize": "8MiB"},
                                      {"input_files_per_partition": 1}])
def test_nemos_removal_workflow_at_another_block_size(executor, identified, reference,
                                                      grouping):
    name = "-".join(f"{k}{v}" for k, v in grouping.items())
    out = identified["root"] / f"nemo-{name}"
    NemoRemoval(input_path=str(identified["data"]), ids_to_remove_path=str(identified["remove"]),
                output_path=str(out), input_filetype="jsonl", output_filetype="jsonl",
                id_generator_path=str(identified["ids"]), duplicate_id_field=CURATOR_DEDUP_ID_STR,
                **grouping).run(executor=executor)
    assert_right_rows_removed(out, reference)


def first_of_each_text_in_listing_order(data: Path) -> set[str]:
    frames = [pd.read_json(p, lines=True) for p in sorted(data.glob("*.jsonl"))]
    return set(pd.concat(frames).drop_duplicates("text", keep="first")["id"])


def test_row_range_partitions_in_phase_1(executor, identified):
    root = identified["root"]
    runs = {}
    for n in (8, 5):  # ranges inside one file and across two
        out = root / f"ranges{n}"
        result = ExactDeduplicationWorkflow(
            output_path=str(out), input_path=str(identified["data"]), input_filetype="jsonl",
            partition={"mode": "manual", "num_of_partitions": n}).run(executor=executor)
        assert result.metadata["num_duplicates"] == FILES * DOCS - TEXTS
        assert len(result.pipeline_tasks["input_filegroups"]) == n  # n tasks in phase 1
        runs[n] = (NemoIdGenerator.from_disk(str(out / "exact_id_generator.json")),
                   set(pd.read_parquet(out / "ExactDuplicateIds")[CURATOR_DEDUP_ID_STR]))
    (gen8, removed8), (gen5, removed5) = runs[8], runs[5]
    assert gen8.next_id == gen5.next_id == FILES * DOCS
    # NeMo's IdGeneratorBase reads the JSON; each file's own range is the same whatever the
    # number of partitions (the ids are deterministic), in listing order
    files = sorted(str(f) for f in identified["data"].glob("*.jsonl"))
    spans = [tuple(gen8.get_batch_range([f], None)) for f in files]
    assert spans == [tuple(gen5.get_batch_range([f], None)) for f in files]
    assert spans == [(i * DOCS, (i + 1) * DOCS - 1) for i in range(FILES)]
    assert removed8 == removed5


def test_removal_after_row_range_identification(executor, identified):
    root = identified["root"]
    ExactDeduplicationWorkflow(
        output_path=str(root / "ranges3"), input_path=str(identified["data"]),
        input_filetype="jsonl", partition={"mode": "manual", "num_of_partitions": 3},
    ).run(executor=executor)
    expected = first_of_each_text_in_listing_order(identified["data"])
    out = root / "after-ranges-nemo"
    NemoRemoval(input_path=str(identified["data"]),
                ids_to_remove_path=str(root / "ranges3" / "ExactDuplicateIds"),
                output_path=str(out), input_filetype="jsonl", output_filetype="jsonl",
                input_files_per_partition=2, duplicate_id_field=CURATOR_DEDUP_ID_STR,
                id_generator_path=str(root / "ranges3" / "exact_id_generator.json"),
                ).run(executor=executor)
    assert_right_rows_removed(out, expected)
    out = removal(identified, root / "after-ranges-ours", root / "ranges3" / "ExactDuplicateIds",
                  root / "ranges3" / "exact_id_generator.json", input_blocksize="1MiB")
    assert_right_rows_removed(out, expected)  # groups by size: file by file


def test_an_unknown_grouping_still_says_what_to_do(identified):
    from curator_dask.ids.generator import IdGeneratorBase, UnknownBatchError

    generator = IdGeneratorBase.from_disk(str(identified["ids"]))
    files = sorted((str(f) for f in identified["data"].glob("*.jsonl")),
                   key=lambda f: generator.get_batch_range([f], None))
    assert generator.get_batch_range(files, None) == (0, FILES * DOCS - 1)
    with pytest.raises(UnknownBatchError, match="no ids are registered"):
        generator.get_batch_range([files[2], files[0]], None)  # not one after the other
