"""MinHash signatures (curator_dask/dedup/fuzzy/minhash.py): the vectorised computation equals a
slow reference written with Python sets of shingles and Python integers, the signatures'
agreement estimates the true shingle Jaccard, a seed fixes them. Pure code, no cluster."""

from __future__ import annotations

import random

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from curator_dask.dedup.fuzzy import minhash as mh
from curator_dask.dedup.fuzzy.minhash import (
    MINHASH_FIELD,
    MinHashSignature,
    hash_parameters,
    minhash_signatures,
    signature_array,
    signature_matrix,
)

M64 = (1 << 64) - 1


def shingles(text: str | None, k: int) -> set[str]:
    """The reference shingle set: every k-character window; a shorter text is one shingle."""
    text = text or ""
    return {text[i:i + k] for i in range(max(len(text) - k + 1, 1))}


def fmix(x: int) -> int:
    x ^= x >> 33
    x = (x * 0xFF51AFD7ED558CCD) & M64
    x ^= x >> 33
    x = (x * 0xC4CEB9FE1A85EC53) & M64
    return x ^ (x >> 33)


def shingle_hash(shingle: str, base: int) -> int:
    """The documented hash: polynomial of (UTF-8 byte + 1) in ``base``, then murmur3's
    finaliser; all mod 2**64."""
    raw, power = 0, 1
    data = shingle.encode("utf-8")
    for byte in data:
        raw = (raw + (byte + 1) * power) & M64
        power = (power * base) & M64
    return fmix(raw)


def reference_signature(text: str | None, k: int, seed: int, num_hashes: int,
                        use_64: bool) -> list[int]:
    p = hash_parameters(seed, num_hashes, use_64)
    hashes = [shingle_hash(s, p.base) for s in shingles(text, k)]
    if use_64:
        return [min((int(a) * h + int(b)) & M64 for h in hashes)
                for a, b in zip(p.a, p.b, strict=True)]
    return [min((int(a) * (h >> 32) + int(b)) & 0xFFFFFFFF for h in hashes)
            for a, b in zip(p.a, p.b, strict=True)]


def true_jaccard(a: str, b: str, k: int) -> float:
    sa, sb = shingles(a, k), shingles(b, k)
    return len(sa & sb) / len(sa | sb)


def edited(rng: random.Random, words: list[str], rate: float) -> str:
    out = [w if rng.random() > rate else rng.choice(["alpha", "beta", "gamma", "delta", "x"])
           for w in words]
    return " ".join(out)


TEXTS = [
    "The quick brown fox jumps over the lazy dog, again and again and again.",
    "short",
    "",
    None,
    "exactly twenty-four ch.",  # 23 characters: one shingle
    "exactly twenty-four chr.",  # 24 characters: one shingle
    "Ünïcödé wörds — ‘quotes’ and emoji 😀😀 mixed into a text longer than the width",
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",  # one distinct shingle
    "a\x00b\x00c NUL bytes inside this one, and \t tabs \n newlines",
]


@pytest.mark.parametrize("use_64", [False, True])
def test_signatures_equal_the_slow_reference(use_64):
    sig = minhash_signatures(TEXTS, seed=7, num_hashes=24, char_ngrams=24,
                             use_64_bit_hash=use_64)
    assert sig.dtype == (np.uint64 if use_64 else np.uint32)
    assert sig.shape == (len(TEXTS), 24)
    for row, text in zip(sig, TEXTS, strict=True):
        assert row.tolist() == reference_signature(text, 24, 7, 24, use_64), text


def test_batches_and_chunks_do_not_change_the_result(monkeypatch):
    """Documents split across permutation chunks and across text batches (a document longer
    than a batch) give the same signatures as one pass."""
    rng = random.Random(3)
    texts = [" ".join(rng.choice(["lorem", "ipsum", "dolor", "sit", "amet", "é"])
                      for _ in range(rng.randint(1, 400))) for _ in range(40)]
    whole = minhash_signatures(texts, num_hashes=16, char_ngrams=5)
    monkeypatch.setattr(mh, "_BATCH_BYTES", 300)
    monkeypatch.setattr(mh, "_CHUNK", 64)
    assert np.array_equal(minhash_signatures(texts, num_hashes=16, char_ngrams=5), whole)
    assert minhash_signatures(texts[:1], num_hashes=16, char_ngrams=5).tolist() == [
        reference_signature(texts[0], 5, 42, 16, False)]


def test_estimated_jaccard_tracks_the_true_jaccard():
    rng = random.Random(11)
    vocab = [f"w{i}" for i in range(3000)]
    pairs, truth = [], []
    for rate in (0.02, 0.05, 0.1, 0.2, 0.35, 0.5):
        for _ in range(4):
            words = [rng.choice(vocab) for _ in range(rng.randint(150, 400))]
            a, b = " ".join(words), edited(rng, words, rate)
            pairs.append((a, b))
            truth.append(true_jaccard(a, b, 24))
    sig_a = minhash_signatures([a for a, _ in pairs])
    sig_b = minhash_signatures([b for _, b in pairs])
    estimate = (sig_a == sig_b).mean(axis=1)
    error = np.abs(estimate - np.asarray(truth))
    assert min(truth) < 0.3 and max(truth) > 0.85  # the pairs span the range
    # 260 hashes: the standard error is at most sqrt(0.25 / 260) = 0.031
    assert error.max() < 0.1, list(zip(truth, estimate, strict=True))
    assert error.mean() < 0.03


def test_unrelated_documents_share_almost_no_values():
    rng = random.Random(5)
    docs = [" ".join(f"t{rng.randrange(10**6)}" for _ in range(300)) for _ in range(30)]
    sig = minhash_signatures(docs, use_64_bit_hash=False)
    agree = [(sig[i] == sig[j]).mean() for i in range(30) for j in range(i + 1, 30)]
    assert max(agree) < 0.02


def test_a_seed_fixes_the_signatures_and_another_changes_them():
    one = minhash_signatures(TEXTS, seed=1, num_hashes=32)
    assert np.array_equal(one, minhash_signatures(TEXTS, seed=1, num_hashes=32))
    other = minhash_signatures(TEXTS, seed=2, num_hashes=32)
    assert (one != other).mean() > 0.9
    # the constants are a function of the seed alone: pinned, so a numpy upgrade cannot
    # silently change every signature of a checkpoint
    p = hash_parameters(42, 2, True)
    assert [p.base, *map(int, p.a), *map(int, p.b)] == PINNED_42


PINNED_42 = [16774671638949507337, 17095148956929344043, 10831612129113404591,
             2349795952729772421, 4100462258288108073]


def test_identical_texts_identical_signatures_and_nulls_are_empty_text():
    sig = minhash_signatures(["same words here", "same words here", None, ""], num_hashes=8)
    assert np.array_equal(sig[0], sig[1])
    assert np.array_equal(sig[2], sig[3])


def test_the_phase1_callable_returns_nemos_column_type():
    frame = pd.DataFrame({"content": ["a text of some length here", None, "x"]})
    for use_64, value_type in ((False, pa.uint32()), (True, pa.uint64())):
        table = MinHashSignature(num_hashes=10, text_field="content",
                                 use_64_bit_hash=use_64)(frame)
        assert table.column_names == [MINHASH_FIELD]
        assert table.schema.field(MINHASH_FIELD).type == pa.list_(value_type)
        back = signature_matrix(table.column(MINHASH_FIELD), 10)
        assert np.array_equal(back, minhash_signatures(frame["content"], num_hashes=10,
                                                       use_64_bit_hash=use_64))


def test_normalize_text_lowers_and_collapses_spaces_before_hashing():
    frame = pd.DataFrame({"text": ["Hello   World  of text", "hello world of text"]})
    plain = signature_matrix(MinHashSignature(num_hashes=8)(frame).column(0), 8)
    normal = signature_matrix(
        MinHashSignature(num_hashes=8, normalize_text=True)(frame).column(0), 8)
    assert not np.array_equal(plain[0], plain[1])
    assert np.array_equal(normal[0], normal[1])


def test_a_signature_file_of_other_parameters_is_refused_with_the_fix():
    column = signature_array(np.zeros((3, 4), dtype=np.uint32))
    with pytest.raises(ValueError, match="checkpoint_path"):
        signature_matrix(column, 5)


def test_bad_parameters_are_refused():
    with pytest.raises(ValueError, match="char_ngrams=0"):
        minhash_signatures(["x"], char_ngrams=0)
