"""The Mappers' equivalents, each exact for these reasons (the tests compare with
Data-Juicer row for row):

- ``remove_long_words_mapper``: the split on ``\n``, ``\t`` and ``" "`` and the merge that
  drops empty pieces are done with ``str.split``/``str.join``; words are checked one by one
  only where a regular expression found a word outside the length range.
- ``clean_email_mapper`` (default pattern): every match is made of the characters
  ``[A-Za-z0-9.\-+_@]`` and holds an ``@``, and the pattern has no anchor or look-around, so
  the same compiled pattern run on each maximal run of those characters that holds an ``@``
  gives the same matches as on the whole text.
- ``clean_links_mapper`` (default pattern): every match holds no ``\s`` and holds ``:``,
  ``/`` or ``www``; its only look-around is a leading ``\b``, which at the start of a run of
  non-``\s`` characters is the same whether a ``\s`` or the start of the text precedes it; so
  the pattern runs on those runs only.
- other patterns of those two: one ``sub`` per text (Data-Juicer runs ``search`` then ``sub``;
  ``sub`` alone changes a text exactly when ``search`` finds a match).
- ``punctuation_normalization_mapper``, ``whitespace_normalization_mapper``: ``str.translate``
  with the operator's own tables.
- ``clean_copyright_mapper``: the comment-block pattern (the operator's own) only runs on texts
  holding ``/*``; the leading comment lines are read one by one instead of splitting the text.
- ``remove_specific_chars_mapper``: the operator's own pattern, compiled once, run only on texts
  that hold one of its characters (read back from the pattern, checked by re-escaping).
"""

from __future__ import annotations

import string
from collections.abc import Callable
from typing import Any

from curator_dask.data_juicer.fast_ops.base import FastMapper, FastOp

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


class RemoveLongWords(FastMapper):
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


class RegexSub(FastMapper):
    """A pattern with no known structure: one ``sub`` per text."""

    def __init__(self, op: Any) -> None:
        super().__init__(op)
        import regex

        self.compiled = regex.compile(op.pattern, flags=regex.DOTALL)
        self.repl: str = op.repl

    def _transform(self, text: str) -> str:
        return self.compiled.sub(self.repl, text)


class CleanEmail(RegexSub):
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


class CleanLinks(RegexSub):
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


class _Translate(FastMapper):
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


class CleanCopyright(FastMapper):
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


class RemoveSpecificChars(FastMapper):
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


class GenericSub(RegexSub):
    def __init__(self, op: Any, name: str) -> None:
        super().__init__(op)
        self.name = name


class Unchanged(FastOp):
    """remove_specific_chars_mapper with nothing to remove: Data-Juicer returns the batch."""

    name = "remove_specific_chars_mapper"

    def process(self, samples: dict[str, list]) -> dict[str, list]:
        """The batch, untouched."""
        return samples
