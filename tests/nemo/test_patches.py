"""NeMo at arm's length (issue 33, item 5): every change curator_dask makes to NeMo Curator's
loaded modules is a row of ``curator_dask/nemo/patches.py``, made while an executor is started
and undone when it closes; ``DaskExecutor()`` changes none of them, except the documented entry
rows when their NeMo module is already loaded (NeMo's checkpointed ``Pipeline.run`` and its
removal workflow's ``run`` reach nothing of the executor before their Ray path)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import uuid

from curator_dask.nemo import hook, patches
from tests.helpers import REPO_ROOT, completed_ids
from tests.nemo.no_ray import MARKER, ray_daemons


def test_every_row_is_there_in_the_installed_nemo():
    assert patches.missing() == []
    assert hook.is_supported(hook.nemo_version())
    assert all(hook.is_supported(row.checked) and row.why for row in patches.PATCHES)


def test_the_table_names_each_attribute_once():
    keys = [(row.module, row.attribute) for row in patches.PATCHES]
    assert len(keys) == len(set(keys)) == 7
    assert [row.attribute for row in patches.PATCHES if row.entry] == [
        "Pipeline._run_with_resumability", "TextDuplicatesRemovalWorkflow.run"]


# A fresh interpreter: no executor of another test is started, nothing is patched yet.
SCRIPT = textwrap.dedent("""
    import importlib, json, sys
    import curator_dask
    from curator_dask import DaskExecutor
    DaskExecutor(n_workers=1, progress=False)
    report = {"extension_without_nemo": "curator_dask.nemo" in sys.modules}
    from nemo_curator.stages.deduplication import id_generator  # noqa: F401
    import nemo_curator.stages.text.io.reader.base  # noqa: F401
    from curator_dask.nemo import patches

    def snapshot():
        found = {}
        for row in patches.PATCHES:
            module = sys.modules.get(row.module)
            if module is not None:
                owner, name = row.owner(module)
                found[row.attribute] = getattr(owner, name)
        return found

    def changed():  # the rows whose attribute is not NeMo's original object now
        now = snapshot()
        return [a for a, original in nemo.items() if now[a] is not original]

    report["pipeline_loaded"] = "nemo_curator.pipeline.pipeline" in sys.modules
    nemo = snapshot()
    DaskExecutor(n_workers=1, progress=False)
    report["made_before_pipeline"] = changed()
    for row in patches.PATCHES:
        importlib.import_module(row.module)
    nemo = snapshot()
    executor = DaskExecutor(n_workers=1, progress=False)
    report["made"] = changed()
    report["entry_wraps_nemo"] = all(snapshot()[row.attribute].__wrapped__ is nemo[row.attribute]
                                     for row in patches.PATCHES if row.entry)
    with executor:
        report["started"] = changed()
        other = DaskExecutor(n_workers=1, progress=False, cluster_kwargs={"processes": False})
        other.start()
        other.close()
        report["one_of_two_closed"] = changed()
    report["closed"] = changed()
    from tests.nemo.nemo_pipelines import int_pipeline
    out = int_pipeline(2).run(executor=DaskExecutor(n_workers=1, progress=False),
                              checkpoint_path=sys.argv[1])
    report["checkpointed"] = sorted(t.data for t in out)
    report["after_run"] = changed()
    patches.restore_all()
    report["restored"] = changed()
    import ray
    report["ray"] = ray.is_initialized()
    print("REPORT " + json.dumps(report))
""")


def test_an_executor_changes_nemo_only_while_it_is_started(tmp_path):
    marker = uuid.uuid4().hex
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), MARKER: marker,
           "RAY_ADDRESS": "127.0.0.1:9"}  # NeMo's Ray path would fail the checkpointed run
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path / "ck")],
                          capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    lines = [x for x in proc.stdout.splitlines() if x.startswith("REPORT ")]
    assert proc.returncode == 0 and lines, (proc.stdout + proc.stderr)[-4000:]
    report = json.loads(lines[-1][len("REPORT "):])
    every = [row.attribute for row in patches.PATCHES]
    entry = [row.attribute for row in patches.PATCHES if row.entry]
    assert report["extension_without_nemo"] is False  # nothing of curator_dask.nemo imported
    assert report["pipeline_loaded"] is False
    assert report["made_before_pipeline"] == []  # DaskExecutor(): NeMo's objects, every one
    assert report["made"] == entry  # the documented exception: their module was loaded
    assert report["entry_wraps_nemo"] is True
    assert report["started"] == every
    assert report["one_of_two_closed"] == every  # the other executor is still started
    assert report["closed"] == entry  # the last close restored NeMo's objects
    # an executor never started: NeMo's checkpointed Pipeline.run comes to Dask, not Ray
    assert report["checkpointed"] == [0, 1] and completed_ids(tmp_path / "ck") == {"0", "1"}
    assert report["after_run"] == entry  # the run's executor closed at its end
    assert report["restored"] == []  # restore_all: the exact objects NeMo's modules had
    assert report["ray"] is False and ray_daemons(marker) == []
