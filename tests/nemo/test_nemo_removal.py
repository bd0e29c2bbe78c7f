"""NeMo Curator's ``TextDuplicatesRemovalWorkflow(id_generator_path=...)`` on a DaskExecutor,
without Ray: NeMo's own workflow, reader, removal stage and writer, on a real 2-worker
LocalCluster, with an id generator state written by NeMo's own ``IdGeneratorBase`` and a
hand-written ids-to-remove Parquet file in NeMo's layout (column ``id``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import uuid

import pandas as pd
from nemo_curator.stages.deduplication.id_generator import CURATOR_DEDUP_ID_STR, IdGeneratorBase
from nemo_curator.stages.file_partitioning import FilePartitioningStage
from nemo_curator.tasks import EmptyTask

from tests.helpers import REPO_ROOT
from tests.nemo.nemo_pipelines import write_input
from tests.nemo.no_ray import MARKER, ray_daemons, ray_initialized

# A fresh interpreter and a DaskExecutor that is not started when the workflow calls NeMo's
# create_id_generator_actor: only the workflow's own redirect sends it to Dask (an entry row of
# curator_dask/nemo/patches.py, which holds the id functions' redirects while it runs).
REMOVAL = textwrap.dedent("""
    import json, sys
    from nemo_curator.stages.text.deduplication.removal_workflow import (
        TextDuplicatesRemovalWorkflow)
    from nemo_curator.stages.deduplication import id_generator as nemo_ids
    from curator_dask import DaskExecutor
    from curator_dask.ids import generator as ours
    from tests.nemo.no_ray import ray_initialized
    data, ids_json, remove, out = sys.argv[1:5]
    nemo_code = nemo_ids.create_id_generator_actor.__code__
    executor = DaskExecutor(n_workers=2, progress=False)
    # the workflow is redirected, its create_id_generator_actor not yet (NeMo's code until the
    # workflow runs on Dask): a regression stops here, before NeMo's code could start Ray
    if not getattr(TextDuplicatesRemovalWorkflow.run, "__curator_dask_redirect__", False):
        sys.exit("TextDuplicatesRemovalWorkflow.run is not redirected")
    if nemo_ids.create_id_generator_actor.__code__ is not nemo_code:
        sys.exit("create_id_generator_actor is redirected by DaskExecutor()")
    result = TextDuplicatesRemovalWorkflow(
        input_path=data, ids_to_remove_path=remove, output_path=out, input_filetype="jsonl",
        input_files_per_partition=2, id_generator_path=ids_json).run(executor=executor)
    print("REPORT " + json.dumps({
        "removed": result.get_metadata("num_duplicates_removed"),
        "outputs": len(result.pipeline_tasks["removal"]),
        "generator_left": ours.id_generator_exists(), "ray": ray_initialized(),
        "nemo_code_after": nemo_ids.create_id_generator_actor.__code__ is nemo_code}))
""")


def test_nemos_removal_workflow_with_an_id_generator_runs_on_dask(tmp_path):
    data = write_input(tmp_path / "input", files=6, docs=5)
    # NeMo's own file groups for this input, registered with NeMo's own generator in reverse
    # order (the ids come from the JSON, not from the order the groups are read in)
    groups = [t.data for t in FilePartitioningStage(
        file_paths=str(data), files_per_partition=2, file_extensions=[".jsonl"],
    ).process(EmptyTask)]
    generator = IdGeneratorBase()
    ids: dict[str, int] = {}  # document id -> NeMo id
    for files in reversed(groups):
        docs = [d for f in files for d in pd.read_json(f, lines=True)["id"]]
        first = generator.register_batch(files, len(docs))
        ids.update({d: first + i for i, d in enumerate(docs)})
    state = tmp_path / "ids.json"
    generator.to_disk(str(state))
    assert len(groups) == 3 and sorted(ids.values()) == list(range(30))
    removed = ["0-0", "0-3", "3-4", "5-1"]  # in three of the groups
    (tmp_path / "remove").mkdir()
    pd.DataFrame({"id": [ids[d] for d in removed]}).to_parquet(
        tmp_path / "remove" / "part.0.parquet", index=False)

    marker = uuid.uuid4().hex
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), MARKER: marker}
    env.pop("RAY_ADDRESS", None)
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, "-c", REMOVAL, str(data), str(state), str(tmp_path / "remove"),
         str(out)], capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    lines = [x for x in proc.stdout.splitlines() if x.startswith("REPORT ")]
    assert proc.returncode == 0 and lines, (proc.stdout + proc.stderr)[-4000:]
    report = json.loads(lines[-1][len("REPORT "):])

    written = pd.concat([pd.read_parquet(p) for p in sorted(out.glob("*.parquet"))])
    assert sorted(written["id"]) == sorted(set(ids) - set(removed))
    assert dict(zip(written["id"], written[CURATOR_DEDUP_ID_STR], strict=True)) == {
        d: i for d, i in ids.items() if d not in removed}  # each row got the JSON's id
    assert report["removed"] == len(removed) and report["outputs"] == 3
    assert report["generator_left"] is False  # the workflow's kill_id_generator_actor ran
    assert report["nemo_code_after"] is True  # the redirects held by the workflow are gone
    assert report["ray"] is False and ray_daemons(marker) == [] and not ray_initialized()
