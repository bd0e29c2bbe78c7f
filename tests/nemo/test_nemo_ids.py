"""NeMo Curator's readers with ``_generate_ids`` / ``_assign_ids`` and its id generator functions
on a DaskExecutor, without Ray (curator_dask/nemo/ids.py): NeMo's own stages and functions, a
real 2-worker LocalCluster, real files."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import pandas as pd
import pytest
from nemo_curator.pipeline import Pipeline
from nemo_curator.stages.deduplication.id_generator import (
    CURATOR_DEDUP_ID_STR,
    IdGeneratorBase,
    create_id_generator_actor,
    kill_id_generator_actor,
    write_id_generator_to_disk,
)
from nemo_curator.stages.text.deduplication.removal_workflow import TextDuplicatesRemovalWorkflow
from nemo_curator.stages.text.io.reader import JsonlReader, ParquetReader

from curator_dask.ids import generator as ours
from tests.helpers import REPO_ROOT
from tests.nemo.nemo_pipelines import write_input
from tests.nemo.no_ray import MARKER, assert_no_ray, ray_daemons

READERS = {"jsonl": JsonlReader, "parquet": ParquetReader}


def _input(directory: Path, filetype: str) -> Path:
    data = write_input(directory / "jsonl", files=6, docs=5)
    if filetype == "jsonl":
        return data
    out = directory / "parquet"
    out.mkdir()
    for path in sorted(data.glob("*.jsonl")):
        pd.read_json(path, lines=True).to_parquet(out / f"{path.stem}.parquet", index=False)
    return out


def _ids_by_group(tasks) -> dict[tuple[str, ...], list[tuple[str, int]]]:
    """{file group: [(document id, NeMo id) in row order]} of a reader's output tasks."""
    groups = {}
    for task in tasks:
        df = task.to_pandas()
        groups[tuple(task._metadata["source_files"])] = list(
            zip(df["id"], df[CURATOR_DEDUP_ID_STR].astype(int), strict=True))
    return groups


@pytest.mark.parametrize("filetype", ["jsonl", "parquet"])
def test_nemo_readers_generate_then_assign_ids_on_dask(tmp_path, executor, filetype):
    data = _input(tmp_path, filetype)

    def read(**ids) -> list:
        stage = READERS[filetype](file_paths=str(data), files_per_partition=2, **ids)
        return Pipeline(name=f"ids-{filetype}", stages=[stage]).run(executor=executor)

    from curator_dask.nemo.ids import target

    # redirected while the executor is started: a regression fails here, before Ray could start
    # (started here: the shared executor starts on first use, and a module run before this one
    # in the same process may have closed its cluster, no_shared_cluster)
    executor.start()
    assert target("create_id_generator_actor") is ours.create_id_generator_actor
    state = tmp_path / "ids.json"
    create_id_generator_actor()  # NeMo's function, imported before any DaskExecutor existed
    try:
        generated = _ids_by_group(read(_generate_ids=True))
        write_id_generator_to_disk(str(state))
    finally:
        kill_id_generator_actor()
    assert not ours.id_generator_exists()
    # unique and together 0..29; contiguous in row order within each file group
    every = sorted(i for rows in generated.values() for _, i in rows)
    assert every == list(range(30)) and len(generated) == 3
    ranges = {}
    for files, rows in generated.items():
        first = rows[0][1]
        assert [i for _, i in rows] == list(range(first, first + len(rows)))
        ranges[files] = (first, first + len(rows) - 1)
    # NeMo's own IdGeneratorBase reads the state with the same ranges, keyed as NeMo keys
    nemo = IdGeneratorBase.from_disk(str(state))
    assert nemo.next_id == 30
    assert {k: tuple(v) for k, v in nemo.batch_registry.items()} == {
        nemo.hash_files(list(files)): r for files, r in ranges.items()}

    create_id_generator_actor(str(state))
    try:
        assigned = _ids_by_group(read(_assign_ids=True))
    finally:
        kill_id_generator_actor()
    assert assigned == generated  # every document gets its id again
    assert_no_ray(executor.client)


def test_a_reader_with_ids_and_no_generator_fails_before_the_cluster_starts(tmp_path):
    from curator_dask import DaskExecutor
    from curator_dask.ids.run import IdGeneratorMissingError

    executor = DaskExecutor(n_workers=1, progress=False)
    pipeline = Pipeline(name="no-generator", stages=[
        JsonlReader(file_paths=str(write_input(tmp_path / "in", 2, 3)), _generate_ids=True)])
    with pytest.raises(IdGeneratorMissingError, match=r"create_id_generator_actor\(\)"):
        pipeline.run(executor=executor)
    assert executor.cluster is None


def test_another_nemo_version_stops_runs_with_ids_in_one_line(tmp_path, monkeypatch):
    """A fake NeMo version (another NeMo Curator cannot be installed next to 1.4 for real):
    a DaskExecutor run with ids stops before anything runs, naming the supported versions."""
    from curator_dask import DaskExecutor
    from curator_dask.nemo import hook
    from curator_dask.nemo.checks import RayOnlyStageError

    monkeypatch.setattr(hook, "nemo_version", lambda: "1.5.0")
    data = write_input(tmp_path / "in", 2, 3)
    executor = DaskExecutor(n_workers=1, progress=False)
    pipeline = Pipeline(name="other-version", stages=[
        JsonlReader(file_paths=str(data), _generate_ids=True)])
    with pytest.raises(RayOnlyStageError) as info:
        pipeline.run(executor=executor)
    message = str(info.value)
    assert "NeMo Curator 1.4.x only; this is 1.5.0" in message and "\n" not in message
    workflow = TextDuplicatesRemovalWorkflow(
        input_path=str(data), ids_to_remove_path=str(tmp_path / "none"),
        output_path=str(tmp_path / "out"), input_filetype="jsonl",
        id_generator_path=str(tmp_path / "ids.json"))
    with pytest.raises(RuntimeError, match=r"1\.4\.x only; this is 1\.5\.0") as info:
        workflow.run(executor=executor)
    assert "\n" not in str(info.value)
    assert executor.cluster is None and not ours.id_generator_exists()


# A fresh interpreter: no DaskExecutor of another test is started there, and NeMo's functions
# are imported before curator_dask, as a script does. Nothing here calls NeMo's own functions:
# even ray.get_actor starts (or connects to) a Ray cluster.
DISPATCH = textwrap.dedent("""
    import json
    from nemo_curator.stages.deduplication import id_generator as nemo_ids
    from nemo_curator.stages.deduplication.id_generator import (
        create_id_generator_actor, kill_id_generator_actor)
    NAMES = ["get_id_generator_actor", "create_id_generator_actor",
             "write_id_generator_to_disk", "kill_id_generator_actor"]
    nemo_code = {n: getattr(nemo_ids, n).__code__ for n in NAMES}
    from curator_dask import DaskExecutor
    from curator_dask.ids import generator as ours
    from curator_dask.nemo import ids

    def nemos():  # the names whose calls run NeMo's own function (its code, unchanged)
        return [n for n in NAMES if ids.target(n) is ids.original(n)
                and ids.original(n).__code__ is nemo_code[n]]

    def redirected():  # the names whose function object runs curator_dask's dispatcher
        return [n for n in NAMES if getattr(nemo_ids, n).__code__ is not nemo_code[n]]

    executor = DaskExecutor(n_workers=1, progress=False)  # changes none of them
    report = {"made": redirected(), "idle": nemos()}
    with executor:
        report["redirected"] = redirected()
        report["started"] = [n for n in NAMES if ids.target(n) is getattr(ours, n, None)]
        report["plain_task"] = executor.client.submit(ids.in_curator_dask_task).result()
        create_id_generator_actor()  # the name bound before any DaskExecutor: curator_dask's
        report["created"] = ours.id_generator_exists()
    report["after"] = nemos()  # write and kill still reach curator_dask's generator
    report["kept"] = redirected()  # held while that generator exists
    kill_id_generator_actor()
    report["end"] = nemos() if not ours.id_generator_exists() else "not killed"
    report["restored"] = redirected()
    import ray
    report["ray"] = ray.is_initialized()
    print("REPORT " + json.dumps(report))
""")


def test_nemos_functions_keep_nemos_code_unless_a_dask_executor_is_started(tmp_path):
    """Made, the executor changes nothing of NeMo's; started, the function objects a script
    imported are redirected; after it closes they stay so only while the generator made on
    Dask exists, and its kill restores NeMo's code (curator_dask/nemo/patches.py)."""
    marker = uuid.uuid4().hex
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), MARKER: marker}
    env.pop("RAY_ADDRESS", None)
    proc = subprocess.run([sys.executable, "-c", DISPATCH], capture_output=True, text=True,
                          timeout=240, env=env, cwd=tmp_path)
    lines = [x for x in proc.stdout.splitlines() if x.startswith("REPORT ")]
    assert proc.returncode == 0 and lines, (proc.stdout + proc.stderr)[-4000:]
    report = json.loads(lines[-1][len("REPORT "):])
    names = ["get_id_generator_actor", "create_id_generator_actor",
             "write_id_generator_to_disk", "kill_id_generator_actor"]
    assert report["made"] == []  # DaskExecutor() leaves NeMo's functions NeMo's
    assert report["idle"] == names  # no DaskExecutor started: NeMo's code, every one
    assert report["redirected"] == names  # started: the function objects a script imported
    driver = names[1:]
    assert report["started"] == driver  # started: curator_dask's (the reader's handle in tasks)
    assert report["plain_task"] is False  # a Dask task that is not curator_dask's: NeMo's
    assert report["created"] is True
    assert report["after"] == names[:2]
    assert report["kept"] == names
    assert report["end"] == names
    assert report["restored"] == []  # NeMo's code objects back
    assert report["ray"] is False and ray_daemons(marker) == []
