"""A corpus of real text for the Data-Juicer tests: Debian's package docs on this machine.

Each ``/usr/share/doc/*/copyright`` and ``/usr/share/doc/*/changelog*.gz`` file is one
document ``{"text": ..., "id": ...}``. Real copyright files and changelogs already carry many
e-mail addresses and links; a few synthetic rows (ids starting with ``synthetic-``) add dense
mixes of addresses, URLs, Unicode punctuation and odd whitespace, so that every fast operator
has work to do even on a small slice.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from itertools import zip_longest
from pathlib import Path

DOC_ROOT = Path("/usr/share/doc")
_FILE_BYTES = 1 << 20

_SYNTHETIC = [
    "Contact John Doe <john.doe@example.com> or jane_roe+lists@mail.example.org for help.\n"
    "See https://www.example.com/path/to/page?x=1&y=(2) and http://foo.bar/baz_(qux).\n"
    "Mirror: ftp://ftp.debian.org/debian/ — also www.debian.org, www2.example.net.\n",
    "Maintainer: Ünïcödé Dev <dev@exämple.com>\tUploaders: a@b.cc, x.y@z.museum\r\n"
    "Homepage: <https://salsa.debian.org/foo/bar.git>\u00a0\u2003(mailto:info@debian.org)\r\n",
    "中文文本，包含标点。网址：http://例子.测试/路径 以及 邮箱 test@example.com！\n"
    "「引号」《书名》……——～ Ｆｕｌｌｗｉｄｔｈ １２３ ％\n",
    "Lorem ipsum " * 50
    + "averyveryveryveryveryveryveryveryveryverylongwordindeed " * 3
    + "file:///usr/share/doc and mailto:someone@example.com and git+ssh://git@github.com/x/y\n",
    "   leading and trailing spaces\t\t\n\n\u3000\u200b mixed\u2009spaces\u00a0here  \n\n",
]


def _iter_documents() -> Iterator[tuple[str, str]]:
    for text_id, text in enumerate(_SYNTHETIC):
        yield f"synthetic-{text_id}", text
    copyrights = sorted(DOC_ROOT.glob("*/copyright"))
    changelogs = sorted(DOC_ROOT.glob("*/changelog*.gz"))
    # interleaved, so that a small slice holds both kinds of text
    paths = [p for pair in zip_longest(copyrights, changelogs) for p in pair if p is not None]
    for path in paths:
        try:
            if path.suffix == ".gz":
                with gzip.open(path, "rb") as fh:
                    raw = fh.read()
            else:
                raw = path.read_bytes()
            text = raw.decode("utf-8", errors="replace")
        except OSError:
            continue
        yield str(path.relative_to(DOC_ROOT)), text


def build_corpus(path: str | Path, max_bytes: int) -> list[str]:
    """Write at most about ``max_bytes`` of documents as JSONL files under ``path``.

    Files hold about 1 MiB each (``part-00000.jsonl``, ...), in a stable order; the synthetic
    rows come first. Returns the file paths written.

    Example:
        >>> files = build_corpus(tmp_path / "corpus", 2_000_000)  # doctest: +SKIP
    """
    out_dir = Path(path)
    out_dir.mkdir(parents=True, exist_ok=True)
    files: list[str] = []
    total = 0
    current: list[str] = []
    current_bytes = 0

    def flush() -> None:
        nonlocal current, current_bytes
        if current:
            file_path = out_dir / f"part-{len(files):05d}.jsonl"
            file_path.write_text("".join(current), encoding="utf-8")
            files.append(str(file_path))
        current, current_bytes = [], 0

    for doc_id, text in _iter_documents():
        line = json.dumps({"text": text, "id": doc_id}, ensure_ascii=False) + "\n"
        size = len(line.encode("utf-8"))
        if total + size > max_bytes and total > 0:
            break
        current.append(line)
        current_bytes += size
        total += size
        if current_bytes >= _FILE_BYTES:
            flush()
    flush()
    return files


def read_texts(files: list[str]) -> list[str]:
    """The ``text`` of every row of ``files``, in order."""
    texts: list[str] = []
    for file_path in files:
        with open(file_path, encoding="utf-8") as fh:
            texts.extend(json.loads(line)["text"] for line in fh)
    return texts
