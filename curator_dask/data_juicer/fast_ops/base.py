"""What every equivalent of a Data-Juicer operator shares: it is called as the executor calls
the operator (``process(samples)`` for a Mapper, ``compute_stats(samples)`` for a Filter, on
one batch in Hugging Face's dict-of-lists form), and hands the whole batch to the operator
itself when a text is not a ``str``, so errors and ``skip_op_error`` behave as Data-Juicer's.
"""

from __future__ import annotations

from typing import Any

STATS_KEY = "__dj__stats__"


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


class FastMapper(FastOp):
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


class FastFilter(FastOp):
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
