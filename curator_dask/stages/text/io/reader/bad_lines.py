"""Malformed lines of a JSONL file: found, named in an error, or skipped and set aside.

``on_bad_lines`` takes pandas' words: ``"error"`` (the first one raises), ``"skip"`` (dropped,
counted, one warning per file) and ``"warn"`` (the same, and a warning for each line). A *bad
line* is a non-blank line that is not one JSON object. Lines are split at ``\\n`` only, as the
row-range planner counts them, so a line number here is the line of the file
(docs/design/contract.md §6.1).
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import posixpath
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import fsspec

from curator_dask.utils.atomic import write_atomic

logger = logging.getLogger(__name__)

ON_BAD_LINES = ("error", "skip", "warn")
SHOWN = 20  # bad lines named one by one in a warning ("warn"), per file
_SKIP_HINT = ("pass on_bad_lines='skip' to the JSONL reader (YAML: on_bad_lines: skip) to skip "
              "such lines, and bad_lines_path=<folder> to keep them")


@dataclass(frozen=True)
class BadLine:
    """Line ``number`` of a file (from 1), its bytes without the ``\\n``, and why it is bad."""

    number: int
    raw: bytes
    error: str


def check_options(on_bad_lines: str | None, bad_lines_path: str | None) -> None:
    """Refuse an unknown ``on_bad_lines`` and a ``bad_lines_path`` that would receive nothing.
    ``None`` is ``"error"``: a parameter added at ``None`` keeps older jobs resumable
    (``resumability/fingerprint.py``)."""
    if on_bad_lines is not None and on_bad_lines not in ON_BAD_LINES:
        msg = (f"on_bad_lines must be one of {list(ON_BAD_LINES)} (as in pandas), got "
               f"{on_bad_lines!r}")
        raise ValueError(msg)
    if bad_lines_path is not None and on_bad_lines in (None, "error"):
        msg = (f"bad_lines_path={bad_lines_path!r} keeps the lines that on_bad_lines skips, but "
               "on_bad_lines='error' skips none: pass on_bad_lines='skip' (or 'warn') with it")
        raise ValueError(msg)


def find_bad_lines(raw: bytes, first_line: int = 1, *, limit: int | None = None,
                   ) -> list[BadLine]:
    """The bad lines of ``raw`` (which starts at line ``first_line`` of its file), at most
    ``limit`` of them.

    Example:
        >>> [(b.number, b.error) for b in find_bad_lines(b'{"a": 1}\\n\\n[1]\\n{"a": \\n')]
        [(3, 'not a JSON object (a list)'), (4, 'Expecting value: line 1 column 7 (char 6)')]
    """
    bad: list[BadLine] = []
    for number, line in enumerate(raw.split(b"\n"), start=first_line):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except ValueError as exc:  # UnicodeDecodeError included
            bad.append(BadLine(number, line, str(exc)))
        else:
            if isinstance(value, dict):
                continue
            bad.append(BadLine(number, line, f"not a JSON object (a {type(value).__name__})"))
        if limit is not None and len(bad) >= limit:
            break
    return bad


def blank_lines(raw: bytes, numbers: Sequence[int], first_line: int = 1) -> bytes:
    """``raw`` with lines ``numbers`` emptied: the other lines keep their numbers.

    Example:
        >>> blank_lines(b"a\\nb\\r\\nc", [2])
        b'a\\n\\nc'
    """
    drop = set(numbers)
    return b"\n".join(b"" if n in drop else line
                      for n, line in enumerate(raw.split(b"\n"), start=first_line))


def looks_like_json_document(line: bytes) -> bool:
    """A line as a JSON array or a pretty-printed document has it: ``[``, ``{`` or ``]``
    alone, a line opening an array, or an object followed by a comma."""
    text = line.strip()
    return (text in (b"[", b"{", b"]", b"}", b"},", b"],") or text.startswith(b"[")
            or (text.startswith(b"{") and text.endswith(b",")))


def malformed_message(path: str, bad: BadLine) -> str:
    """The error for ``path``'s first bad line: a JSON array or a pretty-printed file is named
    as not JSON Lines; otherwise the line, the parser's error and the option to skip it."""
    if looks_like_json_document(bad.raw):
        return (f"{path} is not JSON Lines (one object per line): line {bad.number} is "
                f"{_shown(bad.raw)}, as in a JSON array or an indented JSON document; write one "
                f"object per line (a JSON array converts with: jq -c '.[]' {path})")
    return f"Malformed JSON in {path} at line {bad.number}: {bad.error}; {_SKIP_HINT}"


def _shown(raw: bytes, width: int = 40) -> str:
    text = raw.decode("utf-8", errors="replace").strip()
    return repr(text if len(text) <= width else text[:width] + "...")


def report(path: str, bad: Sequence[BadLine], mode: str, written: str | None) -> None:
    """One warning for a file's skipped lines (with ``"warn"``, one more per line)."""
    if mode == "warn":
        for line in bad[:SHOWN]:
            logger.warning("%s: skipping malformed line %d: %s", path, line.number, line.error)
        if len(bad) > SHOWN:
            logger.warning("%s: skipping %d more malformed lines", path, len(bad) - SHOWN)
    numbers = ", ".join(str(b.number) for b in bad[:5]) + (", ..." if len(bad) > 5 else "")
    where = f"; written to {written}" if written else ""
    logger.warning("%s: %d malformed line(s) skipped (line %s)%s", path, len(bad), numbers,
                   where)


def set_aside(folder: str, path: str, bad: Sequence[BadLine], rows: tuple[int, int] | None,
              storage_options: dict | None) -> str:
    """Write ``path``'s skipped lines into ``folder``, one JSON object a line (``path``,
    ``line``, ``error`` and ``raw``, or ``raw_base64`` for bytes that are not UTF-8), and return
    the file written. Its name is the input's name, a digest of its full path (two inputs may
    share a name) and, for a row range, its rows; written atomically, so a retried task
    replaces it.

    Example:
        >>> import fsspec
        >>> written = set_aside("memory://bad", "/d/a.jsonl", [BadLine(2, b"{x", "oops")],
        ...                     None, None)
        >>> written.startswith("memory:///bad/a.jsonl.") and written.endswith(".bad_lines.jsonl")
        True
    """
    records = []
    for line in bad:
        record: dict[str, Any] = {"path": path, "line": line.number, "error": line.error}
        try:
            record["raw"] = line.raw.decode("utf-8")
        except UnicodeDecodeError:
            record["raw_base64"] = base64.b64encode(line.raw).decode("ascii")
        records.append(json.dumps(record, ensure_ascii=False))
    payload = ("\n".join(records) + "\n").encode("utf-8")
    digest = hashlib.sha256(path.encode("utf-8")).hexdigest()[:8]
    span = f".rows-{rows[0]}-{rows[1]}" if rows is not None else ""
    name = f"{posixpath.basename(path.rstrip('/'))}.{digest}{span}.bad_lines.jsonl"
    fs, root = fsspec.core.url_to_fs(folder, **(storage_options or {}))
    fs.makedirs(root, exist_ok=True)
    target = posixpath.join(root, name)
    write_atomic(fs, target, lambda f: f.write(payload))
    return fs.unstrip_protocol(target) if "://" in folder else target


__all__ = ["ON_BAD_LINES", "BadLine", "blank_lines", "check_options", "find_bad_lines",
           "malformed_message", "report", "set_aside"]
