"""A resume uses the input verification mode its job recorded (real CLI runs)."""

from __future__ import annotations

import os
import shutil

import pytest

from tests.helpers import cli as run_cli

EXAMPLES = os.path.abspath(os.path.join(os.path.dirname(__file__), os.pardir, os.pardir,
                                        "examples"))


def cli(*args: str, cwd):
    """The shared CLI helper with examples/ importable (the demo pipeline names its module)."""
    return run_cli("run", "p.yaml", "--workers", "1", *args, cwd=cwd, timeout=180,
                   pythonpath=[EXAMPLES])


@pytest.mark.slow
def test_a_content_job_resumes_in_content_mode_without_the_flag(tmp_path):
    from curator_dask.sample_data import generate_jsonl

    generate_jsonl(str(tmp_path / "input"), files=2, docs_per_file=3)
    shutil.copy(os.path.join(EXAMPLES, "demo_pipeline.yaml"), tmp_path / "p.yaml")
    first = cli("--job-id", "vc-1", "--verify-content", cwd=tmp_path)
    assert first.returncode == 0, first.stderr

    again = cli("--resume", "vc-1", cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert "job vc-1: resuming with its recorded input verification mode 'content'" in (
        again.stderr)
    assert "2 source partitions: 2 already complete (skipped), 0 to process" in again.stderr

    refused = cli("--resume", "vc-1", "--no-verify-content", cwd=tmp_path)
    assert refused.returncode == 2, refused.stderr
    lines = [line for line in refused.stderr.splitlines() if "error:" in line]
    assert len(lines) == 1, refused.stderr
    assert ("recorded input verification mode 'content' (--verify-content) but this run asks "
            "for 'fingerprint' (--no-verify-content)") in lines[0], lines[0]

    # A same-size edit with the modification time restored: only content mode sees it.
    victim = sorted((tmp_path / "input").iterdir())[0]
    stat = victim.stat()
    data = victim.read_bytes()
    victim.write_bytes(data.replace(b"a", b"b", 1) if b"a" in data else data[::-1])
    os.utime(victim, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    changed = cli("--resume", "vc-1", cwd=tmp_path)
    assert changed.returncode == 2, changed.stderr
    assert f"modified: {victim}" in changed.stderr or victim.name in changed.stderr
    assert "sha256" in changed.stderr and "-> None" not in changed.stderr, changed.stderr
