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

Why each one is exact is said beside it, in :mod:`.mappers` and :mod:`.filters`; what they
share is in :mod:`.base`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from curator_dask.data_juicer.fast_ops.base import FastOp
from curator_dask.data_juicer.fast_ops.filters import (
    Alphanumeric,
    AverageLineLength,
    CharacterRepetition,
    MaximumLineLength,
    SpecialCharacters,
    TextLength,
    WordsNum,
)
from curator_dask.data_juicer.fast_ops.mappers import (
    DEFAULT_EMAIL_PATTERN,
    DEFAULT_LINK_PATTERN,
    CleanCopyright,
    CleanEmail,
    CleanLinks,
    GenericSub,
    PunctuationNormalization,
    RegexSub,
    RemoveLongWords,
    RemoveSpecificChars,
    Unchanged,
    WhitespaceNormalization,
)


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


def _build_regex(kind: type[RegexSub], default: str) -> Callable[[Any], FastOp | None]:
    def build(op: Any) -> FastOp | None:
        if not isinstance(op.pattern, str) or not isinstance(op.repl, str):
            return None
        if op.pattern == default:
            return kind(op)
        return GenericSub(op, kind.name)

    return build


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
        return Unchanged(op)
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
