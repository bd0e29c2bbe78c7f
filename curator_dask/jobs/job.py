"""Job directories and strict resume: ``<work_dir>/<job_id>/`` with what a resume must match.

The job id is the resume token: ``YYYYMMDD_HHMMSS_<6 hex>`` (UTC) or a user-given plain token.
A resume compares the saved configuration and input fingerprints with the current ones and
refuses, naming every difference, when they do not match. It never deletes anything.
Credentials are compared by digest (:mod:`curator_dask.utils.redact`): a changed one is named,
never shown.
(Wiring into ``Pipeline.run`` and the CLI is part of the jobs issue, still in progress.)
"""

from __future__ import annotations

import datetime
import json
import os
import re
import secrets
from typing import Any

from curator_dask.errors import CuratorDaskError
from curator_dask.resumability.fingerprint import diff_configs, diff_inputs
from curator_dask.utils.atomic import write_json_atomically
from curator_dask.utils.redact import redact

_TOKEN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
CONFIG_FILE = "config_fingerprint.json"
INPUTS_FILE = "input_fingerprints.json"
PLAN_FILE = "dag_execution_plan.json"


class ResumeMismatchError(ValueError, CuratorDaskError):
    """A resume whose configuration or inputs differ from the saved job; names each change."""


def new_job_id(now: datetime.datetime | None = None) -> str:
    """``YYYYMMDD_HHMMSS_<6 hex>`` in UTC.

    Example:
        >>> new_job_id(datetime.datetime(2026, 1, 2, 3, 4, 5))[:15]
        '20260102_030405'
    """
    now = now or datetime.datetime.now(datetime.UTC)
    return f"{now:%Y%m%d_%H%M%S}_{secrets.token_hex(3)}"


def validate_job_id(job_id: str) -> str:
    """A job id must be a plain token: it becomes a folder name."""
    if not isinstance(job_id, str) or not _TOKEN.match(job_id):
        msg = (f"job id {job_id!r} must be a plain token (letters, digits, '.', '_', '-'; "
               "at most 128 characters, not starting with '.' or '-')")
        raise ValueError(msg)
    return job_id


class JobDirectory:
    """``<work_dir>/<job_id>/``: saved fingerprints, the execution plan, logs.

    Example:
        >>> import tempfile
        >>> job = JobDirectory(tempfile.mkdtemp(), "20260102_030405_abcdef")
        >>> job.exists()
        False
    """

    def __init__(self, work_dir: str, job_id: str) -> None:
        self.job_id = validate_job_id(job_id)
        self.path = os.path.join(os.path.abspath(work_dir), job_id)

    def file(self, name: str) -> str:
        return os.path.join(self.path, name)

    def exists(self) -> bool:
        return os.path.isfile(self.file(CONFIG_FILE))

    def create(self, config: dict[str, Any], inputs: dict[str, Any],
               plan: dict[str, Any] | None = None) -> None:
        """Save what a later resume must match (fails if the job already exists)."""
        if self.exists():
            msg = (f"job {self.job_id} already exists in {self.path}; resume it with "
                   f"--resume {self.job_id} or choose another --job-id")
            raise FileExistsError(msg)
        os.makedirs(os.path.join(self.path, "logs"), exist_ok=True)
        write_json_atomically(self.file(CONFIG_FILE), config, indent=2)
        write_json_atomically(self.file(INPUTS_FILE), inputs, indent=2)
        if plan is not None:
            write_json_atomically(self.file(PLAN_FILE), plan, indent=2)

    def load(self) -> tuple[dict[str, Any], dict[str, Any]]:
        if not self.exists():
            msg = (f"no job {self.job_id} in {os.path.dirname(self.path)}: nothing to resume "
                   "(check --work-dir and the token)")
            raise FileNotFoundError(msg)
        with open(self.file(CONFIG_FILE), encoding="utf-8") as f:
            # Redacted again: a job saved by an older version may hold a credential in clear,
            # which then compares by digest (and never reaches a refusal message).
            config = redact(json.load(f))
        with open(self.file(INPUTS_FILE), encoding="utf-8") as f:
            inputs = json.load(f)
        return config, inputs

    def recorded_checkpoint(self) -> str | None:
        """The checkpoint path the job recorded, so that ``--resume`` needs no
        ``--checkpoint-path`` again; ``None`` when the job has none readable (a resume of a
        job that does not exist then fails as before, naming the token)."""
        try:
            config, _ = self.load()
        except (OSError, ValueError):
            return None
        path = (config.get("settings") or {}).get("checkpoint")
        return path if isinstance(path, str) and path else None

    def recorded_verify_content(self) -> bool | None:
        """The input verification mode the job was created with: ``True`` for content (its
        saved inputs carry a sha256), ``False`` for fingerprint, ``None`` when it saved no
        inputs (either mode then matches)."""
        _, inputs = self.load()
        if not inputs:
            return None
        return any("sha256" in entry for entry in inputs.values())

    def verify_resume(self, config: dict[str, Any], inputs: dict[str, Any]) -> None:
        """Raise :class:`ResumeMismatchError` naming every change; deletes nothing."""
        saved_config, saved_inputs = self.load()
        config_changes = diff_configs(saved_config, config)
        input_changes = diff_inputs(saved_inputs, inputs)
        if not config_changes and not input_changes:
            return
        lines = [f"cannot resume job {self.job_id}: it no longer matches what was saved."]
        if config_changes:
            lines.append("configuration changed:")
            lines += [f"  {c}" for c in config_changes]
        if input_changes:
            lines.append("inputs changed:")
            lines += [f"  {c}" for c in input_changes]
        lines.append("Nothing was deleted. Restore the previous configuration and inputs, or "
                     "start a new job (without --resume).")
        checkpoint = self.recorded_checkpoint()
        if input_changes and checkpoint:
            # a fixed input (say, a malformed line) should not cost the work already done
            lines.append(
                f"To keep this job's finished work, start a new job on its checkpoint "
                f"(--checkpoint-path {checkpoint}): it skips the sources this job completed "
                "and processes the rest, a failed file fixed since among them (a completed "
                "source whose files changed is redone, by the default --on-input-change "
                "reprocess, where --verify-inputs recorded its fingerprint; row ranges, "
                "partition=, refuse changed content).")
        raise ResumeMismatchError("\n".join(lines))
