"""The command line as a new user meets it (issue 20, item 11): ``--version``, the program name
as it was invoked (``curator-dask`` or ``python -m curator_dask``) in usage lines and one-line
errors, and a misspelt option reported with its own command's usage and the closest option."""

from __future__ import annotations

import platform
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

from tests.helpers import cli, cli_env

SCRIPT = Path(sys.executable).with_name("curator-dask")  # pyproject.toml's console script


def console_script(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    if not SCRIPT.is_file():
        pytest.fail(f"{SCRIPT} is missing: install the package (pip install -e .) to get the "
                    "curator-dask command")
    return subprocess.run([str(SCRIPT), *args], cwd=cwd, capture_output=True, text=True,
                          timeout=120, env=cli_env(), check=False)


def test_version_names_the_package_and_what_it_runs_on(tmp_path):
    out = cli("--version", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    (line,) = out.stdout.splitlines()
    assert line.startswith(f"curator_dask {metadata.version('curator_dask')} (")
    for name in ("dask", "distributed"):
        assert f"{name} {metadata.version(name)}" in line
    assert line.endswith(f"Python {platform.python_version()})")


def test_the_console_script_calls_itself_curator_dask(tmp_path):
    usage = console_script("run", "--help", cwd=tmp_path)
    assert usage.returncode == 0, usage.stderr
    assert usage.stdout.startswith("usage: curator-dask run ")
    failed = console_script("run", "missing.yaml", cwd=tmp_path)
    assert failed.returncode == 2
    assert failed.stderr.strip().splitlines()[-1].startswith(
        "curator-dask run: error: missing.yaml: cannot read")
    same = cli("run", "missing.yaml", cwd=tmp_path)  # `python -m` keeps its own name
    assert same.returncode == 2
    assert same.stderr.strip().splitlines()[-1].startswith(
        "python -m curator_dask run: error: missing.yaml: cannot read")


@pytest.mark.parametrize(("argv", "usage", "error"), [
    (["run", "p.yaml", "--wokers", "2"], "usage: python -m curator_dask run ",
     "python -m curator_dask run: error: unrecognized arguments: --wokers 2; did you mean "
     "--workers?"),
    (["slurm", "submit", "p.yaml", "--array", "0", "--checkpoint-path", "c", "--dry-rn"],
     "usage: python -m curator_dask slurm submit ",
     "python -m curator_dask slurm submit: error: unrecognized arguments: --dry-rn; did you "
     "mean --dry-run?"),
    (["status", "--work-dri=jobs", "--jsn"], "usage: python -m curator_dask status ",
     "python -m curator_dask status: error: unrecognized arguments: --work-dri=jobs --jsn; did "
     "you mean --work-dir (for --work-dri), --json (for --jsn)?"),
    (["run", "p.yaml", "--zzzzzz"], "usage: python -m curator_dask run ",
     "python -m curator_dask run: error: unrecognized arguments: --zzzzzz"),
])
def test_a_misspelt_option_gets_its_commands_usage_and_a_suggestion(tmp_path, argv, usage,
                                                                    error):
    out = cli(*argv, cwd=tmp_path)
    assert out.returncode == 2
    assert out.stderr.startswith(usage), out.stderr
    assert out.stderr.strip().splitlines()[-1] == error
    assert not list(tmp_path.iterdir())  # refused before anything ran


def test_the_console_script_names_itself_in_a_misspelt_options_error(tmp_path):
    out = console_script("run", "p.yaml", "--wokers", "2", cwd=tmp_path)
    assert out.returncode == 2
    assert out.stderr.startswith("usage: curator-dask run ")
    assert out.stderr.strip().splitlines()[-1] == (
        "curator-dask run: error: unrecognized arguments: --wokers 2; did you mean --workers?")
