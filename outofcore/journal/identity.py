"""A job's identity (its inputs, product, memory budget, output layout, tiling) as its
journal keeps it, and how two identities differ, in words a user can act on."""

from __future__ import annotations

from typing import Any

import zarr

from outofcore.storage import stored_arrays
from outofcore.storage.fingerprint import Fingerprint, changes


def describe_input(array: zarr.Array, content: Fingerprint) -> dict[str, Any]:
    """What identifies an input: where it lives, shape, dtype, chunking and content."""
    return {
        "location": stored_arrays.location_of(array) or "memory",
        "shape": list(array.shape),
        "dtype": str(array.dtype),
        "chunks": list(array.chunks),
        "shards": list(array.shards) if array.shards else None,
        "content": content.summary(),
    }


def job_identity(
    inputs: dict[str, zarr.Array],
    fingerprints: dict[str, Fingerprint],
    budget_bytes: int,
    tile: tuple[int, int] | None,
    tk: int | None,
    product: dict[str, Any],
    output: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """What must match for a rerun to resume.

    The inputs (A, B and an addend) and their content, the product's
    parameters (transposes, scales, dtypes: :meth:`outofcore.operands.product.Product.summary`),
    the budget and forced tile sizes, and the layout asked of a created output
    (:func:`output_layout`), so a resume never continues an output of another
    format or sharding than the rerun asks for.
    """
    return {
        "inputs": {name: describe_input(inputs[name], fingerprints[name]) for name in inputs},
        "product": product,
        "memory": budget_bytes,
        "tile": list(tile) if tile else None,
        "tk": tk,
        "output": output or output_layout(),
    }


def output_layout(zarr_format: int = 3, shards: bool | tuple[int, ...] = True) -> dict[str, Any]:
    """The layout options of a created output, as the journal keeps them (JSON: a shard
    shape as a list, so that the rerun's compares equal to what it reads back).

    Journals written before these options existed hold none and read as the
    defaults (format 3, sharded when large), which is what those jobs wrote.
    """
    kept = shards if isinstance(shards, bool) else list(shards)
    return {"zarr_format": zarr_format, "shards": kept}


def differences(
    journal: dict[str, Any],
    now: dict[str, Any],
    tokens_then: dict[str, dict[str, str]] | None = None,
    fingerprints: dict[str, Fingerprint] | None = None,
) -> list[str]:
    """Human-readable differences between a journal's identity and this job's.

    With the journal's input tokens and this job's fingerprints, a changed
    input names the objects that changed.
    """
    found = []
    then_inputs, now_inputs = journal.get("inputs", {}), now["inputs"]
    for name in sorted(set(then_inputs) - set(now_inputs)):
        found.append(f"input {name} was {then_inputs[name].get('location')!r}, now none")
    for name, current in now_inputs.items():
        if name not in then_inputs:
            found.append(f"input {name} was none, now {current['location']!r}")
            continue
        then = then_inputs[name]
        for field in ("location", "shape", "dtype", "chunks", "shards"):
            if then.get(field) != current[field]:
                was, now_value = _show(then.get(field)), _show(current[field])
                found.append(f"input {name} {field} was {was}, now {now_value}")
        was, content = then.get("content") or {}, current["content"]
        if was.get("method") != content["method"]:  # other tokens: nothing to compare
            found.append(
                f"input {name} was fingerprinted by {was.get('method')}, now by "
                f"{content['method']} (the setting fingerprint)"
            )
        elif was.get("digest") != content["digest"]:
            if tokens_then and fingerprints and name in tokens_then:
                detail = changes(tokens_then[name], fingerprints[name].tokens)
            else:
                detail = (
                    f"{was.get('objects')} objects of {was.get('bytes')} bytes then, "
                    f"{content['objects']} of {content['bytes']} now"
                )
            found.append(f"input {name} was rewritten since the job started ({detail})")
    then_product = journal.get("product") or {}
    for field, value in now["product"].items():
        if then_product.get(field) != value:
            found.append(f"{field} was {_show(then_product.get(field))}, now {_show(value)}")
    if journal.get("memory") != now["memory"]:
        found.append(f"memory budget was {journal.get('memory')} bytes, now {now['memory']} bytes")
    then_output, now_output = journal.get("output") or output_layout(), now["output"]
    for field, value in now_output.items():
        if then_output.get(field) != value:
            found.append(f"output {field} was {_show(then_output.get(field))}, now {_show(value)}")
    for field in ("tile", "tk"):
        if now[field] is not None and journal.get(field) != now[field]:
            found.append(f"{field} was {_show(journal.get(field))}, now {_show(now[field])}")
    return found


def _show(value: Any) -> str:
    if isinstance(value, list):
        return (
            "x".join(str(v) for v in value)
            if all(isinstance(v, int) for v in value)
            else str(value)
        )
    return repr(value) if isinstance(value, str) else str(value)
