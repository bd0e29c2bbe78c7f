"""The deduplication phases' one resume rule (curator_dask/dedup/commits.py), on real workflows
over small corpora on the module's LocalCluster: a phase whose committed record holds its key
is skipped; a phase without its record (a run killed inside it) is redone from scratch, the
files a half-written run left in its folder removed; a record of an earlier curator_dask (no
``kind``) is honoured; one of a newer version is refused, the file kept."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from curator_dask.dedup import ExactDeduplicationWorkflow, FuzzyDeduplicationWorkflow
from curator_dask.dedup.synthetic import planted_corpus
from curator_dask.errors import CommittedRecordError
from tests.dedup.exact_corpus import write_corpus

ID = "_curator_dedup_id"


def mtimes(folder: Path) -> dict[str, int]:
    return {str(p.relative_to(folder)): p.stat().st_mtime_ns for p in sorted(folder.rglob("*"))
            if p.is_file()}


def stray(folder: Path) -> Path:
    """A file as a run killed inside the phase leaves it: in the folder, never committed."""
    path = folder / "part.99.parquet"
    pq.write_table(pq.read_table(next(folder.rglob("*.parquet"))), path)
    return path


# -- fuzzy ----------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def fuzzy_input(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("records-fuzzy")
    planted_corpus(240, seed=5, words=(60, 160), cluster_fraction=0.3).write_jsonl(
        str(root / "in"), n_files=3)
    return root / "in"


def fuzzy(executor, root: Path, inp: Path):
    wf = FuzzyDeduplicationWorkflow(cache_path=str(root / "cache"), output_path=str(root / "out"),
                                    input_path=str(inp), input_filetype="jsonl",
                                    input_blocksize=None, checkpoint_path=str(root / "ckpt"))
    return wf.run(executor=executor)


def ids(root: Path) -> list[int]:
    return sorted(pq.read_table(root / "out" / "FuzzyDuplicateIds").column(ID).to_pylist())


def test_a_fuzzy_phase_without_its_record_is_redone_from_scratch_the_others_skipped(
        executor, fuzzy_input, tmp_path):
    first = fuzzy(executor, tmp_path, fuzzy_input)
    assert first.get_metadata("phases_skipped") == []
    clean = ids(tmp_path)
    records = tmp_path / "cache" / ".curator_dask" / "fuzzy"
    edges = json.loads((records / "edges.json").read_text())
    assert (edges["kind"], edges["version"], edges["phase"], edges["done"]) == (
        "dedup_phase", 1, "edges", True)
    # the edges phase as a run killed inside it leaves it: no record, a file too many
    (records / "edges.json").unlink()
    left = stray(tmp_path / "cache" / "BucketsToEdgesStage")
    buckets = mtimes(tmp_path / "cache" / "LSHStage")
    components = mtimes(tmp_path / "cache" / "ConnectedComponentsStage")

    again = fuzzy(executor, tmp_path, fuzzy_input)
    # edges redone; the phases after it keep their keys (the same inputs and parameters)
    assert again.get_metadata("phases_skipped") == ["lsh", "components", "identify"]
    assert not left.exists()  # the half-written phase's files removed before it ran
    assert (records / "edges.json").exists()
    assert mtimes(tmp_path / "cache" / "LSHStage") == buckets  # skipped: untouched
    assert mtimes(tmp_path / "cache" / "ConnectedComponentsStage") == components
    assert again.get_metadata("num_edges") == first.get_metadata("num_edges")
    assert ids(tmp_path) == clean

    # a record of an earlier curator_dask (no kind, no version, no done) is honoured
    lsh = json.loads((records / "lsh.json").read_text())
    (records / "lsh.json").write_text(json.dumps({k: lsh[k] for k in ("phase", "key",
                                                                       "counts")}))
    third = fuzzy(executor, tmp_path, fuzzy_input)
    assert third.get_metadata("phases_skipped") == ["lsh", "edges", "components", "identify"]

    # a record of a newer version is refused, before the phase touches its folder
    (records / "lsh.json").write_text(json.dumps({**lsh, "version": 9}))
    with pytest.raises(CommittedRecordError, match=r"lsh\.json is of version 9, newer than "
                       r"this curator_dask reads \(up to 1\)"):
        fuzzy(executor, tmp_path, fuzzy_input)
    assert json.loads((records / "lsh.json").read_text())["version"] == 9
    assert mtimes(tmp_path / "cache" / "LSHStage") == buckets


# -- exact ----------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def exact_input(tmp_path_factory) -> Path:
    return write_corpus(tmp_path_factory.mktemp("records-exact") / "in", files=4)


def exact(executor, root: Path, inp: Path):
    return ExactDeduplicationWorkflow(
        output_path=str(root / "out"), input_path=str(inp), checkpoint_path=str(root / "ckpt"),
        input_filetype="jsonl", input_blocksize="1kB", normalize_text=True,
        total_nparts=3).run(executor=executor)


def test_the_exact_ids_phase_follows_the_same_rule(executor, exact_input, tmp_path):
    first = exact(executor, tmp_path, exact_input)
    folder = tmp_path / "out" / "ExactDuplicateIds"
    record = tmp_path / "ckpt" / "exact_cache" / "ExactDuplicateIds.committed.json"
    written = json.loads(record.read_text())
    assert (written["kind"], written["phase"], written["done"]) == (
        "dedup_phase", "duplicate_ids", True)
    stamps = mtimes(folder)

    # the marker as the previous curator_dask wrote it is honoured: nothing rewritten
    record.write_text(json.dumps({"version": 1, "parameters": written["parameters"],
                                  "parts": written["counts"]["parts"]}))
    again = exact(executor, tmp_path, exact_input)
    assert mtimes(folder) == stamps
    assert again.get_metadata("num_duplicates") == first.get_metadata("num_duplicates")

    # no record (killed while writing parts): redone from an empty folder
    record.unlink()
    left = stray(folder)
    third = exact(executor, tmp_path, exact_input)
    assert not left.exists()
    assert sorted(mtimes(folder)) == sorted(stamps)
    assert all(mtimes(folder)[name] != stamp for name, stamp in stamps.items())
    assert third.get_metadata("num_duplicates") == first.get_metadata("num_duplicates")
    assert json.loads(record.read_text())["key"] == written["key"]
