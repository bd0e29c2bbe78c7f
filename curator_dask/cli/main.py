"""``python -m curator_dask``: the command line.

Exit codes: 0 success, 1 the pipeline failed, 2 usage or configuration error, 3 stopped by
SIGUSR1/SIGTERM after draining (unfinished sources stay pending), 4 the Dask scheduler was lost
(completions already recorded are kept), 130 interrupted; docs/guarantees.md "Exit codes" says
when each command returns which.
Only argparse is imported at module level, so ``--help`` and ``--version`` answer at once. Each
command module adds its own parsers (``register``) and names its handler (``func``). Usage lines
and errors name the program as it was invoked (``PROG``: ``curator-dask`` or ``python -m
curator_dask``); an option no parser knows is reported by its command's parser, with the
closest option of that command.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from curator_dask.cli import checkpoint, dedup, jobs, run_command, slurm
from curator_dask.cli.common import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_USAGE, PROG, UsageError


def build_parser() -> argparse.ArgumentParser:
    """The whole command line: ``run``, ``status``, ``stop``, ``report``, ``checkpoint``,
    ``slurm``, ``dedup``, in that order."""
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Run NeMo-Curator-style data-curation pipelines on Dask.",
    )
    parser.add_argument("--version", action=_Version, help="print the versions of curator_dask, "
                        "Dask, distributed, NeMo Curator (when installed) and Python, and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    run_command.register(sub)
    jobs.register(sub)
    checkpoint.register(sub)
    slurm.register(sub)
    dedup.register(sub)
    return parser


class _Version(argparse.Action):
    """``--version``: the versions, looked up only when asked (no import of Dask)."""

    def __init__(self, option_strings: list[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, *_args: object, **_kwargs: object
                 ) -> None:
        print(versions())
        parser.exit()


def versions() -> str:
    """``curator_dask 0.1.0 (dask ..., distributed ..., nemo-curator ..., Python ...)``, from
    the installed distributions' metadata; NeMo Curator only when it is installed."""
    import platform
    from importlib import metadata

    def version(name: str) -> str | None:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return None

    others = [f"{name} {v}" for name in ("dask", "distributed", "nemo-curator")
              if (v := version(name)) is not None]
    own = version("curator_dask") or "(not installed: no package metadata)"
    return f"curator_dask {own} ({', '.join([*others, f'Python {platform.python_version()}'])})"


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


def _unrecognized(parser: argparse.ArgumentParser, args: argparse.Namespace,
                  unknown: list[str]) -> None:
    """Report arguments no parser took with the usage of the command they were given to (not
    the top level's, as ``parse_args`` does) and the closest option of that command; exit 2."""
    import difflib

    from curator_dask.utils.private_api import parser_actions, subparser_actions

    command = parser
    while True:  # down to the (sub)command that ran: `run`, `slurm submit`, ...
        subs = subparser_actions(command)
        chosen = getattr(args, subs[0].dest, None) if subs else None
        if chosen not in (subs[0].choices if subs else {}):
            break
        command = subs[0].choices[chosen]
    options = {s.lstrip("-"): s for a in parser_actions(command) if a.help is not argparse.SUPPRESS
               for s in a.option_strings}
    hints = {}  # compared without the dashes, which every option shares
    for arg in (a.partition("=")[0] for a in unknown if a.startswith("-")):
        close = difflib.get_close_matches(arg.lstrip("-"), options, n=1)
        if close:
            hints[arg] = options[close[0]]
    hint = ", ".join(v if len(hints) == 1 else f"{v} (for {k})" for k, v in hints.items())
    command.error(f"unrecognized arguments: {' '.join(unknown)}"
                  + (f"; did you mean {hint}?" if hint else ""))


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv`` (default: ``sys.argv[1:]``), run the command, return its exit code."""
    parser = build_parser()
    raw = list(sys.argv[1:] if argv is None else argv)
    if raw[:1] == ["run"] and "-h" not in raw and "--help" not in raw:
        from curator_dask.cli import data_juicer

        if data_juicer.recipe_argument(raw[1:]) is not None:  # a Data-Juicer recipe
            _configure_logging(0)
            return _dispatch(parser.prog, "run", 0, lambda: data_juicer.cmd_dj_run(raw[1:]))
    args, unknown = parser.parse_known_args(raw)
    if unknown:
        _unrecognized(parser, args, unknown)  # exits
    args.argv = raw
    _configure_logging(args.verbose)
    func = getattr(args, "func", None)
    if func is None:
        parser.error(f"unknown command {args.command!r}")  # exits
    return _dispatch(parser.prog, args.command, args.verbose, lambda: func(args))


def _dispatch(prog: str, command: str, verbose: int, call: Any) -> int:
    """Run a command's handler; every failure becomes one line and an exit code."""
    try:
        return int(call())
    except (UsageError, NotImplementedError) as exc:
        print(f"{prog} {command}: error: {_said(exc, verbose)}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt as exc:  # a RunInterrupted says what completed and what next
        print(f"{prog} {command}: {_said(exc, verbose) or 'interrupted'}", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as exc:  # noqa: BLE001 (the CLI reports every failure the same way)
        if verbose:
            import traceback

            traceback.print_exc()
        print(f"{prog} {command}: failed: {type(exc).__name__}: {_said(exc, verbose)}",
              file=sys.stderr)
        return EXIT_FAILED


def _said(error: BaseException, verbose: int) -> str:
    """The error's message: one line (no traceback it carries) unless ``-v``."""
    if verbose:
        return str(error)
    from curator_dask.errors import one_line

    return one_line(error)
