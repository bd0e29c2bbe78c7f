"""Recipes, corpora and the two runners the Data-Juicer tests compare: Data-Juicer's own
default executor (``dj-process``, run as a process) and curator_dask's (the command line as a
process, or the class on the test process's shared cluster)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from tests.data_juicer.corpus import build_corpus

# The 12-operator recipe of issue 34: 5 mappers, 6 filters, document_deduplicator
TWELVE_OPS: list[dict[str, Any]] = [
    {"whitespace_normalization_mapper": None},
    {"punctuation_normalization_mapper": None},
    {"clean_email_mapper": None},
    {"clean_links_mapper": None},
    {"remove_long_words_mapper": {"min_len": 1, "max_len": 30}},
    {"text_length_filter": {"min_len": 50}},
    {"words_num_filter": {"min_num": 10}},
    {"alphanumeric_filter": {"min_ratio": 0.25}},
    {"character_repetition_filter": {"rep_len": 10, "max_ratio": 0.5}},
    {"special_characters_filter": {"max_ratio": 0.4}},
    {"average_line_length_filter": {"min_len": 10}},
    {"document_deduplicator": {"lowercase": False}},
]

SRC = str(Path(__file__).resolve().parents[2])


def corpus(root: Path, max_bytes: int = 1_500_000, duplicates: int = 12) -> Path:
    """A folder of real text (``corpus.build_corpus``) with a subfolder that repeats some of
    its documents under other ids (so the deduplicators have work across files)."""
    folder = root / "input"
    files = build_corpus(folder, max_bytes)
    rows = [json.loads(line) for line in Path(files[0]).read_text("utf-8").splitlines()]
    (folder / "more").mkdir()
    with open(folder / "more" / "repeats.jsonl", "w", encoding="utf-8") as f:
        for i, row in enumerate(rows[3:3 + duplicates]):
            f.write(json.dumps({"text": row["text"], "id": f"repeat-{i}"}) + "\n")
    return folder


def write_recipe(path: Path, dataset: Path, export: Path, process: list[dict[str, Any]],
                 **extra: Any) -> Path:
    spec = {"project_name": "dj-on-dask-test", "dataset_path": str(dataset),
            "export_path": str(export), "np": 2, "text_keys": "text", "process": process,
            **extra}
    path.write_text(yaml.safe_dump(spec, sort_keys=False), encoding="utf-8")
    return path


def run_dj_default(recipe: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Data-Juicer's own ``dj-process`` on ``recipe`` (its default executor)."""
    code = "import sys; from data_juicer.tools.process_data import main; sys.exit(main())"
    proc = subprocess.run([sys.executable, "-c", code, "--config", str(recipe), *args],
                          capture_output=True, text=True, cwd=recipe.parent, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def run_cli(recipe: Path, *args: str, check: bool = True, timeout: float = 600
            ) -> subprocess.CompletedProcess[str]:
    """``python -m curator_dask run RECIPE ...`` as a user runs it."""
    env = dict(os.environ, PYTHONPATH=SRC)
    proc = subprocess.run([sys.executable, "-m", "curator_dask", "run", str(recipe), *args],
                          capture_output=True, text=True, cwd=recipe.parent, env=env,
                          timeout=timeout)
    if check:
        assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def run_in_process(recipe: Path, executor: Any, *overrides: str, fast_ops: bool = True
                   ) -> Any:
    """The recipe through ``DataJuicerDaskExecutor`` on ``executor``'s cluster."""
    from curator_dask.data_juicer.executor import DataJuicerDaskExecutor
    from curator_dask.data_juicer.recipe import load_recipe

    cwd = os.getcwd()
    os.chdir(recipe.parent)
    try:
        loaded = load_recipe(str(recipe), list(overrides))
        return DataJuicerDaskExecutor(loaded.cfg, executor=executor, fast_ops=fast_ops,
                                      executor_type=loaded.executor_type).run()
    finally:
        os.chdir(cwd)


def same_files(a: Path, b: Path) -> None:
    """Both files hold the same bytes; on a difference, the first differing line."""
    left, right = a.read_bytes(), b.read_bytes()
    if left == right:
        return
    for i, (x, y) in enumerate(zip(left.splitlines(), right.splitlines(), strict=False)):
        if x != y:
            raise AssertionError(f"{a} and {b} differ at line {i + 1}:\n{x[:300]!r}\n"
                                 f"{y[:300]!r}")
    raise AssertionError(f"{a} ({len(left.splitlines())} lines) and {b} "
                         f"({len(right.splitlines())} lines) differ in length")


def copy_tree(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst
