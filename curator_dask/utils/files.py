"""File discovery over fsspec, as NeMo Curator 1.4 does it (docs/design/contract.md §2.2)."""

from __future__ import annotations

import array
import heapq
import logging
import os
import posixpath
from collections.abc import Callable, Iterable, Iterator, Sequence
from glob import has_magic
from typing import Any, TypeVar, overload

import fsspec

from curator_dask.errors import CuratorDaskError

logger = logging.getLogger(__name__)

T = TypeVar("T")

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


class PackedPaths(Sequence[str]):
    """Paths held as one string of their names and an array of their folders' numbers, about
    20 bytes a path with shared folders, instead of a ``str`` each (~100 bytes): a listing of
    10^6 files stays small on the driver.

    Example:
        >>> paths = PackedPaths(["/in/a.jsonl", "/in/b.jsonl", "s3://x/c.jsonl"])
        >>> paths.append("d.jsonl")
        >>> len(paths), paths[1], paths[2], paths[-1], list(paths)[0]
        (4, '/in/b.jsonl', 's3://x/c.jsonl', 'd.jsonl', '/in/a.jsonl')
    """

    _PIECE = 10_000  # names joined at a time, so the names are never all separate strings

    def __init__(self, paths: Iterable[str] = ()) -> None:
        self._numbers: dict[str, int] = {}
        self._folders: list[str] = []
        self._folder = array.array("l")  # each path's folder, by number
        self._ends = array.array("q")  # where each name ends in the joined names
        self._pieces: list[str] = []  # joined names
        self._names: list[str] = []  # names not joined yet
        self._end = 0
        for path in paths:
            self.append(path)

    def append(self, path: str) -> None:
        cut = path.rfind("/") + 1  # the folder keeps its "/" (none for a bare name)
        folder = path[:cut]
        number = self._numbers.get(folder)
        if number is None:
            number = self._numbers[folder] = len(self._folders)
            self._folders.append(folder)
        self._folder.append(number)
        self._names.append(path[cut:])
        self._end += len(path) - cut
        self._ends.append(self._end)
        if len(self._names) == self._PIECE:
            self._pieces.append("".join(self._names))
            self._names.clear()

    def _text(self) -> str:
        if self._names or len(self._pieces) != 1:
            self._pieces, self._names = ["".join([*self._pieces, *self._names])], []
        return self._pieces[0]

    def __len__(self) -> int:
        return len(self._ends)

    @overload
    def __getitem__(self, i: int) -> str: ...

    @overload
    def __getitem__(self, i: slice) -> list[str]: ...

    def __getitem__(self, i: int | slice) -> str | list[str]:
        if isinstance(i, slice):
            return [self[j] for j in range(len(self))[i]]
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            msg = f"path index {i} out of range: {len(self)} paths"
            raise IndexError(msg)
        start = self._ends[i - 1] if i > 0 else 0
        return self._folders[self._folder[i]] + self._text()[start:self._ends[i]]


class _PackedRecords:
    """``(path, size)`` records kept packed (:class:`PackedPaths` and an array of sizes)."""

    def __init__(self, records: Iterable[tuple[str, int]]) -> None:
        self.paths, self.sizes = PackedPaths(), array.array("q")
        for path, size in records:
            self.paths.append(path)
            self.sizes.append(size)

    def __iter__(self) -> Iterator[tuple[str, int]]:
        return ((self.paths[i], self.sizes[i]) for i in range(len(self.sizes)))


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
    # only the size of each file is kept, one folder's listing at a time: the listing's own
    # metadata (~800 bytes a file) would otherwise be the driver's peak at 10^6 files
    records = _gather(paths, extensions, storage_options, require_files, _size)
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
    return _gather(paths, extensions, storage_options, require_files, _info)


def iter_file_records(
    paths: str | list[str],
    *,
    extensions: Iterable[str] | None,
    storage_options: dict | None = None,
    require_files: bool = False,
) -> Iterator[tuple[str, int]]:
    """``(path, size)`` of every matching file under ``paths`` in path order, as
    :func:`gather_file_records` lists them, made as the listing goes: a local folder's
    metadata is reduced to sizes as it is listed, and no list of every file is made (the
    entries of a list are packed, :class:`PackedPaths`, then merged), so a caller that keeps
    the paths packed never holds 10^6 tuples. ``require_files``: as
    :func:`gather_file_records` (raised at once with several entries, else at the first
    pull).

    Example:
        >>> list(iter_file_records("memory://nothing-here/", extensions=[".jsonl"]))
        []
    """
    entries = _entries(paths, extensions, storage_options, require_files, _size)
    if len(entries) == 1:  # one walk: only the folders it is in are listed at once
        return entries[0]
    # listed one after the other and kept packed, then merged: entries walked side by side
    # would each hold a folder's listing at once
    return heapq.merge(*[iter(_PackedRecords(entry)) for entry in entries], key=_first)


def _gather(paths: str | list[str], extensions: Iterable[str] | None,
            storage_options: dict | None, require_files: bool, kept: Callable[[dict], T],
            ) -> list[tuple[str, T]]:
    """``(path, kept(info))`` of every matching file, as :func:`gather_file_infos` lists them."""
    records: list[tuple[str, T]] = []
    for listing in _entries(paths, extensions, storage_options, require_files, kept):
        records.extend(listing)
    return records


def _entries(paths: str | list[str], extensions: Iterable[str] | None,
             storage_options: dict | None, require_files: bool, kept: Callable[[dict], T],
             ) -> list[Iterator[tuple[str, T]]]:
    """One iterator per entry of ``paths``: its files' ``(path, kept(info))`` in path order."""
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
    return [_entry_files(entry, None if recurse else 1, keep, storage_options, require_files,
                         kept) for entry in roots_in]


def _entry_files(entry: str, maxdepth: int | None, keep: set[str] | None,
                 storage_options: dict | None, require_files: bool, kept: Callable[[dict], T],
                 ) -> Iterator[tuple[str, T]]:
    fs, _ = fsspec.core.url_to_fs(entry, **(storage_options or {}))
    full = fs.unstrip_protocol if is_remote_url(entry) else None
    roots = _roots(fs, entry)
    found = heapq.merge(*[_found(fs, root, maxdepth, kept) if info.get("type") == "directory"
                          else iter([(root, kept(info))]) for root, info in roots], key=_first)
    empty = True
    for path, value in found:
        path = path if full is None else full(path)  # one protocol: the order is kept
        if _keep(path, keep):
            empty = False
            yield path, value
    if require_files and empty:
        raise _no_files(fs, entry, roots, keep)


def _first(record: tuple[Any, ...]) -> Any:
    return record[0]


def _found(fs: fsspec.AbstractFileSystem, root: str, maxdepth: int | None,
           kept: Callable[[dict], T]) -> Iterator[tuple[str, T]]:
    """``fs.find(root, maxdepth, detail=True)``'s files in path order, ``(path, kept(info))``.
    Where ``find`` is fsspec's own walk (local files), folder by folder in path order, each
    folder's metadata reduced as it is listed: only one folder's is alive at once. A file
    system with a listing of its own (an object store's paginated request) lists with it."""
    if type(fs).find is not fsspec.AbstractFileSystem.find:
        for path, info in fs.find(root, maxdepth=maxdepth, withdirs=False, detail=True).items():
            yield path, kept(info)
        return
    path = fs._strip_protocol(root)
    try:  # as walk's on_error="omit"
        listing = fs.ls(path, detail=True)
    except OSError:
        return
    # A folder sorts as its name and "/": every path below it then sorts where the folder
    # does among its siblings, so folder by folder in this order is find's sorted order.
    entries: list[tuple[str, Any, bool]] = []
    for info in listing:
        name = info["name"].rstrip("/")
        if info["type"] == "directory" and name != path:
            entries.append((name + "/", name, True))
        else:
            entries.append((info["name"], kept(info), False))
    del listing
    entries.sort(key=_first)
    deeper = maxdepth is None or maxdepth > 1
    for key, value, folder in entries:
        if not folder:
            yield key, value
        elif deeper:
            yield from _found(fs, value, None if maxdepth is None else maxdepth - 1, kept)


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


def _info(info: dict) -> dict:
    return info


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
