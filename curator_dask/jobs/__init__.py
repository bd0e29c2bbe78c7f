"""Jobs: job folders, strict resume, the event log, the summary heartbeat, stop requests,
status views and the HTML report; and the job tools from Python (:mod:`curator_dask.jobs.api`):

    from curator_dask.jobs import JobUtils, list_running_jobs, show_job_progress, stop_job

They are imported when first used, so importing ``curator_dask.jobs`` (as every job module's
import does) stays cheap.
"""

from __future__ import annotations

from typing import Any

__all__ = ["JobUtils", "list_running_jobs", "show_job_progress", "stop_job"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from curator_dask.jobs import api

        return getattr(api, name)
    msg = f"module 'curator_dask.jobs' has no attribute {name!r}"
    raise AttributeError(msg)


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
