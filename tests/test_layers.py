"""The package's folders form layers: at module level a folder imports only folders below it.

The order of the folders and the few imports allowed to go up are written in
docs/design/architecture.md ("Layers"), which this test reads: a new upward import fails here,
printed with its modules, until it is removed or named there with its reason (at most
:data:`MAX_UPWARD`). Imports inside functions or under ``TYPE_CHECKING`` run later and are not
counted (`python3 ../shared/tools/folder_layers.py top` counts the same way).
"""

from __future__ import annotations

import ast
import re
import shutil
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "design" / "architecture.md"
MAX_UPWARD = 5
# a folder's subfolders that are layers of their own
SUBFOLDERS = {"backends": "dask", "dedup": "fuzzy", "resumability": "stage_checkpoints"}


def _modules(package: Path) -> dict[str, Path]:
    return {".".join(p.relative_to(package.parent).with_suffix("").parts)
            .removesuffix(".__init__"): p for p in package.rglob("*.py")}


def _folder(module: str, path: Path) -> str:
    parts = module.split(".")[1:] if path.name == "__init__.py" else module.split(".")[1:-1]
    if not parts:
        return module.split(".")[-1]  # a top-level module is a folder of its own
    if len(parts) > 1 and SUBFOLDERS.get(parts[0]) == parts[1]:
        return "/".join(parts[:2])
    return parts[0]


def module_imports(package: Path) -> list[tuple[str, str]]:
    """Every (importer, imported) pair of the package's modules at module level."""
    modules = _modules(package)

    def owner(name: str) -> str:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name

    pairs = []

    def scan(node: ast.AST, module: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                continue
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                continue
            if isinstance(child, ast.Import):
                names = [a.name for a in child.names]
            elif isinstance(child, ast.ImportFrom) and child.level == 0 and child.module:
                names = [f"{child.module}.{a.name}" for a in child.names]
            else:
                scan(child, module)
                continue
            for name in names:
                target = owner(name)
                if target and target != module:
                    pairs.append((module, target))

    for module, path in modules.items():
        scan(ast.parse(path.read_text()), module)
    return pairs


def folder_imports(package: Path) -> dict[tuple[str, str], list[tuple[str, str]]]:
    """(importer folder, imported folder) -> the module pairs behind that arrow."""
    modules = _modules(package)
    arrows: dict[tuple[str, str], list[tuple[str, str]]] = defaultdict(list)
    for importer, imported in module_imports(package):
        a, b = _folder(importer, modules[importer]), _folder(imported, modules[imported])
        if a != b:
            arrows[(a, b)].append((importer, imported))
    return dict(arrows)


def circles(arrows) -> list[list[str]]:
    """The folders that reach each other through imports (Tarjan's strongly connected parts)."""
    edges: dict[str, set[str]] = defaultdict(set)
    for a, b in arrows:
        edges[a].add(b)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            part = []
            while True:
                w = stack.pop()
                part.append(w)
                if w == v:
                    break
            if len(part) > 1:
                found.append(sorted(part))

    for v in list(edges):
        if v not in index:
            visit(v)
    return found


def documented_layers(doc: Path = DOC) -> tuple[list[str], set[tuple[str, str]]]:
    """The order of folders, bottom first, and the allowed upward (importer, imported) modules,
    as architecture.md's "Layers" section writes them."""
    text = doc.read_text()
    section = text.split("\n## Layers\n", 1)[1].split("\n## ", 1)[0]
    order = re.search(r"```text\n(.*?)\n```", section, re.S).group(1)
    layers = [name.strip() for name in order.replace("\n", " ").split("<")]
    allowed = set(re.findall(r"^\| `(curator_dask[\w.]*)` \| `(curator_dask[\w.]*)` \|", section,
                             re.M))
    return layers, allowed


def layer_violations(package: Path, doc: Path = DOC) -> list[str]:
    """What breaks the documented layers, one line each (empty: nothing)."""
    layers, allowed = documented_layers(doc)
    rank = {name: i for i, name in enumerate(layers)}
    arrows = folder_imports(package)
    problems = []
    folders = {f for arrow in arrows for f in arrow}
    for name in sorted(folders - rank.keys()):
        problems.append(f"folder {name!r} is not in architecture.md's order of layers: add it")
    upward = sorted(pair for (a, b), pairs in arrows.items()
                    if a in rank and b in rank and rank[a] < rank[b] for pair in pairs)
    for importer, imported in upward:
        if (importer, imported) not in allowed:
            problems.append(f"upward import: {importer} imports {imported} at module level "
                            "(move it into the function that needs it, move the code down, or "
                            "name it with its reason in architecture.md's Layers)")
    for importer, imported in sorted(allowed - set(upward)):
        problems.append(f"architecture.md lists {importer} -> {imported} as an upward import, "
                        "but there is none: remove the row")
    if len(allowed) > MAX_UPWARD:
        problems.append(f"{len(allowed)} upward imports are listed; at most {MAX_UPWARD}")
    for part in circles(arrows):
        problems.append(f"circle between folders: {' <-> '.join(part)}")
    return problems


def test_the_folders_keep_their_layers() -> None:
    problems = layer_violations(ROOT / "curator_dask")
    assert not problems, "\n".join(problems)


def test_every_folder_is_in_the_order_once() -> None:
    layers, _ = documented_layers()
    assert len(layers) == len(set(layers)), layers


def test_an_upward_import_added_on_purpose_fails_and_is_named(tmp_path) -> None:
    """The check's own failure: a copy of the package where ``utils/files.py`` imports the
    command line (a low folder importing the top one) is refused, with both modules named,
    and so is the circle it closes (``cli`` imports ``utils`` already)."""
    package = tmp_path / "curator_dask"
    shutil.copytree(ROOT / "curator_dask", package,
                    ignore=shutil.ignore_patterns("__pycache__"))
    files = package / "utils" / "files.py"
    files.write_text(files.read_text() + "\nfrom curator_dask.cli.main import main  # noqa\n")
    problems = layer_violations(package)
    assert ("upward import: curator_dask.utils.files imports curator_dask.cli.main at module "
            "level") in "\n".join(problems)
    assert any(p.startswith("circle between folders:") and "utils" in p and "cli" in p
               for p in problems), problems


def test_an_import_inside_a_function_is_not_counted(tmp_path) -> None:
    package = tmp_path / "curator_dask"
    shutil.copytree(ROOT / "curator_dask", package,
                    ignore=shutil.ignore_patterns("__pycache__"))
    files = package / "utils" / "files.py"
    files.write_text(files.read_text()
                     + "\ndef _late():\n    from curator_dask.cli.main import main  # noqa\n")
    assert layer_violations(package) == layer_violations(ROOT / "curator_dask")


@pytest.mark.parametrize("missing", ["a folder", "a listed import that is gone"])
def test_the_documented_layers_are_checked_against_the_code(tmp_path, missing) -> None:
    text = DOC.read_text()
    layers, _ = documented_layers()
    if missing == "a folder":
        text = text.replace(" < utils <", " <", 1)
        expected = "folder 'utils' is not in architecture.md's order of layers"
    else:
        text = text.replace("\n### Upward imports\n", "\n### Upward imports\n\n| `curator_dask."
                            "utils.files` | `curator_dask.cli.main` | none |\n", 1)
        expected = "lists curator_dask.utils.files -> curator_dask.cli.main as an upward import"
    doc = tmp_path / "architecture.md"
    doc.write_text(text)
    assert any(expected in p for p in layer_violations(ROOT / "curator_dask", doc))
