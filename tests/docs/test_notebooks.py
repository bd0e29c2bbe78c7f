"""The notebooks in notebooks/: stored without outputs, and every cell runs without error.

Each notebook is executed with nbclient on a kernel that runs this interpreter (a kernelspec
written to a temporary JUPYTER_PATH, so a user-level ``python3`` kernel elsewhere is never
picked), in a temporary working directory; notebooks listed in ``CHECKS`` then have their
outputs checked. Skipped with the reason when nbclient, nbformat or ipykernel is missing.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
EXPECTED = ["01_quickstart.ipynb", "02_resume_after_interrupt.ipynb", "03_slurm_arrays.ipynb",
            "04_nemo_pipeline_on_dask.ipynb", "05_deduplication.ipynb",
            "06_data_juicer_recipe.ipynb"]


def _html_output(nb, marker: str) -> str:
    """The ``text/html`` output of the code cell whose source contains ``marker``."""
    cell = next((c for c in nb.cells if c.cell_type == "code" and marker in c.source), None)
    assert cell is not None, f"no code cell contains {marker!r}"
    html = [o["data"]["text/html"] for o in cell.outputs if "text/html" in o.get("data", {})]
    assert html, (f"the cell with {marker!r} has no text/html output, only "
                  f"{[o.get('output_type') for o in cell.outputs]}")
    return html[0]


def check_status_as_html(nb) -> None:
    """Notebook 02 shows `status` as HTML tables with every header in full, and its stopped job
    as stopped with the reason, not as an error (issue 20, item 7)."""
    one = _html_output(nb, "status(JOB_ID")
    for column in ("stage", "progress", "tasks in", "tasks out", "rows in", "rows out",
                   "rows dropped", "tasks filtered", "tasks failed", "busy s", "rows/s busy"):
        assert f">{column}</th>" in one, (column, one)
    assert ">stopped</b>: stop requested with `python -m curator_dask stop`; " in one, one
    assert "RunStopped" not in one and "error" not in one, one
    jobs = _html_output(nb, "status(work_dir=JOBS)")
    for column in ("job", "state", "started", "ended", "sources", "skipped", "done", "failed",
                   "work dir"):
        assert f">{column}</th>" in jobs, (column, jobs)
    assert "<code>resume-demo</code>" in jobs and ">stopped</b>" in jobs, jobs


CHECKS = {"02_resume_after_interrupt.ipynb": check_status_as_html}


def _missing() -> str | None:
    for module in ("nbclient", "nbformat", "ipykernel"):
        try:
            __import__(module)
        except ImportError:
            return f"{module} is not installed (pip install nbclient nbformat ipykernel)"
    return None


def test_the_notebooks_exist():
    assert [p.name for p in NOTEBOOKS] == EXPECTED


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_is_stored_without_outputs(path):
    nb = json.loads(path.read_text(encoding="utf-8"))
    dirty = [i for i, cell in enumerate(nb["cells"]) if cell["cell_type"] == "code"
             and (cell.get("outputs") or cell.get("execution_count") is not None)]
    assert not dirty, (f"{path.name}: cells {dirty} have outputs or execution counts; clear "
                       "them (python tools/docs/clear_notebooks.py)")


@pytest.fixture
def python3_kernel(tmp_path, monkeypatch):
    """A ``python3`` kernelspec that starts ``sys.executable -m ipykernel_launcher``."""
    spec_dir = tmp_path / "jupyter" / "kernels" / "python3"
    spec_dir.mkdir(parents=True)
    (spec_dir / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "Python 3 (curator_dask tests)",
        "language": "python",
    }))
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    monkeypatch.setenv("PYDEVD_DISABLE_FILE_VALIDATION", "1")  # debugpy's frozen-modules note
    return "python3"


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_runs(path, tmp_path, python3_kernel):
    reason = _missing()
    if reason:
        pytest.fail(f"{reason}; the test extra installs it: pip install -e '.[test]'")
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    nb = nbformat.read(path, as_version=4)
    workdir = tmp_path / "cwd"
    workdir.mkdir()
    client = NotebookClient(nb, timeout=300, kernel_name=python3_kernel,
                            resources={"metadata": {"path": str(workdir)}})
    started = time.monotonic()
    try:
        client.execute()
    except CellExecutionError as exc:
        pytest.fail(f"{path.name}: a cell failed:\n{exc}", pytrace=False)
    elapsed = time.monotonic() - started
    print(f"{path.name}: {elapsed:.1f} s")
    if path.name in CHECKS:
        CHECKS[path.name](nb)
