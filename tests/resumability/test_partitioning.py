"""The partitioning record: a rerun that groups the files of completed partitions differently is
refused before anything is processed (it would write their output twice); the same grouping,
added files in partitions of their own, and checkpoints without a record are accepted.

Real LocalCluster (the test process's shared ``executor``, tests/conftest.py), real files
and LMDB checkpoints.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from curator_dask import JsonlReader, JsonlWriter, Pipeline
from curator_dask.errors import PartitioningChangedError, PartitionRecordError
from curator_dask.partitions.groups import (
    check_partitioning,
    find_regrouped,
    merged_groups,
    single_file_id,
)
from curator_dask.partitions.record import GroupsRecord
from curator_dask.resumability.layout import PARTITIONING_RECORD_PATH
from curator_dask.sample_data import generate_jsonl
from curator_dask.stages.file_partitioning import FilePartitioningStage
from tests.helpers import completed_ids

# -- the rules, without a cluster ---------------------------------------------------------------


class FakeSource:
    """A source ``FileGroupTask`` as the source stage hands it over (its id hashes its files)."""

    def __init__(self, *files: str) -> None:
        from curator_dask.tasks import FileGroupTask

        self.task = FileGroupTask(dataset_name="d", data=list(files))
        self.task.task_id = f"0_{self.task.get_deterministic_id()}"


def sources(*groups: tuple[str, ...]) -> list:
    return [FakeSource(*g).task for g in groups]


def check(ckpt: str, stage: FilePartitioningStage, groups: list[tuple[str, ...]],
          completed: set[str]) -> None:
    check_partitioning(stage, sources(*groups), lambda ids: set(ids) & completed, ckpt)


def test_find_regrouped_names_files_of_completed_partitions_only():
    old = {"A": ["a"], "B": ["b"], "C": ["c"], "D": ["d"]}
    new = {"AB": ["a", "b"], "CD": ["c", "d"]}
    asked: list[list[str]] = []

    def completed(ids: list[str]) -> set[str]:
        asked.append(ids)
        return {"A", "B"}  # C and D never completed: regrouping them duplicates nothing

    found = find_regrouped(old, new, completed)
    assert [(r.path, r.old, r.old_files, r.new, r.new_files) for r in found] == [
        ("a", "A", 1, "AB", 2), ("b", "B", 1, "AB", 2)]
    assert asked == [["A", "AB", "B", "C", "CD", "D"]]  # one lookup, sorted
    # the new partition already complete (both groupings ran before): nothing is processed
    assert find_regrouped(old, new, lambda ids: {"A", "B", "AB"}) == []
    # nothing moved: no lookup at all
    assert find_regrouped(old, {"A": ["a"], "E": ["e"]}, lambda ids: pytest.fail("asked")) == []


def test_merged_groups_keep_the_groups_of_files_this_run_did_not_see():
    old = {"AB": ["a", "b"], "CD": ["c", "d"]}
    assert merged_groups(old, {"AB": ["a", "b"], "E": ["e"]}) == {
        "AB": ["a", "b"], "E": ["e"], "CD": ["c", "d"]}
    assert merged_groups(old, {"A": ["a"]}) == {"A": ["a"], "AB": ["b"], "CD": ["c", "d"]}


def test_record_on_an_object_store(tmp_path):
    url = f"memory://{tmp_path.name}/ckpt"
    stage = FilePartitioningStage(file_paths="in/", files_per_partition=1)
    check(url, stage, [("/in/a",), ("/in/b",)], set())
    record = GroupsRecord(url).read()
    assert record["parameters"]["files_per_partition"] == 1
    assert record["files"] == 2 and record["partitions"] == 2
    assert record["groups"] == {}  # single-file partitions named by their file's hash: implied
    completed = {single_file_id("/in/a"), single_file_id("/in/b")}
    two = FilePartitioningStage(file_paths="in/", files_per_partition=2)
    with pytest.raises(PartitioningChangedError, match="files_per_partition was 1, now 2"):
        check(url, two, [("/in/a", "/in/b")], completed)
    assert GroupsRecord(url).read() == record  # a refused run leaves the record alone


def test_removed_files_are_accepted_unless_they_shift_completed_groups(tmp_path):
    one = FilePartitioningStage(file_paths="in/")
    check(str(tmp_path / "c1"), one, [("a",), ("b",), ("c",)], set())
    done = set(GroupsRecord(str(tmp_path / "c1")).read()["groups"])
    check(str(tmp_path / "c1"), one, [("a",), ("c",)], done)  # accepted
    two = FilePartitioningStage(file_paths="in/", files_per_partition=2)
    check(str(tmp_path / "c2"), two, [("a", "b"), ("c", "d")], set())
    done = set(GroupsRecord(str(tmp_path / "c2")).read()["groups"])
    with pytest.raises(PartitioningChangedError, match=r"\(0 files added; 1 file of the record "
                       r"not in this run's input\)\. 3 input files of completed") as err:
        check(str(tmp_path / "c2"), two, [("b", "c"), ("d",)], done)
    assert "restore the input file list" in str(err.value)


def test_unreadable_record_is_replaced_with_a_warning(tmp_path, caplog):
    ckpt = tmp_path / "ckpt"
    path = ckpt / PARTITIONING_RECORD_PATH
    path.parent.mkdir(parents=True)
    path.write_text("{not json")
    stage = FilePartitioningStage(file_paths="in/")
    with caplog.at_level("WARNING", logger="curator_dask"):
        check(str(ckpt), stage, [("/in/a",)], set())
    assert "is unreadable" in caplog.text
    assert json.loads(path.read_text())["groups"] == {}  # a valid record again
    assert json.loads(path.read_text())["files"] == 1


def test_a_record_of_a_newer_version_is_refused_and_kept(tmp_path):
    ckpt = tmp_path / "ckpt"
    path = ckpt / PARTITIONING_RECORD_PATH
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"kind": "partitioning", "version": 3, "groups": {}}))
    stage = FilePartitioningStage(file_paths="in/")
    with pytest.raises(PartitionRecordError, match=r"partitioning record .* is of version 3, "
                       r"newer than this curator_dask reads \(up to 2\)"):
        check(str(ckpt), stage, [("/in/a",)], set())
    assert json.loads(path.read_text())["version"] == 3


def test_sources_that_are_not_file_groups_leave_no_record(tmp_path):
    from curator_dask.tasks import EmptyTask

    task = EmptyTask()
    check_partitioning(FilePartitioningStage(file_paths="in/"), [task],
                       lambda ids: pytest.fail("asked"), str(tmp_path))
    assert not (tmp_path / PARTITIONING_RECORD_PATH).exists()


def test_record_leaves_out_single_file_partitions_named_by_their_hash(tmp_path):
    """At 10^6 files a record of every group is ~100 MB; one file per partition records none."""
    two = FilePartitioningStage(file_paths="in/", files_per_partition=2)
    check(str(tmp_path), two, [("/in/a", "/in/b"), ("/in/c",)], set())
    record = GroupsRecord(str(tmp_path)).read()
    assert record["version"] == 2 and record["files"] == 3 and record["partitions"] == 2
    assert list(record["groups"].values()) == [["/in/a", "/in/b"]]
    many = [(f"/in/{i:06d}.jsonl",) for i in range(20_000)]
    check(str(tmp_path / "many"), FilePartitioningStage(file_paths="in/"), many, set())
    assert (tmp_path / "many" / PARTITIONING_RECORD_PATH).stat().st_size < 1_000


def test_implied_single_file_partitions_are_still_checked(tmp_path):
    """A file the record does not name was a partition of its own: regrouping it into a new
    partition of several files is refused when that single-file partition completed, and
    accepted when it did not (a new file, or one whose partition never completed)."""
    one = FilePartitioningStage(file_paths="in/")
    check(str(tmp_path), one, [("/in/a",), ("/in/b",), ("/in/c",)], set())
    two = FilePartitioningStage(file_paths="in/", files_per_partition=2)
    done = {single_file_id("/in/a")}
    with pytest.raises(PartitioningChangedError, match=r"1 input files of completed partitions "
                       r"now fall into other partitions \(e\.g\. /in/a: was in completed "
                       r"partition \w+ of 1 file, now in \w+ of 2 files\)"):
        check(str(tmp_path), two, [("/in/a", "/in/b"), ("/in/c", "/in/d")], done)
    check(str(tmp_path), two, [("/in/b", "/in/c"), ("/in/d", "/in/e")], done)  # accepted


def test_a_version_1_record_is_read_and_rewritten_compact(tmp_path):
    """Records written before single-file partitions were left out name every group."""
    a, b = single_file_id("/in/a"), single_file_id("/in/b")
    path = tmp_path / PARTITIONING_RECORD_PATH  # as curator_dask wrote it: no "kind"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({
        "version": 1, "parameters": {}, "files": 3, "partitions": 2,
        "groups": {a: ["/in/a"], b: ["/in/b"], "AB": ["/in/x", "/in/y"]}}))
    two = FilePartitioningStage(file_paths="in/", files_per_partition=2)
    with pytest.raises(PartitioningChangedError, match="2 input files of completed"):
        check(str(tmp_path), two, [("/in/a", "/in/b")], {a, b})
    check(str(tmp_path), FilePartitioningStage(file_paths="in/"), [("/in/a",)], {a, b})
    record = GroupsRecord(str(tmp_path)).read()
    assert record["version"] == 2
    assert record["groups"] == {"AB": ["/in/x", "/in/y"]}  # /in/b: implied, like /in/a


# -- real runs -----------------------------------------------------------------------------------


def pipeline(tmp_path: Path, **partitioning) -> Pipeline:
    p = Pipeline(name="parts").add_stage(
        JsonlReader(file_paths=str(tmp_path / "in"), **partitioning))
    return p.add_stage(JsonlWriter(path=str(tmp_path / "out")))


def outputs(tmp_path: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((tmp_path / "out").iterdir())}


def documents(tmp_path: Path) -> int:
    return sum(len(b.splitlines()) for b in outputs(tmp_path).values())


def record_of(ckpt: Path) -> dict:
    return json.loads((ckpt / PARTITIONING_RECORD_PATH).read_text())


@pytest.mark.slow
@pytest.mark.parametrize(("changed", "named", "fix"), [
    ({"files_per_partition": 2}, "files_per_partition was 1, now 2",
     "run with files_per_partition=1 again"),
    ({"blocksize": "1MB"}, "files_per_partition was 1, now None, blocksize was None, now '1MB'",
     "run with files_per_partition=1, blocksize=None again"),
])
def test_changed_partitioning_is_refused_and_writes_nothing(executor, tmp_path, changed, named,
                                                            fix):
    generate_jsonl(str(tmp_path / "in"), files=4, docs_per_file=3, seed=21)
    ckpt = tmp_path / "ckpt"
    first = pipeline(tmp_path, files_per_partition=1).run(executor=executor,
                                                          checkpoint_path=str(ckpt))
    assert first.num_sources == 4 and documents(tmp_path) == 12
    assert record_of(ckpt)["parameters"]["files_per_partition"] == 1
    before, record = outputs(tmp_path), record_of(ckpt)
    with pytest.raises(PartitioningChangedError) as err:
        pipeline(tmp_path, **changed).run(executor=executor, checkpoint_path=str(ckpt))
    message = str(err.value)
    assert named in message
    assert "4 input files of completed partitions now fall into other partitions" in message
    assert fix in message
    assert "a new checkpoint path and a new output folder" in message
    assert "Nothing was processed" in message
    assert outputs(tmp_path) == before and documents(tmp_path) == 12  # not 24
    assert record_of(ckpt) == record and len(completed_ids(ckpt)) == 4


@pytest.mark.slow
def test_same_partitioning_resumes_normally(executor, tmp_path):
    generate_jsonl(str(tmp_path / "in"), files=4, docs_per_file=3, seed=22)
    ckpt = tmp_path / "ckpt"
    (tmp_path / "later").mkdir()
    shutil.move(tmp_path / "in" / "part-00003.jsonl", tmp_path / "later")
    first = pipeline(tmp_path, files_per_partition=2).run(executor=executor,
                                                          checkpoint_path=str(ckpt))
    assert first.num_sources == 2  # [0, 1] and [2]
    written = (ckpt / PARTITIONING_RECORD_PATH).stat().st_mtime_ns
    again = pipeline(tmp_path, files_per_partition=2).run(executor=executor,
                                                          checkpoint_path=str(ckpt))
    assert again.skipped_sources == 2 and len(again) == 0
    assert (ckpt / PARTITIONING_RECORD_PATH).stat().st_mtime_ns == written  # unchanged: kept
    # the last partition had room: part-00003 joins part-00002, whose partition is complete
    shutil.move(tmp_path / "later" / "part-00003.jsonl", tmp_path / "in")
    with pytest.raises(PartitioningChangedError, match=r"the input file list changed \(1 file "
                       r"added: \S+part-00003\.jsonl; 0 files of the record") as err:
        pipeline(tmp_path, files_per_partition=2).run(executor=executor,
                                                      checkpoint_path=str(ckpt))
    assert "restore the input file list" in str(err.value)
    assert documents(tmp_path) == 9


@pytest.mark.slow
def test_added_files_in_partitions_of_their_own_are_accepted(executor, tmp_path):
    generate_jsonl(str(tmp_path / "all"), files=6, docs_per_file=2, seed=23)
    (tmp_path / "in").mkdir()
    for i in range(4):
        shutil.copy(tmp_path / "all" / f"part-0000{i}.jsonl", tmp_path / "in")
    ckpt = tmp_path / "ckpt"
    pipeline(tmp_path, files_per_partition=2).run(executor=executor, checkpoint_path=str(ckpt))
    for i in (4, 5):  # sorted after the others: a new, full partition
        shutil.copy(tmp_path / "all" / f"part-0000{i}.jsonl", tmp_path / "in")
    more = pipeline(tmp_path, files_per_partition=2).run(executor=executor,
                                                         checkpoint_path=str(ckpt))
    assert more.num_sources == 3 and more.skipped_sources == 2 and len(more) == 1
    assert documents(tmp_path) == 12
    assert record_of(ckpt)["files"] == 6 and len(record_of(ckpt)["groups"]) == 3
    # one file per partition (the default): any added file is a partition of its own
    generate_jsonl(str(tmp_path / "one"), files=2, docs_per_file=2, seed=24)
    one = Pipeline(name="one").add_stage(JsonlReader(file_paths=str(tmp_path / "one")))
    one.add_stage(JsonlWriter(path=str(tmp_path / "one-out")))
    one.run(executor=executor, checkpoint_path=str(tmp_path / "ck1"))
    shutil.copy(tmp_path / "all" / "part-00000.jsonl", tmp_path / "one" / "a-first.jsonl")
    again = one.run(executor=executor, checkpoint_path=str(tmp_path / "ck1"))
    assert again.skipped_sources == 2 and len(again) == 1


@pytest.mark.slow
def test_checkpoint_without_a_record_is_accepted_and_gets_one(executor, tmp_path):
    from tests.nemo.nemo_pipelines import nemo_completed

    generate_jsonl(str(tmp_path / "in"), files=3, docs_per_file=2, seed=25)
    ckpt = tmp_path / "ckpt"
    pipeline(tmp_path, files_per_partition=1).run(executor=executor, checkpoint_path=str(ckpt))
    (ckpt / PARTITIONING_RECORD_PATH).unlink()  # as an older curator_dask or NeMo left it
    again = pipeline(tmp_path, files_per_partition=1).run(executor=executor,
                                                          checkpoint_path=str(ckpt))
    assert again.skipped_sources == 3 and len(again) == 0
    assert record_of(ckpt)["files"] == 3
    # NeMo Curator still reads the folder: it looks only at *.mdb in .nemo_curator_metadata
    assert nemo_completed(ckpt) == completed_ids(ckpt) and len(completed_ids(ckpt)) == 3
    assert all(p.suffix == ".mdb" for p in (ckpt / ".nemo_curator_metadata").iterdir())


@pytest.mark.slow
def test_nemo_reader_with_another_files_per_partition_is_refused(executor, tmp_path):
    from tests.nemo.nemo_pipelines import curation_pipeline, files_of, write_input

    data = write_input(tmp_path / "input", files=4, docs=6)
    ckpt = str(tmp_path / "ck")
    curation_pipeline(data, tmp_path / "out", files_per_partition=2).run(
        executor=executor, checkpoint_path=ckpt)
    before = files_of(tmp_path / "out")
    assert record_of(Path(ckpt))["parameters"]["type"] == "FilePartitioningStage"
    with pytest.raises(PartitioningChangedError, match="files_per_partition was 2, now 1"):
        curation_pipeline(data, tmp_path / "out", files_per_partition=1).run(
            executor=executor, checkpoint_path=ckpt)
    assert files_of(tmp_path / "out") == before
    again = curation_pipeline(data, tmp_path / "out", files_per_partition=2).run(
        executor=executor, checkpoint_path=ckpt)
    assert len(again) == 0 and files_of(tmp_path / "out") == before


@pytest.mark.slow
def test_cli_exit_code_is_2(tmp_path):
    from tests.helpers import cli

    generate_jsonl(str(tmp_path / "in"), files=4, docs_per_file=2, seed=26)
    yaml = ("stages:\n  - _target_: curator_dask.stages.text.io.reader.JsonlReader\n"
            "    file_paths: in\n    files_per_partition: {n}\n"
            "  - _target_: curator_dask.stages.text.io.writer.JsonlWriter\n    path: out\n")
    command = ["run", "p.yaml", "--no-job", "--no-progress", "--checkpoint-path", "ck"]
    (tmp_path / "p.yaml").write_text(yaml.format(n=1))
    assert cli(*command, cwd=tmp_path).returncode == 0
    (tmp_path / "p.yaml").write_text(yaml.format(n=2))
    refused = cli(*command, cwd=tmp_path)
    assert refused.returncode == 2, refused.stderr
    assert "run: error: the input is partitioned differently" in refused.stderr
    assert "files_per_partition was 1, now 2" in refused.stderr
    assert len(list((tmp_path / "out").glob("*.jsonl"))) == 4  # nothing more written


def test_sources_given_a_block_at_a_time_are_checked_as_a_list(tmp_path, monkeypatch):
    """Issue 35, item 7: an iterator of sources is compared a block at a time, keeping none;
    the record and the refusal are those of the same sources as one list."""
    from curator_dask.partitions import groups as groups_module

    monkeypatch.setattr(groups_module, "BLOCK", 3)
    files = [f"/in/{i:02d}.jsonl" for i in range(10)]
    pairs = FilePartitioningStage(file_paths="in/", files_per_partition=2)
    as_pairs = [tuple(files[i:i + 2]) for i in range(0, 10, 2)]
    for given in (list, iter):
        ckpt = tmp_path / given.__name__
        check_partitioning(pairs, given(sources(*as_pairs)), lambda ids: set(), str(ckpt))
        record = GroupsRecord(str(ckpt)).read()
        assert (record["files"], record["partitions"]) == (10, 5)
        assert sorted(record["groups"].values()) == [list(p) for p in as_pairs]
    assert (GroupsRecord(str(tmp_path / "list")).read()["groups"]
            == GroupsRecord(str(tmp_path / "iter")).read()["groups"])
    one = FilePartitioningStage(file_paths="in/")
    done = {FakeSource(*as_pairs[i]).task.get_source_id() for i in (1, 4)}
    messages = []
    for given in (list, iter):
        with pytest.raises(PartitioningChangedError) as err:
            check_partitioning(one, given(sources(*[(f,) for f in files], ("/in/new.jsonl",))),
                               lambda ids: set(ids) & done, str(tmp_path / given.__name__))
        messages.append(str(err.value))
    assert messages[0] == messages[1].replace("/iter", "/list")
    assert "4 input files of completed partitions" in messages[0]
