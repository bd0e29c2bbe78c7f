"""NeMo's id generator on Dask: NeMo's JSON both ways, ids from the own-model readers on a real
2-worker LocalCluster, the driver functions with and without a started executor, no Ray."""

from __future__ import annotations

import json
import random
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

import fsspec
import psutil
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from curator_dask import DaskExecutor, JsonlReader, JsonlWriter, ParquetReader, Pipeline
from curator_dask.errors import StageError
from curator_dask.ids import generator as ids
from curator_dask.ids.generator import CURATOR_DEDUP_ID_STR, IdGeneratorBase
from curator_dask.ids.run import IdGeneratorMissingError
from curator_dask.sample_data import generate_jsonl
from curator_dask.stages.base import ProcessingStage
from curator_dask.stages.text.io.reader.jsonl import JsonlReaderStage
from curator_dask.stages.text.io.reader.parquet import ParquetReaderStage
from curator_dask.tasks import DocumentBatch
from tests.backends.dask_test_stages import WaitFor
from tests.helpers import poll_for

pytestmark = pytest.mark.slow

FILES, DOCS = 24, 5  # 24 files, 2 per partition: 12 file groups over 2 workers


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("ids-corpus")
    generate_jsonl(str(root / "jsonl"), files=FILES, docs_per_file=DOCS, seed=3)
    (root / "parquet").mkdir()
    for path in sorted((root / "jsonl").iterdir()):
        rows = [json.loads(line) for line in path.read_text().splitlines()]
        pq.write_table(pa.Table.from_pylist(rows), root / "parquet" / f"{path.stem}.parquet")
    return root


@dataclass
class RangeFromWorker(ProcessingStage[DocumentBatch, DocumentBatch]):
    """Asks the run's id generator, from the worker, for the range of the batch's files."""

    name: str = "range_from_worker"

    def process(self, task: DocumentBatch) -> DocumentBatch:
        low, high = ids.get_batch_range(task._metadata["source_files"])
        table = task.to_pyarrow().append_column(
            "worker_range", pa.array([f"{low}-{high}"] * task.num_items))
        return DocumentBatch(dataset_name=task.dataset_name, data=table,
                             _metadata=task._metadata, _stage_perf=task._stage_perf)


@dataclass
class FailOn(ProcessingStage[DocumentBatch, DocumentBatch]):
    """Raises for the partition that holds ``path`` (after the reader registered it)."""

    path: str = ""
    name: str = "fail_on"

    def process(self, task: DocumentBatch) -> DocumentBatch:
        if self.path in task._metadata["source_files"]:
            msg = f"planted failure on {self.path}"
            raise RuntimeError(msg)
        return task


def read_outputs(out: Path) -> list[dict]:
    return [json.loads(line) for p in sorted(out.glob("*.jsonl"))
            for line in p.read_text().splitlines()]


def ids_by_file(rows: list[dict], inputs: Path) -> dict[str, list[int]]:
    """Each input file's ids (the sample's ``"<file index>-<doc>"`` names the file)."""
    paths = sorted(str(p) for p in inputs.iterdir())
    found: dict[str, list[int]] = {}
    for row in rows:
        found.setdefault(paths[int(row["id"].split("-")[0])], []).append(row[CURATOR_DEDUP_ID_STR])
    return {k: sorted(v) for k, v in found.items()}


def span(gen: IdGeneratorBase, files: list[str]) -> list[int]:
    """Every id of a registered group, in order."""
    low, high = gen.get_batch_range(files)
    return list(range(low, high + 1))


def run_reader(executor, reader, out: Path, *extra: ProcessingStage):
    return Pipeline(name="ids", stages=[reader, *extra, JsonlWriter(path=str(out))]).run(executor)


def assert_no_ray() -> None:
    ray = sys.modules.get("ray")
    assert ray is None or not ray.is_initialized()
    names = {p.name() for p in psutil.Process().children(recursive=True)}
    assert not names & {"raylet", "gcs_server"}, names


# -- NeMo's class and JSON -------------------------------------------------------------------
def test_json_is_byte_identical_to_nemos_and_read_both_ways(tmp_path):
    from nemo_curator.stages.deduplication.id_generator import IdGeneratorBase as NemoGen

    ours, nemo = IdGeneratorBase(start_id=7), NemoGen(start_id=7)
    for i, files in enumerate([["a.jsonl", "b.jsonl"], "c.jsonl", ["d.jsonl"], "a.jsonl"]):
        assert ours.register_batch(files, 3 + i) == nemo.register_batch(files, 3 + i)
    assert ours.hash_files(["a", "b"]) == nemo.hash_files(["a", "b"])
    for url in (str(tmp_path / "sub" / "ours.json"), "memory://ids/ours.json"):
        ours.to_disk(url)
        nemo.to_disk(url.replace("ours", "nemo"))
        with fsspec.open(url, "rb") as a, fsspec.open(url.replace("ours", "nemo"), "rb") as b:
            assert a.read() == b.read()
        theirs = NemoGen.from_disk(url)  # NeMo's own reader reads ours
        assert (theirs.next_id, theirs.batch_registry) == (nemo.next_id, json.loads(
            nemo_json(nemo))["batch_registry"])
        back = IdGeneratorBase.from_disk(url.replace("ours", "nemo"))  # and ours reads NeMo's
        assert back == ours
        assert back.get_batch_range("c.jsonl", None) == tuple(nemo.get_batch_range("c.jsonl", None))
    assert_no_ray()


def nemo_json(gen) -> str:
    return json.dumps({"next_id": gen.next_id, "batch_registry": gen.batch_registry})


def test_unknown_group_and_bad_arguments_say_what_to_do():
    gen = IdGeneratorBase()
    with pytest.raises(KeyError, match="no ids are registered for files.*_generate_ids=True"):
        gen.get_batch_range(["never.jsonl"], None)
    with pytest.raises(ValueError, match="Either files or key must be provided"):
        gen.get_batch_range(None, None)
    with pytest.raises(ValueError, match="not an id generator state"):
        IdGeneratorBase.from_state({"next": 1})


# -- the driver functions ----------------------------------------------------------------------
def test_driver_functions_without_any_executor(tmp_path):
    with pytest.raises(ValueError, match="create_id_generator_actor"):
        ids.write_id_generator_to_disk(str(tmp_path / "none.json"))
    with pytest.raises(ValueError, match="no id generator exists"):
        ids.kill_id_generator_actor()
    ids.create_id_generator_actor()
    with pytest.raises(ValueError, match=r"kill_id_generator_actor\(\) first"):
        ids.create_id_generator_actor()
    assert ids.register_batch(["x.jsonl"], 4) == 0  # outside a worker: the driver's generator
    assert ids.get_batch_range(["x.jsonl"]) == (0, 3)
    ids.write_id_generator_to_disk(str(tmp_path / "a.json"))
    ids.kill_id_generator_actor()
    assert not ids.id_generator_exists()
    ids.create_id_generator_actor(str(tmp_path / "a.json"))
    assert ids.register_batch(["y.jsonl"], 1) == 4


def test_while_a_run_installs_its_registry_the_driver_reads_the_state_it_installs():
    # A fake client (named as such): the window between a run taking the generator and its
    # scheduler plugin being registered is too short to hit on purpose with a real cluster
    # (CI hit it once); the fake asks for the state from inside that window.
    from curator_dask.ids.run import RunIdRegistry

    ids.create_id_generator_actor()
    ids.register_batch(["a.jsonl"], 5)
    seen: list[IdGeneratorBase] = []

    class FakeClientRegistering:
        id = "fake"

        def register_plugin(self, plugin, name=None):
            seen.append(ids.current_id_generator())

    registry = RunIdRegistry("0123456789ab", ["reader"], None, None)
    registry.install(FakeClientRegistering())
    assert [g.batch_registry for g in seen] == [{IdGeneratorBase().hash_files(["a.jsonl"]): (0, 4)}]
    with ids._Driver.lock:
        ids._Driver.holder = None


def test_both_id_options_refused_with_nemos_message(corpus):
    for make in (lambda **k: JsonlReader(file_paths=str(corpus / "jsonl"), **k),
                 lambda **k: ParquetReader(file_paths=str(corpus / "parquet"), **k),
                 JsonlReaderStage, ParquetReaderStage):
        with pytest.raises(ValueError, match="^Cannot generate and assign IDs at the same time$"):
            make(_generate_ids=True, _assign_ids=True)


def test_a_run_that_needs_ids_fails_before_the_cluster_starts(corpus, tmp_path):
    # Nothing listens on this address: a run that tried to connect would fail otherwise.
    executor = DaskExecutor(address="tcp://127.0.0.1:9", progress=False)
    reader = JsonlReader(file_paths=str(corpus / "jsonl"), _assign_ids=True)
    with pytest.raises(IdGeneratorMissingError, match=r"create_id_generator_actor\(\)"):
        run_reader(executor, reader, tmp_path / "out")
    assert executor.client is None


# -- on the cluster --------------------------------------------------------------------------
def test_generated_ids_are_unique_and_contiguous_per_file_group(executor, corpus, tmp_path):
    ids.create_id_generator_actor()
    reader = JsonlReader(file_paths=str(corpus / "jsonl"), files_per_partition=2,
                         _generate_ids=True)
    outputs = run_reader(executor, reader, tmp_path / "out", RangeFromWorker())
    assert len(outputs) == FILES // 2
    rows = read_outputs(tmp_path / "out")
    assert sorted(r[CURATOR_DEDUP_ID_STR] for r in rows) == list(range(FILES * DOCS))
    gen = ids.current_id_generator()  # brought back from the scheduler
    assert gen.next_id == FILES * DOCS and len(gen.batch_registry) == FILES // 2
    for task in outputs:
        files = task._metadata["source_files"]
        numbers = {int(Path(f).stem[-5:]) for f in files}  # part-00007 -> 7
        got = sorted(r[CURATOR_DEDUP_ID_STR] for r in rows
                     if int(r["id"].split("-")[0]) in numbers)
        assert got == span(gen, files) and len(got) == 2 * DOCS
    # the stage after the reader asked the scheduler, from the worker, for the same ranges
    assert {r["worker_range"] for r in rows} == {f"{a}-{b}" for a, b in
                                                 gen.batch_registry.values()}
    # assigning again (same files, same grouping; pandas this time) gives the same ids
    again = JsonlReader(file_paths=str(corpus / "jsonl"), files_per_partition=2,
                        read_kwargs={"engine": "pandas"}, _assign_ids=True)
    run_reader(executor, again, tmp_path / "again")
    assigned = {r["id"]: r[CURATOR_DEDUP_ID_STR] for r in read_outputs(tmp_path / "again")}
    assert assigned == {r["id"]: r[CURATOR_DEDUP_ID_STR] for r in rows}
    assert ids.current_id_generator() == gen  # assigning registers nothing
    assert_no_ray()


def test_parquet_reader_generates_and_assigns(executor, corpus, tmp_path):
    ids.create_id_generator_actor()
    ids.register_batch(["elsewhere.parquet"], 10)  # on the driver, before the runs
    for flag, out in (("_generate_ids", "gen"), ("_assign_ids", "assign")):
        reader = ParquetReader(file_paths=str(corpus / "parquet"), files_per_partition=3,
                               **{flag: True})
        run_reader(executor, reader, tmp_path / out)
    generated, assigned = (sorted((r["id"], r[CURATOR_DEDUP_ID_STR])
                                  for r in read_outputs(tmp_path / out))
                           for out in ("gen", "assign"))
    assert generated == assigned
    assert sorted(i for _, i in generated) == list(range(10, 10 + FILES * DOCS))
    assert len(ids.current_id_generator().batch_registry) == 1 + FILES // 3
    # another grouping was never registered: the worker's error says what to do
    regrouped = ParquetReader(file_paths=str(corpus / "parquet"), files_per_partition=4,
                              _assign_ids=True)
    with pytest.raises(StageError, match="no ids are registered for files.*same file grouping"):
        run_reader(executor, regrouped, tmp_path / "never")


def test_a_restored_registry_gives_its_ranges_whatever_order_workers_finish(executor, corpus,
                                                                           tmp_path):
    paths = sorted(str(p) for p in (corpus / "jsonl").iterdir())
    order = list(range(FILES))
    random.Random(11).shuffle(order)  # registered in an order no run would follow
    planned = IdGeneratorBase(start_id=1000)
    for i in order:
        planned.register_batch([paths[i]], DOCS)
    planned.to_disk(str(tmp_path / "planned.json"))
    ids.create_id_generator_actor(str(tmp_path / "planned.json"))
    reader = JsonlReader(file_paths=str(corpus / "jsonl"), files_per_partition=1,
                         _generate_ids=True)
    run_reader(executor, reader, tmp_path / "out")
    got = ids_by_file(read_outputs(tmp_path / "out"), corpus / "jsonl")
    assert got == {p: span(planned, [p]) for p in paths}
    ids.write_id_generator_to_disk(str(tmp_path / "after.json"))
    assert (tmp_path / "after.json").read_bytes() == (tmp_path / "planned.json").read_bytes()


def test_the_state_comes_back_after_a_failed_run(executor, corpus, tmp_path):
    paths = sorted(str(p) for p in (corpus / "jsonl").iterdir())
    ids.create_id_generator_actor()
    reader = JsonlReader(file_paths=str(corpus / "jsonl"), files_per_partition=1,
                         _generate_ids=True)
    with pytest.raises(StageError, match="planted failure"):
        run_reader(executor, reader, tmp_path / "out", FailOn(path=paths[5]))
    gen = ids.current_id_generator()
    # the failing partition's reader registered its range on the scheduler before the failure
    assert len(span(gen, [paths[5]])) == DOCS
    written = ids_by_file(read_outputs(tmp_path / "out"), corpus / "jsonl")
    assert all(v == span(gen, [p]) for p, v in written.items())
    # the next run on the same files keeps those ranges and adds the rest after them
    run_reader(executor, JsonlReader(file_paths=str(corpus / "jsonl"), files_per_partition=1,
                                     _generate_ids=True), tmp_path / "out2")
    again = ids.current_id_generator()
    assert all(again.batch_registry[k] == r for k, r in gen.batch_registry.items())
    assert again.next_id == FILES * DOCS


def test_state_held_on_the_driver_between_runs_of_an_executor_not_entered(corpus, tmp_path):
    paths = sorted(str(p) for p in (corpus / "jsonl").iterdir())
    ids.create_id_generator_actor()
    executor = DaskExecutor(n_workers=1, progress=False)  # its cluster closes after each run
    first = JsonlReader(file_paths=paths[:4], files_per_partition=1, _generate_ids=True)
    run_reader(executor, first, tmp_path / "a")
    assert executor.client is None  # the cluster is gone; the state is on the driver
    before = ids.current_id_generator()
    assert before.next_id == 4 * DOCS
    second = JsonlReader(file_paths=paths[:8], files_per_partition=1, _generate_ids=True)
    run_reader(executor, second, tmp_path / "b")
    after = ids.current_id_generator()
    assert list(after.batch_registry.items())[:4] == list(before.batch_registry.items())
    assert after.next_id == 8 * DOCS
    got = ids_by_file(read_outputs(tmp_path / "b"), corpus / "jsonl")
    assert got == ids_by_file(read_outputs(tmp_path / "a"), corpus / "jsonl") | {
        p: span(after, [p]) for p in paths[4:8]}
    assert_no_ray()


def test_during_a_run_the_driver_functions_read_the_schedulers_state(executor, corpus, tmp_path):
    ids.create_id_generator_actor()
    release = tmp_path / "release"
    reader = JsonlReader(file_paths=str(corpus / "jsonl"), files_per_partition=4,
                         _generate_ids=True)
    errors: list[BaseException] = []

    def run() -> None:
        try:
            run_reader(executor, reader, tmp_path / "out", WaitFor(path=str(release)))
        except BaseException as exc:  # noqa: BLE001 (reported by the test)
            errors.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    try:
        # the driver's own copy is empty until the run ends: these ranges come from the
        # scheduler, registered by readers that now wait in the next stage
        live = poll_for(lambda: ids.current_id_generator().batch_registry, 120,
                        "no registration reached the scheduler")
        ids.write_id_generator_to_disk(str(tmp_path / "live.json"))
        assert IdGeneratorBase.from_disk(str(tmp_path / "live.json")).batch_registry.keys() >= (
            live.keys())
        with pytest.raises(RuntimeError, match="a run in progress uses the id generator"):
            ids.kill_id_generator_actor()
        with pytest.raises(ValueError, match="exists already"):
            ids.create_id_generator_actor()
    finally:
        release.touch()
        thread.join(timeout=120)
    assert not errors, errors
    assert ids.current_id_generator().next_id == FILES * DOCS
