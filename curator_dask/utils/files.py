"""File discovery over fsspec, as NeMo Curator 1.4 does it (docs/design/contract.md §2.2)."""

from __future__ import annotations

import posixpath
from collections.abc import Iterable

import fsspec


def is_remote_url(path: str) -> bool:
    """True for a URL with a protocol other than ``file`` (``s3://``, ``memory://``, ...)."""
    protocol = path.split("://", 1)[0] if "://" in path else "file"
    return protocol not in ("file", "local")


def _keep(path: str, extensions: set[str] | None) -> bool:
    if extensions is None:
        return True
    ext = posixpath.splitext(posixpath.basename(path))[1][1:].casefold()
    return ext in extensions


def gather_file_records(
    paths: str | list[str],
    *,
    extensions: Iterable[str] | None,
    storage_options: dict | None = None,
    sort_by_size: bool = False,
) -> list[tuple[str, int]]:
    """``(path, size)`` of every matching file under ``paths``.

    A string is listed recursively, each entry of a list only one level deep. Globs work.
    Local paths come back absolute; remote ones keep their protocol. Sorted by path, or by
    size (stable) when ``sort_by_size``.

    Example:
        >>> gather_file_records("memory://nothing-here/", extensions=[".jsonl"])
        []
    """
    records = [(p, _size(info)) for p, info in gather_file_infos(
        paths, extensions=extensions, storage_options=storage_options)]
    # Stable: with sort_by_size, equal sizes keep the listing order of the entries.
    records.sort(key=(lambda x: x[1]) if sort_by_size else (lambda x: x[0]))
    return records


def gather_file_infos(
    paths: str | list[str],
    *,
    extensions: Iterable[str] | None,
    storage_options: dict | None = None,
) -> list[tuple[str, dict]]:
    """``(path, fsspec info)`` of every matching file under ``paths``: each entry's files in
    path order, entries in the given order, with the listing's own metadata (size, mtime or
    ETag) and one metadata request per entry."""
    if isinstance(paths, str):
        roots_in, recurse = [paths], True
    elif isinstance(paths, list):
        roots_in, recurse = paths, False
    else:
        msg = f"Invalid file paths: {paths}, must be a string or list of strings"
        raise TypeError(msg)
    keep = None if extensions is None else {e.casefold().lstrip(".") for e in extensions}
    records: list[tuple[str, dict]] = []
    for entry in roots_in:
        fs, _ = fsspec.core.url_to_fs(entry, **(storage_options or {}))
        remote = is_remote_url(entry)
        listing: list[tuple[str, dict]] = []
        for root in fs.expand_path(entry, recursive=False):
            try:
                info = fs.info(root)
            except FileNotFoundError:
                continue
            if info.get("type") == "directory":
                found = fs.find(root, maxdepth=None if recurse else 1, withdirs=False, detail=True)
                listing.extend(found.items())
            else:
                listing.append((root, info))
        listing = [(fs.unstrip_protocol(p) if remote else p, i) for p, i in listing]
        listing = [(p, i) for p, i in listing if _keep(p, keep)]
        listing.sort(key=lambda x: x[0])
        records.extend(listing)
    return records


def _size(info: dict) -> int:
    size = info.get("size")
    return -1 if size is None else int(size)


def infer_dataset_name(path: str) -> str:
    """A dataset name for a file, as NeMo Curator infers it.

    Local: the lowercased parent directory name, or the file stem when there is no parent.
    Remote (``s3://...``): the lowercased file name.
    """
    if is_remote_url(path):
        return posixpath.basename(path.rstrip("/")).lower()
    stripped = path.split("://", 1)[-1].rstrip("/")
    parent = posixpath.basename(posixpath.dirname(stripped))
    if parent:
        return parent.lower()
    return posixpath.splitext(posixpath.basename(stripped))[0].lower()
