"""What a stored object's bytes are, kept to tell later whether it changed: its size and
SHA-256 (the one form every record of written objects keeps)."""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np

#: ``{key: [bytes, sha256 hex] or None}`` of stored objects by key (None: the store holds none).
Digests = dict[str, list[Any] | None]


def object_digest(data: np.ndarray | bytes | memoryview) -> list[Any]:
    """``[bytes, sha256 hex]`` of one stored object's bytes ``data`` (contiguous)."""
    view = memoryview(data).cast("B")
    return [view.nbytes, hashlib.sha256(view).hexdigest()]
