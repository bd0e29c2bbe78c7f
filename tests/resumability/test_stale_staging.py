"""Local staging folders of killed processes are removed at the next staged store's start."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile

import pytest

from curator_dask.resumability.store import STAGING_PREFIX, CompletionStore

HOLD_STORE = """
import sys, time
from curator_dask.resumability.store import CompletionStore
store = CompletionStore(sys.argv[1], staged=True, publish_interval=3600)
store.add(["abc"])
print(store._local_dir, flush=True)
time.sleep(600)
"""


def _holder(checkpoint: str, tmp: str) -> tuple[subprocess.Popen, str]:
    """A process holding a staged store; returns it and its local staging folder."""
    proc = subprocess.Popen([sys.executable, "-c", HOLD_STORE, checkpoint],
                            stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "TMPDIR": tmp})
    folder = proc.stdout.readline().strip()
    assert folder and os.path.isdir(folder), folder
    return proc, folder


@pytest.mark.slow
def test_a_killed_staged_writer_folder_goes_and_a_live_one_stays(tmp_path, monkeypatch):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    checkpoint = str(tmp_path / "ckpt")
    killed, killed_dir = _holder(checkpoint, str(tmp))
    live, live_dir = _holder(checkpoint, str(tmp))
    try:
        assert os.path.basename(killed_dir).startswith(STAGING_PREFIX)
        killed.send_signal(signal.SIGKILL)
        killed.wait(timeout=30)
        assert os.path.isdir(killed_dir)  # SIGKILL: close() never ran
        host = socket.gethostname().replace(".", "-")
        recycled = tmp / f"{STAGING_PREFIX}{host}-{os.getpid()}-12345-abcd_123"  # our pid, not us
        other_host = tmp / f"{STAGING_PREFIX}elsewhere-{killed.pid}-0-abcd_123"
        recycled.mkdir()
        other_host.mkdir()
        monkeypatch.setattr(tempfile, "tempdir", str(tmp))
        store = CompletionStore(checkpoint, staged=True)
        try:
            assert not os.path.exists(killed_dir)
            assert not recycled.exists()
            assert os.path.isdir(live_dir) and other_host.is_dir()
            assert os.path.isdir(store._local_dir)
        finally:
            store.close()
    finally:
        live.kill()
        live.wait(timeout=30)
