from __future__ import annotations

import os

# Imported up front: CPython 3.11.7 can raise "AST constructor recursion depth mismatch" when
# a module is compiled while other threads are importing (gh-106905), which happened when
# hypothesis was first imported at session end while cluster threads were shutting down.
import hypothesis  # noqa: F401
import pytest

from curator_dask.sample_data import generate_jsonl

EXECUTOR_DEFAULTS = {"n_workers": 2, "progress": False}

# The longest test files (their sum of test durations, slowest first, measured on the 2-core
# machine with the local 3-node SLURM) start first: with `--dist loadfile` a long file collected
# last would run alone at the end while the other processes idle (longest first is the classic
# rule for balancing jobs over machines). Measured at `-n 2`, the processes were balanced
# already (614 s of wall time for 1,200 s of tests): this guards the tail of the README's
# `-n 3`, not more. The rest keep pytest's order.
SLOW_FILES_FIRST = (  # seconds summed per file in a `-n 3 --durations=0` run, 2026-12-05
    "tests/data_juicer/test_recipe_jobs.py",  # 134
    "tests/data_juicer/test_recipe_run.py",  # 121
    "tests/slurm/test_multinode_cluster.py",  # 117
    "tests/slurm/test_real_slurm.py",  # 116
    "tests/docs/test_docs_snippets.py",  # 103
    "tests/data_juicer/test_recipe_job_commands.py",  # 100
    "tests/docs/test_notebooks.py",  # 97
    "tests/test_readme.py",  # 95
    "tests/slurm/test_multinode_arrays.py",  # 62
    "tests/dedup/test_dedup_multinode.py",  # 58 (alone, 2026-12-05)
    "tests/cli/test_cli.py",  # 61
    "tests/cli/test_drain.py",  # 47
    "tests/dedup/test_fuzzy_resume.py",  # 47
    "tests/data_juicer/test_dedup.py",  # 43
    "tests/backends/test_worker_memory.py",  # 39
    "tests/data_juicer/test_fast_ops.py",  # 36
    "tests/data_juicer/test_offline_ops_recipe.py",  # 34
    "tests/data_juicer/test_recipe_slurm.py",  # 33
    "tests/nemo/test_ray_interop.py",  # 30
)


def pytest_collection_modifyitems(config, items) -> None:
    """The files of :data:`SLOW_FILES_FIRST` first, in that order (a stable sort)."""
    rank = {name: i for i, name in enumerate(SLOW_FILES_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.partition("::")[0], len(rank)))


@pytest.fixture(scope="session", autouse=True)
def job_index(tmp_path_factory):
    """Jobs the tests run (here and in the CLI subprocesses they start) are recorded in a
    temporary per-user job index, never in the user's own (curator_dask.jobs.index)."""
    from curator_dask.jobs.index import ENV_VAR

    path = tmp_path_factory.mktemp("job-index") / "jobs.json"
    old = os.environ.get(ENV_VAR)
    os.environ[ENV_VAR] = str(path)
    yield path
    if old is None:
        os.environ.pop(ENV_VAR, None)
    else:
        os.environ[ENV_VAR] = old


@pytest.fixture(scope="session", autouse=True)
def no_performance_reports():
    """Jobs the tests run save no Dask performance report (``jobs.performance-report``): it
    costs each job about 2 s of CPU (bokeh renders the whole task stream), most of the suite's
    job overhead. Set here and for the subprocesses; the tests of the report turn it back on
    (tests/jobs/test_report_and_status.py, tests/backends/test_performance_report.py)."""
    import dask

    key, var = "curator-dask.jobs.performance-report", "DASK_CURATOR_DASK__JOBS__PERFORMANCE_REPORT"
    old = os.environ.get(var)
    os.environ[var] = "False"
    with dask.config.set({key: False}):
        yield
    if old is None:
        os.environ.pop(var, None)
    else:
        os.environ[var] = old


class _NotFromClusterThreads:
    """Drops records of Dask's and tornado's loggers: a cluster that an earlier test in the
    process started (a module's shared ``executor``) logs from its own threads at any moment,
    e.g. "Client ... requests to cancel 0 keys", which a test counting its records would see."""

    PREFIXES = ("distributed", "tornado", "asyncio", "bokeh")

    def filter(self, record) -> bool:
        return not record.name.startswith(self.PREFIXES)


@pytest.fixture(autouse=True)
def caplog_of_this_test(caplog):
    """``caplog.records`` holds what the test's own code logged (no test asserts Dask's log)."""
    only_ours = _NotFromClusterThreads()
    caplog.handler.addFilter(only_ours)
    yield
    caplog.handler.removeFilter(only_ours)


@pytest.fixture
def jsonl_input(tmp_path):
    """Six JSONL files of 5 documents each (about 10 % shorter than 50 characters)."""
    return generate_jsonl(str(tmp_path / "input"), files=6, docs_per_file=5, short_fraction=0.3,
                          seed=7)


@pytest.fixture(scope="session")
def shared_executor():
    """The one ``DaskExecutor`` of this test process (a real LocalCluster, 2 worker processes,
    no progress bars) that every module without needs of its own shares, as distributed's
    ``gen_cluster``-style fixtures share one: tests that kill workers or drivers, stop runs or
    reconfigure the cluster make their own. Started on first use."""
    from curator_dask import DaskExecutor

    with DaskExecutor(**EXECUTOR_DEFAULTS) as ex:
        _SHARED.append(ex)
        yield ex
        _SHARED.remove(ex)


_SHARED: list = []  # the shared executor, while the session holds it


@pytest.fixture(scope="module")
def no_shared_cluster():
    """For a module that watches this process's own cluster processes (the forkserver and the
    workers it forked, what starts at import): the shared cluster is closed first; its
    executor starts a new one when a later module uses it."""
    for ex in _SHARED:
        ex.close()


@pytest.fixture(scope="module")
def executor(request):
    """A ``DaskExecutor`` for the module's tests: the process's shared one
    (:func:`shared_executor`), or, for a module that sets ``EXECUTOR_KWARGS`` (merged over
    the defaults, with a comment saying why), one of its own for the module.

    Stages defined in test modules reach the workers by reference (``tests.…``): the workers
    are spawned with this process's ``sys.path``, which holds the repository root under pytest.
    """
    own = getattr(request.module, "EXECUTOR_KWARGS", None)
    if own is None:
        yield request.getfixturevalue("shared_executor")
        return
    from curator_dask import DaskExecutor

    with DaskExecutor(**{**EXECUTOR_DEFAULTS, **own}) as ex:
        yield ex
