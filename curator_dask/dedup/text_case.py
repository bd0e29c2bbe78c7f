"""libcudf's lowercase mapping, as data: what NeMo Curator's ``normalize_text`` (cudf's
``str.lower()``) does to each code point, for :mod:`curator_dask.dedup.text`.

cudf lowers one code point at a time, from its own tables (``cpp/src/strings/char_types/`` of
rapidsai/cudf, unchanged in substance since 2020, the same in cudf 26.08 that NeMo Curator 1.4
requires): only code points up to U+FFFF are looked at; those flagged upper case map to one code
point, and U+0130 (capital I with dot above) to two, ``"i\u0307"``. Nothing above U+FFFF
changes, and there is no context rule (capital sigma is always ``"σ"``, never a final ``"ς"``).
That is Python's own ``chr(c).lower()`` for every code point up to U+FFFF except eight capitals
added in Unicode 13 and 14 (U+2C2F, U+A7C0, U+A7C7, U+A7C9, U+A7D0, U+A7D6, U+A7D8, U+A7F5),
which cudf leaves as they are (tests/dedup/test_text.py checks both statements).

The table is kept as data, not derived from ``unicodedata`` or Arrow at import, because those
follow newer Unicode versions with every Python and pyarrow release while cudf's tables do not.
"""

from __future__ import annotations

from functools import lru_cache

# (first code point, count, step, delta): code points first, first + step, ... (count of them)
# lower to code point + delta. Derived from libcudf's g_character_codepoint_flags (upper-case
# flag) and g_character_cases_table.
_RUNS: tuple[tuple[int, int, int, int], ...] = (
    (0x0041, 26, 1, 32), (0x00C0, 23, 1, 32), (0x00D8, 7, 1, 32), (0x0100, 24, 2, 1),
    (0x0132, 3, 2, 1), (0x0139, 8, 2, 1), (0x014A, 23, 2, 1), (0x0178, 1, 1, -121),
    (0x0179, 3, 2, 1), (0x0181, 1, 1, 210), (0x0182, 2, 2, 1), (0x0186, 1, 1, 206),
    (0x0187, 1, 1, 1), (0x0189, 2, 1, 205), (0x018B, 1, 1, 1), (0x018E, 1, 1, 79),
    (0x018F, 1, 1, 202), (0x0190, 1, 1, 203), (0x0191, 1, 1, 1), (0x0193, 1, 1, 205),
    (0x0194, 1, 1, 207), (0x0196, 1, 1, 211), (0x0197, 1, 1, 209), (0x0198, 1, 1, 1),
    (0x019C, 1, 1, 211), (0x019D, 1, 1, 213), (0x019F, 1, 1, 214), (0x01A0, 3, 2, 1),
    (0x01A6, 1, 1, 218), (0x01A7, 1, 1, 1), (0x01A9, 1, 1, 218), (0x01AC, 1, 1, 1),
    (0x01AE, 1, 1, 218), (0x01AF, 1, 1, 1), (0x01B1, 2, 1, 217), (0x01B3, 2, 2, 1),
    (0x01B7, 1, 1, 219), (0x01B8, 1, 1, 1), (0x01BC, 1, 1, 1), (0x01C4, 1, 1, 2),
    (0x01C5, 1, 1, 1), (0x01C7, 1, 1, 2), (0x01C8, 1, 1, 1), (0x01CA, 1, 1, 2),
    (0x01CB, 9, 2, 1), (0x01DE, 9, 2, 1), (0x01F1, 1, 1, 2), (0x01F2, 2, 2, 1),
    (0x01F6, 1, 1, -97), (0x01F7, 1, 1, -56), (0x01F8, 20, 2, 1), (0x0220, 1, 1, -130),
    (0x0222, 9, 2, 1), (0x023A, 1, 1, 10795), (0x023B, 1, 1, 1), (0x023D, 1, 1, -163),
    (0x023E, 1, 1, 10792), (0x0241, 1, 1, 1), (0x0243, 1, 1, -195), (0x0244, 1, 1, 69),
    (0x0245, 1, 1, 71), (0x0246, 5, 2, 1), (0x0370, 2, 2, 1), (0x0376, 1, 1, 1),
    (0x037F, 1, 1, 116), (0x0386, 1, 1, 38), (0x0388, 3, 1, 37), (0x038C, 1, 1, 64),
    (0x038E, 2, 1, 63), (0x0391, 17, 1, 32), (0x03A3, 9, 1, 32), (0x03CF, 1, 1, 8),
    (0x03D8, 12, 2, 1), (0x03F4, 1, 1, -60), (0x03F7, 1, 1, 1), (0x03F9, 1, 1, -7),
    (0x03FA, 1, 1, 1), (0x03FD, 3, 1, -130), (0x0400, 16, 1, 80), (0x0410, 32, 1, 32),
    (0x0460, 17, 2, 1), (0x048A, 27, 2, 1), (0x04C0, 1, 1, 15), (0x04C1, 7, 2, 1),
    (0x04D0, 48, 2, 1), (0x0531, 38, 1, 48), (0x10A0, 38, 1, 7264), (0x10C7, 1, 1, 7264),
    (0x10CD, 1, 1, 7264), (0x13A0, 80, 1, 38864), (0x13F0, 6, 1, 8), (0x1C90, 43, 1, -3008),
    (0x1CBD, 3, 1, -3008), (0x1E00, 75, 2, 1), (0x1E9E, 1, 1, -7615), (0x1EA0, 48, 2, 1),
    (0x1F08, 8, 1, -8), (0x1F18, 6, 1, -8), (0x1F28, 8, 1, -8), (0x1F38, 8, 1, -8),
    (0x1F48, 6, 1, -8), (0x1F59, 4, 2, -8), (0x1F68, 8, 1, -8), (0x1F88, 8, 1, -8),
    (0x1F98, 8, 1, -8), (0x1FA8, 8, 1, -8), (0x1FB8, 2, 1, -8), (0x1FBA, 2, 1, -74),
    (0x1FBC, 1, 1, -9), (0x1FC8, 4, 1, -86), (0x1FCC, 1, 1, -9), (0x1FD8, 2, 1, -8),
    (0x1FDA, 2, 1, -100), (0x1FE8, 2, 1, -8), (0x1FEA, 2, 1, -112), (0x1FEC, 1, 1, -7),
    (0x1FF8, 2, 1, -128), (0x1FFA, 2, 1, -126), (0x1FFC, 1, 1, -9), (0x2126, 1, 1, -7517),
    (0x212A, 1, 1, -8383), (0x212B, 1, 1, -8262), (0x2132, 1, 1, 28), (0x2160, 16, 1, 16),
    (0x2183, 1, 1, 1), (0x24B6, 26, 1, 26), (0x2C00, 47, 1, 48), (0x2C60, 1, 1, 1),
    (0x2C62, 1, 1, -10743), (0x2C63, 1, 1, -3814), (0x2C64, 1, 1, -10727),
    (0x2C67, 3, 2, 1), (0x2C6D, 1, 1, -10780), (0x2C6E, 1, 1, -10749),
    (0x2C6F, 1, 1, -10783), (0x2C70, 1, 1, -10782), (0x2C72, 1, 1, 1), (0x2C75, 1, 1, 1),
    (0x2C7E, 2, 1, -10815), (0x2C80, 50, 2, 1), (0x2CEB, 2, 2, 1), (0x2CF2, 1, 1, 1),
    (0xA640, 23, 2, 1), (0xA680, 14, 2, 1), (0xA722, 7, 2, 1), (0xA732, 31, 2, 1),
    (0xA779, 2, 2, 1), (0xA77D, 1, 1, -35332), (0xA77E, 5, 2, 1), (0xA78B, 1, 1, 1),
    (0xA78D, 1, 1, -42280), (0xA790, 2, 2, 1), (0xA796, 10, 2, 1), (0xA7AA, 1, 1, -42308),
    (0xA7AB, 1, 1, -42319), (0xA7AC, 1, 1, -42315), (0xA7AD, 1, 1, -42305),
    (0xA7AE, 1, 1, -42308), (0xA7B0, 1, 1, -42258), (0xA7B1, 1, 1, -42282),
    (0xA7B2, 1, 1, -42261), (0xA7B3, 1, 1, 928), (0xA7B4, 6, 2, 1), (0xA7C2, 1, 1, 1),
    (0xA7C4, 1, 1, -48), (0xA7C5, 1, 1, -42307), (0xA7C6, 1, 1, -35384),
    (0xFF21, 26, 1, 32),
)

# libcudf's special-case table: the one upper-case code point whose lower case is two.
_SPECIAL = {0x0130: "i\u0307"}


@lru_cache(maxsize=1)
def cudf_lower_table() -> dict[int, str]:
    """``{code point: its lower case}`` for every code point that cudf's ``str.lower()``
    changes (1,165 of them), in the form ``str.translate`` takes.

    Example:
        >>> table = cudf_lower_table()
        >>> "ÀΣİ\U00010400".translate(table) == "àσi\u0307\U00010400"
        True
    """
    table = {c: chr(c + delta) for first, count, step, delta in _RUNS
             for c in range(first, first + count * step, step)}
    table.update(_SPECIAL)
    return table


__all__ = ["cudf_lower_table"]
