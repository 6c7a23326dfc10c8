"""JSON documents read back from disk or a network, parsed within bounds.

Every JSON document outofcore reads (an input's ``zarr.json`` or ``.zarray``, a
journal's ``job.json`` and tile records, the lease, the manifest, the probe's cache)
is hostile until checked: :func:`load_document` refuses one over a size cap before
reading it further, one nested deeper than a depth cap before parsing it (Python's
parser recurses, so 10⁵ nested brackets were a ``RecursionError``), and, unless asked,
the non-standard constants ``NaN``, ``Infinity`` and ``-Infinity`` that Python's
parser takes by default.  The error is a :class:`DocumentError` (an
:class:`~outofcore.errors.InputError`, exit status 2) that names the document and
what is wrong with it.

The checks on fields (types, finite numbers, ranges) belong to each document's own
reader; :func:`require` is the one way they name a field that is wrong.

Every object outofcore opens on a local disk from an output or a journal (a job
document, a tile record, the lease, a chunk or a shard whose digest is checked, a
metadata document) is opened by :func:`read_regular_file`, the one rule for them: opened
without blocking and without following a link, checked to be a regular file before a
byte is read (a FIFO would block the reader for ever, a device never end, a folder is
not a document), and read to a bounded size.  What is not a regular file is a
:class:`NotRegularFileError` naming its path and what it is.
"""

from __future__ import annotations

import errno
import json
import math
import os
import re
import stat
from typing import Any, BinaryIO

import numpy as np

from outofcore.errors import InputError

#: The largest document read (bytes): a journal record or zarr metadata is kilobytes;
#: a zarr.json with a few thousand attributes stays far below.
MAX_DOCUMENT_BYTES = 16 * 2**20
#: The deepest nesting of arrays and objects accepted.
MAX_DOCUMENT_DEPTH = 64

_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)


class DocumentError(InputError):
    """A JSON document read back is too large, too deep, not JSON, or has a bad field."""


class NotRegularFileError(DocumentError):
    """What is at a document's (or a stored object's) path is not a regular file: a folder,
    a FIFO, a device, a socket or a symbolic link.  ``kind`` says which."""

    def __init__(self, message: str, kind: str = "not a regular file") -> None:
        super().__init__(message)
        self.kind = kind


def entry_kind(mode: int) -> str:
    """What a file of ``mode`` (``st_mode``) is, in words: ``"a regular file"``,
    ``"a folder"``, ``"a FIFO"``, ``"a symbolic link"``, ...."""
    kinds = (
        (stat.S_ISREG, "a regular file"),
        (stat.S_ISDIR, "a folder"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISLNK, "a symbolic link"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    )
    return next((name for test, name in kinds if test(mode)), "not a file")


def open_regular_file(path: str, what: str, *, follow_links: bool = False) -> BinaryIO | None:
    """The regular file at ``path`` opened for reading, unbuffered (None: nothing there).

    The one rule for what outofcore opens on a local disk from an output or a journal
    (module docstring): opened with ``O_NONBLOCK`` (a FIFO opens without waiting for a
    writer) and, unless ``follow_links``, ``O_NOFOLLOW`` (outofcore writes no links); then
    ``fstat`` of the open file must say a regular file before anything is read.  The
    caller reads it to a bounded size (:func:`read_regular_file`) and closes it.

    Parameters
    ----------
    path
        The file.
    what
        How the error names it (its path, or a label and its path).
    follow_links
        Open through a symbolic link (an input's metadata may be a link); else a link is
        refused as one.

    Raises
    ------
    NotRegularFileError
        When it is a folder, a FIFO, a device, a socket, or (unless ``follow_links``) a
        symbolic link, naming ``what`` and which.
    OSError
        When it cannot be opened for another reason (permissions, the disk, a link to
        itself when ``follow_links``).
    """
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    if not follow_links:
        flags |= getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        # a folder, a socket; a link unless followed (followed, ELOOP is a loop: an error)
        refused = (errno.EISDIR, errno.ENXIO) + (() if follow_links else (errno.ELOOP,))
        if exc.errno in refused:
            kind = _kind_at(path)
            if kind is None:
                return None
            message = f"{what} is not a regular file ({kind}); it is not read"
            raise NotRegularFileError(message, kind) from None
        raise
    try:
        mode = os.fstat(fd).st_mode
    except BaseException:
        os.close(fd)
        raise
    if not stat.S_ISREG(mode):
        os.close(fd)
        kind = entry_kind(mode)
        raise NotRegularFileError(f"{what} is not a regular file ({kind}); it is not read", kind)
    return os.fdopen(fd, "rb", buffering=0)


def read_regular_file(
    path: str, what: str, max_bytes: int = MAX_DOCUMENT_BYTES, *, follow_links: bool = False
) -> bytes | None:
    """At most ``max_bytes + 1`` bytes of the regular file at ``path`` (None: nothing
    there), opened by :func:`open_regular_file`'s rule: a caller that gets
    ``max_bytes + 1`` bytes knows the file is over its cap, and no more is read.

    Raises
    ------
    NotRegularFileError
        As :func:`open_regular_file`.
    OSError
        When it cannot be opened or read for another reason.
    """
    opened = open_regular_file(path, what, follow_links=follow_links)
    if opened is None:
        return None
    with opened:
        # Reads as large as the file says it is (and one byte more, to see it grew), not
        # as the cap: an unbuffered read allocates all it is asked for before it shrinks.
        size = os.fstat(opened.fileno()).st_size
        chunks, left = [], max_bytes + 1
        while left > 0:
            part = opened.read(min(left, size + 1, 1 << 24))
            if not part:
                break
            chunks.append(part)
            left -= len(part)
            size = max(1, size - len(part))
    return b"".join(chunks)


def _kind_at(path: str) -> str | None:
    """What is at ``path`` (not following a link), or None when nothing is."""
    try:
        return entry_kind(os.lstat(path).st_mode)
    except (FileNotFoundError, NotADirectoryError):
        return None


def check_size(size: int, what: str, max_bytes: int = MAX_DOCUMENT_BYTES) -> None:
    """Refuse a document of ``size`` bytes before it is read, if it is over ``max_bytes``."""
    if size > max_bytes:
        raise DocumentError(
            f"{what} is {size} bytes, more than the {max_bytes} bytes a document may have; "
            "it is not read"
        )


def nesting_depth(data: bytes) -> int:
    """The deepest nesting of ``[`` and ``{`` in the JSON text ``data``, strings skipped."""
    bare = np.frombuffer(_STRING.sub(b'""', data), dtype=np.uint8)
    if bare.size == 0:
        return 0
    step = np.isin(bare, (ord("["), ord("{"))).astype(np.int64) - np.isin(
        bare, (ord("]"), ord("}"))
    ).astype(np.int64)
    return int(np.cumsum(step).max(initial=0))


def load_document(
    data: bytes | str,
    what: str,
    *,
    max_bytes: int = MAX_DOCUMENT_BYTES,
    max_depth: int = MAX_DOCUMENT_DEPTH,
    allow_constants: bool = False,
) -> Any:
    """Parse the JSON ``data`` read back as ``what`` (a file or key name), within bounds.

    Parameters
    ----------
    data
        The document's bytes (or text).
    what
        How the error names it, e.g. ``"c.zarr/.outofcore/job.json"``.
    max_bytes, max_depth
        The size and nesting caps, checked before parsing.
    allow_constants
        Take ``NaN``, ``Infinity`` and ``-Infinity`` as floats (zarr v2 metadata may
        hold them); refused by default.

    Raises
    ------
    DocumentError
        Naming ``what`` and the cap or the parser's complaint.
    """
    raw = data.encode() if isinstance(data, str) else bytes(data)
    check_size(len(raw), what, max_bytes)
    depth = nesting_depth(raw)
    if depth > max_depth:
        raise DocumentError(
            f"{what} is nested {depth} levels deep, more than the {max_depth} a document may "
            "have; it is not parsed"
        )

    def constant(name: str) -> float:
        if allow_constants:
            return float(name.replace("Infinity", "inf"))
        raise ValueError(f"the non-standard constant {name}")

    try:
        return json.loads(raw, parse_constant=constant)
    except (ValueError, RecursionError) as exc:
        raise DocumentError(f"{what} is not valid JSON: {exc}") from None


def require(document: dict[str, Any], field: str, kind: type | tuple[type, ...], what: str) -> Any:
    """``document[field]`` if it is of ``kind`` (bools are not numbers; floats finite).

    Raises
    ------
    DocumentError
        Naming ``what``, the field, and the value found (shortened).
    """
    value = document.get(field)
    kinds = kind if isinstance(kind, tuple) else (kind,)
    ok = isinstance(value, kinds) and not (isinstance(value, bool) and bool not in kinds)
    if ok and isinstance(value, float) and not math.isfinite(value):
        ok = False
    if not ok:
        names = " or ".join(k.__name__ for k in kinds)
        shown = repr(value)
        shown = shown if len(shown) <= 60 else shown[:57] + "..."
        raise DocumentError(f"{what}: field {field!r} is {shown}, not of type {names}")
    return value
