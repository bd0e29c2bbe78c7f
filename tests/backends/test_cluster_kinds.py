"""The registry of cluster kinds (issue 33, item 4): ``DaskExecutor(cluster=...)``, the CLI's
``--cluster`` choices, help and checks, and their error messages read one table, so a FAKE kind
registered by the test (``tests/backends/fake_cluster_kind.py``, a real in-process
``LocalCluster``) runs with no other change, and is gone once the registry is restored. The
readers spell no kind's name: only ``cluster_kinds.py`` does."""

from __future__ import annotations

import ast
import os
import shutil
import sys
import textwrap
from pathlib import Path

import pytest

from curator_dask import DaskExecutor, JsonlReader, JsonlWriter, Pipeline
from curator_dask.backends.dask.cluster_kinds import (
    ClusterKind,
    UnknownClusterKindError,
    cluster_kind,
    implied_kind,
    known_cluster_kinds,
    register_cluster_kind,
    user_kinds,
)
from curator_dask.cli.common import UsageError
from curator_dask.cli.main import build_parser
from curator_dask.cli.run_command import check_cluster_options
from curator_dask.errors import CuratorDaskError
from curator_dask.sample_data import generate_jsonl
from tests.backends.fake_cluster_kind import DESCRIPTION, FAKE, FAKE_KIND, registered
from tests.helpers import REPO_ROOT, cli

BUILT_IN = ["local", "address", "client", "slurm", "slurm-runner"]


def _run_args(*argv: str):
    return build_parser().parse_args(["run", "p.yaml", *argv])


@pytest.mark.slow
def test_a_registered_fake_kind_runs_a_pipeline_and_leaves_no_trace(tmp_path):
    inputs = generate_jsonl(str(tmp_path / "in"), files=3, docs_per_file=2, seed=1)
    pipeline = (Pipeline(name="fake-kind")
                .add_stage(JsonlReader(file_paths=inputs, files_per_partition=1))
                .add_stage(JsonlWriter(path=str(tmp_path / "out"))))
    with registered():
        with DaskExecutor(cluster=FAKE, progress=False) as executor:
            from distributed import LocalCluster

            assert isinstance(executor.cluster, LocalCluster)  # the fake kind's builder's
            assert executor.settings()["cluster_kind"] == FAKE
            result = pipeline.run(executor=executor)
        assert result.num_sources == 3
        assert len(os.listdir(tmp_path / "out")) == 3
    assert FAKE not in known_cluster_kinds
    assert list(known_cluster_kinds) == BUILT_IN
    with pytest.raises(UnknownClusterKindError, match="fake-kind"):
        DaskExecutor(cluster=FAKE)


def test_the_cli_offers_describes_and_checks_a_registered_fake_kind(capsys):
    with registered():
        args = _run_args("--cluster", FAKE)
        assert args.cluster == FAKE
        check_cluster_options(args)  # no option of another kind: accepted
        with pytest.raises(UsageError, match="^--jobs needs --cluster slurm$"):
            check_cluster_options(_run_args("--cluster", FAKE, "--jobs", "2"))
        with pytest.raises(UsageError, match="^--cluster fake-kind starts its own scheduler"):
            check_cluster_options(_run_args("--cluster", FAKE, "--address", "tcp://h:1"))
        with pytest.raises(SystemExit):
            build_parser().parse_args(["run", "--help"])
        assert f"{FAKE}: {DESCRIPTION}" in " ".join(capsys.readouterr().out.split())
    with pytest.raises(SystemExit) as exited:  # the registry restored: not a choice any more
        _run_args("--cluster", FAKE)
    assert exited.value.code == 2
    assert "invalid choice: 'fake-kind'" in capsys.readouterr().err


def test_a_fake_kind_that_takes_an_option_and_needs_a_package():
    needy = ClusterKind(FAKE, FAKE_KIND.builder, DESCRIPTION, options=("jobs",),
                        requires=(("no_such_module_of_a_test", "no-such-package"),))
    with registered(needy):
        args = _run_args("--cluster", FAKE, "--jobs", "2")
        with pytest.raises(UsageError, match="^--cluster fake-kind needs no-such-package: "
                                             "pip install no-such-package$"):
            check_cluster_options(args)
        with pytest.raises(UsageError, match="^--jobs needs --cluster slurm or --cluster "
                                             "fake-kind$"):
            check_cluster_options(_run_args("--jobs", "2"))
        with pytest.raises(ImportError, match="^cluster='fake-kind' needs no-such-package"):
            DaskExecutor(cluster=FAKE, progress=False).start()


@pytest.mark.slow
def test_the_command_line_runs_on_a_fake_kind_registered_before_main(tmp_path):
    """A program that registers a kind and calls the CLI's ``main``: nothing else changed."""
    generate_jsonl(str(tmp_path / "input"), files=2, docs_per_file=5, seed=3)
    examples = REPO_ROOT / "examples"
    for name in ("demo_pipeline.yaml", "stages.py"):
        shutil.copy(examples / name, tmp_path / name)
    (tmp_path / "with_fake.py").write_text(textwrap.dedent("""
        import sys
        from curator_dask.backends.dask.cluster_kinds import register_cluster_kind
        from curator_dask.cli.main import main
        from tests.backends.fake_cluster_kind import FAKE_KIND

        register_cluster_kind(FAKE_KIND)
        sys.exit(main(sys.argv[1:]))
    """))
    import subprocess

    from tests.helpers import cli_env

    out = subprocess.run(
        [sys.executable, "with_fake.py", "run", "demo_pipeline.yaml", "--cluster", FAKE,
         "--no-progress"], cwd=tmp_path, capture_output=True, text=True, timeout=120,
        env=cli_env(pythonpath=[REPO_ROOT]), check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "2 sources, 2 output tasks" in out.stdout
    refused = cli("run", "demo_pipeline.yaml", "--cluster", FAKE, cwd=tmp_path)
    assert refused.returncode == 2
    assert "invalid choice: 'fake-kind'" in refused.stderr


def test_an_unknown_kind_names_the_known_ones_and_the_closest():
    with pytest.raises(UnknownClusterKindError) as raised:
        DaskExecutor(cluster="slurm_runner")
    assert str(raised.value) == (
        "DaskExecutor: cluster='slurm_runner' is not a cluster kind; pass one of 'local', "
        "'slurm', 'slurm-runner'; did you mean 'slurm-runner'?")
    assert isinstance(raised.value, ValueError) and isinstance(raised.value, CuratorDaskError)
    with pytest.raises(UnknownClusterKindError, match=r"pass one of 'local', 'address', "
                       r"'client', 'slurm', 'slurm-runner'$"):
        cluster_kind("kubernetes")


@pytest.mark.parametrize("name", ["address", "client"])
def test_a_kind_implied_by_an_argument_is_not_chosen_by_name(name):
    with pytest.raises(UnknownClusterKindError,
                       match=rf"^DaskExecutor: cluster='{name}' is chosen by {name}= alone"):
        DaskExecutor(cluster=name)
    assert implied_kind(None, **{name: object()}) == name
    assert cluster_kind(name).implied_by == name


def test_the_cli_choices_are_the_kinds_chosen_by_name(capsys):
    assert [kind.name for kind in user_kinds()] == ["local", "slurm", "slurm-runner"]
    with pytest.raises(SystemExit):
        _run_args("--cluster", "slrum")
    assert ("invalid choice: 'slrum' (choose from 'local', 'slurm', 'slurm-runner')"
            in capsys.readouterr().err)


def test_a_name_is_registered_once_unless_clobbered():
    with registered():
        with pytest.raises(ValueError, match="^cluster kind 'fake-kind' is already registered"):
            register_cluster_kind(FAKE_KIND)
        other = ClusterKind(FAKE, FAKE_KIND.builder, "another fake")
        register_cluster_kind(other, clobber=True)
        assert cluster_kind(FAKE) is other
    assert FAKE not in known_cluster_kinds


def _kind_names_spelt(path: Path) -> list[str]:
    """String constants of ``path`` (its docstrings, prose, left out) that name a kind, alone or
    as ``cluster='x'`` / ``--cluster x`` (``"address"`` alone is also an argument's name)."""
    names = set(known_cluster_kinds)
    alone = {kind.name for kind in user_kinds()}
    tree = ast.parse(path.read_text(encoding="utf-8"))
    prose = {id(node.value) for node in ast.walk(tree) if isinstance(node, ast.Expr)}
    found = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Constant) and isinstance(node.value, str)
                and id(node) not in prose):
            text = node.value
            if text in alone or any(f"cluster={n!r}" in text or f"--cluster {n}" in text
                                    for n in names):
                found.append(text)
    return found


@pytest.mark.parametrize("module", [
    "backends/dask/executor.py", "backends/dask/clusters.py", "cli/run_command.py",
    "cli/dedup.py", "slurm/sbatch.py", "slurm/cluster.py"])
def test_the_modules_that_read_the_registry_spell_no_kind(module):
    path = REPO_ROOT / "curator_dask" / module
    assert _kind_names_spelt(path) == [], f"{module} spells a cluster kind; ask the registry"
    assert _kind_names_spelt(REPO_ROOT / "curator_dask/backends/dask/cluster_kinds.py")
