"""What a job document may hold: its fields and their types, checked before a journal
is trusted (:func:`check_job`); anything else is an edited or damaged journal."""

from __future__ import annotations

from typing import Any

from outofcore.storage.documents import DocumentError, require

#: Version of the journal's layout; a journal of another version is not resumed.
#: 2: inputs carry a content fingerprint.  3: the job names its product (transposes,
#: scales, addend, dtypes).  4: partial tiles of split-k plans; symmetric products.
#: 5: local input tokens carry the change time (a format-4 token never matches one, so
#: its journal is refused by format rather than called "rewritten").
FORMAT = 5

_NUMBER = (int, float)
_NONE = type(None)
#: The fields of a job document and their types.  Every field present must be of its
#: type (floats finite: :func:`outofcore.storage.documents.require`); those of :data:`REQUIRED`
#: must be present in a document of this :data:`FORMAT`.
JOB_FIELDS: dict[str, type | tuple[type, ...]] = {
    "format": int,
    "journal_id": str,
    "created": _NUMBER,
    "created_text": (str, _NONE),
    "inputs": dict,
    "product": dict,
    "memory": int,
    "output": dict,
    "tile": list,
    "tk": int,
    "tiles_total": int,
    "plan": dict,
    "backend": str,
    "complete": bool,
    "completed": (*_NUMBER, _NONE),
    "runs": list,
    "output_metadata": (dict, _NONE),
}


REQUIRED = ("journal_id", "inputs", "product", "memory", "output", "tile", "tk", "tiles_total")
REQUIRED += ("complete", "runs")


#: Times a journal keeps (seconds since 1970) lie in this range; others are refused.
TIME_RANGE = (0.0, 1e11)


def check_job(document: dict[str, Any], what: str) -> None:
    """Check the job document ``document`` (read back as ``what``) field by field.

    Every field of :data:`JOB_FIELDS` present is of its type, its times in
    :data:`TIME_RANGE`; a document of this :data:`FORMAT` has every field of
    :data:`REQUIRED`; the fields read further (tile, plan's tile grid, inputs, runs)
    hold what they should.

    Raises
    ------
    outofcore.storage.documents.DocumentError
        Naming ``what``, the field and the value found.
    """
    for field, kind in JOB_FIELDS.items():
        if field in document or (field in REQUIRED and document.get("format") == FORMAT):
            require(document, field, kind, what)
    for field in ("created", "completed"):
        value = document.get(field)
        if value is not None and not TIME_RANGE[0] <= value <= TIME_RANGE[1]:
            raise DocumentError(f"{what}: field {field!r} is {value!r}, not a time in range")
    _check_items(document, "tile", int, what, length=2, least=1)
    for name in ("tk", "memory", "tiles_total"):
        if isinstance(document.get(name), int) and document[name] < 0:
            raise DocumentError(f"{what}: field {name!r} is {document[name]}, below 0")
    plan = document.get("plan") or {}
    _check_items(plan, "tiles_grid", int, f"{what} (its plan)", length=2, least=0)
    _check_items(document, "inputs", dict, what)
    _check_items(document, "runs", dict, what)
    for name, described in (document.get("inputs") or {}).items():
        where = f"{what} (input {name})"
        for field in ("content", "location"):
            if field in described:
                require(described, field, dict if field == "content" else str, where)
    for run in document.get("runs") or []:
        if "damaged" in run:
            require(run, "damaged", dict, f"{what} (a run)")


def _check_items(
    document: dict[str, Any],
    field: str,
    kind: type,
    what: str,
    length: int | None = None,
    least: int | None = None,
) -> None:
    """Check that ``document[field]``, when there, holds items of ``kind`` (a list's, or
    a dict's values), ``length`` of them, each at least ``least``."""
    if field not in document:
        return
    value = document[field]
    items = list(value.values()) if isinstance(value, dict) else value
    ok = isinstance(items, list) and (length is None or len(items) == length)
    ok = ok and all(isinstance(v, kind) and not isinstance(v, bool) for v in items)
    ok = ok and (least is None or all(v >= least for v in items))
    if not ok:
        shown = repr(value) if len(repr(value)) <= 60 else repr(value)[:57] + "..."
        raise DocumentError(
            f"{what}: field {field!r} is {shown}, not "
            + (f"{length} " if length else "")
            + f"{kind.__name__}s"
            + (f" of at least {least}" if least is not None else "")
        )


def string_mapping(value: Any) -> bool:
    """Whether ``value`` is a dict of strings to strings."""
    return isinstance(value, dict) and all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    )
