"""Dask key names of a run: ``<group label>-<run token>-<first task id>[+<more>]``.

The run token (the first 8 characters of the run id) makes keys of two runs on one cluster
distinct, and lets ``stop --force`` find a run's tasks on the scheduler. Every module that makes
or matches keys uses these functions.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def run_token(run_id: str) -> str:
    """The part of a run id that appears in its Dask keys.

    Example:
        >>> run_token("0123456789ab")
        '01234567'
    """
    return run_id[:8]


def task_key(label: str, run_id: str, chunk: Sequence[Any]) -> str:
    """The key of one fusion group's Dask task over ``chunk`` (source tasks).

    Example:
        >>> class T: task_id = "0_ab"
        >>> task_key("reader+writer", "0123456789ab", [T(), T()])
        'reader+writer-01234567-0_ab+1'
    """
    first = chunk[0].task_id
    suffix = first + (f"+{len(chunk) - 1}" if len(chunk) > 1 else "")
    return f"{label}-{run_token(run_id)}-{suffix}"


def is_run_key(key: Any, token: str) -> bool:
    """Whether a scheduler key belongs to the run with this token.

    Example:
        >>> is_run_key("g0-reader-01234567-0_ab", "01234567"), is_run_key("x-0_ab", "01234567")
        (True, False)
    """
    return f"-{token}-" in str(key)
