"""Faster equivalents of Data-Juicer's hottest text operators, with exactly its output.

Data-Juicer's text operators spend their time in per-word Python loops and in regular
expressions run over every character of every document. :func:`fast_equivalent` gives, for an
operator built by Data-Juicer's ``load_ops``, an object with the same calling convention
(``process(samples)`` for a Mapper, ``compute_stats(samples)`` for a Filter, on one batch in
Hugging Face's dict-of-lists form) that returns what the operator returns, or ``None`` where
there is no equivalent for this operator or these parameters (then the operator's own code
runs). Each equivalent reads its parameters from the operator instance, so the recipe's
parameters are honoured, and hands the whole batch to the operator itself when a text is not a
``str``, so errors and ``skip_op_error`` behave as Data-Juicer's.

Why each one is exact (the tests compare with Data-Juicer row for row):

- ``remove_long_words_mapper``: the split on ``\\n``, ``\\t`` and ``" "`` and the merge that
  drops empty pieces are done with ``str.split``/``str.join``; words are checked one by one
  only where a regular expression found a word outside the length range.
- ``clean_email_mapper`` (default pattern): every match is made of the characters
  ``[A-Za-z0-9.\\-+_@]`` and holds an ``@``, and the pattern has no anchor or look-around, so
  the same compiled pattern run on each maximal run of those characters that holds an ``@``
  gives the same matches as on the whole text.
- ``clean_links_mapper`` (default pattern): every match holds no ``\\s`` and holds ``:``,
  ``/`` or ``www``; its only look-around is a leading ``\\b``, which at the start of a run of
  non-``\\s`` characters is the same whether a ``\\s`` or the start of the text precedes it; so
  the pattern runs on those runs only.
- other patterns of those two: one ``sub`` per text (Data-Juicer runs ``search`` then ``sub``;
  ``sub`` alone changes a text exactly when ``search`` finds a match).
- ``punctuation_normalization_mapper``, ``whitespace_normalization_mapper``: ``str.translate``
  with the operator's own tables.
- ``character_repetition_filter``: n-grams counted exactly (dense integer codes of the
  characters, ranked with numpy; no hashing), the same integer sums and the same division.
"""

from __future__ import annotations

import string
from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np

STATS_KEY = "__dj__stats__"

FAST_OPS: frozenset[str] = frozenset(
    {
        "remove_long_words_mapper",
        "clean_email_mapper",
        "clean_links_mapper",
        "punctuation_normalization_mapper",
        "whitespace_normalization_mapper",
        "character_repetition_filter",
    }
)

# Data-Juicer 1.6's default patterns. The exactness arguments above hold for these patterns
# only; any other pattern takes the generic one-``sub`` path.
DEFAULT_EMAIL_PATTERN = r"[A-Za-z0-9.\-+_]+@[a-z0-9.\-+_]+\.[a-z]+"
DEFAULT_LINK_PATTERN = (
    r"(?i)\b("
    r"(?:[a-z][\w-]+:(?:\/{1,3}|"
    r"[a-z0-9%])|www\d{0,3}[.]|"
    r"[a-z0-9.\-]+[.][a-z]{2,4}\/)"
    r"(?:[^\s()<>]+|\(([^\s()<>]+|"
    r"(\([^\s()<>]+\)))*\))"
    r"+(?:\(([^\s()<>]+|(\([^\s()<>]+\)))*\)|"
    r"[^\s`!()\[\]{};:\'\".,<>?«»“”‘’])"
    r")"
)
_EMAIL_CHARS = string.ascii_letters + string.digits + ".-+_@"
# Regular expressions above this repeat count are refused by the engines; such a max_len
# cannot be exceeded by any realistic word, so the length of the text decides instead.
_MAX_REPEAT = 1 << 20
# Below this many characters, counting n-grams in Python beats numpy's fixed costs.
_NUMPY_MIN_CHARS = 512


class FastOp:
    """An equivalent of one Data-Juicer operator, called as the executor calls the operator.

    Example:
        >>> fast = fast_equivalent(op)  # doctest: +SKIP
        >>> batch = fast.process(batch) if fast is not None else op.process(batch)  # doctest: +SKIP
    """

    name = ""

    def __init__(self, op: Any) -> None:
        self.op = op
        self.text_key: str = op.text_key

    def _texts_are_str(self, samples: dict[str, list]) -> bool:
        return all(type(text) is str for text in samples[self.text_key])


class _FastMapper(FastOp):
    def process(self, samples: dict[str, list]) -> dict[str, list]:
        """The batch as the operator's ``process(samples)`` returns it."""
        if not self._texts_are_str(samples):
            return self.op.process(samples)
        texts = samples[self.text_key]
        transform = self._transform
        for idx, text in enumerate(texts):
            texts[idx] = transform(text)
        return samples

    def _transform(self, text: str) -> str:
        raise NotImplementedError


class RemoveLongWords(_FastMapper):
    name = "remove_long_words_mapper"

    def __init__(self, op: Any, strip_chars: str) -> None:
        super().__init__(op)
        self.min_len = op.min_len
        self.max_len = op.max_len
        self.strip_chars = strip_chars
        import re

        self._unnormalised = re.compile(r"[ \t\n]{2}|\A[ \t\n]|[ \t\n]\Z")
        # Words this long may be dropped; without one (and with min_len <= 1, which every
        # non-empty word meets) only the merge's dropping of empty pieces changes the text.
        self._long = None
        if self.max_len < _MAX_REPEAT:
            self._long = re.compile(rf"[^ \t\n]{{{max(self.max_len, -1) + 1},}}")

    def _keep(self, word: str) -> bool:
        word_len = len(word)
        if self.min_len <= word_len <= self.max_len:
            return True
        if word_len > self.max_len:
            return self.min_len <= len(word.strip(self.strip_chars)) <= self.max_len
        return False

    def _transform(self, text: str) -> str:
        if self.min_len <= 1:
            if self._long is None:
                has_long = len(text) > self.max_len
            else:
                has_long = self._long.search(text) is not None
            if not has_long:
                if self._unnormalised.search(text) is None:
                    return text
                return _merge_pieces(text, None)
        return _merge_pieces(text, self._keep)


def _merge_pieces(text: str, keep: Callable[[str], bool] | None) -> str:
    """Split on newline, tab and space, keep the words ``keep`` keeps, merge without empty
    pieces: Data-Juicer's split_on_newline_tab_whitespace / merge_on_whitespace_tab_newline."""
    lines = []
    for line in text.split("\n"):
        fields = []
        for field in line.split("\t"):
            if keep is None:
                merged = " ".join(filter(None, field.split(" ")))
            else:
                merged = " ".join([w for w in field.split(" ") if w and keep(w)])
            if merged:
                fields.append(merged)
        if fields:
            lines.append("\t".join(fields))
    return "\n".join(lines)


class _RegexSub(_FastMapper):
    """A pattern with no known structure: one ``sub`` per text."""

    def __init__(self, op: Any) -> None:
        super().__init__(op)
        import regex

        self.compiled = regex.compile(op.pattern, flags=regex.DOTALL)
        self.repl: str = op.repl

    def _transform(self, text: str) -> str:
        return self.compiled.sub(self.repl, text)


class CleanEmail(_RegexSub):
    name = "clean_email_mapper"

    def __init__(self, op: Any) -> None:
        super().__init__(op)
        import regex

        chars = regex.escape(_EMAIL_CHARS)
        self._run_right = regex.compile(f"[{chars}]*")
        self._run_left = regex.compile(f"(?r)[{chars}]*")

    def _transform(self, text: str) -> str:
        at = text.find("@")
        if at < 0:
            return text
        pieces: list[str] = []
        done = 0
        while at >= 0:
            start = self._run_left.match(text, done, at).start()
            end = self._run_right.match(text, at).end()
            pieces.append(text[done:start])
            pieces.append(self.compiled.sub(self.repl, text[start:end]))
            done = end
            at = text.find("@", end)
        pieces.append(text[done:])
        return "".join(pieces)


class CleanLinks(_RegexSub):
    name = "clean_links_mapper"

    def __init__(self, op: Any) -> None:
        super().__init__(op)
        import regex

        # Each match starts with one of the pattern's three prefixes, each of which holds
        # one of these (under the same case folding).
        self._candidate = regex.compile(r":[/a-z0-9%]|www|\.[a-z]{2,4}/", flags=regex.IGNORECASE)
        self._token_right = regex.compile(r"\S*")
        self._token_left = regex.compile(r"(?r)\S*")

    def _transform(self, text: str) -> str:
        found = self._candidate.search(text)
        if found is None:
            return text
        pieces: list[str] = []
        done = 0
        while found is not None:
            pos = found.start()
            start = self._token_left.match(text, done, pos).start()
            end = self._token_right.match(text, pos).end()
            pieces.append(text[done:start])
            pieces.append(self.compiled.sub(self.repl, text[start:end]))
            done = end
            found = self._candidate.search(text, end)
        pieces.append(text[done:])
        return "".join(pieces)


class _Translate(_FastMapper):
    def __init__(self, op: Any, table: dict[str, str]) -> None:
        super().__init__(op)
        import re

        chars = {c: r for c, r in table.items() if c != r}
        self._chars = chars
        # One scan of the compiled class beats ``str.translate``, which looks up every
        # character of the text in a dict; most texts hold few or none of these characters.
        self._any = re.compile("[" + "".join(re.escape(c) for c in sorted(chars)) + "]")
        replacements = set(chars.values())
        self._replace: str | Callable[[re.Match[str]], str] = lambda m: chars[m.group()]
        if len(replacements) == 1 and "\\" not in next(iter(replacements)):
            # one replacement with no backslash: the engine inserts it literally
            self._replace = next(iter(replacements))

    def _translate(self, text: str) -> str:
        if not self._chars:
            return text
        return self._any.sub(self._replace, text)


class PunctuationNormalization(_Translate):
    name = "punctuation_normalization_mapper"

    def process(self, samples: dict[str, list]) -> dict[str, list]:
        """The batch as the operator's ``process(samples)`` returns it."""
        if not self._texts_are_str(samples):
            return self.op.process(samples)
        # Data-Juicer puts a new list in the batch here (the others edit it in place).
        samples[self.text_key] = [self._translate(text) for text in samples[self.text_key]]
        return samples


class WhitespaceNormalization(_Translate):
    name = "whitespace_normalization_mapper"

    def _transform(self, text: str) -> str:
        return self._translate(text.strip())


class CharacterRepetition(FastOp):
    name = "character_repetition_filter"
    stat = "char_rep_ratio"

    def __init__(self, op: Any) -> None:
        super().__init__(op)
        self.n: int = op.n

    def compute_stats(self, samples: dict[str, list]) -> dict[str, list]:
        """The batch as the operator's ``compute_stats(samples)`` returns it: each row's stats
        dict gets ``char_rep_ratio`` unless it has one already."""
        texts = samples[self.text_key]
        stats = samples[STATS_KEY]
        todo = [idx for idx, stat in enumerate(stats) if self.stat not in stat]
        if not all(type(texts[idx]) is str for idx in todo):
            return self.op.compute_stats(samples)
        for idx in todo:
            stats[idx][self.stat] = self._ratio(texts[idx])
        return samples

    def _ratio(self, text: str) -> float:
        n = self.n
        windows = len(text) - n + 1
        if windows <= 0:
            return 0.0
        counts = _ngram_counts(text, n) if len(text) >= _NUMPY_MIN_CHARS else None
        if counts is None:
            counted = Counter(text[i : i + n] for i in range(windows))
            values = sorted(counted.values(), reverse=True)
        else:
            values = sorted(counts.tolist(), reverse=True)
        distinct = len(values)
        singletons = values.count(1)
        top = min(int(np.sqrt(distinct)), distinct - singletons)
        total = sum(values)
        return (sum(values[:top]) / total) if total != 0 else 0.0


def _ngram_counts(text: str, n: int) -> np.ndarray | None:
    """How often each distinct character n-gram of ``text`` occurs (in no given order), or None
    where the n-grams do not fit the exact packing (then the caller counts them in Python)."""
    try:
        raw = text.encode("utf-32-le")
    except UnicodeEncodeError:  # lone surrogates
        return None
    points = np.frombuffer(raw, dtype=np.uint32)
    windows = len(points) - n + 1
    alphabet = np.unique(points)
    codes = np.searchsorted(alphabet, points).astype(np.int64)
    bits = max(1, (len(alphabet) - 1).bit_length())
    # Each window packed exactly (no hashing): one int64 when it fits, else two halves of at
    # most 53 bits each, exact in the real and imaginary parts of a complex128, which numpy
    # sorts lexicographically.
    if n * bits <= 63:
        keys: np.ndarray = _packed(codes, 0, n, bits, windows)
    elif n * bits <= 106:
        head = 53 // bits
        keys = np.empty(windows, dtype=np.complex128)
        keys.real = _packed(codes, 0, head, bits, windows)
        keys.imag = _packed(codes, head, n, bits, windows)
    else:
        return None
    keys.sort()
    starts = np.empty(windows, dtype=bool)
    starts[0] = True
    np.not_equal(keys[1:], keys[:-1], out=starts[1:])
    return np.diff(np.append(np.flatnonzero(starts), windows))


def _packed(codes: np.ndarray, first: int, stop: int, bits: int, windows: int) -> np.ndarray:
    """Characters ``first..stop-1`` of every window packed into one int64 per window."""
    group = np.zeros(windows, dtype=np.int64)
    for offset in range(first, stop):
        group <<= bits
        group |= codes[offset : offset + windows]
    return group


def _single_chars(chars: Any) -> str:
    return "".join(sorted(c for c in chars if isinstance(c, str) and len(c) == 1))


def fast_equivalent(op: Any) -> FastOp | None:
    """The faster equivalent of Data-Juicer operator ``op`` (built by ``load_ops``), or None
    where there is none for this operator or these parameters.

    Example:
        >>> from data_juicer.ops import load_ops  # doctest: +SKIP
        >>> op = load_ops([{"clean_email_mapper": {}}])[0]  # doctest: +SKIP
        >>> fast_equivalent(op).process({"text": ["mail a@b.cd now"]})  # doctest: +SKIP
        {'text': ['mail  now']}
    """
    name = getattr(op, "_name", "")
    if name not in FAST_OPS:
        return None
    text_key = getattr(op, "text_key", None)
    # A dotted key is a nested field for Data-Juicer's nested-access wrappers.
    if not isinstance(text_key, str) or "." in text_key:
        return None
    if getattr(op, "batch_mode", None) is False:
        return None
    builder = _BUILDERS[name]
    return builder(op)


def _build_remove_long_words(op: Any) -> FastOp | None:
    numbers = (int, float)
    if not (isinstance(op.min_len, numbers) and isinstance(op.max_len, numbers)):
        return None
    if isinstance(op.min_len, bool) or isinstance(op.max_len, bool):
        return None
    if not (isinstance(op.max_len, int) and isinstance(op.min_len, int)):
        return None
    from data_juicer.ops.common import SPECIAL_CHARACTERS

    return RemoveLongWords(op, _single_chars(SPECIAL_CHARACTERS))


def _build_regex(kind: type[_RegexSub], default: str) -> Callable[[Any], FastOp | None]:
    def build(op: Any) -> FastOp | None:
        if not isinstance(op.pattern, str) or not isinstance(op.repl, str):
            return None
        if op.pattern == default:
            return kind(op)
        return _GenericSub(op, kind.name)

    return build


class _GenericSub(_RegexSub):
    def __init__(self, op: Any, name: str) -> None:
        super().__init__(op)
        self.name = name


def _build_punctuation(op: Any) -> FastOp | None:
    mapping = getattr(op, "punctuation_unicode", None)
    if not isinstance(mapping, dict):
        return None
    if not all(isinstance(v, str) for v in mapping.values()):
        return None
    table = {k: v for k, v in mapping.items() if isinstance(k, str) and len(k) == 1}
    return PunctuationNormalization(op, table)


def _build_whitespace(op: Any) -> FastOp | None:
    from data_juicer.ops.common.special_characters import VARIOUS_WHITESPACES

    return WhitespaceNormalization(op, {c: " " for c in _single_chars(VARIOUS_WHITESPACES)})


def _build_char_rep(op: Any) -> FastOp | None:
    if not isinstance(op.n, int) or isinstance(op.n, bool) or op.n < 1:
        return None
    return CharacterRepetition(op)


_BUILDERS: dict[str, Callable[[Any], FastOp | None]] = {
    "remove_long_words_mapper": _build_remove_long_words,
    "clean_email_mapper": _build_regex(CleanEmail, DEFAULT_EMAIL_PATTERN),
    "clean_links_mapper": _build_regex(CleanLinks, DEFAULT_LINK_PATTERN),
    "punctuation_normalization_mapper": _build_punctuation,
    "whitespace_normalization_mapper": _build_whitespace,
    "character_repetition_filter": _build_char_rep,
}

__all__ = ["FAST_OPS", "FastOp", "fast_equivalent"]
