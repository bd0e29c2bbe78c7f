"""Checks that no Ray started: ``ray.is_initialized()`` in the driver and on the workers, and no
``raylet`` / ``gcs_server`` process among this process's descendants or carrying a marker.

The marker (an environment variable set for a child interpreter, which its Dask workers and any
Ray daemon they start inherit) finds a Ray daemon even after it was re-parented; processes of
anyone else on the machine (another test run using Ray) are not looked at.
"""

from __future__ import annotations

import sys

import psutil

MARKER = "CURATOR_DASK_TEST_NO_RAY"
RAY_DAEMONS = ("raylet", "gcs_server")


def ray_initialized() -> bool | None:
    """``ray.is_initialized()`` in this process, ``None`` when Ray was never imported."""
    ray = sys.modules.get("ray")
    return None if ray is None else bool(ray.is_initialized())


def ray_daemons(marker: str | None = None) -> list[str]:
    """Ray daemons below this process, or (``marker``) carrying the marker in their env."""
    found = []
    below = {p.pid for p in psutil.Process().children(recursive=True)}
    for p in psutil.process_iter(["name", "pid"]):
        try:
            if not any(d in (p.info["name"] or "") for d in RAY_DAEMONS):
                continue
            if p.pid in below or (marker is not None and p.environ().get(MARKER) == marker):
                found.append(f"{p.info['name']} ({p.pid})")
        except (psutil.Error, OSError):  # gone meanwhile, or a zombie
            continue
    return found


def assert_no_ray(client=None) -> None:
    """No Ray in the driver, on the workers of ``client``, or below this process."""
    assert not ray_initialized()
    if client is not None:
        on_workers = client.run(ray_initialized)
        assert on_workers and not any(on_workers.values()), on_workers
    assert ray_daemons() == []
