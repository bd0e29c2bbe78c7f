"""What tests/nemo/test_migration_page_stages.py needs to run every NeMo stage class the
migration page lists: the page's table, a small corpus that gives each stage something to do,
locally made models in place of the ones NeMo's users download, and one construction per class.

The models are real: a fastText language-id and a quality classifier trained with
``fasttext.train_supervised``, a SentencePiece model trained with ``SentencePieceTrainer``, a
Hugging Face tokenizer built with ``tokenizers``, a character histogram in the layout of the
fairseq histograms ``HistogramFilter`` downloads. None of them is fetched from anywhere.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

PAGE = Path(__file__).resolve().parents[2] / "docs" / "migrating-from-nemo-curator.md"
HEADING = "### NeMo stages that run on Dask"
NOTHING = "—"

SENTENCES = [
    "The pipeline reads every shard of the corpus and writes the clean documents to disk.",
    "Each worker runs the same stages on its own partition of the data.",
    "A filter keeps the documents whose scores are good enough for training a model.",
    "The resume step skips the partitions that were already complete in the checkpoint.",
    "Some of the files are large, and the scheduler spreads them over all of the workers.",
    "When a stage fails, the run names it and tells you what to change.",
]
FRENCH = ("Le pipeline lit chaque fragment du corpus et écrit les documents propres sur le "
          "disque. Chaque travailleur applique les mêmes étapes à sa propre partition.")
CODE = '''"""Reads the shards of a corpus."""

import json


def read(path):
    """Returns the documents of one shard."""
    # one document per line
    with open(path) as f:
        return [json.loads(line) for line in f]


def count(path):
    # the number of documents
    return len(read(path))
'''


@dataclass(frozen=True)
class Row:
    """One row of the page's table: classes of one module used one way, with what they need."""

    module: str
    classes: tuple[str, ...]
    used_as: str
    needs: str


def page_rows(page: Path = PAGE) -> list[Row]:
    """The table under ``HEADING`` on the migration page, one ``Row`` per line."""
    lines = page.read_text(encoding="utf-8").splitlines()
    if HEADING not in lines:
        msg = f"{page} has no heading {HEADING!r}: the stage table moved or was renamed"
        raise ValueError(msg)
    start = lines.index(HEADING)
    table = []
    for line in lines[start + 1:]:
        if line.startswith("|"):
            table.append(line)
        elif table or line.startswith("#"):
            break
    header, _rule, *body = table
    cells = [c.strip() for c in header.strip("|").split("|")]
    if cells != ["import from", "classes", "used as", "needs"]:
        msg = f"the stage table's columns are {cells}; the test reads import from, classes, ..."
        raise ValueError(msg)
    rows = []
    for line in body:
        module, classes, used_as, needs = (c.strip() for c in line.strip("|").split("|"))
        rows.append(Row(module.strip("`"), tuple(re.findall(r"`(\w+)`", classes)), used_as,
                        needs))
    return rows


def write_corpus(directory: Path, files: int = 3, docs: int = 8) -> Path:
    """``files`` JSONL files of ``docs`` documents with ``text``, ``code`` and ``html`` fields;
    document ``d`` of each file carries what one modifier or filter acts on (``d % 8``)."""
    directory.mkdir(parents=True, exist_ok=True)
    for f in range(files):
        with open(directory / f"part-{f}.jsonl", "w", encoding="utf-8") as out:
            for d in range(docs):
                out.write(json.dumps(_document(f, d), ensure_ascii=False) + "\n")
    return directory


# NeMo's RepeatingTopNGramsFilter breaks a tie for the most frequent n-gram by the order of a
# set of strings, which each interpreter's PYTHONHASHSEED decides: the workers share one seed
# (tests/backends/test_hash_seed.py), this process has its own. This sentence makes "of the"
# every English document's one most frequent 2-gram, so both runs score alike.
LEAD = "Most of the time, most of the files of the corpus are small."


def _document(f: int, d: int) -> dict:
    first = LEAD + " " + " ".join(SENTENCES[(f + d + i) % len(SENTENCES)] for i in range(2))
    second = " ".join(SENTENCES[(f + 2 * d + i + 3) % len(SENTENCES)] for i in range(2))
    variant = d % 8
    if variant == 1:
        first += f" See https://example.org/docs/{f}/{d} for the details."
    elif variant == 2:
        first = f"The **first** part of the *guide* is in [the docs]({f}-{d}). " + first
    elif variant == 4:
        first = "The cafÃ© on the corner serves the workers. " + first  # mojibake for ftfy
    elif variant == 6:
        second += "\nremove me\nRead our privacy policy and terms of use."
    paragraphs = [first, second]
    if variant == 5:
        paragraphs.insert(1, "\n\n")  # three or more newlines in a row
    text = "\n\n".join(paragraphs)
    if variant == 3:
        text = f'"{text}"'
    if variant == 7:
        text = FRENCH  # the language-id filter drops these
    html = (f"<html><head><style>p {{color: red}}</style></head><body><p>{first}</p>"
            f"<script>var x = {d};</script></body></html>")
    return {"id": f"{f}-{d}", "text": text, "code": CODE, "html": html}


@dataclass(frozen=True)
class LocalModels:
    """Paths (and one tokenizer) made in ``directory`` by ``make_models``."""

    langid: str
    quality: str
    sentencepiece: str
    histogram_cache: str
    tokenizer: object


def make_models(directory: Path) -> LocalModels:
    """Trains the tiny models on this machine (a few seconds in all)."""
    import fasttext
    import sentencepiece
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    directory.mkdir(parents=True, exist_ok=True)
    english = " ".join(SENTENCES)
    spam = "buy cheap pills now win a free casino prize click here to claim your reward"
    langid_train = directory / "langid.txt"
    langid_train.write_text(
        "".join(f"__label__en {s}\n__label__fr {FRENCH}\n" for s in SENTENCES) * 10,
        encoding="utf-8")
    quality_train = directory / "quality.txt"
    quality_train.write_text(
        "".join(f"__label__hq {s}\n__label__lq {spam}\n" for s in SENTENCES) * 10,
        encoding="utf-8")
    paths = {}
    for name, train in (("langid", langid_train), ("quality", quality_train)):
        # thread=16, not 1: fasttext 0.9.3 leaves its input matrix uninitialised except for
        # thread/10 of it (DenseMatrix::uniform), and the garbage of a reused heap makes
        # training fail with "Encountered NaN" at random; 10 threads or more fill all of it.
        model = fasttext.train_supervised(str(train), dim=8, epoch=50, lr=0.5, minCount=1,
                                          thread=16, seed=0, verbose=0)
        paths[name] = str(directory / f"{name}.bin")
        model.save_model(paths[name])
    sp_train = directory / "sentencepiece.txt"
    sp_train.write_text("\n".join(SENTENCES + CODE.splitlines()), encoding="utf-8")
    sentencepiece.SentencePieceTrainer.train(
        input=str(sp_train), model_prefix=str(directory / "sp"), vocab_size=60,
        character_coverage=1.0, hard_vocab_limit=False, minloglevel=2)
    # HistogramFilter reads <cache_dir>/histograms/.../clean_hists/<lang>: one character per
    # line, most frequent first, up to a line starting with "]" (fairseq's layout).
    hist_dir = directory / "hist" / "histograms/checkpoint/edunov/cc60_multilingual/clean_hists"
    hist_dir.mkdir(parents=True)
    chars = sorted(set(english + FRENCH + "\"*[]()/:?-0123456789\n"), key=english.count,
                   reverse=True)
    hist_dir.joinpath("en").write_text(
        "".join(f"{c} 1\n" for c in chars if c not in "]\n") + "] 0\n", encoding="utf-8")
    words = sorted({w for w in re.findall(r"\w+", english.lower())})
    tokenizer = Tokenizer(models.WordLevel({"[UNK]": 0, **{w: i + 1 for i, w in
                                                            enumerate(words)}},
                                           unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    return LocalModels(paths["langid"], paths["quality"], str(directory / "sp.model"),
                       str(directory / "hist"),
                       PreTrainedTokenizerFast(tokenizer_object=tokenizer, unk_token="[UNK]"))


@dataclass(frozen=True)
class Build:
    """How the test builds one listed class: its keyword arguments (a function of the local
    models), the field it reads, and the words the page's "needs" cell must hold for it."""

    kwargs: Callable[[LocalModels], dict] = lambda m: {}
    field: str = "text"
    needs: tuple[str, ...] = ()


def _plain(**kwargs) -> Build:
    return Build(lambda m: kwargs)


# Thresholds are loose so that most documents pass every filter of the chain: a filter that
# dropped them all would leave the filters after it nothing to score.
FILTERS: dict[str, Build] = {
    "NonAlphaNumericFilter": _plain(max_non_alpha_numeric_to_text_ratio=0.5),
    "SymbolsToWordsFilter": _plain(max_symbol_to_word_ratio=0.5),
    "NumbersFilter": _plain(max_number_to_text_ratio=0.5),
    "UrlsFilter": _plain(max_url_to_text_ratio=0.5),
    "BulletsFilter": _plain(max_bullet_lines_ratio=0.9),
    "WhiteSpaceFilter": _plain(max_white_space_ratio=0.5),
    "ParenthesesFilter": _plain(max_parentheses_ratio=0.5),
    "LongWordFilter": _plain(max_word_length=100),
    "WordCountFilter": _plain(min_words=5),
    "BoilerPlateStringFilter": _plain(),
    "MeanWordLengthFilter": _plain(min_mean_word_length=2, max_mean_word_length=12),
    "PunctuationFilter": _plain(max_num_sentences_without_endmark_ratio=0.9),
    "EllipsisFilter": _plain(max_num_lines_ending_with_ellipsis_ratio=0.5),
    "CommonEnglishWordsFilter": _plain(min_num_common_words=2),
    "WordsWithoutAlphabetsFilter": _plain(min_words_with_alphabets=0.5),
    "PornographicUrlsFilter": _plain(),
    "SubstringFilter": _plain(substring="the", position="any"),
    "RepeatedLinesFilter": _plain(max_repeated_line_fraction=0.9),
    "RepeatedParagraphsFilter": _plain(max_repeated_paragraphs_ratio=0.9),
    "RepeatedLinesByCharFilter": _plain(max_repeated_lines_char_ratio=0.9),
    "RepeatedParagraphsByCharFilter": _plain(max_repeated_paragraphs_char_ratio=0.9),
    "RepeatingTopNGramsFilter": _plain(n=2, max_repeating_ngram_ratio=0.5),
    "RepeatingDuplicateNGramsFilter": _plain(n=2, max_repeating_duplicate_ngram_ratio=0.5),
    "PythonCommentToCodeFilter": Build(lambda m: {"max_comment_to_code_ratio": 0.9}, "code"),
    "GeneralCommentToCodeFilter": Build(lambda m: {"language": "text/x-python"}, "code"),
    "NumberOfLinesOfCodeFilter": Build(lambda m: {"min_lines": 5}, "code"),
    "XMLHeaderFilter": Build(field="code"),
    "AlphaFilter": Build(field="code"),
    "HTMLBoilerplateFilter": Build(lambda m: {"min_lang_content_ratio": 0.1}, "html"),
    "PerExtensionFilter": Build(lambda m: {"lang": "python", "extension": "py",
                                           "metadata_file": _code_meta()}, "code",
                                needs=("code_meta.csv", "metadata_file")),
    "TokenizerFertilityFilter": Build(lambda m: {"path_to_tokenizer": m.sentencepiece,
                                                 "min_char_to_token_ratio": 1.0}, "code",
                                      needs=("SentencePiece", "path_to_tokenizer")),
    "FastTextLangId": Build(lambda m: {"model_path": m.langid, "lang": "en"},
                            needs=("fastText", "model_path")),
    # NeMo keeps a document when np.random.pareto(alpha) > 1 - score, from the global random
    # state of whichever process scores it; alpha=1e-9 makes every draw infinite, so both
    # runs keep every document and the comparison checks the model's scores.
    "FastTextQualityFilter": Build(lambda m: {"model_path": m.quality, "alpha": 1e-9},
                                   needs=("fastText", "model_path")),
    "HistogramFilter": Build(lambda m: {"cache_dir": m.histogram_cache},
                             needs=("histogram", "cache_dir")),
    "TokenCountFilter": Build(lambda m: {"tokenizer": m.tokenizer, "min_tokens": 5},
                              needs=("tokenizer", "hf_model_name")),
}

MODIFIERS: dict[str, Build] = {
    "BoilerPlateStringModifier": _plain(),
    "LineRemover": _plain(patterns=["remove me"]),
    "MarkdownRemover": _plain(),
    "NewlineNormalizer": _plain(),
    "QuotationRemover": _plain(),
    "Slicer": _plain(left=0, right=60),
    "UrlRemover": _plain(),
    "UnicodeReformatter": _plain(),
    "FastTextLabelModifier": _plain(label="__label__hq"),
}


def _code_meta() -> str:
    import nemo_curator.utils

    return str(Path(nemo_curator.utils.__file__).parent / "code_meta.csv")
