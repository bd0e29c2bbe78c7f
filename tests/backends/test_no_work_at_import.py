"""Nothing happens at import or construction (issue 23, item 4).

Getting ``curator_dask.Pipeline`` and making a ``DaskExecutor`` start no process and install
no import hook; ``multiprocessing.spawn.get_preparation_data`` is replaced only while an
embedded cluster of ours is alive. The first test runs in a fresh interpreter, where nothing
of another test has started a process or patched anything.
"""

from __future__ import annotations

import json
import multiprocessing.spawn
import subprocess
import sys

import pytest

from curator_dask import DaskExecutor
from curator_dask.backends.dask import local
from tests.helpers import REPO_ROOT

# the forkserver and worker processes of this process are watched: no shared cluster alive
pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("no_shared_cluster")]

SCRIPT = """
import json, multiprocessing.spawn, sys, time
import psutil
original = multiprocessing.spawn.get_preparation_data
import curator_dask
curator_dask.Pipeline
executor = curator_dask.DaskExecutor(n_workers=1)
children = []
for _ in range(40):  # a child started in the background shows up within these polls
    children = [" ".join(p.cmdline()) for p in psutil.Process().children(recursive=True)]
    if children:
        break
    time.sleep(0.025)
print("REPORT " + json.dumps({
    "children": children,
    "finders": [type(f).__module__ + "." + type(f).__qualname__ for f in sys.meta_path
                if type(f).__module__.startswith("curator_dask")],
    "preparation_data_original": multiprocessing.spawn.get_preparation_data is original,
    "nemo_imported": any(m.startswith("nemo_curator") for m in sys.modules),
    "cluster": executor.cluster is None,
}))
"""


def test_getting_pipeline_and_making_an_executor_start_no_process_and_hook_nothing(tmp_path):
    proc = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path, env=_env())
    lines = [x for x in proc.stdout.splitlines() if x.startswith("REPORT ")]
    assert proc.returncode == 0 and lines, (proc.stdout + proc.stderr)[-3000:]
    report = json.loads(lines[-1][len("REPORT "):])
    assert report == {"children": [], "finders": [], "preparation_data_original": True,
                      "nemo_imported": False, "cluster": True}


def test_multiprocessing_is_patched_only_while_an_embedded_cluster_is_alive():
    def patched() -> bool:
        return multiprocessing.spawn.get_preparation_data is local._preparation_data

    assert not patched()
    with DaskExecutor(n_workers=1, progress=False) as outer:
        assert patched()
        with DaskExecutor(n_workers=1, progress=False) as inner:
            assert patched() and inner.cluster is not outer.cluster
        assert patched()  # one cluster is still alive: its restarted workers skip __main__
    assert not patched()
    assert multiprocessing.spawn.get_preparation_data.__module__ == "multiprocessing.spawn"


def _env() -> dict[str, str]:
    import os

    env = {k: v for k, v in os.environ.items() if not k.startswith("DASK_CURATOR_DASK__")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT),
                                                      os.environ.get("PYTHONPATH")]))
    return env
