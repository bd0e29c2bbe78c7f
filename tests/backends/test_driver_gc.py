"""The driver's garbage-collector policy during a stream (``backends/dask/driver_gc.py``).

Real ``gc`` state of this process; each test leaves it as it found it. That the policy pays is
measured by ``benchmarks/bench_scale.py memory`` (with the collector disabled as a diagnostic,
full collections took about 11 s of a 48 s stream with 200,000 outputs kept), not here.
"""

from __future__ import annotations

import gc
import weakref

import dask
import pytest

from curator_dask.backends.dask import driver_gc
from curator_dask.backends.dask.driver_gc import frozen_heap

# The freeze count is the process's: the threads of a cluster alive in this process (the
# suite's shared one) free frozen objects meanwhile and lower it, so none may be alive here.
pytestmark = pytest.mark.usefixtures("no_shared_cluster")


@pytest.fixture(autouse=True)
def unfrozen():
    gc.unfreeze()
    yield
    gc.unfreeze()


class Node:
    def __init__(self) -> None:
        self.other: Node | None = None


def test_what_is_alive_is_frozen_during_the_stream_and_thawed_after():
    kept = [Node() for _ in range(100)]
    with frozen_heap(keep_outputs=False) as freezer:
        assert gc.get_freeze_count() >= len(kept)
        assert not freezer.enabled  # outputs not kept: nothing more to freeze as it goes
    assert gc.get_freeze_count() == 0


def test_outputs_kept_are_frozen_as_they_come_and_cycles_are_collected_after():
    with frozen_heap(keep_outputs=True) as freezer:
        before = gc.get_freeze_count()
        outputs = [Node() for _ in range(1000)]
        a, b = Node(), Node()  # a reference cycle that becomes garbage during the stream
        a.other, b.other = b, a
        ref = weakref.ref(a)
        freezer.collected()
        assert gc.get_freeze_count() >= before + len(outputs)
        del a, b
        gc.collect()
        assert ref() is not None  # frozen: a full collection leaves it for later
    gc.collect()
    assert ref() is None  # thawed when the stream ended: collected


def test_a_process_that_freezes_itself_is_left_alone():
    """What ``frozen_heap`` decides, not the process-wide freeze count (reference counting may
    free a frozen object meanwhile, which lowers the count)."""
    mine = [Node() for _ in range(10)]
    gc.freeze()
    with frozen_heap(keep_outputs=True) as freezer:
        freezer.collected()
        assert not freezer.enabled and driver_gc._active == 0
    # the stream did not unfreeze what the process froze itself
    assert gc.get_freeze_count() > 0 and mine


def test_the_config_turns_it_off():
    with dask.config.set({"curator-dask.execution.freeze-gc": False}), frozen_heap(
            keep_outputs=True) as freezer:
        freezer.collected()
        assert gc.get_freeze_count() == 0


def test_streams_at_once_share_one_freeze_until_the_last_ends():
    with frozen_heap(keep_outputs=False):
        with frozen_heap(keep_outputs=True) as inner:
            assert inner.enabled
        assert gc.get_freeze_count() > 0  # the outer stream still runs
    assert gc.get_freeze_count() == 0
