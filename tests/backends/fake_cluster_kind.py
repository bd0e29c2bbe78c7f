"""A FAKE cluster kind, for the tests of the registry of cluster kinds only: its builder starts
a real in-process ``LocalCluster`` of one worker, as a new kind's own module would start its
cluster. Registering it (:func:`registered`) is the only change a new kind needs."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from curator_dask.backends.dask.cluster_kinds import (
    ClusterKind,
    known_cluster_kinds,
    register_cluster_kind,
)

FAKE = "fake-kind"
DESCRIPTION = "a fake kind made by the registry's tests"
FAKE_KIND = ClusterKind(FAKE, f"{__name__}:start_fake_kind", DESCRIPTION)


def start_fake_kind(spec: Any, stack: contextlib.ExitStack) -> Any:
    """The fake kind's builder: a threads-only ``LocalCluster`` of one worker in this process,
    closed with ``stack``."""
    from distributed import Client, LocalCluster

    from curator_dask.backends.dask.clusters import Provisioned

    cluster = stack.enter_context(LocalCluster(
        n_workers=1, threads_per_worker=2, processes=False, dashboard_address=":0"))
    client = Client(cluster)
    stack.callback(client.close)
    return Provisioned(client, cluster, stack, dashboard_on=False)


@contextlib.contextmanager
def registered(kind: ClusterKind = FAKE_KIND) -> Iterator[ClusterKind]:
    """``kind`` in the registry while the block runs; the registry as it was afterwards."""
    saved = dict(known_cluster_kinds)
    register_cluster_kind(kind)
    try:
        yield kind
    finally:
        known_cluster_kinds.clear()
        known_cluster_kinds.update(saved)
