"""Keys and documents inside an output, read as they are: a key joined to the output's
path, a metadata document of bounded size, a store's listing, a link's target."""

from __future__ import annotations

import os

from zarr.abc.store import Store
from zarr.core.buffer import default_buffer_prototype
from zarr.core.sync import sync

from outofcore.storage.documents import DocumentError, open_regular_file

#: Largest metadata document read to learn the chunk keys (bigger: no chunk key is known).
_METADATA_BYTES = 16 << 20


def join_key(*parts: str) -> str:
    """``parts`` joined into one key (empty parts left out)."""
    return "/".join(p for p in parts if p)


def read_metadata(store: Store, top: str, base: str | None, name: str) -> bytes | None:
    """The document ``name`` at the output's top, when it is a plain file of sane size."""
    if base is not None:  # by the one rule for what outofcore opens from an output
        path = os.path.join(base, join_key(top, name))
        try:
            opened = open_regular_file(path, path)
        except (OSError, DocumentError):  # unreadable, or not a regular file
            return None
        if opened is None:
            return None
        with opened:
            if os.fstat(opened.fileno()).st_size > _METADATA_BYTES:
                return None
            return opened.read(_METADATA_BYTES)
    reader = _reader(store)
    try:
        buffer = sync(reader.get(join_key(top, name), prototype=default_buffer_prototype()))
    except OSError:
        return None
    if buffer is None or len(buffer) > _METADATA_BYTES:
        return None
    return buffer.to_bytes()


def _reader(store: Store) -> Store:
    """A read-only twin of ``store`` where it has one (a writable LocalStore creates its
    folder when opened), else ``store``."""
    if store.read_only:
        return store
    try:
        return store.with_read_only(True)
    except NotImplementedError:
        return store


def link_target(path: str) -> str:
    """Where the symbolic link ``path`` points, for a message; ``"?"`` where unreadable."""
    try:
        return os.readlink(path)
    except OSError:
        return "?"


def list_store(store: Store, top: str, under: str) -> list[str]:
    """Every key below the output (``under`` it), relative to the output."""
    start = join_key(top, under)
    reader = _reader(store)

    async def collect() -> list[str]:
        return [key async for key in reader.list_prefix(start + "/" if start else "")]

    try:
        keys = sync(collect())
    except FileNotFoundError:
        return []
    skip = len(top) + 1 if top else 0
    return [key[skip:] for key in keys if not top or key.startswith(top + "/")]
