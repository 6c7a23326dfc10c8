"""The one rule for what outofcore opens from an output or a journal on a local disk
(:func:`outofcore.storage.documents.open_regular_file`, issue 53): a regular file before a
byte is read, never a FIFO (which would block for ever), a device (which never ends), a
folder or a link; reads bounded; and the stored objects' digests taken by the same rule."""

from __future__ import annotations

import os
import threading

import pytest

from outofcore.storage.digests import file_digest, object_digest
from outofcore.storage.documents import (
    NotRegularFileError,
    open_regular_file,
    read_regular_file,
)


def make(path, kind: str) -> None:
    if kind == "folder":
        path.mkdir()
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "link to a file":
        (path.parent / "target").write_bytes(b"{}")
        path.symlink_to(path.parent / "target")
    elif kind == "link to /dev/zero":
        path.symlink_to("/dev/zero")


KINDS = {
    "folder": "a folder",
    "fifo": "a FIFO",
    "link to a file": "a symbolic link",
    "link to /dev/zero": "a symbolic link",
}


def within(seconds: float, call):
    """``call()``'s answer, failing when it takes longer than ``seconds`` (a blocked open)."""
    box: dict = {}

    def run() -> None:
        try:
            box["value"] = call()
        except BaseException as exc:  # noqa: BLE001 (handed to the test)
            box["error"] = exc

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(seconds)
    assert not worker.is_alive(), f"still waiting after {seconds} s"
    if "error" in box:
        raise box["error"]
    return box["value"]


@pytest.mark.parametrize("kind", list(KINDS))
def test_what_is_not_a_regular_file_is_named_never_opened(tmp_path, kind):
    path = tmp_path / "job.json"
    make(path, kind)
    with pytest.raises(NotRegularFileError, match="not a regular file") as raised:
        within(5, lambda: read_regular_file(str(path), str(path)))
    assert raised.value.kind == KINDS[kind]
    assert str(path) in str(raised.value) and KINDS[kind] in str(raised.value)
    assert within(5, lambda: file_digest(str(path), 100)) == KINDS[kind]


def test_a_link_is_followed_only_when_asked_and_a_device_is_refused(tmp_path):
    make(tmp_path / "doc", "link to a file")
    assert read_regular_file(str(tmp_path / "doc"), "doc", follow_links=True) == b"{}"
    make(tmp_path / "zero", "link to /dev/zero")
    with pytest.raises(NotRegularFileError, match=r"\(a character device\)"):
        within(5, lambda: read_regular_file(str(tmp_path / "zero"), "zero", follow_links=True))


def test_reads_are_bounded_and_nothing_there_is_none(tmp_path):
    path = tmp_path / "record.json"
    assert read_regular_file(str(path), "record") is None
    assert read_regular_file(str(tmp_path / "no" / "such"), "record") is None
    assert file_digest(str(path), 10) is None
    path.write_bytes(b"x" * 1000)
    assert read_regular_file(str(path), "record", max_bytes=10) == b"x" * 11  # one over: too big
    assert read_regular_file(str(path), "record", max_bytes=2000) == b"x" * 1000
    assert file_digest(str(path), 2000) == object_digest(b"x" * 1000)
    assert file_digest(str(path), 999) == [1000, "not read"]  # over its cap: not read
    with open_regular_file(str(path), "record") as opened:
        assert opened.read(3) == b"xxx"
