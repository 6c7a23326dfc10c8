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
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

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
