"""Generate the CLI reference (Markdown) from the argparse parser, so it cannot drift.

    python tools/docs/gen_cli_reference.py              # print to stdout
    python tools/docs/gen_cli_reference.py -o out.md    # write a file

The docs build calls :func:`render` from ``tools/docs/hooks.py`` and serves the result as
``cli-reference.md`` (a generated page: it is never stored under ``docs/``). Every parser and
subparser reachable from ``curator_dask.cli.main.build_parser()`` is documented, recursively,
with its usage line, description and every option not hidden with ``argparse.SUPPRESS``.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Iterator

USAGE_WIDTH = 88
EXIT_CODES_TITLE = "Exit codes"
EXIT_CODES_PAGE = "guarantees.md#exit-codes"
_SPECIAL = re.compile(r"([\\*_\[\]{}])")


_DOCS_PAGE = re.compile(r"docs/([\w-]+)\.md")


def escape(text: str) -> str:
    """Escape Markdown outside backtick spans (help strings use `code` spans); a page named
    as ``docs/<page>.md`` becomes a link to it."""
    parts = re.split(r"(`[^`]*`|docs/[\w-]+\.md)", text)
    out = []
    for part in parts:
        if part.startswith("`") and part.endswith("`") and len(part) > 1:
            out.append(part)
        elif _DOCS_PAGE.fullmatch(part):
            out.append(f"[{part}]({_DOCS_PAGE.fullmatch(part).group(1)}.md)")
        else:
            out.append(_SPECIAL.sub(r"\\\1", part).replace("<", "&lt;"))
    return "".join(out)


def code(text: str) -> str:
    """An inline code span that survives backticks inside ``text``."""
    fence = "``" if "`" in text else "`"
    pad = " " if "`" in text else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def walk(parser: argparse.ArgumentParser, path: tuple[str, ...] = (),
         summary: str | None = None) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser,
                                                       str | None]]:
    """Yield ``(command path, parser, one-line help)`` for the parser and every subparser."""
    yield path, parser, summary
    for action in parser._actions:
        if not isinstance(action, argparse._SubParsersAction):
            continue
        helps = {a.dest: a.help for a in action._choices_actions}
        seen: set[int] = set()
        for name, sub in action.choices.items():
            if id(sub) in seen:  # an alias of a command already documented
                continue
            seen.add(id(sub))
            yield from walk(sub, (*path, name), helps.get(name))


def anchor(path: tuple[str, ...]) -> str:
    return "-".join(path) if path else "top"


def usage(parser: argparse.ArgumentParser) -> str:
    try:
        formatter = parser.formatter_class(prog=parser.prog, width=USAGE_WIDTH)
    except TypeError:  # a formatter class that takes no width
        formatter = parser._get_formatter()
    formatter.add_usage(parser.usage, parser._actions, parser._mutually_exclusive_groups)
    return formatter.format_help().strip()


def _help(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    if not action.help:
        return ""
    return parser._get_formatter()._expand_help(action)


def _invocation(action: argparse.Action) -> str:
    if not action.option_strings:
        return action.metavar or action.dest
    if action.nargs == 0:
        return ", ".join(action.option_strings)
    formatter = argparse.HelpFormatter("x")
    default = action.dest.upper()
    args = formatter._format_args(action, default)
    return ", ".join(f"{opt} {args}" for opt in action.option_strings)


def _details(parser: argparse.ArgumentParser, action: argparse.Action) -> list[str]:
    bits = []
    help_text = _help(parser, action)
    if getattr(action, "required", False) and action.option_strings:
        bits.append("required")
    default = action.default
    shown_default = (
        action.option_strings
        and action.nargs != 0
        and default is not None
        and default is not argparse.SUPPRESS
        and "default" not in help_text.lower()
    )
    if shown_default:
        bits.append("default " + code(str(default)))
    if isinstance(action, argparse._CountAction):
        bits.append("repeatable")
    out = [escape(help_text)] if help_text else []
    if bits:
        out.append("(" + "; ".join(bits) + ")")
    return out


def render_parser(path: tuple[str, ...], parser: argparse.ArgumentParser,
                  summary: str | None) -> str:
    level = "#" * min(2 + max(len(path) - 1, 0), 4) if path else "##"
    title = parser.prog
    lines = [f"{level} {code(title)} {{#{anchor(path)}}}", ""]
    if summary:
        lines += [escape(summary[0].upper() + summary[1:]) + ".", ""]
    if parser.description and parser.description != summary:
        lines += [escape(" ".join(parser.description.split())), ""]
    lines += ["```text", usage(parser), "```", ""]
    for group in parser._action_groups:
        actions = [a for a in group._group_actions
                   if a.help is not argparse.SUPPRESS
                   and not isinstance(a, argparse._HelpAction)]
        if not actions:
            continue
        title = (group.title or "arguments")
        lines += [f"**{escape(title[0].upper() + title[1:])}**", ""]
        for action in actions:
            if isinstance(action, argparse._SubParsersAction):
                helps = {a.dest: a.help for a in action._choices_actions}
                for name in action.choices:
                    if name not in helps:
                        continue
                    lines.append(f"- [{code(name)}](#{anchor((*path, name))}): "
                                 f"{escape(helps[name] or '')}")
                continue
            text = " ".join(_details(parser, action))
            lines.append(f"- {code(_invocation(action))}" + (f": {text}" if text else ""))
        lines.append("")
    return "\n".join(lines)


def render(parser: argparse.ArgumentParser | None = None) -> str:
    """The whole CLI reference page as Markdown."""
    import curator_dask.cli.main as cli_main

    if parser is None:
        parser = cli_main.build_parser()
    head = [
        "# CLI reference",
        "",
        "<!-- Generated from curator_dask.cli.main.build_parser() by "
        "tools/docs/gen_cli_reference.py at every docs build: do not edit. -->",
        "",
        f"The command line is {code('python -m curator_dask')} (installed also as "
        f"{code('curator-dask')}). This page is generated from the argument parser at every "
        "documentation build, so it lists exactly the options of this version; "
        f"{code('python -m curator_dask COMMAND --help')} prints the same.",
        "",
    ]
    # One table of exit codes, in the guarantees (not a second, partial list here).
    head += [f"Exit codes: see [{EXIT_CODES_TITLE}]({EXIT_CODES_PAGE}), every code and when "
             "each command returns it.", ""]
    sections = [render_parser(path, p, summary) for path, p, summary in walk(parser)]
    return "\n".join(head) + "\n" + "\n".join(sections).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-o", "--output", help="write here instead of stdout")
    args = ap.parse_args(argv)
    text = render()
    if args.output:
        with open(args.output, "w", encoding="utf-8") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
