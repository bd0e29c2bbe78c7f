"""Exit codes and the usage error shared by the CLI's command modules (no heavy imports)."""

from __future__ import annotations

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_STOPPED, EXIT_INTERRUPTED = 0, 1, 2, 3, 130
EXIT_SCHEDULER_LOST = 4  # the run lost its Dask scheduler; completions already written are kept
PROG = "python -m curator_dask"


class UsageError(Exception):
    """A problem with the command line or the pipeline definition (exit code 2)."""
