"""What a stored object's bytes are, kept to tell later whether it changed: its size and
SHA-256 (the one form every record of written objects keeps)."""

from __future__ import annotations

import hashlib
import os
from typing import Any

import numpy as np

from outofcore.storage.documents import NotRegularFileError, open_regular_file

#: ``{key: [bytes, sha256 hex] or None}`` of stored objects by key (None: the store holds none).
Digests = dict[str, list[Any] | None]


def object_digest(data: np.ndarray | bytes | memoryview) -> list[Any]:
    """``[bytes, sha256 hex]`` of one stored object's bytes ``data`` (contiguous)."""
    view = memoryview(data).cast("B")
    return [view.nbytes, hashlib.sha256(view).hexdigest()]


#: Bytes of a stored object read (and hashed) at once when its digest is taken from a file.
FILE_PIECE_BYTES = 16 * 2**20


def file_digest(path: str, max_bytes: int) -> list[Any] | str | None:
    """:func:`object_digest` of the regular file at ``path``, read in pieces of
    :data:`FILE_PIECE_BYTES` (None: nothing there).

    Opened by the one rule for what outofcore opens from an output
    (:func:`outofcore.storage.documents.open_regular_file`): what is not a regular file
    (a folder, a FIFO, a link, a device) is not opened for reading, and comes back as
    what it is, in words (``"a folder"``).  A file of more than ``max_bytes`` is not
    read: ``[its size, "not read"]``, which no digest taken of what was written equals.
    """
    try:
        opened = open_regular_file(path, path)
    except NotRegularFileError as exc:
        return exc.kind
    if opened is None:
        return None
    with opened:
        size = os.fstat(opened.fileno()).st_size
        if size > max_bytes:
            return [size, "not read"]
        digest, done = hashlib.sha256(), 0
        # Pieces no larger than what is left of the file: an unbuffered read allocates all
        # it is asked for before it shrinks (a small chunk would cost a whole piece).
        while piece := opened.read(max(1, min(FILE_PIECE_BYTES, size - done + 1))):
            digest.update(piece)
            done += len(piece)
    return [done, digest.hexdigest()]
