"""A Griffe extension (mkdocstrings ``extensions:``) for two habits of this repo's docstrings.

- ``Example:`` (singular) is read by Griffe's Google parser as an admonition whose body is
  Markdown, so doctest output such as ``['a', 'b']`` turns into broken reference links. It is
  renamed ``Examples:``, which Griffe parses into doctest code blocks.
- Sphinx roles (``:class:`~pkg.Name```, ``:meth:`run```) render literally in Markdown; they
  become code spans (``Name``, ``run``).
- ``a, b, c: text`` in an ``Args:`` section documents several parameters at once; Griffe
  expects one name per item and warns. Such an item is expanded into one item per name.

Only the docstring text Griffe sees is changed; the source files are not touched.
"""

from __future__ import annotations

import re
from typing import Any

try:
    import griffe
except ImportError:  # the rewriting functions work without Griffe
    griffe = None

_EXAMPLE = re.compile(r"^(\s*)Example:\s*$")
_ARGS = re.compile(r"^(\s*)(Args|Arguments|Parameters|Params|Keyword Args|Keyword Arguments)"
                   r":\s*$")
_ROLE = re.compile(r":(?:py:)?[a-z]+:`(~?)([^`]+)`")
_MULTI = re.compile(r"^(\s*)([A-Za-z_]\w*(?:\s*,\s*[A-Za-z_]\w*)+)\s*:(.*)$")


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def roles(text: str) -> str:
    """Sphinx roles to Markdown code spans.

    Example:
        >>> roles("raises :class:`~curator_dask.errors.RunStopped`, see :meth:`decompose`")
        'raises `RunStopped`, see `decompose`'
    """
    return _ROLE.sub(lambda m: "`" + (m.group(2).rsplit(".", 1)[-1] if m.group(1)
                                      else m.group(2)) + "`", text)


def rewrite(text: str) -> str:
    """The docstring with ``Example:`` renamed and multi-name ``Args`` items expanded.

    Example:
        >>> print(rewrite("Args:\\n    a, b: the two.\\n        More.\\nExample:\\n    text"))
        Args:
            a: the two.
                More.
            b: the two.
                More.
        Examples:
            text
    """
    lines = text.split("\n")
    out: list[str] = []
    i = 0
    section_indent: int | None = None
    while i < len(lines):
        line = lines[i]
        m = _EXAMPLE.match(line)
        if m:
            out.append(f"{m.group(1)}Examples:")
            section_indent = None
            i += 1
            continue
        if _ARGS.match(line):
            section_indent = _indent(line)
            out.append(line)
            i += 1
            continue
        if section_indent is not None and line.strip() and _indent(line) <= section_indent:
            section_indent = None
        multi = _MULTI.match(line) if section_indent is not None else None
        if multi and _indent(line) > section_indent:
            item_indent = _indent(line)
            body = [multi.group(3)]
            j = i + 1
            while j < len(lines) and (not lines[j].strip() or _indent(lines[j]) > item_indent):
                body.append(lines[j])
                j += 1
            while len(body) > 1 and not body[-1].strip():
                j -= 1
                body.pop()
            for name in (n.strip() for n in multi.group(2).split(",")):
                out.append(f"{multi.group(1)}{name}:{body[0]}")
                out.extend(body[1:])
            i = j
            continue
        out.append(line)
        i += 1
    return roles("\n".join(out))


if griffe is not None:

    class RepoDocstrings(griffe.Extension):
        def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
            if obj.docstring is not None and obj.docstring.value:
                obj.docstring.value = rewrite(obj.docstring.value)
