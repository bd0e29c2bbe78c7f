"""Append a benchmark row to its own table in benchmarks/RESULTS.md."""

from __future__ import annotations

import os

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "RESULTS.md")


def append_row(section: str, header: list[str], row: list[str]) -> None:
    """Add ``row`` at the end of the table under ``## section`` (created when missing)."""
    line = "| " + " | ".join(row) + " |"
    text = "# Benchmark results\n"
    if os.path.exists(RESULTS):
        with open(RESULTS) as f:
            text = f.read()
    lines = text.rstrip("\n").split("\n")
    title = f"## {section}"
    if title not in lines:
        lines += ["", title, "", "| " + " | ".join(header) + " |",
                  "|" + "---|" * len(header), line]
    else:
        i = lines.index(title) + 1
        while i < len(lines) and not lines[i].startswith("|"):
            i += 1
        while i < len(lines) and lines[i].startswith("|"):
            i += 1
        lines.insert(i, line)
    with open(RESULTS, "w") as f:
        f.write("\n".join(lines) + "\n")
