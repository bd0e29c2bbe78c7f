"""Exit codes and the usage error shared by the CLI's command modules (no heavy imports)."""

from __future__ import annotations

import argparse
import os
import sys

from curator_dask.errors import CuratorDaskError

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_STOPPED, EXIT_INTERRUPTED = 0, 1, 2, 3, 130
EXIT_SCHEDULER_LOST = 4  # the run lost its Dask scheduler; completions already written are kept
EXIT_PARTIAL = 5  # the run ended, but some sources saw a FailedTask: they stay pending
SCRIPT = "curator-dask"  # the console script of pyproject.toml


def invoked_as(argv0: str) -> str:
    """The command as the user typed it, from ``sys.argv[0]``: ``curator-dask`` for the
    console script, else ``python -m curator_dask`` (``-m`` sets the module's path).

    Example:
        >>> invoked_as("/venv/bin/curator-dask"), invoked_as("/src/curator_dask/__main__.py")
        ('curator-dask', 'python -m curator_dask')
    """
    name = os.path.basename(argv0)
    return SCRIPT if name in (SCRIPT, f"{SCRIPT}.exe") else "python -m curator_dask"


# Usage lines, one-line errors and the resume command all start with it. Read once: the CLI
# imports this module after Python has set argv[0] (for -m, the module's path).
PROG = invoked_as(sys.argv[0] if sys.argv else "")


class UsageError(CuratorDaskError):
    """A problem with the command line or the pipeline definition (exit code 2)."""


def add_hidden_verbose(parser: argparse.ArgumentParser) -> None:
    """``-v``/``--verbose`` accepted after any command (the help lists it on ``run``)."""
    parser.add_argument("-v", "--verbose", action="count", default=0, help=argparse.SUPPRESS)


def add_work_dir(parser: argparse.ArgumentParser) -> None:
    """``--work-dir``, where job folders are looked up (the job commands)."""
    parser.add_argument("--work-dir", metavar="DIR", help="default: config jobs.work-dir")
