"""Generate the API reference page from ``curator_dask.__all__`` (mkdocstrings directives).

    python tools/docs/gen_api_reference.py              # print to stdout

Each public name is documented where it is defined (``obj.__module__``), because the package
exports its names lazily (``__getattr__``) and static analysis cannot follow that. A name added
to ``__all__`` appears on the next docs build; one that cannot be imported fails the build.
"""

from __future__ import annotations

import importlib
import inspect
import os
import sys

if os.path.dirname(os.path.abspath(__file__)) not in sys.path:
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from griffe_docstrings import roles  # noqa: E402


def public_objects() -> list[tuple[str, str, object]]:
    """``(public name, defining import path, object)`` for every name in ``__all__``."""
    package = importlib.import_module("curator_dask")
    out = []
    for name in package.__all__:
        obj = getattr(package, name)  # raises for an export that cannot be imported
        module = getattr(obj, "__module__", None) or "curator_dask"
        qualname = getattr(obj, "__qualname__", name)
        out.append((name, f"{module}.{qualname}", obj))
    return out


def _summary(obj: object) -> str:
    doc = inspect.getdoc(obj) or ""
    first = doc.strip().split("\n\n")[0]
    return roles(" ".join(first.split())).replace("|", "\\|")


def render() -> str:
    objects = public_objects()
    lines = [
        "# API reference",
        "",
        "<!-- Generated from curator_dask.__all__ by tools/docs/gen_api_reference.py at every "
        "docs build: do not edit. -->",
        "",
        "Every name below is importable from the package itself "
        "(`from curator_dask import Pipeline`); the heading shows where it is defined. "
        "This page is generated from `curator_dask.__all__` and the docstrings at every "
        "documentation build.",
        "",
        "| name | summary |",
        "|---|---|",
    ]
    for name, path, obj in objects:
        lines.append(f"| [`{name}`][{path}] | {_summary(obj)} |")
    lines.append("")
    for _name, path, _obj in objects:
        lines += [f"::: {path}", ""]
    return "\n".join(lines + _errors_section())


def _errors_section() -> list[str]:
    """Every exception class of the package, from ``curator_dask.errors``' docstring (its table
    is checked against the classes the package defines by tests/test_errors_base.py)."""
    return [
        "## Errors",
        "",
        "The table below is the docstring of `curator_dask.errors`.",
        "",
        "::: curator_dask.errors",
        "    options:",
        "      members: false",
        "      show_root_heading: false",
        "      show_root_toc_entry: false",
        "",
    ]


def main() -> int:
    sys.stdout.write(render())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
