"""A planted near-duplicate corpus: documents with known clusters and known Jaccard similarities.

The tests, the notebook and ``benchmarks/bench_dedup.py`` share it. Every document is a run of
words from a fixed vocabulary. A *cluster* is an original document plus copies of it edited by
word substitutions; the substitution rate is calibrated so that two edited copies have the
requested Jaccard similarity on character shingles (24 characters, NeMo's ``char_ngrams``), so
every pair of a cluster is near that value or above it (a copy is closer to the original than
to another copy). *Far pairs* are a document and a copy edited to a similarity well below any
dedup threshold (about ``far_similarity``): neither is a duplicate. The remaining documents are
unrelated. The true Jaccard of every planted pair is measured on the shingle sets and kept.

Generation is deterministic for a seed and vectorised per document (no per-shingle Python
loop): 100,000 documents of 300-1,000 words take seconds.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

CHAR_NGRAMS = 24
_HASH_BASE = np.uint64(0x100000001B3)  # an odd 64-bit multiplier (FNV's prime)
_CALIBRATION_DOCS = 16
_DRAW_TABLE = 1 << 20


@dataclass(frozen=True)
class Score:
    """Precision and recall of a set of removed documents against the planted clusters.

    In a cluster of ``s`` documents, ``s - 1`` removals are right (any ``s - 1`` of them); a
    removal beyond that (the whole cluster gone) and every removal of a document outside the
    clusters (far pairs included) is wrong. ``precision`` is 1.0 when nothing was removed.
    """

    precision: float
    recall: float
    removed: int
    correct: int
    expected: int
    unrelated_removed: int
    far_pairs_hit: int
    clusters_emptied: int


@dataclass(frozen=True)
class PlantedCorpus:
    """The documents and what was planted in them.

    Attributes:
        texts: the documents; the index of a document is its id in the written files.
        cluster: cluster number of each document (int64), ``-1`` for documents in no cluster.
        cluster_pairs: every pair of documents in the same cluster, shape ``(m, 2)``.
        cluster_jaccard: the true Jaccard similarity of each of ``cluster_pairs``.
        far_pairs: the far pairs, shape ``(k, 2)``.
        far_jaccard: the true Jaccard similarity of each far pair.
        char_ngrams: the shingle width the similarities were measured with.

    Example:
        >>> corpus = planted_corpus(60, seed=1, words=(150, 300))
        >>> len(corpus.texts), corpus.expected_removals > 0
        (60, True)
        >>> bool(corpus.cluster_jaccard.min() > 0.8)
        True
        >>> corpus.score([]).recall
        0.0
    """

    texts: list[str]
    cluster: np.ndarray
    cluster_pairs: np.ndarray
    cluster_jaccard: np.ndarray
    far_pairs: np.ndarray
    far_jaccard: np.ndarray
    char_ngrams: int = CHAR_NGRAMS

    @property
    def n_clusters(self) -> int:
        return int(self.cluster.max(initial=-1)) + 1

    @property
    def cluster_sizes(self) -> np.ndarray:
        return np.bincount(self.cluster[self.cluster >= 0], minlength=self.n_clusters)

    @property
    def expected_removals(self) -> int:
        """Documents a perfect deduplication removes: ``s - 1`` per cluster of size ``s``."""
        return int((self.cluster_sizes - 1).sum())

    def write_jsonl(self, directory: str, n_files: int = 1) -> list[str]:
        """Write ``{"id": <doc index>, "text": ...}`` lines in ``n_files`` files, in id order."""
        paths = []
        for i, ids in enumerate(self._file_ranges(directory, n_files)):
            path = os.path.join(directory, f"part-{i:05d}.jsonl")
            lines = [json.dumps({"id": int(d), "text": self.texts[d]}) for d in ids]
            _write_atomically(path, ("\n".join(lines) + "\n").encode())
            paths.append(path)
        return paths

    def write_parquet(self, directory: str, n_files: int = 1) -> list[str]:
        """Write Parquet files with columns ``id`` (int64 doc index) and ``text``, in id order."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        paths = []
        for i, ids in enumerate(self._file_ranges(directory, n_files)):
            path = os.path.join(directory, f"part-{i:05d}.parquet")
            table = pa.table({"id": pa.array(ids, pa.int64()),
                              "text": pa.array([self.texts[d] for d in ids], pa.string())})
            pq.write_table(table, path + ".tmp", compression="snappy")
            os.replace(path + ".tmp", path)
            paths.append(path)
        return paths

    def score(self, removed_doc_indices: Iterable[int]) -> Score:
        """Score the documents a deduplication removed (doc indices, any order, no repeats
        needed) against the planted clusters; see :class:`Score` for the definitions."""
        removed = np.unique(np.fromiter((int(d) for d in removed_doc_indices), np.int64))
        if removed.size and (removed[0] < 0 or removed[-1] >= len(self.texts)):
            bad = removed[0] if removed[0] < 0 else removed[-1]
            msg = (f"removed document index {bad} is outside this corpus of "
                   f"{len(self.texts)} documents: pass doc indices (the written 'id' field)")
            raise ValueError(msg)
        labels = self.cluster[removed]
        sizes = self.cluster_sizes
        hits = np.bincount(labels[labels >= 0], minlength=self.n_clusters)
        correct = int(np.minimum(hits, sizes - 1).sum())
        expected = self.expected_removals
        far = self.far_pairs
        far_hit = int(np.isin(far, removed).any(axis=1).sum()) if far.size else 0
        return Score(
            precision=correct / removed.size if removed.size else 1.0,
            recall=correct / expected if expected else 1.0,
            removed=int(removed.size), correct=correct, expected=expected,
            unrelated_removed=int((labels < 0).sum()), far_pairs_hit=far_hit,
            clusters_emptied=int((hits == sizes).sum()) if sizes.size else 0,
        )

    def _file_ranges(self, directory: str, n_files: int) -> list[np.ndarray]:
        if not 1 <= n_files <= len(self.texts):
            msg = f"n_files={n_files} must be between 1 and the {len(self.texts)} documents"
            raise ValueError(msg)
        os.makedirs(directory, exist_ok=True)
        return np.array_split(np.arange(len(self.texts), dtype=np.int64), n_files)


def planted_corpus(
    n_docs: int,
    *,
    seed: int = 0,
    words: tuple[int, int] = (300, 1000),
    cluster_fraction: float = 0.2,
    cluster_size: tuple[int, int] = (2, 5),
    similarity: float = 0.9,
    far_pair_fraction: float = 0.05,
    far_similarity: float = 0.4,
    vocabulary: int | Sequence[str] = 20_000,
    char_ngrams: int = CHAR_NGRAMS,
) -> PlantedCorpus:
    """Generate ``n_docs`` documents with planted near-duplicate clusters and far pairs.

    Args:
        n_docs: number of documents.
        seed: the whole corpus is a function of the arguments.
        words: inclusive range of the number of words of an original document.
        cluster_fraction: share of the documents that are in a cluster.
        cluster_size: inclusive range of the number of documents of a cluster (original
            included).
        similarity: mean Jaccard similarity (on ``char_ngrams`` shingles) of two edited copies
            of one original, the least similar pairs of a cluster; ``1.0`` makes the members
            of a cluster exact copies (a corpus for exact deduplication).
        far_pair_fraction: share of the documents that are in a far pair (two per pair).
        far_similarity: mean Jaccard similarity of a far pair.
        vocabulary: the words (a sequence of distinct strings without whitespace), or how many
            pseudo-words to generate; words are drawn with Zipf-like frequencies.
        char_ngrams: shingle width for the calibration and the measured similarities.

    Returns:
        The :class:`PlantedCorpus`; documents are in random order (members of a cluster are
        not neighbours).

    One substitution changes about 25 of a document's shingles, so documents of fewer than
    about 100 words cannot hold a similarity near 0.9 closely (at 40-80 words some copies fall
    to 0.75); at 300-1,000 words every cluster pair stays within a few hundredths of the target
    or above it. Read the measured ``cluster_jaccard`` rather than assume the target.
    """
    _check(n_docs, words, cluster_fraction, cluster_size, similarity, far_pair_fraction,
           far_similarity)
    rng = np.random.default_rng(seed)
    vocab = _vocabulary(rng, vocabulary)
    weights = 1.0 / (np.arange(len(vocab)) + 10.0)
    cum = np.cumsum(weights / weights.sum())
    # Zipf-like draws through a quantised inverse CDF: one gather per word instead of a
    # binary search (10^8 words of a large corpus)
    table = np.minimum(np.searchsorted(cum, (np.arange(_DRAW_TABLE) + 0.5) / _DRAW_TABLE),
                       len(vocab) - 1).astype(np.int32)

    sizes = _cluster_sizes(rng, round(cluster_fraction * n_docs), cluster_size)
    n_far = min(round(far_pair_fraction * n_docs) // 2, (n_docs - int(sizes.sum())) // 2)
    n_fresh = n_docs - int(sizes.sum()) - n_far + len(sizes)
    lengths = rng.integers(words[0], words[1] + 1, n_fresh)
    draws = table[rng.integers(0, _DRAW_TABLE, int(lengths.sum()))]
    fresh = np.split(draws, np.cumsum(lengths)[:-1])

    calib = [fresh[i] for i in range(min(_CALIBRATION_DOCS, n_fresh))]
    near_rate = 0.0 if similarity == 1 else _calibrate(
        calib, vocab, similarity, both_edited=True, seed=seed, char_ngrams=char_ngrams)
    far_rate = _calibrate(calib, vocab, far_similarity, both_edited=False, seed=seed,
                          char_ngrams=char_ngrams)

    docs: list[np.ndarray] = []
    labels: list[int] = []
    groups: list[list[int]] = []
    for c, size in enumerate(sizes):
        start = len(docs)
        docs.append(fresh[c])
        docs += [_substitute(rng, fresh[c], near_rate, len(vocab)) for _ in range(size - 1)]
        labels += [c] * int(size)
        groups.append(list(range(start, len(docs))))
    far_list = []
    for f in range(n_far):
        base = fresh[len(sizes) + f]
        far_list.append((len(docs), len(docs) + 1))
        docs += [base, _substitute(rng, base, far_rate, len(vocab))]
        labels += [-1, -1]
    docs += fresh[len(sizes) + n_far:]
    labels += [-1] * (n_docs - len(labels))

    order = rng.permutation(n_docs)  # position of generated doc g is order[g]
    texts: list[str] = [""] * n_docs
    for g, idx in enumerate(docs):
        texts[order[g]] = " ".join(vocab[idx].tolist())
    cluster = np.full(n_docs, -1, dtype=np.int64)
    cluster[order] = np.asarray(labels, dtype=np.int64)
    pairs = [(order[a], order[b]) for g in groups for i, a in enumerate(g) for b in g[i + 1:]]
    cluster_pairs = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
    far_pairs = order[np.asarray(far_list, dtype=np.int64).reshape(-1, 2)]
    return PlantedCorpus(
        texts=texts, cluster=cluster,
        cluster_pairs=cluster_pairs,
        cluster_jaccard=(np.ones(len(cluster_pairs)) if near_rate == 0  # exact copies
                         else _pair_jaccards(texts, cluster_pairs, char_ngrams)),
        far_pairs=far_pairs, far_jaccard=_pair_jaccards(texts, far_pairs, char_ngrams),
        char_ngrams=char_ngrams,
    )


def shingle_hashes(text: str, char_ngrams: int = CHAR_NGRAMS) -> np.ndarray:
    """The distinct 64-bit hashes of the ``char_ngrams``-character shingles of ``text``
    (a polynomial hash of the UTF-8 bytes, computed for all windows at once; the same as
    character shingles for ASCII text, such as this module's; a text shorter than the width
    is one shingle)."""
    data = np.frombuffer(text.encode("utf-8"), dtype=np.uint8).astype(np.uint64)
    width = min(char_ngrams, len(data))
    n = len(data) - width + 1
    h = np.zeros(max(n, 0), dtype=np.uint64)
    for j in range(width):
        h = h * _HASH_BASE + data[j:j + n]
    h.sort()  # sort and drop repeats: np.unique's hash table is slower on these sizes
    return h[np.concatenate(([True], h[1:] != h[:-1]))] if h.size else h


def shingle_jaccard(a: str, b: str, char_ngrams: int = CHAR_NGRAMS) -> float:
    """Jaccard similarity of the ``char_ngrams``-character shingle sets of ``a`` and ``b``."""
    return _jaccard(shingle_hashes(a, char_ngrams), shingle_hashes(b, char_ngrams))


def _jaccard(x: np.ndarray, y: np.ndarray) -> float:
    """Jaccard of two sorted arrays of distinct hashes."""
    at = np.minimum(np.searchsorted(y, x), max(y.size - 1, 0))
    inter = int((y[at] == x).sum()) if y.size else 0
    union = x.size + y.size - inter
    return inter / union if union else 1.0


def _pair_jaccards(texts: list[str], pairs: np.ndarray, char_ngrams: int) -> np.ndarray:
    cache: dict[int, np.ndarray] = {}

    def hashes(d: int) -> np.ndarray:
        if d not in cache:
            cache[d] = shingle_hashes(texts[d], char_ngrams)
        return cache[d]

    return np.asarray([_jaccard(hashes(int(a)), hashes(int(b))) for a, b in pairs],
                      dtype=np.float64)


def _substitute(rng: np.random.Generator, doc: np.ndarray, rate: float, n_vocab: int
                ) -> np.ndarray:
    """A copy of ``doc`` (word indices) with ``k = round(rate * len)`` words replaced by
    others, one at a random place in each of ``k`` equal stretches: a fixed number of evenly
    spread edits makes the similarity of a copy vary less than a random number of edits that
    may fall side by side."""
    k = min(len(doc), round(rate * len(doc)))
    out = doc.copy()
    at: np.ndarray | list[int] = (
        ((np.arange(k) + rng.random(k)) * (len(doc) / k)).astype(np.int64) if k else [])
    out[at] = (out[at] + rng.integers(1, n_vocab, size=k)) % n_vocab
    return out


def _calibrate(docs: list[np.ndarray], vocab: np.ndarray, target: float, *, both_edited: bool,
               seed: int, char_ngrams: int) -> float:
    """The substitution rate at which the mean shingle Jaccard of a pair is ``target``: two
    edited copies (``both_edited``) or a document and one edited copy. Bisection, each step on
    the same random numbers, so the mean is monotone in the rate."""

    def mean_jaccard(rate: float) -> float:
        rng = np.random.default_rng([seed, 1])
        values = []
        for doc in docs:
            a = _substitute(rng, doc, rate, len(vocab)) if both_edited else doc
            b = _substitute(rng, doc, rate, len(vocab))
            values.append(_jaccard(shingle_hashes(" ".join(vocab[a].tolist()), char_ngrams),
                                   shingle_hashes(" ".join(vocab[b].tolist()), char_ngrams)))
        return float(np.mean(values))

    low, high = 0.0, 1.0
    for _ in range(16):
        mid = (low + high) / 2
        if mean_jaccard(mid) > target:
            low = mid
        else:
            high = mid
    return (low + high) / 2


def _cluster_sizes(rng: np.random.Generator, n_clustered: int, size: tuple[int, int]
                   ) -> np.ndarray:
    sizes: list[int] = []
    left = n_clustered
    while left >= size[0]:
        s = min(int(rng.integers(size[0], size[1] + 1)), left)
        if left - s == 1:  # a remainder of one cannot be a cluster: grow or shrink this one
            if s < size[1]:
                s += 1
            elif s - 1 >= size[0]:
                s -= 1  # (else the one document left over stays outside the clusters)
        sizes.append(s)
        left -= s
    return np.asarray(sizes, dtype=np.int64)


def _vocabulary(rng: np.random.Generator, vocabulary: int | Sequence[str]) -> np.ndarray:
    if not isinstance(vocabulary, int):
        words = list(dict.fromkeys(vocabulary))
        if len(words) < 2 or any(not w or any(ch.isspace() for ch in w) for w in words):
            msg = ("vocabulary must hold at least 2 distinct non-empty words without "
                   f"whitespace, got {len(words)} distinct (first: {words[:3]!r})")
            raise ValueError(msg)
        return np.asarray(words, dtype=object)
    if vocabulary < 2:
        msg = f"vocabulary={vocabulary} must be at least 2 words"
        raise ValueError(msg)
    letters = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz", dtype=np.uint8)
    words_out: dict[str, None] = {}
    while len(words_out) < vocabulary:
        lengths = rng.integers(2, 11, vocabulary)
        codes = letters[rng.integers(0, 26, int(lengths.sum()))].tobytes().decode()
        ends = np.cumsum(lengths)
        for start, end in zip(ends - lengths, ends, strict=True):
            words_out[codes[start:end]] = None
            if len(words_out) == vocabulary:
                break
    return np.asarray(list(words_out), dtype=object)


def _check(n_docs: int, words: tuple[int, int], cluster_fraction: float,
           cluster_size: tuple[int, int], similarity: float, far_pair_fraction: float,
           far_similarity: float) -> None:
    problems = []
    if n_docs < 1:
        problems.append(f"n_docs={n_docs} must be at least 1")
    if not 1 <= words[0] <= words[1]:
        problems.append(f"words={words} must be (low, high) with 1 <= low <= high")
    if not 2 <= cluster_size[0] <= cluster_size[1]:
        problems.append(f"cluster_size={cluster_size} must be (low, high) with 2 <= low <= high")
    if min(cluster_fraction, far_pair_fraction) < 0 or cluster_fraction + far_pair_fraction > 1:
        problems.append(f"cluster_fraction={cluster_fraction} and far_pair_fraction="
                        f"{far_pair_fraction} must be >= 0 and add up to at most 1")
    if not 0 < far_similarity < similarity <= 1:
        problems.append(f"similarities must satisfy 0 < far_similarity ({far_similarity}) "
                        f"< similarity ({similarity}) <= 1")
    if problems:
        msg = "planted_corpus: " + "; ".join(problems)
        raise ValueError(msg)


def _write_atomically(path: str, data: bytes) -> None:
    with open(path + ".tmp", "wb") as f:
        f.write(data)
    os.replace(path + ".tmp", path)
