"""Whether the CUDA code changed since a GPU check last ran it: the sanitizer and the
chip's pytest phases teach something only then.

The summary of every check records :func:`kernels_sha256` (``kernels_sha256``); the
runner skips those two phases when it equals the one in the newest ``docs/gpu-check-*.json``
that has it (:func:`last_checked`), unless ``--only`` names them.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from tools.gpu_check.common import REPO

#: The CUDA code whose change makes the sanitizer and the chip's tests worth running.
KERNEL_SOURCES = REPO / "outofcore" / "compute" / "cuda"
#: Phases that run only when the kernels changed.
WHEN_CHANGED = ("sanitizer", "pytest")


def kernels_sha256(folder: Path = KERNEL_SOURCES) -> str:
    """sha256 of ``folder/*.py``, each file's name and bytes, in name order."""
    digest = hashlib.sha256()
    for path in sorted(folder.glob("*.py")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def last_checked(docs: Path = REPO / "docs") -> tuple[str, str] | None:
    """``(hash, file name)`` of the newest ``gpu-check-*.json`` in ``docs`` that records a
    ``kernels_sha256`` (newest by its ``started`` time, then its name); None if none does."""
    found = []
    for path in docs.glob("gpu-check-*.json"):
        try:
            summary = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(summary, dict) and summary.get("kernels_sha256"):
            found.append((str(summary.get("started", "")), path.name, summary["kernels_sha256"]))
    if not found:
        return None
    _, name, digest = max(found)
    return digest, name


def unchanged_since(current: str, docs: Path = REPO / "docs") -> str | None:
    """The file name of the newest check that ran these same kernels, or None."""
    last = last_checked(docs)
    return last[1] if last is not None and last[0] == current else None
