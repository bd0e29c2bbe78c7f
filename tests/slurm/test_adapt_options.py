"""``adapt=(min, max)`` / ``--adapt MIN:MAX`` (adaptive SLURM clusters): the checks on the
value, what ``settings()`` reports, and the resource check before any worker job has joined.
Nothing here starts a cluster; the real run is in test_real_slurm.py."""

from __future__ import annotations

import pytest

from curator_dask import DaskExecutor, JsonlReader, Pipeline, ResourceUnavailableError
from curator_dask.backends.dask.plan import build_plan
from curator_dask.backends.dask.resource_check import check_resources
from curator_dask.cli.common import UsageError
from curator_dask.cli.run_command import parse_adapt
from curator_dask.slurm.cluster import SlurmClusterHandle, check_adapt
from tests.backends.dask_test_stages import NeedsGpu
from tests.helpers import cli


def test_adapt_is_reported_and_replaces_jobs():
    executor = DaskExecutor(cluster="slurm", adapt=[0, 4], progress=False)
    settings = executor.settings()
    assert settings["adapt"] == (0, 4) and settings["jobs"] is None
    assert DaskExecutor(cluster="slurm", progress=False).settings()["jobs"] == 1
    assert DaskExecutor(progress=False).settings()["adapt"] is None


@pytest.mark.parametrize(("kwargs", "expected"), [
    ({"adapt": (3, 1)}, "adapt=(3, 1): the minimum 3 is above the maximum 1; give (minimum, "
                        "maximum), e.g. (1, 3)"),
    ({"adapt": (-1, 2)}, "adapt=(-1, 2): the minimum must be 0 or more"),
    ({"adapt": (0, 0)}, "adapt=(0, 0): the maximum must be at least 1 worker job, got 0"),
    ({"adapt": 4}, "adapt=4: expected two integers, the minimum and maximum"),
    ({"adapt": (0.5, 2)}, "adapt=(0.5, 2): expected two integers"),
    ({"adapt": (True, 2)}, "adapt=(True, 2): expected two integers"),
    ({"adapt": (0, 2, 4)}, "adapt=(0, 2, 4): expected two integers"),
    ({"adapt": (0, 2), "jobs": 2}, "adapt=(0, 2) and jobs=2 exclude each other"),
])
def test_bad_adapt_values_name_the_value_and_the_fix(kwargs, expected):
    with pytest.raises(ValueError) as info:
        DaskExecutor(cluster="slurm", progress=False, **kwargs)
    assert str(info.value).startswith(f"DaskExecutor: {expected}"), str(info.value)


def test_adapt_needs_a_slurm_cluster():
    with pytest.raises(ValueError, match=r"adapt=\(0, 2\) scales SLURM worker jobs; it goes "
                                         r"with cluster='slurm', not cluster='local'"):
        DaskExecutor(cluster="local", adapt=(0, 2), progress=False)


@pytest.mark.parametrize(("text", "expected"), [
    ("0:4", (0, 4)), ("2:2", (2, 2)), (" 1 : 3 ", (1, 3)),
    ("3:1", "--adapt 3:1: the minimum 3 is above the maximum 1; give MIN:MAX, e.g. "
            "--adapt 1:3"),
    ("0:0", "--adapt 0:0: the maximum must be at least 1 worker job, got 0"),
    ("-1:2", "--adapt -1:2: the minimum must be 0 or more"),
    ("4", "--adapt 4: expected MIN:MAX, two whole numbers of SLURM worker jobs, e.g. "
          "--adapt 0:4"),
    ("a:b", "--adapt a:b: expected MIN:MAX"),
    ("1:2:3", "--adapt 1:2:3: expected MIN:MAX"),
])
def test_adapt_option_values(text, expected):
    if isinstance(expected, tuple):
        assert parse_adapt(text) == expected
        return
    with pytest.raises(UsageError) as info:
        parse_adapt(text)
    assert str(info.value).startswith(expected), str(info.value)


def test_adapt_option_mistakes_are_usage_errors(tmp_path):
    """Exit code 2 and one line, before any pipeline is loaded or any cluster started."""
    cases = [
        (["--cluster", "slurm", "--adapt", "3:1"], "--adapt 3:1: the minimum 3 is above"),
        (["--adapt", "0:2"], "--adapt 0:2 needs --cluster slurm"),
        (["--cluster", "slurm", "--adapt", "0:2", "--jobs", "2"],
         "--adapt 0:2 and --jobs 2 exclude each other"),
    ]
    script = "; ".join(
        f"print(main(['run', 'no-such.yaml', {', '.join(map(repr, args))}]))"
        for args, _ in cases)
    out = cli_python(f"from curator_dask.cli.main import main; {script}", tmp_path)
    assert out.stdout.split() == ["2", "2", "2"], out.stdout + out.stderr
    for _, expected in cases:
        assert f"run: error: {expected}" in out.stderr, out.stderr
    single = cli("run", "no-such.yaml", "--cluster", "slurm", "--adapt", "x", cwd=tmp_path)
    assert single.returncode == 2 and "--adapt x: expected MIN:MAX" in single.stderr


def cli_python(code: str, cwd):
    """``python -c code`` with this interpreter (several CLI calls in one process)."""
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True,
                          text=True, timeout=120, check=False)


def test_check_adapt_keeps_integers_of_any_kind():
    numpy = pytest.importorskip("numpy")
    assert check_adapt((numpy.int64(0), numpy.int32(3))) == (0, 3)


class _NoWorkers:
    def scheduler_info(self, n_workers: int = 0) -> dict:
        return {"workers": {}}


def test_resources_are_judged_by_the_worker_jobs_before_any_has_joined(tmp_path):
    """An adaptive cluster at 0 jobs: a GPU stage is refused at once when the jobs will not
    offer a GPU, and accepted when their ``--resources`` do."""
    pipeline = Pipeline(name="g").add_stage(JsonlReader(file_paths=str(tmp_path)))
    pipeline.add_stage(NeedsGpu())
    pipeline.build()
    plan = build_plan(pipeline.stages, fuse=True)
    handle = object.__new__(SlurmClusterHandle)  # no cluster: only its worker arguments
    handle._worker_args = ["--dashboard-address", "127.0.0.1:0"]
    with pytest.raises(ResourceUnavailableError, match="needs_gpu"):
        check_resources(_NoWorkers(), pipeline.stages, plan, handle.worker_resources)
    handle._worker_args = ["--resources", "GPU=1 MEM=2e9"]
    assert handle.worker_resources() == {"GPU": 1.0, "MEM": 2e9}
    check_resources(_NoWorkers(), pipeline.stages, plan, handle.worker_resources)
    handle._worker_args = ["--resources=GPU=2,X=1"]
    assert handle.worker_resources() == {"GPU": 2.0, "X": 1.0}


def test_idle_release_timing_comes_from_the_config():
    import dask

    from curator_dask.slurm.cluster import adapt_timing

    assert adapt_timing() == {"interval": 1.0, "wait_count": 60}  # the production defaults
    with dask.config.set({"curator-dask.slurm.adapt-idle-timeout": 0}):
        assert adapt_timing() == {"interval": 1.0, "wait_count": 1}
    with dask.config.set({"curator-dask.slurm.adapt-interval": 0}), \
            pytest.raises(ValueError, match="slurm.adapt-interval must be above 0"):
        adapt_timing()
