"""``python -m curator_dask``: the command line.

Exit codes: 0 success, 1 the pipeline failed, 2 usage or configuration error, 3 stopped by
SIGUSR1/SIGTERM after draining (unfinished sources stay pending), 4 the Dask scheduler was lost
(completions already recorded are kept), 130 interrupted; docs/guarantees.md "Exit codes" says
when each command returns which.
Only argparse is imported at module level, so ``--help`` answers at once. Each command module
adds its own parsers (``register``) and names its handler (``func``).
"""

from __future__ import annotations

import argparse
import sys

from curator_dask.cli import checkpoint, jobs, run_command, slurm
from curator_dask.cli.common import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_USAGE, PROG, UsageError


def build_parser() -> argparse.ArgumentParser:
    """The whole command line: ``run``, ``status``, ``stop``, ``report``, ``checkpoint``,
    ``slurm``, in that order."""
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Run NeMo-Curator-style data-curation pipelines on Dask.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    run_command.register(sub)
    jobs.register(sub)
    checkpoint.register(sub)
    slurm.register(sub)
    return parser


def _configure_logging(verbose: int) -> None:
    import logging

    import dask.config

    # distributed sets up its own INFO logging when imported; keep it quiet unless -vv.
    dask.config.set({"logging.distributed": "debug" if verbose >= 2 else "warning"})
    logging.basicConfig(
        level=logging.DEBUG if verbose >= 2 else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        datefmt="%H:%M:%S",
    )
    logging.getLogger("curator_dask").setLevel(logging.DEBUG if verbose else logging.INFO)


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv`` (default: ``sys.argv[1:]``), run the command, return its exit code."""
    parser = build_parser()
    raw = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(raw)
    args.argv = raw
    _configure_logging(args.verbose)
    func = getattr(args, "func", None)
    if func is None:
        parser.error(f"unknown command {args.command!r}")  # exits
    try:
        return func(args)
    except (UsageError, NotImplementedError) as exc:
        print(f"{parser.prog} {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt as exc:  # a RunInterrupted says what completed and what next
        print(f"{parser.prog} {args.command}: {exc or 'interrupted'}", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as exc:  # noqa: BLE001 (the CLI reports every failure the same way)
        if args.verbose:
            import traceback

            traceback.print_exc()
        print(f"{parser.prog} {args.command}: failed: {type(exc).__name__}: {exc}",
              file=sys.stderr)
        return EXIT_FAILED
