"""The seed's interrupt-and-resume example as a user runs it: a script, Ctrl+C or kill -9, rerun."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import lmdb
import pytest

from curator_dask.sample_data import generate_jsonl
from tests.helpers import completed_ids, poll_for

pytestmark = pytest.mark.slow

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
FILES = 6
# Runs the seed script unchanged, with logging configured so the driver's summary line shows.
RUNNER = (
    "import logging, runpy; "
    "logging.basicConfig(level=logging.WARNING, format='%(message)s'); "
    "logging.getLogger('curator_dask').setLevel(logging.INFO); "
    "runpy.run_path('resume_demo.py', run_name='__main__')"
)
SUMMARY = re.compile(
    r"(\d+) source partitions: (\d+) already complete \(skipped\), (\d+) to process"
)


def demo_dir(root: Path) -> Path:
    root.mkdir()
    shutil.copy(EXAMPLES / "resume_demo.py", root / "resume_demo.py")
    generate_jsonl(str(root / "input"), files=FILES, docs_per_file=5, seed=5)
    return root


def start(cwd: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", RUNNER], cwd=cwd, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)


def run_to_end(cwd: Path) -> str:
    proc = start(cwd)
    out, _ = proc.communicate(timeout=180)
    assert proc.returncode == 0, out[-3000:]
    return out


def outputs(cwd: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((cwd / "output").iterdir())}


def completed(cwd: Path) -> set[str]:
    return completed_ids(cwd / "checkpoints" / "resume-demo")


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """The demo folder and an uninterrupted run's outputs there (ids hash absolute paths, so
    the reference comes from the same folder); each test then starts from no outputs."""
    cwd = demo_dir(tmp_path_factory.mktemp("interrupt") / "demo")
    out = run_to_end(cwd)
    assert SUMMARY.search(out).groups() == (str(FILES), "0", str(FILES))
    return cwd, outputs(cwd)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL], ids=["ctrl-c", "kill-9"])
def test_interrupt_then_resume_processes_only_unfinished(demo, sig):
    cwd, reference = demo
    shutil.rmtree(cwd / "output", ignore_errors=True)
    shutil.rmtree(cwd / "checkpoints", ignore_errors=True)

    proc = start(cwd)
    poll_for(lambda: len(list((cwd / "output").glob("*.jsonl"))) >= 2, 120,
             "no outputs appeared", on_timeout=proc.kill)
    # the completion writer commits (flush interval 0.2 s); a read racing a commit is retried
    poll_for(lambda: completed(cwd), 30, "no completion reached the checkpoint",
             on_timeout=proc.kill, ignore=(FileNotFoundError, lmdb.Error, UnicodeDecodeError))
    os.killpg(proc.pid, sig)  # like Ctrl+C in a terminal: the whole process group
    proc.communicate(timeout=120)
    assert proc.returncode != 0
    finished = completed(cwd)
    assert 1 <= len(finished) < FILES

    out = run_to_end(cwd)
    total, skipped, todo = map(int, SUMMARY.search(out).groups())
    assert (total, skipped, todo) == (FILES, len(finished), FILES - len(finished))
    assert len(completed(cwd)) == FILES
    # Byte-identical to an uninterrupted run, and nothing hidden or partial left behind.
    assert outputs(cwd) == reference
    assert sorted(os.listdir(cwd / "output")) == sorted(reference)
