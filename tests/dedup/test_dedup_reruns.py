"""The deduplication workflows run again over an output, a cache or a checkpoint that holds
something else (issue 32, item 10): the deduplicated corpus holds exactly the input's distinct
documents, whatever was in the folder before; a checkpointed rerun notices a deleted, modified
or appended input; ids that are not unique are refused; a rerun reports what was removed; a
second workflow on a busy executor is refused at once; a ``memory://`` cache is refused with
the reason. Real 2-worker LocalCluster, real files."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import pytest

from curator_dask.dedup import ExactDeduplicationWorkflow, FuzzyDeduplicationWorkflow
from curator_dask.dedup.synthetic import planted_corpus
from curator_dask.errors import CuratorDaskError
from tests.dedup.exact_corpus import read_corpus, write_corpus
from tests.helpers import poll_for


@pytest.fixture(scope="module")
def exact_corpus(tmp_path_factory) -> Path:
    return write_corpus(tmp_path_factory.mktemp("exact") / "in", files=4, docs=30)


@pytest.fixture(scope="module")
def fuzzy_corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("fuzzy")
    planted = planted_corpus(240, seed=5, words=(60, 150), cluster_fraction=0.3)
    planted.write_jsonl(str(root / "in"), n_files=4)
    return planted, root / "in"


def exact(out: Path | str, inp: Path, **kwargs) -> ExactDeduplicationWorkflow:
    options = {"input_filetype": "jsonl", "normalize_text": True, "perform_removal": True,
               "input_blocksize": "1kB", **kwargs}
    return ExactDeduplicationWorkflow(output_path=str(out), input_path=str(inp), **options)


def fuzzy(root: Path, inp: Path, **kwargs) -> FuzzyDeduplicationWorkflow:
    options = {"input_filetype": "jsonl", "input_blocksize": None, "perform_removal": True,
               **kwargs}
    return FuzzyDeduplicationWorkflow(cache_path=str(root / "cache"),
                                      output_path=str(root / "out"), input_path=str(inp),
                                      **options)


def kept(folder: Path) -> list[dict]:
    return read_corpus(folder / "deduplicated")


# -- (a) an output folder with the results of another run -------------------------------------
@pytest.mark.parametrize("first", ["another blocksize", "another corpus"])
def test_the_deduplicated_corpus_holds_no_file_of_an_earlier_run(executor, exact_corpus,
                                                                 tmp_path, first):
    other = write_corpus(tmp_path / "other", files=3, docs=20, seed=11)
    out = tmp_path / "out"
    if first == "another blocksize":  # one group per file, then all files in one group
        exact(out, exact_corpus).run(executor=executor)
    else:
        exact(out, other).run(executor=executor)
    result = exact(out, exact_corpus, input_blocksize="256MiB").run(executor=executor)
    rows = kept(out)
    keys = {r["key"] for r in read_corpus(exact_corpus)}
    assert sorted(r["key"] for r in rows) == sorted(keys), "stale or foreign rows kept"
    assert result.get_metadata("num_duplicates_removed") == len(read_corpus(exact_corpus)) - len(
        keys)


def test_a_fuzzy_run_without_a_checkpoint_replaces_the_deduplicated_corpus(executor,
                                                                           fuzzy_corpus,
                                                                           tmp_path):
    _, inp = fuzzy_corpus
    fuzzy(tmp_path, inp).run(executor=executor)  # a group per file
    fuzzy(tmp_path, inp, input_blocksize="256MiB").run(executor=executor)  # one group
    fuzzy(tmp_path / "clean", inp, input_blocksize="256MiB").run(executor=executor)
    clean = sorted(r["id"] for r in kept(tmp_path / "clean" / "out"))
    assert sorted(r["id"] for r in kept(tmp_path / "out")) == clean


# -- (b) an input file deleted between a checkpointed run and its rerun ------------------------
def test_a_deleted_input_file_leaves_the_deduplicated_corpus(executor, fuzzy_corpus, tmp_path):
    planted, source = fuzzy_corpus
    inp = tmp_path / "in"
    inp.mkdir()
    for p in source.iterdir():
        (inp / p.name).write_bytes(p.read_bytes())
    ckpt = str(tmp_path / "ckpt")
    fuzzy(tmp_path, inp, checkpoint_path=ckpt).run(executor=executor)
    gone = sorted(inp.iterdir())[1]
    gone_ids = {json.loads(line)["id"] for line in gone.read_text().splitlines()}
    gone.unlink()
    result = fuzzy(tmp_path, inp, checkpoint_path=ckpt).run(executor=executor)
    left = {r["id"] for r in kept(tmp_path / "out")}
    assert not left & gone_ids, f"{len(left & gone_ids)} documents of the deleted file kept"
    clean = fuzzy(tmp_path / "clean", inp).run(executor=executor)
    assert left == {r["id"] for r in kept(tmp_path / "clean" / "out")}
    assert (result.get_metadata("num_duplicates_removed")
            == clean.get_metadata("num_duplicates_removed"))


# -- (c) the corpus's own ids, not unique ----------------------------------------------------
def test_own_ids_shared_by_two_documents_are_refused(executor, tmp_path):
    inp = tmp_path / "in"
    inp.mkdir()
    docs = [{"id": 5, "text": "the same text"}, {"id": 5, "text": "a text of its own"},
            {"id": 3, "text": "the same text"}, {"id": 7, "text": "another"}]
    (inp / "a.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    workflow = ExactDeduplicationWorkflow(output_path=str(tmp_path / "out"),
                                          input_path=str(inp), input_filetype="jsonl",
                                          assign_id=False, id_field="id", perform_removal=True)
    with pytest.raises(ValueError, match=r"id_field 'id'.*5.*2 documents") as caught:
        workflow.run(executor=executor)
    assert "assign_id=True" in str(caught.value)
    assert not (tmp_path / "out" / "deduplicated").exists()  # nothing removed


# -- (e) a modified or appended input line, noticed by a checkpointed rerun -------------------
@pytest.mark.parametrize("change", ["modified", "appended"])
def test_a_changed_input_line_is_noticed_by_a_checkpointed_rerun(executor, tmp_path, change):
    inp = write_corpus(tmp_path / "in", files=3, docs=20, seed=4)
    ckpt = str(tmp_path / "ckpt")
    exact(tmp_path / "out", inp, checkpoint_path=ckpt).run(executor=executor)
    path = inp / "part-1.jsonl"
    lines = path.read_text(encoding="utf-8").splitlines()
    new = {"id": "doc-new", "text": "a text nobody wrote before", "key": "new", "raw": "new"}
    if change == "modified":  # same line count: only the content says it changed
        lines[0] = json.dumps(new)
    else:
        lines.append(json.dumps(new))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    os.utime(path, (time.time() + 5, time.time() + 5))  # a later mtime, even on coarse clocks
    result = exact(tmp_path / "out", inp, checkpoint_path=ckpt).run(executor=executor)
    clean = exact(tmp_path / "clean", inp).run(executor=executor)
    assert "doc-new" in {r["id"] for r in kept(tmp_path / "out")}
    assert sorted(r["id"] for r in kept(tmp_path / "out")) == sorted(
        r["id"] for r in kept(tmp_path / "clean"))
    assert result.get_metadata("num_duplicates") == clean.get_metadata("num_duplicates")


def test_verify_inputs_off_keeps_the_checkpoint_as_it_is(executor, tmp_path):
    inp = write_corpus(tmp_path / "in", files=2, docs=10, seed=4)
    ckpt = str(tmp_path / "ckpt")
    exact(tmp_path / "out", inp, checkpoint_path=ckpt).run(executor=executor)
    with open(inp / "part-0.jsonl", "a", encoding="utf-8") as f:
        f.write(json.dumps({"id": "doc-new", "text": "new", "key": "new", "raw": "new"}) + "\n")
    exact(tmp_path / "out", inp, checkpoint_path=ckpt, verify_inputs="off").run(
        executor=executor)
    assert "doc-new" not in {r["id"] for r in kept(tmp_path / "out")}
    with pytest.raises(ValueError, match="verify_inputs must be one of"):
        exact(tmp_path / "out", inp, verify_inputs="sometimes")


# -- (f) a resumed run reports what the removal removed ---------------------------------------
def test_a_rerun_of_a_checkpointed_fuzzy_run_reports_the_removed_count(executor, fuzzy_corpus,
                                                                      tmp_path):
    _, inp = fuzzy_corpus
    ckpt = str(tmp_path / "ckpt")
    first = fuzzy(tmp_path, inp, checkpoint_path=ckpt).run(executor=executor)
    removed = first.get_metadata("num_duplicates_removed")
    assert removed == first.get_metadata("num_duplicates") > 0
    again = fuzzy(tmp_path, inp, checkpoint_path=ckpt).run(executor=executor)
    assert again.get_metadata("num_duplicates_removed") == removed
    assert "removal" in again.get_metadata("phases_skipped")


def test_a_deduplicated_folder_deleted_since_is_written_again(executor, exact_corpus,
                                                              tmp_path):
    import shutil

    ckpt = str(tmp_path / "ckpt")
    first = exact(tmp_path / "out", exact_corpus, checkpoint_path=ckpt).run(executor=executor)
    before = sorted(r["id"] for r in kept(tmp_path / "out"))
    shutil.rmtree(tmp_path / "out" / "deduplicated")
    again = exact(tmp_path / "out", exact_corpus, checkpoint_path=ckpt).run(executor=executor)
    assert sorted(r["id"] for r in kept(tmp_path / "out")) == before
    assert (again.get_metadata("num_duplicates_removed")
            == first.get_metadata("num_duplicates_removed") > 0)


# -- (g) two workflows on one executor ---------------------------------------------------------
def test_a_second_workflow_on_a_busy_executor_is_refused_at_once(executor, fuzzy_corpus,
                                                                tmp_path):
    _, inp = fuzzy_corpus
    outcome: dict[str, object] = {}

    def first() -> None:
        try:
            outcome["first"] = fuzzy(tmp_path / "a", inp).run(executor=executor)
        except BaseException as exc:  # noqa: BLE001 (shown by the assertion below)
            outcome["first"] = exc

    thread = threading.Thread(target=first)
    thread.start()
    try:  # the first run is in its minhash phase
        poll_for(lambda: (tmp_path / "a" / "cache" / "MinHashStage").exists(), 60,
                 "the first run did not start")
        with pytest.raises(RuntimeError, match="busy") as caught:
            exact(tmp_path / "b", inp).run(executor=executor)
        assert isinstance(caught.value, CuratorDaskError)
        assert "fuzzy_deduplication" in str(caught.value)
        assert "kill_id_generator_actor" not in str(caught.value)
        assert not (tmp_path / "b").exists()  # refused before any step
    finally:
        thread.join(300)
    assert not isinstance(outcome["first"], BaseException), outcome["first"]
    exact(tmp_path / "b", inp).run(executor=executor)  # free again


# -- (h) a cache the workers cannot share ------------------------------------------------------
def test_a_memory_cache_is_refused_naming_the_workers(executor, fuzzy_corpus, tmp_path):
    _, inp = fuzzy_corpus
    workflow = FuzzyDeduplicationWorkflow(cache_path="memory://fuzzy-cache",
                                          output_path=str(tmp_path / "out"),
                                          input_path=str(inp), input_filetype="jsonl")
    with pytest.raises(ValueError, match=r"cache_path='memory://fuzzy-cache'.*workers"):
        workflow.run(executor=executor)
    with pytest.raises(ValueError, match=r"output_path='memory://x'.*workers"):
        exact("memory://x", inp).run(executor=executor)

