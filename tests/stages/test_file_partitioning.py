"""FilePartitioningStage (docs/design/contract.md §2 and upstream
tests/stages/common/test_file_partitioning.py).

Runs on real files under ``tmp_path`` and on fsspec ``memory://`` (a unique root per test,
removed afterwards).
"""

from __future__ import annotations

import logging
import os
import re
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import fsspec
import pytest

from curator_dask.stages.file_partitioning import FilePartitioningStage
from curator_dask.stages.resources import Resources
from curator_dask.tasks import EmptyTask, FileGroupTask
from curator_dask.utils import files as file_utils
from curator_dask.utils.files import infer_dataset_name

LOGGER = "curator_dask.stages.file_partitioning"
BOTH_MSG = "Both 'files_per_partition' and 'blocksize' were specified, but only one is allowed"


def run(stage: FilePartitioningStage) -> list[FileGroupTask]:
    return stage.process(EmptyTask())


def groups(tasks: list[FileGroupTask]) -> list[list[str]]:
    return [t.data for t in tasks]


# --------------------------------------------------------------------------------------------
# Storage back ends: a local directory or a unique memory:// root
# --------------------------------------------------------------------------------------------


@dataclass
class Store:
    """Writes files under a root and names them the way the stage reports them."""

    kind: str
    root: str  # as passed to the stage
    write: Callable[[str, bytes], None]
    full: Callable[[str], str]  # relative name -> path as the stage returns it


@pytest.fixture
def local_store(tmp_path: Path) -> Store:
    def write(rel: str, content: bytes) -> None:
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(content)

    return Store("local", str(tmp_path), write, lambda rel: str(tmp_path / rel))


@pytest.fixture
def memory_store() -> Iterator[Store]:
    fs = fsspec.filesystem("memory")
    root = f"/fp-test-{uuid.uuid4().hex}"

    def write(rel: str, content: bytes) -> None:
        fs.pipe(f"{root}/{rel}", content)

    # "memory://fp-test-x" is listed as "/fp-test-x/..." and re-prefixed with
    # fs.unstrip_protocol, which gives "memory:///fp-test-x/...".
    yield Store(
        "memory", f"memory://{root.lstrip('/')}", write, lambda rel: f"memory://{root}/{rel}"
    )
    if fs.exists(root):
        fs.rm(root, recursive=True)


@pytest.fixture(params=["local", "memory"])
def store(request: pytest.FixtureRequest) -> Store:
    return request.getfixturevalue(f"{request.param}_store")


def make_observed(store: Store) -> None:
    """docs/design/contract.md §2.5: E.JSONL 2 bytes, a.jsonl 16, b.jsonl 8, sub/c.jsonl 8,
    d.txt."""
    store.write("in/E.JSONL", b"x" * 2)
    store.write("in/a.jsonl", b"x" * 16)
    store.write("in/b.jsonl", b"x" * 8)
    store.write("in/sub/c.jsonl", b"x" * 8)
    store.write("in/d.txt", b"text")


# --------------------------------------------------------------------------------------------
# §2.1 __post_init__ and stage surface
# --------------------------------------------------------------------------------------------


class TestPostInit:
    def test_defaults(self) -> None:
        stage = FilePartitioningStage(file_paths="in/")
        assert stage.file_extensions == [".jsonl", ".json", ".parquet"]
        assert stage.storage_options == {}
        assert stage.name == "file_partitioning"
        assert stage.files_per_partition is None
        assert stage.blocksize is None
        assert stage.limit is None
        assert stage._blocksize == 512_000_000

    def test_stage_surface(self) -> None:
        stage = FilePartitioningStage(file_paths="in/")
        assert stage.resources == Resources(cpus=0.5)
        assert stage.resources.cpus == 0.5
        assert stage.resources.gpus == 0.0
        assert stage.num_workers() == 1
        assert stage.inputs() == ([], [])
        assert stage.outputs() == ([], [])
        assert stage.ray_stage_spec()["is_fanout_stage"] is True
        assert stage.xenna_stage_spec() == {}

    def test_does_not_mark_itself_source(self) -> None:
        stage = FilePartitioningStage(file_paths="in/")
        assert stage.is_source_stage is False
        assert stage.is_sink_stage is False

    def test_given_options_are_kept(self) -> None:
        stage = FilePartitioningStage(
            file_paths=["a"], file_extensions=[".txt"], storage_options={"anon": True}, limit=4
        )
        assert stage.file_extensions == [".txt"]
        assert stage.storage_options == {"anon": True}
        assert stage.limit == 4

    def test_both_options_raise(self) -> None:
        with pytest.raises(ValueError, match="only one is allowed") as info:
            FilePartitioningStage(file_paths="in/", files_per_partition=2, blocksize="1MB")
        assert str(info.value) == BOTH_MSG

    @pytest.mark.parametrize(("fpp", "blocksize"), [(2, 0), (0, "1MB"), (0, 0)])
    def test_both_options_set_means_not_none(self, fpp: int, blocksize: int | str) -> None:
        # docs/design/contract.md §2.1: "set" is "not None" (blocksize unset -> 512MB), not
        # truthiness.
        with pytest.raises(ValueError, match="only one is allowed"):
            FilePartitioningStage(file_paths="in/", files_per_partition=fpp, blocksize=blocksize)

    def test_blocksize_zero_is_set(self) -> None:
        # docs/design/contract.md §2.1: _blocksize = parse(blocksize), or 512MB only when blocksize
        # is unset.
        assert FilePartitioningStage(file_paths="in/", blocksize=0)._blocksize == 0

    @pytest.mark.parametrize(
        ("blocksize", "expected"),
        [
            ("10B", 10),
            ("3B", 3),
            ("1kB", 1000),
            ("1kb", 1000),
            ("1KiB", 1024),
            ("1kib", 1024),
            ("2MB", 2_000_000),
            ("2mb", 2_000_000),
            ("5.4 kB", 5400),
            ("100", 100),
            (100, 100),
            ("512MB", 512_000_000),
        ],
    )
    def test_blocksize_parsing(self, blocksize: int | str, expected: int) -> None:
        assert FilePartitioningStage(file_paths="in/", blocksize=blocksize)._blocksize == expected

    def test_large_blocksize_warns(self, caplog: pytest.LogCaptureFixture) -> None:
        with caplog.at_level(logging.WARNING, logger=LOGGER):
            FilePartitioningStage(file_paths="in/", blocksize="1GB")
        msgs = [r.getMessage() for r in caplog.records if r.name == LOGGER]
        assert any(
            m.startswith("Blocksize is greater than 512 MB, which is not recommended: ")
            for m in msgs
        ), msgs

    def test_512mb_does_not_warn(self, caplog: pytest.LogCaptureFixture) -> None:
        with caplog.at_level(logging.WARNING, logger=LOGGER):
            FilePartitioningStage(file_paths="in/", blocksize="512MB")
            FilePartitioningStage(file_paths="in/")
        assert not [r for r in caplog.records if "Blocksize" in r.getMessage()]


# --------------------------------------------------------------------------------------------
# §2.5 observed example, local and memory://
# --------------------------------------------------------------------------------------------


class TestObservedExample:
    def test_default(self, store: Store) -> None:
        make_observed(store)
        tasks = run(FilePartitioningStage(file_paths=f"{store.root}/in"))
        f = store.full
        assert groups(tasks) == [
            [f("in/E.JSONL")],
            [f("in/a.jsonl")],
            [f("in/b.jsonl")],
            [f("in/sub/c.jsonl")],
        ]

    def test_files_per_partition_2(self, store: Store) -> None:
        make_observed(store)
        tasks = run(FilePartitioningStage(file_paths=f"{store.root}/in", files_per_partition=2))
        f = store.full
        assert groups(tasks) == [
            [f("in/E.JSONL"), f("in/a.jsonl")],
            [f("in/b.jsonl"), f("in/sub/c.jsonl")],
        ]

    def test_blocksize_10b(self, store: Store) -> None:
        make_observed(store)
        tasks = run(FilePartitioningStage(file_paths=f"{store.root}/in", blocksize="10B"))
        f = store.full
        assert groups(tasks) == [
            [f("in/E.JSONL"), f("in/b.jsonl")],
            [f("in/sub/c.jsonl")],
            [f("in/a.jsonl")],
        ]

    def test_local_dataset_name(self, local_store: Store) -> None:
        make_observed(local_store)
        tasks = run(FilePartitioningStage(file_paths=f"{local_store.root}/in"))
        assert {t.dataset_name for t in tasks} == {"in"}


# --------------------------------------------------------------------------------------------
# §2.2 discovery
# --------------------------------------------------------------------------------------------


class TestDiscovery:
    def test_string_is_recursive(self, store: Store) -> None:
        make_observed(store)
        tasks = run(FilePartitioningStage(file_paths=f"{store.root}/in"))
        assert [store.full("in/sub/c.jsonl")] in groups(tasks)

    def test_list_entries_are_not_recursive(self, store: Store) -> None:
        make_observed(store)
        tasks = run(FilePartitioningStage(file_paths=[f"{store.root}/in"]))
        f = store.full
        assert groups(tasks) == [[f("in/E.JSONL")], [f("in/a.jsonl")], [f("in/b.jsonl")]]

    def test_list_of_dir_and_subdir_sorted_by_path(self, store: Store) -> None:
        make_observed(store)
        tasks = run(FilePartitioningStage(file_paths=[f"{store.root}/in/sub", f"{store.root}/in"]))
        f = store.full
        assert groups(tasks) == [
            [f("in/E.JSONL")],
            [f("in/a.jsonl")],
            [f("in/b.jsonl")],
            [f("in/sub/c.jsonl")],
        ]

    def test_list_of_files_sorted_by_path(self, store: Store) -> None:
        make_observed(store)
        paths = [f"{store.root}/in/b.jsonl", f"{store.root}/in/a.jsonl"]
        tasks = run(FilePartitioningStage(file_paths=paths))
        assert groups(tasks) == [[store.full("in/a.jsonl")], [store.full("in/b.jsonl")]]

    def test_blocksize_ties_keep_listing_order_across_entries(self, store: Store) -> None:
        make_observed(store)
        tasks = run(
            FilePartitioningStage(
                file_paths=[f"{store.root}/in/sub", f"{store.root}/in"], blocksize="8B"
            )
        )
        f = store.full
        # sizes: c 8 (first entry), then E 2, b 8, a 16 (second entry); stable sort by size
        assert groups(tasks) == [
            [f("in/E.JSONL")],
            [f("in/sub/c.jsonl")],
            [f("in/b.jsonl")],
            [f("in/a.jsonl")],
        ]

    def test_glob(self, store: Store) -> None:
        make_observed(store)
        tasks = run(FilePartitioningStage(file_paths=f"{store.root}/in/*.jsonl"))
        assert groups(tasks) == [[store.full("in/a.jsonl")], [store.full("in/b.jsonl")]]

    def test_glob_matching_a_directory_recurses_for_a_string(self, store: Store) -> None:
        make_observed(store)
        tasks = run(FilePartitioningStage(file_paths=f"{store.root}/in/*"))
        f = store.full
        assert groups(tasks) == [
            [f("in/E.JSONL")],
            [f("in/a.jsonl")],
            [f("in/b.jsonl")],
            [f("in/sub/c.jsonl")],
        ]

    def test_single_file_string(self, store: Store) -> None:
        make_observed(store)
        tasks = run(FilePartitioningStage(file_paths=f"{store.root}/in/b.jsonl"))
        assert groups(tasks) == [[store.full("in/b.jsonl")]]

    @pytest.mark.parametrize("ext", [".jsonl", "jsonl", "JSONL", ".JsonL"])
    def test_extension_match_is_case_insensitive(self, store: Store, ext: str) -> None:
        make_observed(store)
        tasks = run(FilePartitioningStage(file_paths=f"{store.root}/in", file_extensions=[ext]))
        f = store.full
        assert groups(tasks) == [
            [f("in/E.JSONL")],
            [f("in/a.jsonl")],
            [f("in/b.jsonl")],
            [f("in/sub/c.jsonl")],
        ]

    def test_custom_extension(self, store: Store) -> None:
        make_observed(store)
        tasks = run(FilePartitioningStage(file_paths=f"{store.root}/in", file_extensions=[".txt"]))
        assert groups(tasks) == [[store.full("in/d.txt")]]

    def test_default_extensions(self, store: Store) -> None:
        for name in ("x.jsonl", "x.json", "x.parquet", "x.jsonl.gz", "x.csv", "noext", "x.JSON"):
            store.write(f"d/{name}", b"1")
        tasks = run(FilePartitioningStage(file_paths=f"{store.root}/d"))
        f = store.full
        assert groups(tasks) == [
            [f("d/x.JSON")],
            [f("d/x.json")],
            [f("d/x.jsonl")],
            [f("d/x.parquet")],
        ]

    def test_last_extension_only(self, store: Store) -> None:
        store.write("d/x.jsonl.gz", b"1")
        tasks = run(FilePartitioningStage(file_paths=f"{store.root}/d", file_extensions=[".gz"]))
        assert groups(tasks) == [[store.full("d/x.jsonl.gz")]]

    def test_missing_entries_are_skipped_with_allow_no_files(self, store: Store) -> None:
        make_observed(store)
        paths = [f"{store.root}/nope", f"{store.root}/in/a.jsonl", f"{store.root}/nope.jsonl"]
        tasks = run(FilePartitioningStage(file_paths=paths, allow_no_files=True))
        assert groups(tasks) == [[store.full("in/a.jsonl")]]
        with pytest.raises(FileNotFoundError, match=f"{re.escape(paths[0])} does not exist"):
            run(FilePartitioningStage(file_paths=paths))

    def test_relative_directory_becomes_absolute(
        self, local_store: Store, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        make_observed(local_store)
        monkeypatch.chdir(local_store.root)
        tasks = run(FilePartitioningStage(file_paths="in"))
        cwd = os.getcwd()
        assert groups(tasks) == [
            [f"{cwd}/in/E.JSONL"],
            [f"{cwd}/in/a.jsonl"],
            [f"{cwd}/in/b.jsonl"],
            [f"{cwd}/in/sub/c.jsonl"],
        ]
        assert all(os.path.isabs(p) for g in groups(tasks) for p in g)

    def test_relative_file_in_list_becomes_absolute(
        self, local_store: Store, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        make_observed(local_store)
        monkeypatch.chdir(local_store.root)
        tasks = run(FilePartitioningStage(file_paths=["in/a.jsonl", "./in/b.jsonl"]))
        cwd = os.getcwd()
        assert groups(tasks) == [[f"{cwd}/in/a.jsonl"], [f"{cwd}/in/b.jsonl"]]

    def test_relative_glob_becomes_absolute(
        self, local_store: Store, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        make_observed(local_store)
        monkeypatch.chdir(local_store.root)
        tasks = run(FilePartitioningStage(file_paths="in/*.jsonl"))
        cwd = os.getcwd()
        assert groups(tasks) == [[f"{cwd}/in/a.jsonl"], [f"{cwd}/in/b.jsonl"]]

    @pytest.mark.parametrize("bad", [123, ("a.jsonl",), {"a.jsonl"}])
    def test_invalid_file_paths_type(self, bad: object) -> None:
        expected = f"Invalid file paths: {bad}, must be a string or list of strings"
        with pytest.raises(TypeError, match=re.escape(expected)):
            run(FilePartitioningStage(file_paths=bad))  # type: ignore[arg-type]

    def test_memory_paths_keep_protocol(self, memory_store: Store) -> None:
        make_observed(memory_store)
        tasks = run(FilePartitioningStage(file_paths=f"{memory_store.root}/in"))
        for task in tasks:
            (path,) = task.data
            assert path.startswith("memory:///fp-test-")
            with fsspec.open(path, "rb") as fh:
                assert fh.read()

    def test_missing_size_is_minus_one(self) -> None:
        assert file_utils._size({"name": "x"}) == -1
        assert file_utils._size({"name": "x", "size": None}) == -1
        assert file_utils._size({"name": "x", "size": 7}) == 7


class TestStorageSizeCheck:
    def test_oversized_partition_logs_a_warning(
        self, store: Store, caplog: pytest.LogCaptureFixture
    ) -> None:
        # docs/design/contract.md §2.3: a per-partition storage-size check logs warnings (texts in
        # the source:
        # "File group task has exceeded the storage limit per partition: [...]"). With
        # blocksize "10B", the partition [a.jsonl] holds 16 bytes.
        make_observed(store)
        with caplog.at_level(logging.WARNING, logger=LOGGER):
            tasks = run(FilePartitioningStage(file_paths=f"{store.root}/in", blocksize="10B"))
        assert len(tasks) == 3
        warnings = [
            r.getMessage()
            for r in caplog.records
            if r.name == LOGGER and r.levelno == logging.WARNING
        ]
        assert any(store.full("in/a.jsonl") in m for m in warnings), warnings
        assert not any(store.full("in/b.jsonl") in m for m in warnings), warnings

    def test_partitions_within_limit_log_no_warning(
        self, store: Store, caplog: pytest.LogCaptureFixture
    ) -> None:
        make_observed(store)
        with caplog.at_level(logging.WARNING, logger=LOGGER):
            run(FilePartitioningStage(file_paths=f"{store.root}/in", files_per_partition=2))
        assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []


class TestNoFiles:
    """Without files: an error by default (tests/stages/test_input_faults.py); with
    ``allow_no_files=True`` NeMo Curator's warning and no tasks."""

    def _warnings(self, caplog: pytest.LogCaptureFixture) -> list[str]:
        return [
            r.getMessage()
            for r in caplog.records
            if r.name == LOGGER and r.levelno == logging.WARNING
        ]

    def test_empty_list(self, caplog: pytest.LogCaptureFixture) -> None:
        with caplog.at_level(logging.WARNING, logger=LOGGER):
            assert run(FilePartitioningStage(file_paths=[], allow_no_files=True)) == []
        assert self._warnings(caplog) == ["No files found under []"]

    def test_missing_directory(self, store: Store, caplog: pytest.LogCaptureFixture) -> None:
        path = f"{store.root}/does-not-exist"
        with caplog.at_level(logging.WARNING, logger=LOGGER):
            assert run(FilePartitioningStage(file_paths=path, allow_no_files=True)) == []
        assert self._warnings(caplog) == [f"No files found under {path}"]

    def test_no_matching_extension(self, store: Store, caplog: pytest.LogCaptureFixture) -> None:
        make_observed(store)
        with caplog.at_level(logging.WARNING, logger=LOGGER):
            stage = FilePartitioningStage(file_paths=f"{store.root}/in", file_extensions=[".csv"],
                                          allow_no_files=True)
            assert run(stage) == []
        warnings = self._warnings(caplog)
        assert len(warnings) == 1
        assert warnings[0].startswith("No files found under ")


# --------------------------------------------------------------------------------------------
# §2.3 grouping, limit, metadata
# --------------------------------------------------------------------------------------------


def write_numbered(store: Store, n: int, size: int = 3, folder: str = "dir") -> list[str]:
    names = [f"{folder}/file_{i}.jsonl" for i in range(n)]
    for name in names:
        store.write(name, b"x" * size)
    return [store.full(name) for name in names]


class TestGrouping:
    def test_list_of_three_files(self, store: Store) -> None:
        files = write_numbered(store, 3, folder="MyData")
        tasks = run(
            FilePartitioningStage(
                file_paths=[f"{store.root}/MyData/file_{i}.jsonl" for i in range(3)]
            )
        )
        assert groups(tasks) == [[p] for p in files]
        assert all(isinstance(t, FileGroupTask) for t in tasks)
        if store.kind == "local":
            assert [t.dataset_name for t in tasks] == ["mydata"] * 3

    def test_four_files_two_per_partition(self, store: Store) -> None:
        files = write_numbered(store, 4)
        tasks = run(FilePartitioningStage(file_paths=f"{store.root}/dir", files_per_partition=2))
        assert groups(tasks) == [files[0:2], files[2:4]]

    def test_five_files_two_per_partition(self, store: Store) -> None:
        files = write_numbered(store, 5)
        tasks = run(FilePartitioningStage(file_paths=f"{store.root}/dir", files_per_partition=2))
        assert groups(tasks) == [files[0:2], files[2:4], files[4:5]]

    def test_blocksize_3b_six_files(self, store: Store) -> None:
        files = write_numbered(store, 6, size=3)
        tasks = run(FilePartitioningStage(file_paths=f"{store.root}/dir", blocksize="3B"))
        assert groups(tasks) == [[p] for p in files]

    def test_blocksize_greedy_packing(self, store: Store) -> None:
        sizes = {"a.jsonl": 4, "b.jsonl": 3, "c.jsonl": 5, "d.jsonl": 1, "e.jsonl": 12}
        for name, size in sizes.items():
            store.write(f"p/{name}", b"x" * size)
        tasks = run(FilePartitioningStage(file_paths=f"{store.root}/p", blocksize=8))
        f = store.full
        # sorted by size: d1 b3 a4 c5 e12 -> [d,b,a]=8, [c]=5 (+12 > 8), [e]
        assert groups(tasks) == [
            [f("p/d.jsonl"), f("p/b.jsonl"), f("p/a.jsonl")],
            [f("p/c.jsonl")],
            [f("p/e.jsonl")],
        ]

    def test_blocksize_oversized_first_file_alone(self, store: Store) -> None:
        store.write("p/big.jsonl", b"x" * 20)
        store.write("p/bigger.jsonl", b"x" * 30)
        tasks = run(FilePartitioningStage(file_paths=f"{store.root}/p", blocksize=10))
        assert groups(tasks) == [[store.full("p/big.jsonl")], [store.full("p/bigger.jsonl")]]

    def test_blocksize_ties_keep_path_order(self, store: Store) -> None:
        for name in ("z.jsonl", "m.jsonl", "a.jsonl"):
            store.write(f"t/{name}", b"x" * 5)
        store.write("t/small.jsonl", b"x")
        tasks = run(FilePartitioningStage(file_paths=f"{store.root}/t", blocksize=5))
        f = store.full
        assert groups(tasks) == [
            [f("t/small.jsonl")],
            [f("t/a.jsonl")],
            [f("t/m.jsonl")],
            [f("t/z.jsonl")],
        ]

    def test_blocksize_zero_sorts_by_size_one_file_each(self, store: Store) -> None:
        # sort_by_size follows `blocksize is not None`; grouping needs a truthy blocksize.
        store.write("z/a.jsonl", b"x" * 9)
        store.write("z/b.jsonl", b"x" * 1)
        tasks = run(FilePartitioningStage(file_paths=f"{store.root}/z", blocksize=0))
        assert groups(tasks) == [[store.full("z/b.jsonl")], [store.full("z/a.jsonl")]]

    def test_limit_counts_total_before_limit(self, store: Store) -> None:
        files = write_numbered(store, 10)
        stage = FilePartitioningStage(
            file_paths=f"{store.root}/dir", files_per_partition=2, limit=3
        )
        tasks = run(stage)
        assert groups(tasks) == [files[0:2], files[2:4], files[4:6]]
        assert [t._metadata["total_partitions"] for t in tasks] == [5, 5, 5]
        assert [t._metadata["partition_index"] for t in tasks] == [0, 1, 2]

    def test_limit_zero(self, store: Store) -> None:
        write_numbered(store, 4)
        assert run(FilePartitioningStage(file_paths=f"{store.root}/dir", limit=0)) == []

    def test_limit_one_without_fpp(self, store: Store) -> None:
        files = write_numbered(store, 4)
        tasks = run(FilePartitioningStage(file_paths=f"{store.root}/dir", limit=1))
        assert groups(tasks) == [[files[0]]]
        assert tasks[0]._metadata["total_partitions"] == 4

    def test_limit_applies_after_blocksize_grouping(self, store: Store) -> None:
        files = write_numbered(store, 6, size=3)
        tasks = run(FilePartitioningStage(file_paths=f"{store.root}/dir", blocksize="6B", limit=2))
        assert groups(tasks) == [files[0:2], files[2:4]]
        assert [t._metadata["total_partitions"] for t in tasks] == [3, 3]

    def test_limit_above_partition_count(self, store: Store) -> None:
        files = write_numbered(store, 3)
        tasks = run(FilePartitioningStage(file_paths=f"{store.root}/dir", limit=10))
        assert groups(tasks) == [[p] for p in files]

    def test_metadata(self, store: Store) -> None:
        files = write_numbered(store, 3)
        tasks = run(FilePartitioningStage(file_paths=f"{store.root}/dir", files_per_partition=2))
        assert len(tasks) == 2
        for i, task in enumerate(tasks):
            assert set(task._metadata) == {"partition_index", "total_partitions", "source_files"}
            assert task._metadata["partition_index"] == i
            assert task._metadata["total_partitions"] == 2
            assert task._metadata["source_files"] is task.data
            assert task.reader_config == {}
            assert task.task_id == ""
            assert task._stage_perf == []
        assert tasks[0]._metadata["source_files"] == files[0:2]
        assert tasks[1]._metadata["source_files"] == files[2:3]

    def test_content_ids_are_hashes_of_paths(self, store: Store) -> None:
        from curator_dask.lineage import get_deterministic_hash

        files = write_numbered(store, 2)
        tasks = run(FilePartitioningStage(file_paths=f"{store.root}/dir"))
        assert [t.get_deterministic_id() for t in tasks] == [
            get_deterministic_hash([p]) for p in files
        ]

    def test_process_is_repeatable(self, store: Store) -> None:
        write_numbered(store, 3)
        stage = FilePartitioningStage(file_paths=f"{store.root}/dir")
        first, second = run(stage), run(stage)
        assert groups(first) == groups(second)
        assert first[0] is not second[0]


class TestDatasetName:
    def test_parent_directory_lowercased(self, local_store: Store) -> None:
        write_numbered(local_store, 2, folder="Some/MixedCase")
        tasks = run(FilePartitioningStage(file_paths=f"{local_store.root}/Some"))
        assert [t.dataset_name for t in tasks] == ["mixedcase", "mixedcase"]

    def test_from_first_file_in_path_order(self, local_store: Store) -> None:
        local_store.write("root/alpha/z.jsonl", b"x" * 50)
        local_store.write("root/beta/y.jsonl", b"x" * 1)
        tasks = run(FilePartitioningStage(file_paths=f"{local_store.root}/root"))
        assert {t.dataset_name for t in tasks} == {"alpha"}

    def test_from_first_file_in_size_order_with_blocksize(self, local_store: Store) -> None:
        local_store.write("root/alpha/z.jsonl", b"x" * 50)
        local_store.write("root/beta/y.jsonl", b"x" * 1)
        tasks = run(FilePartitioningStage(file_paths=f"{local_store.root}/root", blocksize=10))
        assert {t.dataset_name for t in tasks} == {"beta"}

    def test_get_dataset_name(self) -> None:
        stage = FilePartitioningStage(file_paths="in/")
        assert stage._get_dataset_name(["parent/dir/file"]) == "dir"
        assert stage._get_dataset_name([]) == "dataset"

    @pytest.mark.parametrize(
        ("path", "expected"),
        [
            ("parent/dir/file.jsonl", "dir"),
            ("/abs/Data/file.jsonl", "data"),
            ("file.jsonl", "file"),
            ("/file.jsonl", "file"),
        ],
    )
    def test_infer_dataset_name_local(self, path: str, expected: str) -> None:
        assert infer_dataset_name(path) == expected


class TestPartitionHelpers:
    def test_partition_by_count(self) -> None:
        assert FilePartitioningStage._partition_by_count([1, 2, 3, 4, 5], 2) == [
            [1, 2],
            [3, 4],
            [5],
        ]
        assert FilePartitioningStage._partition_by_count([], 2) == []

    def test_partition_by_size(self) -> None:
        records = [("a", 4), ("b", 6), ("c", 1)]
        assert FilePartitioningStage._partition_by_size(records, 5) == [["c", "a"], ["b"]]


# --------------------------------------------------------------------------------------------
# Issue 35, item 7: the default (one file each) lists as it goes and keeps the paths packed
# --------------------------------------------------------------------------------------------


def make_tricky(store: Store) -> None:
    """Names whose path order is not folder by folder ("a-b" and "a.jsonl" sort before
    "a/"), a hidden-looking name with the extension, a folder "a.b", and a file elsewhere."""
    for rel in ["in/a.jsonl", "in/a/b.jsonl", "in/a-b.jsonl", "in/a/c/d.jsonl",
                "in/a.b/x.jsonl", "in/A.jsonl", "in/a/ b.jsonl", "in/sub/.h.jsonl",
                "in/a0/q.jsonl", "in/a/c.jsonl", "in/z.txt", "other/o.jsonl"]:
        store.write(rel, b"x" * len(rel))


def test_one_file_partitions_list_in_the_order_of_the_records(store: Store) -> None:
    """The streamed listing (``iter_file_records``) gives ``gather_file_records``'s order,
    for one entry walked and for several merged, and the tasks name the same files."""
    make_tricky(store)
    listed = []
    for paths in [store.root + "/in", [store.root + "/in/a", store.root + "/in",
                                        store.root + "/other"]]:
        records = file_utils.gather_file_records(paths, extensions=[".jsonl"])
        assert list(file_utils.iter_file_records(paths, extensions=[".jsonl"])) == records
        tasks = run(FilePartitioningStage(file_paths=paths, file_extensions=[".jsonl"]))
        assert groups(tasks) == [[p] for p, _ in records]
        assert [t._metadata["total_partitions"] for t in tasks] == [len(records)] * len(tasks)
        listed.append([p for p, _ in records])
    assert listed[0][:5] == [store.full(r) for r in [  # a string: every folder below it
        "in/A.jsonl", "in/a-b.jsonl", "in/a.b/x.jsonl", "in/a.jsonl", "in/a/ b.jsonl"]]
    assert listed[1] == [store.full(r) for r in [  # a list: each entry one level deep
        "in/A.jsonl", "in/a-b.jsonl", "in/a.jsonl", "in/a/ b.jsonl", "in/a/b.jsonl",
        "in/a/c.jsonl", "other/o.jsonl"]]


def test_the_partition_check_makes_the_same_tasks_again(local_store: Store) -> None:
    make_tricky(local_store)
    stage = FilePartitioningStage(file_paths=local_store.root + "/in", limit=5)
    tasks = stage.process_iter(EmptyTask())
    first = next(tasks)
    again = list(tasks.again())
    assert [t.data for t in again] == [first.data] + [t.data for t in tasks]
    assert len(again) == 5 and again[0]._metadata == first._metadata


def test_packed_paths() -> None:
    paths = [f"/data/{i % 7}/part-{i:05d}.jsonl" for i in range(25_001)] + [
        "s3://b/k.jsonl", "bare.jsonl", "/é/ü.jsonl"]
    packed = file_utils.PackedPaths(paths)
    assert len(packed) == len(paths) and list(packed) == paths
    assert packed[-1] == "/é/ü.jsonl" and packed[3:6] == paths[3:6]
    with pytest.raises(IndexError, match="out of range"):
        packed[len(paths)]
