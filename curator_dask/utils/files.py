"""File discovery over fsspec, as NeMo Curator 1.4 does it (docs/design/contract.md §2.2)."""

from __future__ import annotations

import logging
import os
import posixpath
from collections.abc import Iterable
from glob import has_magic

import fsspec

from curator_dask.errors import CuratorDaskError

logger = logging.getLogger(__name__)

_ALLOW_HINT = "pass allow_no_files=True (FilePartitioningStage or the reader) to accept that"


class NoInputFilesError(FileNotFoundError, CuratorDaskError):
    """An entry of ``file_paths`` names no file to read: a path that does not exist, a glob
    that matches nothing, or a directory (or file) without the wanted extensions.

    Example:
        >>> try:
        ...     gather_file_records("memory://no-such-dir/", extensions=None, require_files=True)
        ... except FileNotFoundError as exc:
        ...     print(str(exc).split(";")[0])
        No input files: memory://no-such-dir/ does not exist
    """


def is_remote_url(path: str) -> bool:
    """True for a URL with a protocol other than ``file`` (``s3://``, ``memory://``, ...)."""
    protocol = path.split("://", 1)[0] if "://" in path else "file"
    return protocol not in ("file", "local")


def file_extension(path: str) -> str:
    """The extension of ``path``'s name without the dot, case-folded; ``""`` when none.

    The text after the last dot, unless that dot starts the name: ``.jsonl`` is a hidden file
    without an extension (as in NeMo Curator), but ``..jsonl`` and ``.x.jsonl`` end in
    ``jsonl`` (``posixpath.splitext``, which NeMo Curator uses, gives ``..jsonl`` none, so it
    was skipped without a word; docs/design/contract.md §2.2).

    Example:
        >>> [file_extension(n) for n in ["a.JSONL", "x.jsonl.gz", "..jsonl", ".jsonl", "a."]]
        ['jsonl', 'gz', 'jsonl', '', '']
    """
    name = posixpath.basename(path)
    dot = name.rfind(".")
    return name[dot + 1 :].casefold() if dot > 0 else ""


def _keep(path: str, extensions: set[str] | None) -> bool:
    if extensions is None:
        return True
    if file_extension(path) in extensions:
        return True
    name = posixpath.basename(path)
    folded = name.casefold()
    # an extension of several parts (".jsonl.gz") ends the name after something else
    if any("." in e and folded.endswith("." + e) and len(folded) > len(e) + 1
           for e in extensions):
        return True
    if name.startswith(".") and name[1:].casefold() in extensions:
        logger.warning("Skipping %s: a hidden file named like the extension, not a .%s file "
                       "(rename it to read it)", path, name[1:])
    return False


def gather_file_records(
    paths: str | list[str],
    *,
    extensions: Iterable[str] | None,
    storage_options: dict | None = None,
    sort_by_size: bool = False,
    require_files: bool = False,
) -> list[tuple[str, int]]:
    """``(path, size)`` of every matching file under ``paths``.

    A string is listed recursively, each entry of a list only one level deep. Globs work.
    Local paths come back absolute; remote ones keep their protocol. Sorted by path, or by
    size (stable) when ``sort_by_size``. ``require_files``: see ``gather_file_infos``.

    Example:
        >>> gather_file_records("memory://nothing-here/", extensions=[".jsonl"])
        []
    """
    records = [(p, _size(info)) for p, info in gather_file_infos(
        paths, extensions=extensions, storage_options=storage_options,
        require_files=require_files)]
    # Stable: with sort_by_size, equal sizes keep the listing order of the entries.
    records.sort(key=(lambda x: x[1]) if sort_by_size else (lambda x: x[0]))
    return records


def gather_file_infos(
    paths: str | list[str],
    *,
    extensions: Iterable[str] | None,
    storage_options: dict | None = None,
    require_files: bool = False,
) -> list[tuple[str, dict]]:
    """``(path, fsspec info)`` of every matching file under ``paths``: each entry's files in
    path order, entries in the given order, with the listing's own metadata (size, mtime or
    ETag) and one metadata request per entry.

    An entry that exists is taken literally, so ``data[1]/`` is a directory, not a glob. With
    ``require_files``, an entry that yields no file (or an empty list) raises
    ``NoInputFilesError`` naming it; otherwise it is skipped.
    """
    if isinstance(paths, str):
        roots_in, recurse = [paths], True
    elif isinstance(paths, list):
        roots_in, recurse = paths, False
    else:
        msg = f"Invalid file paths: {paths}, must be a string or list of strings"
        raise TypeError(msg)
    if require_files and not roots_in:
        msg = f"No input files: file_paths is an empty list; {_ALLOW_HINT}"
        raise NoInputFilesError(msg)
    keep = None if extensions is None else {e.casefold().lstrip(".") for e in extensions}
    records: list[tuple[str, dict]] = []
    for entry in roots_in:
        fs, _ = fsspec.core.url_to_fs(entry, **(storage_options or {}))
        remote = is_remote_url(entry)
        listing: list[tuple[str, dict]] = []
        roots = _roots(fs, entry)
        for root, info in roots:
            if info.get("type") == "directory":
                found = fs.find(root, maxdepth=None if recurse else 1, withdirs=False, detail=True)
                listing.extend(found.items())
            else:
                listing.append((root, info))
        listing = [(fs.unstrip_protocol(p) if remote else p, i) for p, i in listing]
        listing = [(p, i) for p, i in listing if _keep(p, keep)]
        if require_files and not listing:
            raise _no_files(fs, entry, roots, keep)
        listing.sort(key=lambda x: x[0])
        records.extend(listing)
    return records


def check_paths_exist(paths: str | list[str], storage_options: dict | None = None) -> None:
    """Raise ``NoInputFilesError`` for the first entry of ``paths`` that names nothing (a path
    that does not exist, a glob that matches nothing), with the same message as
    :func:`gather_file_infos`; one metadata request per entry, no listing. A command-line job
    asks this before it makes its job folder: a typo is refused before there is a job.

    Example:
        >>> check_paths_exist("memory://no-such-input/")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        curator_dask.utils.files.NoInputFilesError: No input files: memory://no-such-input/ ...
    """
    for entry in [paths] if isinstance(paths, str) else list(paths):
        fs, _ = fsspec.core.url_to_fs(entry, **(storage_options or {}))
        if not _roots(fs, entry):
            raise _no_files(fs, entry, [], None)


def _no_files(fs: fsspec.AbstractFileSystem, entry: str, roots: list[tuple[str, dict]],
              keep: set[str] | None) -> NoInputFilesError:
    """The error for ``entry``, which yields no file: why, and the fix. A path that is not
    there is a typo to fix (the closest name), not an empty input to accept."""
    fix = _ALLOW_HINT if roots or has_magic(entry) else _check_path_hint(fs, entry)
    return NoInputFilesError(f"No input files: {_shown(entry)} "
                             f"{_why_empty(entry, roots, keep)}; {fix}")


def _roots(fs: fsspec.AbstractFileSystem, entry: str) -> list[tuple[str, dict]]:
    """``(path, info)`` of what ``entry`` names: itself when it exists, even with glob
    characters in its name (``[``), else the existing matches of it as a glob."""
    try:
        info = fs.info(entry)
    except FileNotFoundError:
        pass
    else:
        return [(info["name"], info)]
    if not has_magic(entry):
        return []
    try:
        matches = fs.expand_path(entry, recursive=False)
    except FileNotFoundError:  # fsspec's answer to a glob that matches nothing
        return []
    roots = []
    for root in matches:
        try:
            roots.append((root, fs.info(root)))
        except FileNotFoundError:
            continue
    return roots


def _check_path_hint(fs: fsspec.AbstractFileSystem, entry: str) -> str:
    """How to fix a path that names nothing: the closest names in its parent folder, when
    that folder exists, else its nearest existing ancestor.

    Example:
        >>> import fsspec
        >>> fs = fsspec.filesystem("memory")
        >>> fs.pipe("/hint-demo/input/a.jsonl", b"")
        >>> _check_path_hint(fs, "memory:///hint-demo/inptu")
        'check the path (did you mean /hint-demo/input?)'
    """
    import difflib

    path = fs._strip_protocol(entry).rstrip("/")
    parent = posixpath.dirname(path) or "."
    try:
        names = [posixpath.basename(n.rstrip("/")) for n in fs.ls(parent, detail=False)]
    except (FileNotFoundError, NotADirectoryError, PermissionError):
        names = []
    close = difflib.get_close_matches(posixpath.basename(path), names, n=1, cutoff=0.6)
    if close:
        return f"check the path (did you mean {posixpath.join(parent, close[0])}?)"
    while parent not in ("", "/", ".") and not fs.exists(parent):
        parent = posixpath.dirname(parent)
    return f"check the path ({parent} exists, the rest does not)" if parent not in (
        "", "/", ".") else "check the path"


def _shown(entry: str) -> str:
    """``entry``, followed by its absolute form when it is a relative local path."""
    if is_remote_url(entry) or "://" in entry or os.path.isabs(entry):
        return entry
    return f"{entry} ({os.path.abspath(entry)})"


def _why_empty(entry: str, roots: list[tuple[str, dict]], keep: set[str] | None) -> str:
    if not roots:
        return "matches no file or directory" if has_magic(entry) else "does not exist"
    wanted = "files" if keep is None else "files ending in " + ", ".join(
        f".{e}" for e in sorted(keep))
    if len(roots) == 1 and roots[0][1].get("type") != "directory":
        return f"is not one of the {wanted}"
    return f"holds no {wanted}"


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
