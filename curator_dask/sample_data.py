"""Deterministic sample JSONL data for the demo, the tests and the benchmarks."""

from __future__ import annotations

import json
import os
import random

_WORDS = [
    "data",
    "curation",
    "pipeline",
    "dask",
    "worker",
    "scheduler",
    "partition",
    "source",
    "sink",
    "filter",
    "stage",
    "checkpoint",
    "resume",
    "shard",
    "array",
    "cluster",
    "token",
    "document",
    "quality",
    "language",
    "text",
    "corpus",
    "model",
    "train",
    "dedup",
    "minhash",
    "bucket",
    "parquet",
    "jsonl",
    "arrow",
    "table",
    "column",
    "row",
    "batch",
]


def _document(rng: random.Random, short: bool) -> str:
    if short:
        # Strictly shorter than 50 characters.
        return " ".join(rng.choice(_WORDS) for _ in range(rng.randint(1, 4)))[:49]
    n = rng.randint(12, 30)
    return " ".join(rng.choice(_WORDS) for _ in range(n))


def generate_jsonl(
    out_dir: str,
    *,
    files: int = 8,
    docs_per_file: int = 100,
    short_fraction: float = 0.1,
    seed: int = 0,
    prefix: str = "part",
) -> list[str]:
    """Write ``files`` JSONL files of ``docs_per_file`` documents ``{"id", "text"}``.

    About ``short_fraction`` of the documents are shorter than 50 characters; the rest are
    longer than 50. The same arguments always give the same bytes.

    Example:
        >>> import tempfile
        >>> paths = generate_jsonl(tempfile.mkdtemp(), files=2, docs_per_file=3)
        >>> len(paths)
        2
    """
    if files < 1 or docs_per_file < 1:
        msg = f"files and docs_per_file must be at least 1, got {files} and {docs_per_file}"
        raise ValueError(msg)
    os.makedirs(out_dir, exist_ok=True)
    rng = random.Random(seed)
    paths = []
    for f in range(files):
        path = os.path.join(out_dir, f"{prefix}-{f:05d}.jsonl")
        lines = []
        for d in range(docs_per_file):
            text = _document(rng, rng.random() < short_fraction)
            lines.append(json.dumps({"id": f"{f}-{d}", "text": text}))
        tmp = path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write("\n".join(lines) + "\n")
        os.replace(tmp, path)
        paths.append(path)
    return paths
