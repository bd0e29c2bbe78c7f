"""One attempt of a job: job directory, strict resume, event log, job summary heartbeat."""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from curator_dask.backends.base import RunEnd, RunObserver
from curator_dask.errors import RunStopped
from curator_dask.jobs.control import read_stop_request, stop_request_for
from curator_dask.jobs.events import EventLog
from curator_dask.jobs.index import record_job
from curator_dask.jobs.job import (
    JobDirectory,
    ResumeMismatchError,
    new_job_id,
    validate_job_id,
)
from curator_dask.jobs.summary import (
    STOP_REQUEST,
    SUMMARY_FILE,
    process_start_time,
    write_summary,
)
from curator_dask.nemo.logs import LOGGER as LOGURU_RECORDS
from curator_dask.resumability.fingerprint import config_fingerprint, input_fingerprints
from curator_dask.utils.atomic import write_json_atomically
from curator_dask.utils.redact import ScrubbingFormatter, collect_secrets, redact

logger = logging.getLogger(__name__)


def _source_files(stages: Sequence[Any]) -> dict[str, dict]:
    """``{path: listing info}`` of the source stage's input files."""
    from curator_dask.classes import class_named
    from curator_dask.utils.files import gather_file_infos

    source = next((s for s in stages if s.is_source_stage), None)
    if source is None or not class_named(source, "FilePartitioningStage"):  # either model's
        return {}
    return dict(gather_file_infos(source.file_paths, extensions=source.file_extensions,
                                  storage_options=source.storage_options))


def _mode_name(content: bool) -> str:
    """How a verification mode is named in messages: the mode and its flag."""
    return "'content' (--verify-content)" if content else "'fingerprint' (--no-verify-content)"


class JobRun(RunObserver):
    """The job side of one ``Pipeline.run``: created before execution, finished after it.

    It is the run's :class:`~curator_dask.backends.base.RunObserver`: the run binds its own
    stop request (what the job's stop-request file reaches) and its progress to it, sends it
    the plan and every event, and ends the job through :meth:`run_finished`.

    Example:
        >>> import tempfile
        >>> old = os.environ.get("CURATOR_DASK_JOB_INDEX")
        >>> os.environ["CURATOR_DASK_JOB_INDEX"] = os.path.join(tempfile.mkdtemp(), "jobs.json")
        >>> from curator_dask.stages.base import ProcessingStage
        >>> class Source(ProcessingStage):
        ...     name = "source"
        ...     is_source_stage = True
        >>> job = JobRun([Source()], work_dir=tempfile.mkdtemp(), job_id="doc-job")
        >>> job.finish("completed")
        >>> from curator_dask.jobs.summary import read_summary
        >>> read_summary(job.directory.file(SUMMARY_FILE))["state"]
        'completed'
        >>> _ = (os.environ.pop("CURATOR_DASK_JOB_INDEX") if old is None
        ...      else os.environ.update({"CURATOR_DASK_JOB_INDEX": old}))
    """

    def __init__(
        self,
        stages: Sequence[Any],
        *,
        work_dir: str,
        job_id: str | None = None,
        resume: str | None = None,
        checkpoint_path: str | None = None,
        verify_content: bool | None = None,
        command: str | None = None,
        heartbeat: float = 5.0,
        settings: dict[str, Any] | None = None,
        checkpointed: bool = True,
    ) -> None:
        if job_id is not None and resume is not None and job_id != resume:
            msg = f"--job-id {job_id!r} and --resume {resume!r} disagree; give one of them"
            raise ValueError(msg)
        self.job_id = validate_job_id(resume or job_id or new_job_id())
        self.resumed = resume is not None
        self.directory = JobDirectory(work_dir, self.job_id)
        if checkpoint_path is None and self.resumed:
            checkpoint_path = self.directory.recorded_checkpoint()  # the job's own, if it had one
        # A pipeline's job always checkpoints (in its own folder unless told where); a job
        # whose work keeps its own records (a dedup workflow's phases) names a checkpoint only
        # when it was given one, so its summary never points at a folder that is never made.
        self.checkpoint_path: str | None = checkpoint_path or (
            os.path.join(self.directory.path, "checkpoint") if checkpointed else None)
        self.stages = list(stages)
        self.settings = dict(settings or {})
        # The secret values the configuration holds: what it writes is redacted by name, and
        # free text (errors, warnings, log lines) is also scrubbed of these values.
        with collect_secrets() as found:
            self.config = config = config_fingerprint(stages, checkpoint=self.checkpoint_path,
                                                      **self.settings)
        self.secrets = frozenset(found)
        verify_content = self._verify_mode(verify_content)
        files = _source_files(stages)
        inputs = input_fingerprints(files, content=verify_content, infos=files)
        if self.resumed:
            self.directory.verify_resume(config, inputs)
        else:
            self.directory.create(config, inputs)
        record_job(self.job_id, self.directory.path)  # `status` etc. find it from anywhere
        self.run_id = uuid.uuid4().hex[:8]
        self.process_start = process_start_time()
        self.command = command
        self._open_driver_log()
        self.started = time.time()
        self.events = EventLog(self.directory.file("events.jsonl"), job_id=self.job_id,
                               run_id=self.run_id, secrets=self.secrets)
        self.events.emit("run_resume" if self.resumed else "job_start", pid=os.getpid(),
                         host=socket.gethostname(), command=command,
                         checkpoint=self.checkpoint_path)
        self._state = "running"
        self._request_stop: Callable[[str], None] | None = None
        self._progress: Callable[[], dict] | None = None
        self._stop_seen = False
        self.heartbeat = heartbeat
        self._write_summary()
        self._check_stop_request()  # one left for an earlier attempt goes at once
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._heartbeat, name="curator-dask-job-summary",
                                        daemon=True)
        self._thread.start()

    def _verify_mode(self, given: bool | None) -> bool:
        """Whether to fingerprint inputs by content: a resume uses the mode the job recorded
        when none is given, and refuses (``ResumeMismatchError``) a different one given."""
        if not self.resumed:
            return bool(given)
        recorded = self.directory.recorded_verify_content()
        if recorded is None:
            return bool(given)
        if given is None:
            logger.info("job %s: resuming with its recorded input verification mode %s",
                        self.job_id, _mode_name(recorded))
            return recorded
        if given != recorded:
            msg = (f"cannot resume job {self.job_id}: it recorded input verification mode "
                   f"{_mode_name(recorded)} but this run asks for {_mode_name(given)}; resume "
                   "without --verify-content/--no-verify-content to use the recorded mode")
            raise ResumeMismatchError(msg)
        return given

    def _open_driver_log(self) -> None:
        """This attempt's driver log: curator_dask's records at INFO and above."""
        self.log_path = os.path.join(self.directory.path, "logs", f"driver-{self.run_id}.log")
        os.makedirs(os.path.dirname(self.log_path), exist_ok=True)
        self._log_handler = logging.FileHandler(self.log_path, encoding="utf-8")
        self._log_handler.setLevel(logging.INFO)
        self._log_formatter = ScrubbingFormatter(
            "%(asctime)s %(levelname)s %(name)s: %(message)s", secrets=self.secrets)
        self._log_handler.setFormatter(self._log_formatter)
        package_logger = logging.getLogger("curator_dask")
        self._log_level = package_logger.level
        if package_logger.getEffectiveLevel() > logging.INFO:
            package_logger.setLevel(logging.INFO)
        package_logger.addHandler(self._log_handler)
        # NeMo stages' loguru records from the workers (curator_dask.nemo.logs) go there too.
        logging.getLogger(LOGURU_RECORDS).addHandler(self._log_handler)

    # -- the RunObserver side ---------------------------------------------------------------
    def bind(self, *, stop: Callable[[str], None], progress: Callable[[], dict]) -> None:
        """The run's stop request (for ``stop JOB``) and its live progress (for the summary)."""
        self._request_stop = stop
        self._progress = progress

    def plan_built(self, plan: dict[str, Any], settings: dict[str, Any]) -> None:
        """Write the plan the run built and the settings it resolved into the job folder."""
        import dask.config

        from curator_dask.jobs.job import PLAN_FILE

        with collect_secrets() as found:
            plan = redact({**plan, "job_id": self.job_id, "run_id": self.run_id}, self.secrets)
            # What this attempt ran with: every curator-dask setting as resolved (config files,
            # environment, defaults), the executor's choices, and the normalized pipeline.
            resolved = redact({"run_id": self.run_id,
                               "curator-dask": dask.config.get("curator-dask"),
                               "executor": settings, "pipeline": self.config}, self.secrets)
        if found - self.secrets:  # a credential in the settings: scrubbed from text too
            # A new set, not an update: the heartbeat thread may be reading the old one.
            self.secrets = self.events.secrets = self._log_formatter.secrets = (
                self.secrets | found)
        write_json_atomically(self.directory.file(PLAN_FILE), plan, indent=2)
        write_json_atomically(self.directory.file("resolved_config.json"), resolved, indent=2,
                              default=str)

    def event(self, type_: str, **fields: Any) -> None:
        """Record an event; the summary follows the run's progress."""
        self.events.emit(type_, **fields)
        if type_ in ("sources_planned", "phase_started", "phase_finished"):
            self._write_summary()  # at once: tools should not wait for the next heartbeat

    def run_finished(self, end: RunEnd) -> None:
        """The job's end as the run ended: ``completed`` (with the result), ``stopped`` (a
        stop or Ctrl+C) or ``failed``, with the run's error."""
        if end.completed:
            self.finish("completed", end.result, recorded=end.recorded)
            return
        stopped = isinstance(end.error, RunStopped | KeyboardInterrupt)
        self.finish("stopped" if stopped else "failed", error=end.error, recorded=end.recorded)

    @property
    def performance_report(self) -> str | None:
        """Where this attempt saves Dask's performance report (needs bokeh), if anywhere."""
        import importlib.util

        from curator_dask import config
        from curator_dask.jobs.report import PERFORMANCE_REPORT

        if not config.get("jobs.performance-report") or importlib.util.find_spec("bokeh") is None:
            return None
        return self.directory.file(PERFORMANCE_REPORT)

    def _check_stop_request(self) -> None:
        """Obey a stop request for this attempt; remove one left for another attempt.

        A request names the attempt it is for (``stop`` reads the run id from the summary), so
        one left behind by an attempt whose driver was killed never stops the next attempt
        (docs/design/architecture.md "Jobs").
        """
        path = self.directory.file(STOP_REQUEST)
        if self._stop_seen or not os.path.exists(path):
            return
        request = read_stop_request(path)
        if request is None:
            return
        if not stop_request_for(request, self.run_id, self.started):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
            made = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(request["requested"]))
            logger.warning("job %s: ignoring a stop request for attempt %s made at %s (this "
                           "attempt is %s); removed it", self.job_id,
                           request.get("run_id") or "(none named)", made, self.run_id)
            self.events.emit("warning", message=f"ignored a stop request for attempt "
                             f"{request.get('run_id')} made at {made}")
            return
        if self._request_stop is None:
            return  # the run has not bound its stop function yet: obey it then
        self._stop_seen = True
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        logger.warning("job %s: stop requested", self.job_id)
        self._request_stop("stop requested with `python -m curator_dask stop`")

    @property
    def resume_command(self) -> str | None:
        if self.command is None:
            return None
        return f"{self.command} --resume {self.job_id}"

    def _write_summary(self, **extra: Any) -> None:
        if self._progress is not None:
            for key, value in self._progress().items():
                extra.setdefault(key, value)
        write_summary(
            self.directory.file(SUMMARY_FILE), self.secrets,
            job_id=self.job_id, run_id=self.run_id, state=self._state,
            started=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.started)),
            checkpoint=self.checkpoint_path, resume_command=self.resume_command,
            process_start=self.process_start, **extra,
        )

    def _heartbeat(self) -> None:
        # Poll for stop requests every 0.5 s; rewrite the summary every `heartbeat` seconds.
        last = time.monotonic()
        while not self._stop.wait(0.5):
            self._check_stop_request()
            if time.monotonic() - last < self.heartbeat:
                continue
            last = time.monotonic()
            try:
                self._write_summary()
            except OSError as exc:
                logger.warning("could not write the job summary: %s", exc)

    def _unfinished_progress(self, state: str, error: BaseException) -> dict[str, Any]:
        """The sources and stages of an attempt that raised or stopped, from its live progress.

        Nothing is in flight once the attempt has ended: ``failed`` counts the sources of the
        Dask task whose stage raised, and ``cancelled_at_end`` the sources still in flight that
        the end of the attempt cancelled (they stay pending in the checkpoint: a resume runs
        them again). Every stage of the pipeline gets a row (zeros where nothing reached it), and
        ``failed_stage`` names the stage that raised, when a stage did.
        """
        from dataclasses import asdict

        from curator_dask.backends.counts import StageCount

        snapshot = self._progress() if self._progress is not None else {}
        sources = dict(snapshot.get("sources") or {})
        unfinished = int(sources.get("in_flight") or 0)
        out: dict[str, Any] = {}
        if sources:
            sources["in_flight"] = 0
            out["cancelled_at_end"] = unfinished
            out["sources"] = sources
        ran = {row.get("index"): row for row in snapshot.get("stages") or []}
        out["stages"] = [ran.get(i) or {"stage": stage.name, "index": i,
                                        **asdict(StageCount()), "sources_done": None}
                         for i, stage in enumerate(self.stages)]
        stage_name = getattr(error, "stage_name", None)
        if isinstance(stage_name, str):
            out["failed_stage"] = stage_name
        return out

    def _stage_failed(self, error: BaseException) -> None:
        """``stage_failed`` for an error a stage raised (a ``StageError``): the stage, the
        tasks and input files it failed on, the exception in one line."""
        stage = getattr(error, "stage_name", None)
        if not isinstance(stage, str):
            return
        index = next((i for i, s in enumerate(self.stages) if s.name == stage), None)
        self.events.emit("stage_failed", stage=stage, index=index,
                         task_ids=list(getattr(error, "task_ids", None) or [])[:20],
                         source_files=list(getattr(error, "source_files", None) or [])[:20],
                         error=str(getattr(error, "error", "") or type(error).__name__))

    def _recorded_sources(self, extra: dict[str, Any], recorded: int | None) -> int | None:
        """Put what the checkpoint recorded for this attempt (``recorded``, the run's
        ``RunEnd.recorded``) into ``extra`` (the summary's ``sources.completed``, less
        ``cancelled_at_end`` for chains recorded but never collected by the driver) and return
        it; without it (no checkpoint, or not flushed) the driver's count stays."""
        snapshot = self._progress() if self._progress is not None else {}
        sources = dict(extra.get("sources") or snapshot.get("sources") or {})
        if recorded is None or not sources:
            return int(sources["completed"]) if "completed" in sources else None
        late = recorded - int(sources.get("completed") or 0)
        if late > 0 and extra.get("cancelled_at_end"):
            extra["cancelled_at_end"] = max(0, int(extra["cancelled_at_end"]) - late)
        extra["sources"] = {**sources, "completed": recorded}
        return recorded

    def finish(self, state: str, result: Any = None, error: BaseException | None = None,
               recorded: int | None = None) -> None:
        """Record the end (``completed``, ``failed`` or ``stopped``); always safe to call once.

        Its sources completed are those the checkpoint recorded (``recorded``, the run's
        ``RunEnd.recorded``; :meth:`_recorded_sources`),
        also in the end event (``completed``). A ``completed`` run whose result counts failed
        sources (a stage returned ``FailedTask``) ends as ``completed_with_failures``: its
        ``job_complete`` event says so (``state``) and counts them (``failed_sources``), and
        its summary lists the first 100 of their ids (``failed_source_ids``).
        """
        self._stop.set()
        failed = getattr(result, "failed_sources", ()) if state == "completed" else ()
        if failed:
            state = "completed_with_failures"
        self._state = state
        now = time.time()
        extra: dict[str, Any] = {"ended": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now)),
                                 "ended_at": now}
        if result is not None:
            extra["stages"] = result.counts_table()
            extra["dashboard"] = result.dashboard_link
        if failed:
            extra["failed_source_ids"] = list(failed[:100])
        if error is not None:
            extra["error"] = f"{type(error).__name__}: {error}"
            extra.update(self._unfinished_progress(state, error))
        event = {"completed": "job_complete", "completed_with_failures": "job_complete",
                 "failed": "job_failed", "stopped": "job_stopped"}[state]
        fields = {"state": state, "failed_sources": len(failed)} if failed else {}
        completed = self._recorded_sources(extra, recorded)
        if completed is not None:  # the report's attempts count it
            fields["completed"] = completed
        if error is not None:
            fields["error"] = extra["error"]
            self._stage_failed(error)
        self.events.emit(event, **fields)
        extra["log"] = self.log_path
        self._write_summary(**extra)
        self.events.close()
        package_logger = logging.getLogger("curator_dask")
        package_logger.removeHandler(self._log_handler)
        logging.getLogger(LOGURU_RECORDS).removeHandler(self._log_handler)
        package_logger.setLevel(self._log_level)
        self._log_handler.close()
