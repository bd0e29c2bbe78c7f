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
- ``character_repetition_filter``: each n-gram written exactly as a number in base (number of
  distinct characters of the text) over dense character codes, grouped by the first character
  where it needs more than 64 bits, and counted by sorting (no hashing); where two numbers do
  not suffice, or for short texts, counted in Python. Same integer sums, same division.
- ``words_num_filter`` (no tokenization), ``alphanumeric_filter`` (no tokenization),
  ``special_characters_filter``: one numpy pass over the batch's code points with a table of
  the characters Data-Juicer tests one at a time (``SPECIAL_CHARACTERS``' single characters,
  ``str.isalnum``); a word survives Data-Juicer's split on space, tab and newline and its
  strip of special characters exactly when it holds a character that is not special. Counts
  are Python ints divided as Data-Juicer divides them.
- ``text_length_filter``, ``average_line_length_filter``, ``maximum_line_length_filter``: the
  same expressions (``len``, ``str.splitlines``) without the per-row wrappers.
- ``clean_copyright_mapper``: the comment-block pattern (the operator's own) only runs on texts
  holding ``/*``; the leading comment lines are read one by one instead of splitting the text.
- ``remove_specific_chars_mapper``: the operator's own pattern, compiled once, run only on texts
  that hold one of its characters (read back from the pattern, checked by re-escaping).
- Filters keep a stat already present in a row's stats (Data-Juicer's caching) and never use
  the ``context`` cache (the executor does not pass ``context``).
"""

from __future__ import annotations

import string
from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np

STATS_KEY = "__dj__stats__"


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


class _FastFilter(FastOp):
    """A Filter whose stat is computed for the rows of a batch that do not have it yet."""

    stat = ""

    def compute_stats(self, samples: dict[str, list]) -> dict[str, list]:
        """The batch as the operator's ``compute_stats(samples)`` returns it: each row's stats
        dict gets the operator's stat unless it has one already (Data-Juicer's caching)."""
        texts = samples[self.text_key]
        stats = samples[STATS_KEY]
        todo = [idx for idx, stat in enumerate(stats) if self.stat not in stat]
        if not all(type(texts[idx]) is str for idx in todo):
            return self.op.compute_stats(samples)
        if todo:
            values = self._values([texts[idx] for idx in todo])
            for idx, value in zip(todo, values, strict=True):
                stats[idx][self.stat] = value
        return samples

    def _values(self, texts: list[str]) -> list[Any]:
        raise NotImplementedError


class CharacterRepetition(_FastFilter):
    name = "character_repetition_filter"
    stat = "char_rep_ratio"

    def __init__(self, op: Any) -> None:
        super().__init__(op)
        self.n: int = op.n

    def _values(self, texts: list[str]) -> list[Any]:
        return [self._ratio(text) for text in texts]

    def _ratio(self, text: str) -> float:
        n = self.n
        windows = len(text) - n + 1
        if windows <= 0:
            return 0.0
        counts = _ngram_counts(text, n) if len(text) >= _NUMPY_MIN_CHARS else None
        if counts is None:
            values = list(Counter(text[i : i + n] for i in range(windows)).values())
            distinct = len(values)
            repeated = sorted((v for v in values if v != 1), reverse=True)
        else:
            distinct = len(counts)
            repeated = sorted(counts[counts != 1].tolist(), reverse=True)
        # Data-Juicer sorts all counts and takes the largest ``top``; ``top`` is at most the
        # number of repeated n-grams, so the repeated ones alone give the same sum. The total
        # of all counts is the number of windows.
        top = min(int(np.sqrt(distinct)), len(repeated))
        return sum(repeated[:top]) / windows


def _ngram_counts(text: str, n: int) -> np.ndarray | None:
    """How often each distinct character n-gram of ``text`` occurs, in no given order, or None
    where an n-gram needs more than two 64-bit numbers (then the caller counts in Python).

    Each window is the number its characters' dense codes write in base ``base`` (the number
    of distinct characters): exact, so equal windows give equal numbers and different windows
    different ones. Where that number needs more than 64 bits, windows are grouped by their
    first character, so that within a group the rest of the number fits.
    """
    points = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
    windows = len(points) - n + 1
    codes, base = _dense_codes(points)
    tail = base ** (n - 1)
    if tail * base <= 1 << 64:
        return _run_lengths([_polynomial(codes, 0, n, base, windows)])
    if tail < 1 << 64:
        per_group = (1 << 64) // tail
        keys = _polynomial(codes, 1, n, base, windows)
        lead = codes[:windows]
        group = lead // np.uint64(per_group)
        keys += (lead - group * np.uint64(per_group)) * np.uint64(tail)
        if int(group.max()) < 1 << 16:
            group = group.astype(np.uint16)  # numpy sorts 16-bit keys stably by radix
        return _run_lengths([group, keys])
    return None


def _polynomial(codes: np.ndarray, first: int, stop: int, base: int, windows: int) -> np.ndarray:
    """Codes ``first..stop-1`` of every window as one number in base ``base`` (the caller
    checks that it fits 64 bits)."""
    keys = np.zeros(windows, dtype=np.uint64)
    step = np.uint64(base)
    for offset in range(first, stop):
        keys *= step
        keys += codes[offset : offset + windows]
    return keys


def _run_lengths(parts: list[np.ndarray]) -> np.ndarray:
    """How often each distinct key occurs, a key being the tuple of ``parts`` at one index.

    Only equality matters, so 64-bit parts are sorted as int64 (faster than uint64 in numpy).
    Two parts: a small group number first, sorted stably, then the second part within each
    group.
    """
    parts = [p.view(np.int64) if p.dtype == np.uint64 else p for p in parts]
    if len(parts) == 1:
        ordered = [np.sort(parts[0])]
    else:
        order = np.argsort(parts[0], kind="stable")
        ordered = [parts[0][order], parts[1][order]]
        edges = np.flatnonzero(ordered[0][1:] != ordered[0][:-1]) + 1
        for start, stop in zip([0, *edges.tolist()], [*edges.tolist(), len(order)], strict=True):
            ordered[1][start:stop].sort()
    size = len(ordered[0])
    starts = np.zeros(size, dtype=bool)
    starts[:1] = True
    for part in ordered:
        starts[1:] |= part[1:] != part[:-1]
    return np.diff(np.append(np.flatnonzero(starts), size))


def _dense_codes(points: np.ndarray) -> tuple[np.ndarray, int]:
    """Each code point's rank among the text's distinct code points, and how many there are."""
    top = int(points.max())
    if top < 1 << 16:
        present = np.bincount(points, minlength=top + 1) > 0
        ranks = np.cumsum(present, dtype=np.uint64) - np.uint64(1)
        return ranks[points], int(ranks[-1]) + 1
    alphabet = np.unique(points)
    return np.searchsorted(alphabet, points).astype(np.uint64), len(alphabet)


# --- per-character filters: one pass of numpy over the whole batch ---------------------------

_UNICODE_SIZE = 0x110000


def _code_points(texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """The batch's code points, end to end (lone surrogates included), and where each text
    starts and ends in them (``bounds[i]:bounds[i + 1]``)."""
    bounds = np.zeros(len(texts) + 1, dtype=np.int64)
    np.cumsum([len(text) for text in texts], out=bounds[1:])
    raw = "".join(texts).encode("utf-32-le", "surrogatepass")
    return np.frombuffer(raw, dtype=np.uint32), bounds


def _per_text(positions: np.ndarray, bounds: np.ndarray) -> list[int]:
    """How many of the (sorted) ``positions`` fall in each text."""
    return np.diff(np.searchsorted(positions, bounds)).tolist()


def _membership(chars: str) -> np.ndarray:
    table = np.zeros(_UNICODE_SIZE, dtype=bool)
    table[[ord(c) for c in chars]] = True
    return table


class _AlnumTable:
    """``str.isalnum`` of every code point below ``size``, grown on demand (the whole of
    Unicode takes a noticeable fraction of a second; most batches stay below U+0800)."""

    def __init__(self) -> None:
        self.table = np.zeros(0, dtype=bool)

    def upto(self, top: int) -> np.ndarray:
        if top >= len(self.table):
            import re

            size = min(_UNICODE_SIZE, max(256, 1 << top.bit_length()))
            table = np.zeros(size, dtype=bool)
            table[: len(self.table)] = self.table
            chunk = "".join(map(chr, range(len(self.table), size)))
            # sre's \w is str.isalnum() or "_" (tests check the table against isalnum)
            alnum = re.sub(r"[\W_]+", "", chunk).encode("utf-32-le", "surrogatepass")
            table[np.frombuffer(alnum, dtype=np.uint32)] = True
            self.table = table
        return self.table


_ALNUM = _AlnumTable()


def _ratios(counts: list[int], texts: list[str]) -> list[float]:
    # Python ints divided as Data-Juicer divides them: the same float.
    return [
        count / len(text) if len(text) != 0 else 0.0
        for count, text in zip(counts, texts, strict=True)
    ]


class Alphanumeric(_FastFilter):
    name = "alphanumeric_filter"
    stat = "alnum_ratio"

    def _values(self, texts: list[str]) -> list[Any]:
        points, bounds = _code_points(texts)
        if len(points) == 0:
            return [0.0] * len(texts)
        table = _ALNUM.upto(int(points.max()))
        return _ratios(_per_text(np.flatnonzero(table[points]), bounds), texts)


class SpecialCharacters(_FastFilter):
    name = "special_characters_filter"
    stat = "special_char_ratio"

    def __init__(self, op: Any, special: str) -> None:
        super().__init__(op)
        self.table = _membership(special)

    def _values(self, texts: list[str]) -> list[Any]:
        points, bounds = _code_points(texts)
        return _ratios(_per_text(np.flatnonzero(self.table[points]), bounds), texts)


class WordsNum(_FastFilter):
    """Data-Juicer splits on ``" "``, ``"\\n"`` and ``"\\t"``, strips each word of the special
    characters and counts the words left non-empty: the words holding a character that is
    not special. Counted here as the first such character of each word."""

    name = "words_num_filter"
    stat = "num_words"

    def __init__(self, op: Any, special: str) -> None:
        super().__init__(op)
        self.table = _membership(special)

    def _values(self, texts: list[str]) -> list[Any]:
        points, bounds = _code_points(texts)
        if len(points) == 0:
            return [0] * len(texts)
        # word numbers: +1 after every separator and at the start of every text
        breaks = (points == 32) | (points == 10) | (points == 9)
        breaks[bounds[:-1][bounds[:-1] < len(points)]] = True
        word = np.cumsum(breaks, dtype=np.int32 if len(points) < 1 << 31 else np.int64)
        # separators are special characters too, so these are all inside words
        plain = np.flatnonzero(~self.table[points])
        words_of_plain = word[plain]
        first = np.ones(len(plain), dtype=bool)
        np.not_equal(words_of_plain[1:], words_of_plain[:-1], out=first[1:])
        return _per_text(plain[first], bounds)


class TextLength(_FastFilter):
    name = "text_length_filter"
    stat = "text_len"

    def _values(self, texts: list[str]) -> list[Any]:
        return [len(text) for text in texts]


class AverageLineLength(_FastFilter):
    name = "average_line_length_filter"
    stat = "avg_line_length"

    def _values(self, texts: list[str]) -> list[Any]:
        out: list[Any] = []
        for text in texts:
            lines = len(text.splitlines())
            out.append(len(text) / lines if lines != 0 else 0.0)
        return out


class MaximumLineLength(_FastFilter):
    name = "maximum_line_length_filter"
    stat = "max_line_length"

    def _values(self, texts: list[str]) -> list[Any]:
        return [max(map(len, text.splitlines()), default=0) for text in texts]


class CleanCopyright(_FastMapper):
    """The comment-block pattern needs ``/*``; without it, only the leading lines are read
    (Data-Juicer splits the whole text into lines first)."""

    name = "clean_copyright_mapper"

    def __init__(self, op: Any) -> None:
        super().__init__(op)
        self.block = op.pat
        self.copyright = op.cpat

    def _transform(self, text: str) -> str:
        if "/*" in text:
            found = self.block.search(text)
            if found:
                start, end = found.span()
                if self.copyright.search(text[start:end]):
                    return text[:start] + text[end:]
                return text
        pos = 0
        while True:
            end = text.find("\n", pos)
            line_end = len(text) if end < 0 else end
            if line_end != pos and not text.startswith(("//", "#", "--"), pos, line_end):
                return text[pos:] if pos else text
            if end < 0:
                return ""
            pos = end + 1


class RemoveSpecificChars(_FastMapper):
    """The same compiled pattern, run only on texts holding one of its characters."""

    name = "remove_specific_chars_mapper"

    def __init__(self, op: Any, chars: str | None) -> None:
        super().__init__(op)
        import re

        self.compiled = re.compile(op.pattern, flags=re.DOTALL)
        self.chars = chars

    def process(self, samples: dict[str, list]) -> dict[str, list]:
        """The batch as the operator's ``process(samples)`` returns it."""
        if not self._texts_are_str(samples):
            return self.op.process(samples)
        # Data-Juicer puts a new list in the batch here.
        samples[self.text_key] = [self._transform(text) for text in samples[self.text_key]]
        return samples

    def _transform(self, text: str) -> str:
        if self.chars is not None and not any(c in text for c in self.chars):
            return text
        return self.compiled.sub("", text)


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


def _special_characters() -> str:
    from data_juicer.ops.common.special_characters import SPECIAL_CHARACTERS

    # Data-Juicer tests one character at a time against the set, so its multi-character
    # members (emoji sequences) never match.
    return _single_chars(SPECIAL_CHARACTERS)


def _build_words_num(op: Any) -> FastOp | None:
    # With tokenization the words come from a sentencepiece model.
    if getattr(op, "model_key", None) is not None:
        return None
    return WordsNum(op, _special_characters())


def _build_alphanumeric(op: Any) -> FastOp | None:
    if getattr(op, "tokenization", True) is not False:
        return None
    return Alphanumeric(op)


def _build_remove_specific_chars(op: Any) -> FastOp | None:
    import re

    pattern = getattr(op, "pattern", None)
    if pattern is None:
        return _Unchanged(op)
    if not isinstance(pattern, str):
        return None
    chars: str | None = None
    if pattern.startswith("[") and pattern.endswith("]"):
        # the pattern is "[" + escaped characters + "]"; re.escape works character by
        # character, so escaping the characters found again must give the pattern back
        found = re.sub(r"\\(.)", r"\1", pattern[1:-1], flags=re.DOTALL)
        if found and "[" + re.escape(found) + "]" == pattern and len(set(found)) <= 32:
            chars = "".join(sorted(set(found)))
    return RemoveSpecificChars(op, chars)


class _Unchanged(FastOp):
    """remove_specific_chars_mapper with nothing to remove: Data-Juicer returns the batch."""

    name = "remove_specific_chars_mapper"

    def process(self, samples: dict[str, list]) -> dict[str, list]:
        """The batch, untouched."""
        return samples


_BUILDERS: dict[str, Callable[[Any], FastOp | None]] = {
    "remove_long_words_mapper": _build_remove_long_words,
    "clean_email_mapper": _build_regex(CleanEmail, DEFAULT_EMAIL_PATTERN),
    "clean_links_mapper": _build_regex(CleanLinks, DEFAULT_LINK_PATTERN),
    "punctuation_normalization_mapper": _build_punctuation,
    "whitespace_normalization_mapper": _build_whitespace,
    "character_repetition_filter": _build_char_rep,
    "words_num_filter": _build_words_num,
    "alphanumeric_filter": _build_alphanumeric,
    "special_characters_filter": lambda op: SpecialCharacters(op, _special_characters()),
    "text_length_filter": TextLength,
    "average_line_length_filter": AverageLineLength,
    "maximum_line_length_filter": MaximumLineLength,
    "clean_copyright_mapper": CleanCopyright,
    "remove_specific_chars_mapper": _build_remove_specific_chars,
}

FAST_OPS: frozenset[str] = frozenset(_BUILDERS)

__all__ = ["FAST_OPS", "FastOp", "fast_equivalent"]
