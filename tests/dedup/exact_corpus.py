"""A small JSONL corpus with planted exact duplicates for the exact-dedup tests.

Every document carries the ``key`` of its text after NeMo's normalisation, known by
construction (not computed by the code under test): variants that only change ASCII or Greek
case, write the dotted capital I, or change runs of U+0000..U+0020, keep their base's key;
a no-break space or a final sigma gives a text of its own. Null, empty and white-space-only
texts share one key (cudf hashes a null as the empty text). ``raw`` is the key without
normalisation (the text itself; null as "").
"""

from __future__ import annotations

import json
import random
from pathlib import Path

EMPTY = "<empty>"
BASES = [f"document {k} about the {w} and its {v}" for k, (w, v) in enumerate(
    [("river", "banks"), ("market", "prices"), ("engine", "parts"), ("forest", "trees"),
     ("city", "streets"), ("garden", "flowers"), ("school", "pupils"), ("ship", "crew")])] + [
    "οδοσ και δρομοσ στην πολη", "i\u0307stanbul is a city on two continents",
    "the café serves crème brûlée", "short"]
SPACES = ["  ", "\t", "\n", " \r\n ", "\x0b", "\x00 ", "\x1f"]


def _variant(rng: random.Random, base: str) -> tuple[str, str]:
    """A text and its normalised key."""
    kind = rng.choice(["same", "upper", "spaces", "dotted", "nbsp", "sigma"])
    if kind == "upper":
        return base.upper(), base
    if kind == "spaces":
        text = "".join(rng.choice(SPACES) if c == " " else c for c in base)
        return rng.choice(["", " ", "\n"]) + text + rng.choice(["", "\t", "  "]), base
    if kind == "dotted" and "i\u0307" in base:
        return base.replace("i\u0307", "\u0130"), base  # cudf lowers İ to i + U+0307
    if kind == "nbsp":
        text = base.replace(" ", "\u00a0", 1)  # not white space for cudf: another text
        return text, text
    if kind == "sigma" and "σ " in base:
        text = base.replace("σ ", "ς ", 1)  # a final sigma is another letter
        return text, text
    return base, base


def write_corpus(root: Path, files: int = 6, docs: int = 50, seed: int = 3) -> Path:
    """``files`` JSONL files of ``docs`` documents: ``id`` ("doc-0000" ...), ``text``, ``key``,
    ``raw``."""
    rng = random.Random(seed)
    root.mkdir(parents=True, exist_ok=True)
    n = 0
    for f in range(files):
        with open(root / f"part-{f}.jsonl", "w", encoding="utf-8") as out:
            for _ in range(docs):
                roll = rng.random()
                if roll < 0.06:
                    text = rng.choice([None, "", "   ", "\t\n"])
                    key = EMPTY
                else:
                    text, key = _variant(rng, rng.choice(BASES))
                raw = "" if text is None else text
                record = {"id": f"doc-{n:04d}", "text": text, "key": key, "raw": raw}
                out.write(json.dumps(record, ensure_ascii=False) + "\n")
                n += 1
    return root


def read_corpus(root: Path) -> list[dict]:
    """Every record, files in name order (a writer's empty file holds one blank line)."""
    return [json.loads(line) for p in sorted(root.glob("*.jsonl"))
            for line in p.read_text(encoding="utf-8").splitlines() if line]
