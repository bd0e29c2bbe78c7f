"""Strip outputs and execution counts from notebooks, in place (as tests/docs expects).

    python tools/docs/clear_notebooks.py                  # notebooks/*.ipynb
    python tools/docs/clear_notebooks.py path.ipynb ...
"""

from __future__ import annotations

import glob
import sys

import nbformat


def clear(path: str) -> bool:
    """Clear one notebook; True when it changed."""
    nb = nbformat.read(path, as_version=4)
    changed = False
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        if cell.get("outputs") or cell.get("execution_count") is not None:
            changed = True
        cell["outputs"] = []
        cell["execution_count"] = None
    if changed:
        nbformat.write(nb, path)
    return changed


def main(argv: list[str]) -> int:
    for path in argv or sorted(glob.glob("notebooks/*.ipynb")):
        print(f"{path}: {'cleared' if clear(path) else 'clean'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
