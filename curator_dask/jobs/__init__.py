"""Jobs: job folders, strict resume, the event log, the summary heartbeat, stop requests,
status views and the HTML report; and the job tools from Python (:mod:`curator_dask.jobs.api`):

    from curator_dask.jobs import JobUtils, list_running_jobs, show_job_progress, stop_job

They are imported when first used, so importing ``curator_dask.jobs`` (as every job module's
import does) stays cheap.
"""

from __future__ import annotations

from curator_dask.utils.lazy import lazy_exports

__all__ = ["JobUtils", "list_running_jobs", "show_job_progress", "stop_job"]

__getattr__, __dir__ = lazy_exports(__name__, dict.fromkeys(__all__, "curator_dask.jobs.api"))
