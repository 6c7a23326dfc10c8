"""The store of a job journal: keys held to safe names, reads, durable and conditional writes.

:class:`JournalStore` is where a journal (:class:`outofcore.journal.records.Journal`, which
adds the records) lives: the output's store and its path in it.  Every key is built
of :data:`~outofcore.storage.manifest.SAFE_NAME` parts under the journal folder
(:data:`~outofcore.storage.manifest.JOURNAL_DIR`), so a name read back from an edited
journal cannot point outside it.  Writes on a local disk are durable
(:func:`outofcore.storage.writing.write_durably`); writes that must have one winner are
conditional where the store offers it (:mod:`outofcore.storage.storeops`).
"""

from __future__ import annotations

import asyncio
import json
import os
from dataclasses import dataclass
from typing import Any, Self

import numpy as np
import zarr
from zarr.abc.store import RangeByteRequest, Store
from zarr.core.buffer import default_buffer_prototype
from zarr.core.sync import sync
from zarr.storage import LocalStore

from outofcore.errors import OutputExistsError
from outofcore.storage import deleting, storeops, stores
from outofcore.storage.deadlines import StoreDeadlineError
from outofcore.storage.documents import (
    MAX_DOCUMENT_BYTES,
    DocumentError,
    NotRegularFileError,
    load_document,
    open_regular_file,
    read_regular_file,
)
from outofcore.storage.locations import Location
from outofcore.storage.manifest import JOURNAL_DIR, SAFE_NAME
from outofcore.storage.writing import naming_full_disk, write_durably

#: Records read at once when a resume checks them
#: (:meth:`outofcore.journal.records.Journal.drop_damaged_records`).
RECORDS_IN_FLIGHT = 32
#: The largest journal document read (bytes): a tile record with its chunks' digests is
#: kilobytes, a job document tens of them; anything larger is not read past this.
MAX_JOURNAL_BYTES = MAX_DOCUMENT_BYTES
#: The first ranged read of a journal document (:func:`bounded_get`): a record fits.
FIRST_READ_BYTES = 64 * 1024


class JournalError(OutputExistsError):
    """The output's journal holds what outofcore never writes (edited or damaged)."""


def safe_name(value: object, what: str) -> str:
    """Return ``value`` when it is a name journal keys may be built from (:data:`SAFE_NAME`).

    Raises
    ------
    JournalError
        Naming ``what`` and the value, for anything else (``..``, a ``/``, not a str).
    """
    if isinstance(value, str) and SAFE_NAME.fullmatch(value):
        return value
    shown = repr(value) if len(repr(value)) <= 80 else repr(value)[:77] + "..."
    raise JournalError(
        f"{what} {shown} is not a name outofcore writes (letters, digits, '_', '-', '.'): "
        "the output's journal was edited or damaged, and nothing is read or written by it; "
        "pass overwrite=True to start the output over"
    )


def parse_document(data: bytes, what: str, max_bytes: int = MAX_JOURNAL_BYTES) -> Any:
    """The journal document ``data`` (read back as ``what``) parsed within bounds.

    Raises
    ------
    outofcore.storage.documents.DocumentError
        When it is over ``max_bytes`` (a read of ``max_bytes + 1`` says so), nested too
        deep, not JSON, or holds ``NaN`` or ``Infinity``.
    """
    if len(data) > max_bytes:
        raise DocumentError(
            f"{what} is more than {max_bytes} bytes, more than a journal document may have; "
            "it is not read"
        )
    return load_document(data, what, max_bytes=max_bytes)


async def bounded_get(store: Store, key: str, max_bytes: int) -> bytes | None:
    """At most ``max_bytes + 1`` bytes of the object at ``key`` in ``store`` (None: none).

    A ranged read of :data:`FIRST_READ_BYTES` first, and only a document that fills it is
    read on, to its size (asked of the store) or one byte over ``max_bytes``: a local
    store allocates the whole range it is asked for, so a cap-sized range for every
    kilobyte record would hold ``max_bytes`` per read.  Where the store refuses the
    range (obstore, for an empty object), the object is read whole, and
    :func:`parse_document` still refuses it past ``max_bytes``.

    On a local disk the file is read by the one rule for what outofcore opens there
    (:func:`outofcore.storage.documents.read_regular_file`: never a FIFO, a device, a
    folder or a link, at most ``max_bytes + 1`` bytes).

    Raises
    ------
    outofcore.storage.documents.NotRegularFileError
        On a local disk, when what is at ``key`` is not a regular file.
    """
    path = local_key_path(store, key)
    if path is not None:
        return await asyncio.to_thread(read_regular_file, path, path, max_bytes)
    prototype = default_buffer_prototype()
    first = min(FIRST_READ_BYTES, max_bytes + 1)
    try:
        buffer = await store.get(key, prototype=prototype, byte_range=RangeByteRequest(0, first))
    except FileNotFoundError:
        return None
    except Exception as exc:  # noqa: BLE001 (a range past an empty object's end): read it whole
        if isinstance(exc, StoreDeadlineError) or "range" not in str(exc).lower():
            raise  # a store that does not answer is not asked twice
        try:
            buffer = await store.get(key, prototype=prototype)
        except FileNotFoundError:
            return None
    if buffer is None:
        return None
    head = buffer.to_bytes()
    if len(head) < first or first > max_bytes:
        return head
    try:
        end = min(await store.getsize(key), max_bytes + 1)
    except FileNotFoundError:
        return None
    if end <= len(head):
        return head
    rest = await store.get(key, prototype=prototype, byte_range=RangeByteRequest(len(head), end))
    return head if rest is None else head + rest.to_bytes()


def local_key_path(store: Store, key: str) -> str | None:
    """The file of ``key`` in ``store`` on a local disk (a ``LocalStore``), else None."""
    if isinstance(store, LocalStore):
        return os.path.join(os.fspath(store.root), *key.split("/"))
    return None


@dataclass(frozen=True)
class JournalStore:
    """The journal folder of the output at ``prefix`` in ``store``: its keys and raw access."""

    store: Store
    prefix: str

    @classmethod
    def for_output(cls, target: zarr.Array | Location) -> Self:
        """The journal of an output given as a ``zarr.Array`` or a location (a local path,
        or a URL opened with the options the location carries).

        Nothing is read or written here.
        """
        if isinstance(target, zarr.Array):
            return cls(store=target.store, prefix=target.path)
        return cls(store=stores.open_store(target), prefix="")

    # -- keys -------------------------------------------------------------------------
    def key(self, *parts: str) -> str:
        """Store key of ``parts`` inside the journal folder.

        Raises
        ------
        JournalError
            For a part that is not a :data:`SAFE_NAME` (``..``, ``a/b``, ...): no key
            leaves the journal folder, whatever a journal read back says.
        """
        for part in parts:
            safe_name(part, "the journal key part")
        return "/".join(p for p in (self.prefix.strip("/"), JOURNAL_DIR, *parts) if p)

    @property
    def local_folder(self) -> str | None:
        """The journal's folder on disk for local stores, else None (for messages)."""
        if isinstance(self.store, LocalStore):
            return os.path.join(os.fspath(self.store.root), self.key())
        return None

    # -- raw access -------------------------------------------------------------------
    def _reader(self) -> Store:
        # A read-only twin: opening a writable LocalStore would create its folder.
        return self.store if self.store.read_only else self.store.with_read_only(True)

    def get_array(self, key: str) -> np.ndarray | None:
        """The object at ``key`` as bytes in a read-only numpy array (as the store read
        it, not copied), or None when there is none.

        On a local disk, by the one rule (:func:`outofcore.storage.documents.open_regular_file`):
        what is not a regular file there counts as none (the task that wrote it runs again).
        """
        path = self.local_path(key)
        if path is not None:
            return _read_local_array(path)
        try:
            buffer = sync(self._reader().get(key, prototype=default_buffer_prototype()))
        except FileNotFoundError:
            return None
        return None if buffer is None else buffer.as_numpy_array()

    def get_bytes(self, key: str) -> bytes | None:
        """The object at ``key``, or None when there is none; at most
        :data:`MAX_JOURNAL_BYTES` + 1 bytes of it (a journal document's cap).

        On a local disk what is not a regular file there (a FIFO, a folder, a device)
        reads as empty bytes: there, and no document (:meth:`get_versioned` says the
        same); a link is followed (the lease's heartbeat retries a link that loops, as a
        store's read error)."""
        path = self.local_path(key)
        try:
            if path is not None:  # a link is followed, as a store's read follows it
                return read_regular_file(path, path, MAX_JOURNAL_BYTES, follow_links=True)
            return self.get_bounded(key)
        except NotRegularFileError:
            return b""

    def get_document(self, key: str, max_bytes: int = MAX_JOURNAL_BYTES) -> Any:
        """The JSON document at ``key`` parsed within bounds
        (:func:`outofcore.storage.documents.load_document`: at most ``max_bytes`` are read, the
        nesting capped, no ``NaN``), or None when there is none.

        Raises
        ------
        outofcore.storage.documents.DocumentError
            Naming the document, when it is too large, too deep or not JSON.
        """
        data = self.get_bounded(key, max_bytes)
        return None if data is None else parse_document(data, self.name_of(key), max_bytes)

    def get_bounded(self, key: str, max_bytes: int = MAX_JOURNAL_BYTES) -> bytes | None:
        """At most ``max_bytes + 1`` bytes of the object at ``key`` (one more than a
        document may have: :func:`parse_document` refuses it), or None when there is none."""
        return sync(bounded_get(self._reader(), key, max_bytes))

    def name_of(self, key: str) -> str:
        """How messages name the journal object ``key``: its file, or its key in the store."""
        return self.local_path(key) or key

    def get_json(self, key: str) -> dict[str, Any] | None:
        """The JSON object at ``key``, or None when there is none or it is unreadable
        (too large, too deep, not JSON, not an object: :meth:`get_document`)."""
        try:
            document = self.get_document(key)
        except DocumentError:
            return None
        return document if isinstance(document, dict) else None

    def get_versioned(
        self, key: str
    ) -> tuple[dict[str, Any] | None, bytes | None, storeops.Version | None]:
        """The JSON document at ``key`` (None: none, or not a bounded JSON object), its
        bytes, and its version for :meth:`put_json`'s ``if_version`` (None where the store
        has no compare-and-swap)."""
        if self.local_path(key) is not None:  # no versions on a local disk
            data, version = self.get_bytes(key), None
        else:
            data, version = sync(storeops.get_versioned(self._reader(), key))
        try:
            document = None if data is None else parse_document(data, self.name_of(key))
        except DocumentError:
            document = None
        return (document if isinstance(document, dict) else None), data, version

    def put_json(
        self,
        key: str,
        document: dict[str, Any],
        *,
        only_if_absent: bool = False,
        if_version: storeops.Version | None = None,
    ) -> bool | None:
        """Write ``document`` at ``key`` (atomically on local stores).

        ``only_if_absent``: only when nothing is there; ``if_version``: only
        when the object is still the version :meth:`get_versioned` returned.
        Returns whether it was written when the store knows (a conditional
        write), else None.
        """
        data = json.dumps(document, indent=1, sort_keys=True).encode()
        with naming_full_disk(f"writing {key} of the job journal", self.local_folder):
            if if_version is not None:
                return sync(storeops.put_if_unchanged(self.store, key, data, if_version))
            if self.local_path(key) is not None:  # flushed to disk before it counts
                return self.put_bytes(key, data, only_if_absent=only_if_absent)
            if only_if_absent:
                return sync(storeops.put_if_absent(self.store, key, data))
            sync(self.store.set(key, default_buffer_prototype().buffer.from_bytes(data)))
        return None

    def put_bytes(self, key: str, data: Any, *, only_if_absent: bool = False) -> bool | None:
        """Write ``data`` (bytes or a buffer) at ``key``; on a local disk durably
        (:func:`outofcore.storage.writing.write_durably`: the bytes are on disk before the name
        is), elsewhere through the store (a PUT is durable once acknowledged).

        Returns whether it was written where that is known (a local disk, a conditional
        write), else None.
        """
        path = self.local_path(key)
        if path is not None:
            if self.store.read_only:
                raise OSError(f"the store {self.store} is read-only")
            root = os.path.join(os.fspath(self.store.root), self.prefix.strip("/"))
            return write_durably(path, data, exclusive=only_if_absent, root=root)
        if only_if_absent:
            return sync(storeops.put_if_absent(self.store, key, bytes(data)))
        buffer = default_buffer_prototype().buffer
        value = buffer.from_bytes(data) if isinstance(data, bytes) else buffer.from_array_like(data)
        sync(self.store.set(key, value))
        return None

    def local_path(self, key: str) -> str | None:
        """The file of ``key`` on a local disk, or None for other stores."""
        if isinstance(self.store, LocalStore):
            return os.path.join(os.fspath(self.store.root), *key.split("/"))
        return None

    @property
    def conditional_writes(self) -> str | None:
        """How this journal's store creates an object only if absent atomically, or None."""
        return storeops.conditional_writes(self.store)

    def delete(self, key: str) -> None:
        """Remove the object at exactly ``key`` if there is one (never a pattern or a
        folder with anything in it: :func:`outofcore.storage.deleting.delete_keys`); on a
        local disk an empty folder, a FIFO or a link at ``key`` (where outofcore writes a
        file) goes too, so the file can be written again.

        Raises
        ------
        JournalError
            When a folder that holds something is where the object was: never removed.
        """
        deleting.remove_folders(self.store, "", [key])  # only an empty one
        deleting.delete_keys(self.store, "", [key])
        path = self.local_path(key)
        if path is not None and os.path.isdir(path) and not os.path.islink(path):
            raise JournalError(
                f"{path} is a folder that holds files, where outofcore keeps a journal file; "
                "it is not outofcore's to remove: move it away and run the command again"
            )

    def list_keys(self, prefix: str) -> list[str]:
        """Every key under ``prefix`` (a folder), empty when there is none."""

        async def collect() -> list[str]:
            return [key async for key in self._reader().list_prefix(prefix)]

        try:
            return sync(collect())
        except FileNotFoundError:
            return []

    def read_records(self, keys: list[str]) -> dict[str, dict[str, Any] | None]:
        """The JSON documents at ``keys`` (None: missing, or not a bounded JSON object:
        :meth:`get_document`), read :data:`RECORDS_IN_FLIGHT` at a time, each at most
        :data:`MAX_JOURNAL_BYTES` long."""
        reader = self._reader()

        async def one(key: str, limit: asyncio.Semaphore) -> dict[str, Any] | None:
            try:
                async with limit:
                    data = await bounded_get(reader, key, MAX_JOURNAL_BYTES)
                document = None if data is None else parse_document(data, key)
            except (DocumentError, PermissionError):  # not a file, unreadable: not a record
                return None
            return document if isinstance(document, dict) else None

        async def every() -> list[dict[str, Any] | None]:
            limit = asyncio.Semaphore(RECORDS_IN_FLIGHT)  # made on the loop that uses it
            return list(await asyncio.gather(*(one(key, limit) for key in keys)))

        return dict(zip(keys, sync(every()), strict=True)) if keys else {}

    @property
    def where(self) -> str:
        """How messages name the output of this journal."""
        folder = self.local_folder
        if folder is not None:
            return os.path.dirname(folder)
        return "/".join(p for p in (str(self.store), self.prefix.strip("/")) if p)


def _read_local_array(path: str) -> np.ndarray | None:
    """The regular file at ``path`` in a read-only byte array of its size (None: none, or
    not a regular file: :func:`outofcore.storage.documents.open_regular_file`)."""
    try:
        opened = open_regular_file(path, path)
    except NotRegularFileError:
        return None
    if opened is None:
        return None
    with opened:
        data = np.empty(os.fstat(opened.fileno()).st_size, dtype=np.uint8)
        view, done = memoryview(data), 0
        while done < data.size:
            got = opened.readinto(view[done:])
            if not got:  # shorter than its size said: a file cut meanwhile
                data = data[:done]
                break
            done += got
    data.flags.writeable = False
    return data
