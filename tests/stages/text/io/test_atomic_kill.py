"""A real crash test of the writers' atomic commit: SIGKILL a process while it writes.

A child process writes a ~50 MB ``DocumentBatch`` with ``JsonlWriter``. As soon as its hidden
temp file (``.<final>.<host>-<pid>-<rand>.tmp``) appears in the output directory, the child is
killed with SIGKILL, so nothing in it can clean up. The final name must then not exist (or still
hold the previous complete version), and the same write run to completion must give a complete,
parseable file.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import REPO_ROOT, cli_env, poll_for

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs POSIX SIGKILL"),
]

N_ROWS = 50_000  # ~50 MB of JSONL: the write takes a few hundred ms

# Source shared by the child process and this process, so both build the very same batch.
BUILD_SRC = """
import pyarrow as pa
from curator_dask.tasks import DocumentBatch

def build_batch(n, tag="v1"):
    base = ("lorem ipsum dolor sit amet, consectetur adipiscing elit " * 20)[:1000]
    table = pa.table({"text": [f"{tag} {base} {i}" for i in range(n)], "id": list(range(n))})
    batch = DocumentBatch(dataset_name="big", data=table,
                          _metadata={"source_files": ["/data/in/big.jsonl"]})
    batch._set_task_id("0_1f82e4a37355", 0)
    return batch
"""

CHILD_SRC = (
    BUILD_SRC
    + """
import sys
from curator_dask.stages.text.io.writer import JsonlWriter
out_dir, n, tag = sys.argv[1], int(sys.argv[2]), sys.argv[3]
batch = build_batch(n, tag)
JsonlWriter(path=out_dir).process(batch)
print("DONE", flush=True)
"""
)


def _build_batch(n: int, tag: str = "v1"):
    namespace: dict = {}
    exec(BUILD_SRC, namespace)  # noqa: S102 - the module's own constant
    return namespace["build_batch"](n, tag)


def _final_name() -> str:
    from curator_dask.lineage import get_deterministic_hash

    return get_deterministic_hash(["/data/in/big.jsonl"], "0_1f82e4a37355_0") + ".jsonl"


def _kill_mid_write(out_dir: Path, tag: str, timeout_s: float = 10.0) -> tuple[int, list[str]]:
    """Start the child, SIGKILL it once its temp file exists; return (pid, temp names seen)."""
    env = cli_env(pythonpath=[REPO_ROOT])
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD_SRC, str(out_dir), str(N_ROWS), tag],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    final = _final_name()

    def hidden_temps() -> list[str]:
        temps = [
            n for n in os.listdir(out_dir) if n.startswith(f".{final}.") and n.endswith(".tmp")
        ]
        if not temps and proc.poll() is not None:
            out, err = proc.communicate()
            pytest.fail(
                "the writer finished without a hidden temp file ever being seen "
                f"(rc={proc.returncode}, listing={os.listdir(out_dir)}, "
                f"stdout={out!r}, stderr={err[-2000:]!r})"
            )
        return temps

    try:
        # a short interval: the temp file exists only while the write runs
        temps = poll_for(hidden_temps, timeout_s,
                         lambda: f"no temp file appeared within {timeout_s}s: "
                                 f"{os.listdir(out_dir)}", interval=0.001)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()
    assert proc.returncode == -signal.SIGKILL
    return proc.pid, temps


def _check_temp_names(temps: list[str], pid: int) -> None:
    host = socket.gethostname().replace(".", "-")
    pattern = rf"\.{re.escape(_final_name())}\.{re.escape(host)}-{pid}-[0-9a-f]{{8}}\.tmp"
    assert len(temps) == 1
    assert re.fullmatch(pattern, temps[0]), temps


def _kill_until_mid_write(out_dir: Path, tag: str, attempts: int = 3) -> tuple[int, list[str]]:
    """``_kill_mid_write``, repeated if the kill landed only after the commit.

    Seeing the temp file and delivering SIGKILL are two steps; if the child committed in
    between, the temp file is gone and the final file is complete. That outcome is also atomic
    but proves nothing, so the attempt is repeated (the final file is removed first, unless it
    existed before). Any other outcome is returned for the test to judge.
    """
    final = out_dir / _final_name()
    previous = final.read_bytes() if final.exists() else None
    for _ in range(attempts):
        pid, temps = _kill_mid_write(out_dir, tag)
        listing = os.listdir(out_dir)
        if temps[0] in listing:
            return pid, temps
        # lost the race: the write committed before the kill; restore and retry
        assert final.exists()
        if previous is None:
            final.unlink()
        else:
            final.write_bytes(previous)
    pytest.fail(f"the kill never landed mid-write in {attempts} attempts")


def test_sigkill_mid_write_leaves_no_final_file(tmp_path: Path) -> None:
    from curator_dask.stages.text.io.writer import JsonlWriter

    out_dir = tmp_path / "out"
    out_dir.mkdir()
    final = out_dir / _final_name()

    pid, temps = _kill_until_mid_write(out_dir, "v1")

    _check_temp_names(temps, pid)
    listing = os.listdir(out_dir)
    assert final.name not in listing, "a killed write left a file under the final name"
    # the kill landed mid-write: the (hidden) temp file is still there, nothing else is
    assert listing == temps

    # The same write, run to completion here, commits a complete and parseable file.
    result = JsonlWriter(path=str(out_dir)).process(_build_batch(N_ROWS, "v1"))
    assert result.data == [str(final)]
    with open(final, encoding="utf-8") as f:
        lines = f.read().splitlines()
    assert len(lines) == N_ROWS
    records = [json.loads(line) for line in lines]
    assert [r["id"] for r in records] == list(range(N_ROWS))
    assert records[-1]["text"].startswith("v1 lorem ipsum")
    assert records[-1]["text"].endswith(f" {N_ROWS - 1}")
    visible = [n for n in os.listdir(out_dir) if not n.startswith(".")]
    assert visible == [final.name]


def test_sigkill_mid_rewrite_keeps_the_previous_complete_file(tmp_path: Path) -> None:
    from curator_dask.stages.text.io.writer import JsonlWriter

    out_dir = tmp_path / "out"
    previous = JsonlWriter(path=str(out_dir)).process(_build_batch(100, "old")).data[0]
    assert previous == str(out_dir / _final_name())
    before = Path(previous).read_bytes()
    assert len(before.splitlines()) == 100

    pid, temps = _kill_until_mid_write(out_dir, "new")

    _check_temp_names(temps, pid)
    assert Path(previous).read_bytes() == before, "the killed rewrite damaged the old file"
    assert sorted(os.listdir(out_dir)) == sorted([_final_name(), *temps])
