"""Exit codes and the usage error shared by the CLI's command modules (no heavy imports)."""

from __future__ import annotations

import argparse

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_STOPPED, EXIT_INTERRUPTED = 0, 1, 2, 3, 130
EXIT_SCHEDULER_LOST = 4  # the run lost its Dask scheduler; completions already written are kept
PROG = "python -m curator_dask"


class UsageError(Exception):
    """A problem with the command line or the pipeline definition (exit code 2)."""


def add_hidden_verbose(parser: argparse.ArgumentParser) -> None:
    """``-v``/``--verbose`` accepted after any command (the help lists it on ``run``)."""
    parser.add_argument("-v", "--verbose", action="count", default=0, help=argparse.SUPPRESS)


def add_work_dir(parser: argparse.ArgumentParser) -> None:
    """``--work-dir``, where job folders are looked up (the job commands)."""
    parser.add_argument("--work-dir", metavar="DIR", help="default: config jobs.work-dir")
