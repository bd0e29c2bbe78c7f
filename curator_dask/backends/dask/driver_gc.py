"""The driver's cyclic garbage collector during a stream: what is alive stays out of its scans.

CPython's collector scans every tracked object of the process in each full (oldest
generation) collection, and runs one whenever the objects that survived into that generation
since the last one reach a quarter of it. A run's driver only grows there: the source tasks it
holds at the start, and with ``keep_outputs`` every output task it collects (NeMo Curator's
contract). On the 2-core machine, in the run of ``benchmarks/bench_scale.py memory`` (200,000
tiny sources) with the driver's collector disabled as a diagnostic, those full collections
took about 11 s of a 48 s stream with outputs kept and about 2.6 s of 30 s without: the
driver's event loop (which also runs the embedded scheduler) spent that time scanning
objects that could not be garbage.

:func:`frozen_heap` moves what is alive into the collector's permanent generation
(``gc.freeze()``): when the stream starts, and with outputs kept after each chain's outputs
are added. Reference counting still frees frozen objects the moment they are no longer
referenced (a submitted source task is let go as before); only a reference cycle among them
waits for the end of the stream, when ``gc.unfreeze()`` hands everything back to the oldest
generation. Young garbage is collected as usual throughout.

It stays out of the way of a process that freezes objects itself (``gc.get_freeze_count()``
not 0 when the first stream starts), of one whose collector is disabled, and of
``execution.freeze-gc: false`` (config); streams running at once in one process share one
freeze, undone when the last of them ends.
"""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Iterator

from curator_dask import config as _config

_lock = threading.Lock()
_active = 0  # streams inside frozen_heap that froze (the first one decided for all)


class Freezer:
    """What a stream calls as it goes: :meth:`collected` after it added output tasks."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled

    def collected(self) -> None:
        """Output tasks were added to what the driver keeps: out of the collector's scans."""
        if self.enabled:
            gc.freeze()


@contextlib.contextmanager
def frozen_heap(keep_outputs: bool) -> Iterator[Freezer]:
    """Freeze what is alive for the stream's duration (see the module's docstring).

    Example:
        >>> with frozen_heap(keep_outputs=True) as freezer:
        ...     kept = [object() for _ in range(3)]
        ...     freezer.collected()
        >>> gc.get_freeze_count() == 0 or not freezer.enabled
        True
    """
    global _active
    with _lock:
        mine = bool(_config.get("execution.freeze-gc")) and gc.isenabled() and (
            _active > 0 or gc.get_freeze_count() == 0)
        if mine:
            _active += 1
            gc.freeze()
    try:
        yield Freezer(mine and keep_outputs)
    finally:
        if mine:
            with _lock:
                _active -= 1
                if _active == 0:
                    gc.unfreeze()
