"""Dask's performance report of one run, saved next to the job's other records
(``jobs.performance-report``)."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import Any

logger = logging.getLogger(__name__)


@contextlib.contextmanager
def performance_report(client: Any, path: str | None,
                       skip: Any = lambda: False) -> Iterator[None]:
    """``distributed.performance_report`` for one run, self-contained (no CDN); a failure to
    save only logs a warning, and ``skip()`` (a lost scheduler) leaves it unsaved rather than
    waiting for it."""
    stack = contextlib.ExitStack()
    if path:
        try:
            from distributed import performance_report as report

            stack.enter_context(client.as_current())
            # bokeh's JavaScript inlined: the report opens on an air-gapped cluster
            stack.enter_context(report(filename=path, mode="inline"))
        except Exception as exc:  # noqa: BLE001 (bokeh missing, or an old distributed)
            logger.warning("no Dask performance report for this run: %s", exc)
            stack.close()
    try:
        yield
    finally:
        if skip():
            stack.pop_all()  # nothing to ask a scheduler that is gone
        try:
            stack.close()  # the report is saved here
        except Exception as error:  # noqa: BLE001 (the report must not fail the run)
            logger.warning("could not save the Dask performance report: %s", error)
