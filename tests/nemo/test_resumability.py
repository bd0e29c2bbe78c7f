"""``nemo_curator.pipeline.Pipeline.run(executor=DaskExecutor(), checkpoint_path=P)`` with no
Ray cluster: the scheduler plugin counts, the LMDB files are NeMo's format (read back with
NeMo's own reader), and Ray's path is never taken. Mirrors NeMo Curator's
``tests/backends/test_resumability_e2e.py``."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import nemo_curator.package_info
import pytest

from tests.helpers import completed_ids
from tests.nemo.nemo_pipelines import (
    InProcessExecutor,
    curation_pipeline,
    files_of,
    int_pipeline,
    nemo_completed,
    write_input,
)


def test_resume_skips_completed_and_reruns_failed(tmp_path, executor):
    ck = tmp_path / "ck"
    first = int_pipeline(3, fail=(1,)).run(executor=executor, checkpoint_path=str(ck))
    assert sorted(t.data for t in first) == [0, 2]
    assert sorted(t.task_id for t in first) == ["0_0_0", "0_2_0"]
    assert completed_ids(ck) == nemo_completed(ck) == {"0", "2"}  # 1 failed: still pending
    second = int_pipeline(3).run(executor=executor, checkpoint_path=str(ck))
    assert [(t.data, t.task_id) for t in second] == [(1, "0_1_0")]
    assert nemo_completed(ck) == {"0", "1", "2"}


def test_fully_completed_pipeline_reruns_nothing(tmp_path, executor):
    ck = tmp_path / "ck"
    assert sorted(t.data for t in int_pipeline(3).run(executor=executor,
                                                      checkpoint_path=str(ck))) == [0, 1, 2]
    # NeMo's RayActorPoolExecutor raises "No tasks to process" here; the Dask executor returns
    # an empty result (docs/design/contract.md §7.3).
    again = int_pipeline(3).run(executor=executor, checkpoint_path=str(ck))
    assert list(again) == [] and again.skipped_sources == 3


def test_checkpointed_curation_equals_the_reference_and_reruns_nothing(tmp_path, executor):
    data = write_input(tmp_path / "input")
    reference = curation_pipeline(data, tmp_path / "ref")
    reference.run(executor=InProcessExecutor())
    ck = tmp_path / "ck"
    result = curation_pipeline(data, tmp_path / "out").run(executor=executor,
                                                          checkpoint_path=str(ck))
    assert files_of(tmp_path / "out") == files_of(tmp_path / "ref")
    # the checkpoint holds exactly the sources NeMo's source stage makes (ids "<12 hex>")
    from nemo_curator.backends.base import BaseStageAdapter

    made = BaseStageAdapter(reference.stages[0]).process_batch([_empty()])
    sources = {t.get_source_id() for t in made}
    assert len(sources) == 3 and completed_ids(ck) == nemo_completed(ck) == sources
    before = {p.name: p.stat().st_mtime_ns for p in (tmp_path / "out").iterdir()}
    rerun = curation_pipeline(data, tmp_path / "out").run(executor=executor,
                                                         checkpoint_path=str(ck))
    assert len(result) == 3 and list(rerun) == [] and rerun.skipped_sources == 3
    assert {p.name: p.stat().st_mtime_ns for p in (tmp_path / "out").iterdir()} == before


def test_a_set_ray_address_never_diverts_the_run_to_ray(tmp_path, executor, monkeypatch):
    """NeMo's own path would connect to RAY_ADDRESS and create its Ray actor (which nothing
    would feed); here nothing listens there, so taking that path would fail the run."""
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:9")
    out = int_pipeline(2).run(executor=executor, checkpoint_path=str(tmp_path / "ck"))
    assert sorted(t.data for t in out) == [0, 1]
    assert completed_ids(tmp_path / "ck") == {"0", "1"}


def test_other_nemo_versions_are_refused_in_one_line(tmp_path, executor, monkeypatch):
    monkeypatch.setattr(nemo_curator.package_info, "__version__", "1.5.0")
    with pytest.raises(RuntimeError) as info:
        int_pipeline(2).run(executor=executor, checkpoint_path=str(tmp_path / "ck"))
    message = str(info.value)
    assert "1.4.x" in message and "1.5.0" in message and "\n" not in message
    assert not (tmp_path / "ck" / ".nemo_curator_metadata").exists()  # nothing ran


def test_executor_made_before_nemo_is_imported_hooks_the_pipeline_once_installed(tmp_path):
    """No import hook: NeMo imported after the executor was made is patched by
    ``curator_dask.nemo.install()`` (docs/migrating-from-nemo-curator.md)."""
    script = textwrap.dedent(f"""
        import sys
        import curator_dask.nemo
        from curator_dask import DaskExecutor
        executor = DaskExecutor(n_workers=1, progress=False)
        assert "nemo_curator.pipeline.pipeline" not in sys.modules
        from nemo_curator.pipeline.pipeline import Pipeline
        from tests.nemo.nemo_pipelines import int_pipeline
        hooked = lambda: getattr(Pipeline._run_with_resumability, "__curator_dask_hook__", False)
        assert not hooked()  # nothing watched the import
        curator_dask.nemo.install()
        assert hooked()
        out = int_pipeline(2).run(executor=executor, checkpoint_path={str(tmp_path / 'ck')!r})
        print(sorted(t.data for t in out))
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120, env={**_env(), "RAY_ADDRESS": "127.0.0.1:9"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1] == "[0, 1]"
    assert completed_ids(tmp_path / "ck") == {"0", "1"}


def _empty():
    from nemo_curator.tasks import EmptyTask

    return EmptyTask()


def _env() -> dict[str, str]:
    import os

    from tests.helpers import REPO_ROOT

    return {**os.environ, "PYTHONPATH": os.pathsep.join(
        filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))}
