"""curator_dask's fast equivalents against Data-Juicer's own operators, row for row.

Each equivalent is compared with the real operator (built by Data-Juicer's ``load_ops``) on
real text (Debian's copyright files and changelogs, tests/data_juicer/corpus.py), on
adversarial text and on hypothesis-generated text, with default and other parameters.

Timing (not a test; run by hand, one process, ~5 MB of the corpus)::

    .venv/bin/python -c "
    import copy, time, sys; sys.path.insert(0, '.')
    from tests.data_juicer.corpus import build_corpus, read_texts
    from data_juicer.ops import load_ops
    from curator_dask.data_juicer.fast_ops import fast_equivalent
    texts = read_texts(build_corpus('/tmp/fo_corpus', 5_000_000))
    for cfg in [{'remove_long_words_mapper': {'max_len': 25}}, {'clean_email_mapper': {}},
                {'clean_links_mapper': {}}, {'punctuation_normalization_mapper': {}},
                {'whitespace_normalization_mapper': {}}, {'character_repetition_filter': {}},
                {'words_num_filter': {}}, {'alphanumeric_filter': {}},
                {'special_characters_filter': {}}, {'text_length_filter': {}},
                {'average_line_length_filter': {}}, {'maximum_line_length_filter': {}},
                {'clean_copyright_mapper': {}}, {'remove_specific_chars_mapper': {}}]:
        op = load_ops([cfg])[0]; fast = fast_equivalent(op)
        call = 'compute_stats' if 'filter' in next(iter(cfg)) else 'process'
        took = []
        for impl in (op, fast):
            batch = {'text': list(texts), '__dj__stats__': [{} for _ in texts]}
            t = time.perf_counter(); getattr(impl, call)(batch)
            took.append(time.perf_counter() - t)
        print(next(iter(cfg)), 'dj %.2fs fast %.3fs' % tuple(took), 'x%.1f' % (took[0] / took[1]))
    "
"""

from __future__ import annotations

import copy
import string
import subprocess
import sys
from collections import Counter
from typing import Any

import numpy as np
import pytest
from data_juicer.ops import load_ops
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from curator_dask.data_juicer.fast_ops import FAST_OPS, fast_equivalent, filters
from tests.data_juicer.corpus import build_corpus, read_texts

STATS = "__dj__stats__"

CONFIGS: list[dict[str, dict[str, Any]]] = [
    {"remove_long_words_mapper": {"min_len": 1, "max_len": 25}},
    {"remove_long_words_mapper": {}},
    {"remove_long_words_mapper": {"min_len": 3, "max_len": 10}},
    {"remove_long_words_mapper": {"min_len": 0, "max_len": 5}},
    {"remove_long_words_mapper": {"min_len": 5, "max_len": 3}},
    {"remove_long_words_mapper": {"min_len": 1, "max_len": 0}},
    {"clean_email_mapper": {}},
    {"clean_email_mapper": {"repl": "<EMAIL>"}},
    {"clean_email_mapper": {"pattern": r"r'[a-z]+@[a-z]+'", "repl": r"[\g<0>]"}},
    {"clean_links_mapper": {}},
    {"clean_links_mapper": {"repl": "<LINK>"}},
    {"clean_links_mapper": {"pattern": r"https?://\S+", "repl": ""}},
    {"punctuation_normalization_mapper": {}},
    {"whitespace_normalization_mapper": {}},
    {"character_repetition_filter": {}},
    {"character_repetition_filter": {"rep_len": 1}},
    {"character_repetition_filter": {"rep_len": 3}},
    {"character_repetition_filter": {"rep_len": 16}},
    {"character_repetition_filter": {"rep_len": 60}},
    {"words_num_filter": {}},
    {"words_num_filter": {"lang": "zh", "min_num": 3, "max_num": 50}},
    {"alphanumeric_filter": {}},
    {"alphanumeric_filter": {"min_ratio": 0.5, "max_ratio": 0.9}},
    {"special_characters_filter": {}},
    {"special_characters_filter": {"min_ratio": 0.1, "max_ratio": 0.3, "reversed_range": True}},
    {"text_length_filter": {}},
    {"text_length_filter": {"min_len": 50, "max_len": 5000}},
    {"average_line_length_filter": {}},
    {"average_line_length_filter": {"min_len": 20, "max_len": 60}},
    {"maximum_line_length_filter": {}},
    {"maximum_line_length_filter": {"min_len": 20, "max_len": 80}},
    {"clean_copyright_mapper": {}},
    {"remove_specific_chars_mapper": {}},
    {"remove_specific_chars_mapper": {"chars_to_remove": "aeé-[]^\\\n"}},
    {"remove_specific_chars_mapper": {"chars_to_remove": ["ab", "\t", ".", "中"]}},
    {"remove_specific_chars_mapper": {"chars_to_remove": string.punctuation + string.digits}},
    {"remove_specific_chars_mapper": {"chars_to_remove": ""}},
]
IDS = [f"{next(iter(c))}-{i}" for i, c in enumerate(CONFIGS)]

ADVERSARIAL = [
    "",
    " ",
    "\n",
    "\t",
    " \t\n \t\n",
    "\r\n\r\n",
    "a",
    "  a  ",
    "a\n\n\nb\t\t\tc   d",
    "\u00a0\u2003\u3000\u200b\u2060\ufffc\x84\x85\x1c\x1f\u2028\u2029 text \u00a0",
    "line one\r\nline two\r\n\tindented\t\r\n",
    "x" * 5000,
    ("word " * 200 + "y" * 300 + "\n") * 3,
    "😀" * 30 + " " + "👩‍👩‍👧‍👦" * 10 + " ok",
    "!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!hello!!!!!!!!!!!!!!!!!!!!!!!!!",
    "...................................................................................",
    "中文文本，包含标点。没有空格的很长很长很长很长很长很长很长很长很长很长很长很长很长的句子。",
    "e\u0301\u0301\u0301\u0301\u0301\u0301\u0301\u0301\u0301\u0301\u0301\u0301\u0301\u0301\u0301",
    "עברית וערבית العربية mixed RTL \u202e reversed \u202c text",
    "a@b.cc user.name+tag@sub.example.co.uk @@@ x@y z@q. w@e.r.t.y mail@ex-ample.com",
    "A@B.COM a@B.com a@b.Com ...@...  @.a.b  a@@b.cc a@b..cc a@b.c.d",
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa@" * 20,
    "x@" + "a." * 500 + "b" + "@c.dd" * 50,
    '<john@example.com>, (jane@example.org); "joe@example.net" joe@例子.测试 ü@x.de',
    "http://a.b https://www.example.com/path?q=1&r=(2) ftp://x.y/z_(w) www.foo.bar "
    "www9.x.y WWW.CAPS.COM/Path HTTP://UPPER.CASE/ mailto:a@b.cc git+ssh://git@h/x.git",
    "see (http://example.com/foo_(bar)) and <https://example.com/x>, and example.com/path.",
    "no scheme example.org/dir/ file:///etc/passwd urn:isbn:0451450523 a:b c:/ d:%20",
    "Closes: #12345  12:34:56 +0000 ratio 3:1 http: // broken :// www . no",
    "http://" + "a" * 3000 + " " + "www." + "b/" * 500,
    "http://x" + "(" * 20 + ")" * 20 + " https://y/((a)(b))(c) http://z/!",
    "\u212aelvin://x \u017ftp://y wWw.mixed.case ＨＴＴＰ://fullwidth",
    "「引号」《书名》……——～ Ｆｕｌｌ １２３ ％ ’quoted’ „low” «guillemets» ▬ ► ━ ．",
    "tabs\tand\u3000ideographic\u00a0nbsp\u2009thin\u200bzero-width\ufeffbom",
    "\ud800 lone surrogate \udfff text \ud83d",
    "  \u2028  ",
    "/* Copyright 2020 Foo */\nint x;",
    "/* no notice here */\n// copyright\nbody",
    "// header\n# more\n--\n\nbody\n# not skipped",
    "#only\n//comment\n--lines",
    "\n\n\nx",
    "/* unterminated copyright",
    "text /***/ then /* COPYRIGHT ** x */ end",
    "a\x1cb\x1dc\x1ed\x85e\u2028f\u2029g\x0bh\x0ci\rj\r\nk",
    "\r\r\n\n\r",
    "◆●■►▼▲▴∆▻▷❖♡□ shapes ◆◆",
    "a\U0001f600\U0001f44d\u2764\ufe0f b ©® ™ ½",
    "".join(chr(c) for c in range(32, 127)) * 8,
]


def _build(cfg: dict[str, dict[str, Any]]) -> Any:
    return load_ops([copy.deepcopy(cfg)])[0]


def _compare(cfg: dict[str, dict[str, Any]], texts: list[Any], text_key: str = "text") -> None:
    name = next(iter(cfg))
    if text_key != "text":
        cfg = {name: {**cfg[name], "text_key": text_key}}
    op = _build(cfg)
    fast = fast_equivalent(op)
    assert fast is not None
    batch = {
        text_key: list(texts),
        "id": list(range(len(texts))),
        STATS: [{} for _ in texts],
    }
    expected_in, actual_in = copy.deepcopy(batch), copy.deepcopy(batch)
    if name.endswith("_filter"):
        expected = op.compute_stats(expected_in)
        actual = fast.compute_stats(actual_in)
        # the keep decision stays Data-Juicer's: same stats, same kept rows
        assert list(op.process(actual)) == list(op.process(expected))
    else:
        expected = op.process(expected_in)
        actual = fast.process(actual_in)
    assert set(actual) == set(expected)
    for key in expected:
        for row, (want, got) in enumerate(zip(expected[key], actual[key], strict=True)):
            assert got == want, f"{name} {key} row {row}: {texts[row]!r:.200}"


@pytest.fixture(scope="module")
def corpus_texts(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    files = build_corpus(tmp_path_factory.mktemp("corpus"), 3_000_000)
    texts = read_texts(files)
    return texts


def test_corpus_has_real_text(corpus_texts: list[str]) -> None:
    assert sum(map(len, corpus_texts)) > 1_000_000
    assert sum("@" in text for text in corpus_texts) > 10
    assert sum("://" in text for text in corpus_texts) > 10


@pytest.mark.parametrize("cfg", CONFIGS, ids=IDS)
def test_equal_on_real_text(cfg: dict[str, dict[str, Any]], corpus_texts: list[str]) -> None:
    _compare(cfg, corpus_texts)


@pytest.mark.parametrize("cfg", CONFIGS, ids=IDS)
def test_equal_on_adversarial_text(cfg: dict[str, dict[str, Any]]) -> None:
    _compare(cfg, ADVERSARIAL)
    _compare(cfg, [text * 3 for text in ADVERSARIAL], text_key="content")


# fmt: off
_PIECES = st.sampled_from(
    [" ", "  ", "\t", "\n", "\r\n", "\u00a0", "\u3000", "\u200b", "@", ".", "-", "+", "_", ":",
     "/", "//", "://", "www", "WWW", "www1.", "http", "mailto:", "(", ")", "<", ">", "!", "?",
     ",", "，", "。", "“", "”", "—", "…", "１", "a", "b", "Z", "0", "9", "é", "\u0301", "中",
     "😀", "com", ".org/", "x@y.zz", "https://e.co/p", "%", "'", '"', "«", "‘", "/*", "*/",
     "*", "#", "//", "--", "Copyright", "\x0b", "\x0c", "\x1c", "\x85", "\u2028", "◆", "■", "©"]
)
# fmt: on
_TEXT = st.one_of(
    st.lists(_PIECES, max_size=60).map("".join),
    st.text(max_size=80),
    st.builds(lambda word, n: word * n, st.text(min_size=1, max_size=4), st.integers(1, 40)),
    # long enough for the numpy n-gram count of character_repetition_filter
    st.text(alphabet="ab c\né中😀", min_size=520, max_size=1500),
    # about 100 distinct characters: n-grams of 10 need two numbers
    st.text(alphabet=string.printable, min_size=520, max_size=900),
)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(texts=st.lists(_TEXT, min_size=1, max_size=8))
@pytest.mark.parametrize("cfg", CONFIGS, ids=IDS)
def test_equal_on_generated_text(cfg: dict[str, dict[str, Any]], texts: list[str]) -> None:
    _compare(cfg, texts)


def test_filter_keeps_stats_already_computed() -> None:
    cfg = {"character_repetition_filter": {"rep_len": 2}}
    op, fast = _build(cfg), fast_equivalent(_build(cfg))
    assert fast is not None
    batch = {"text": ["aaaa", "abab", None], STATS: [{}, {"char_rep_ratio": 7.0}, {"x": 1}]}
    with pytest.raises(TypeError):
        op.compute_stats(copy.deepcopy(batch))
    with pytest.raises(TypeError):
        fast.compute_stats(copy.deepcopy(batch))
    batch[STATS][2]["char_rep_ratio"] = 0.5
    assert fast.compute_stats(copy.deepcopy(batch)) == op.compute_stats(copy.deepcopy(batch))
    stats = fast.compute_stats(copy.deepcopy(batch))[STATS]
    assert stats[1]["char_rep_ratio"] == 7.0


@pytest.mark.parametrize("name", sorted(FAST_OPS))
@pytest.mark.parametrize("skip_op_error", [False, True])
def test_non_str_text_behaves_as_data_juicer(name: str, skip_op_error: bool) -> None:
    cfg = {name: {"skip_op_error": skip_op_error}}
    op, fast = _build(cfg), fast_equivalent(_build(cfg))
    assert fast is not None
    call = "compute_stats" if name.endswith("_filter") else "process"
    batch = {"text": ["a@b.cc http://x.y", None], "id": [1, 2], STATS: [{}, {}]}
    if not skip_op_error:
        with pytest.raises((TypeError, AttributeError)):
            getattr(op, call)(copy.deepcopy(batch))
        with pytest.raises((TypeError, AttributeError)):
            getattr(fast, call)(copy.deepcopy(batch))
    else:
        want = getattr(op, call)(copy.deepcopy(batch))
        assert getattr(fast, call)(copy.deepcopy(batch)) == want


def test_no_equivalent_for_other_ops_or_nested_keys() -> None:
    assert fast_equivalent(_build({"suffix_filter": {}})) is None
    tokenized = _build({"alphanumeric_filter": {}})
    tokenized.tokenization = True  # as tokenization=True sets it, without the model download
    assert fast_equivalent(tokenized) is None
    tokenized = _build({"words_num_filter": {}})
    tokenized.model_key = "sentencepiece"
    assert fast_equivalent(tokenized) is None
    assert fast_equivalent(_build({"clean_email_mapper": {"text_key": "meta.text"}})) is None
    for name in FAST_OPS:
        assert fast_equivalent(_build({name: {}})) is not None


def test_filter_stats_already_present_are_kept() -> None:
    for name, key in [("words_num_filter", "num_words"), ("alphanumeric_filter", "alnum_ratio"),
                      ("text_length_filter", "text_len"),
                      ("maximum_line_length_filter", "max_line_length")]:
        op = _build({name: {}})
        fast = fast_equivalent(op)
        assert fast is not None
        batch = {"text": ["a b c", "d e"], STATS: [{key: -1}, {}]}
        want = op.compute_stats(copy.deepcopy(batch))
        got = fast.compute_stats(copy.deepcopy(batch))
        assert got == want
        assert got[STATS][0][key] == -1


def test_alnum_table_is_str_isalnum() -> None:
    table = filters._ALNUM.upto(0x10FFFF)
    want = np.fromiter((chr(c).isalnum() for c in range(0x110000)), dtype=bool, count=0x110000)
    assert np.array_equal(table, want)


@pytest.mark.parametrize(
    ("alphabet", "n"),
    [
        ("ab", 10),
        (string.printable, 10),
        (string.printable, 3),
        ("中文😀" + string.ascii_letters, 20),
        ("".join(map(chr, range(0x4E00, 0x4E00 + 3000))), 10),
        (string.printable, 60),
    ],
)
def test_ngram_counts_every_packing(alphabet: str, n: int) -> None:
    rng = np.random.default_rng(n)
    picks = rng.integers(0, len(alphabet), 3000)
    # repeats, so that counts above 1 occur
    text = "".join(alphabet[i] for i in picks) * 2 + alphabet
    counts = filters._ngram_counts(text, n)
    want = sorted(Counter(text[i : i + n] for i in range(len(text) - n + 1)).values())
    if counts is None:  # more than two numbers per n-gram: counted in Python
        assert len(set(alphabet)) ** (n - 1) >= 1 << 64
    else:
        assert sorted(counts.tolist()) == want


def test_module_does_not_import_data_juicer() -> None:
    code = (
        "import sys, curator_dask.data_juicer.fast_ops as m; "
        "assert 'data_juicer' not in sys.modules, 'imported'; print(sorted(m.FAST_OPS))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
