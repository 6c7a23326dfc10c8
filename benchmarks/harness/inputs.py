"""Benchmark inputs: seeded random zarr arrays, written once and cached, and their stored bytes."""

from __future__ import annotations

import argparse
import itertools
import math
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.harness.processes import HERE

#: Where inputs are cached, and where results are written.
DEFAULT_DATA = HERE / "data"
DEFAULT_RESULTS = HERE / "results"


@dataclass(frozen=True)
class Operand:
    """A seeded standard-normal float32 zarr array to write (zstd chunks)."""

    name: str
    shape: tuple[int, ...]
    chunks: tuple[int, ...]
    seed: int

    def folder(self) -> str:
        dims = "x".join(map(str, self.shape))
        return f"{self.name}-f32-{dims}-c{'x'.join(map(str, self.chunks))}-s{self.seed}.zarr"

    @property
    def nbytes(self) -> int:
        return 4 * math.prod(self.shape)


def write_operand(path: Path, operand: Operand, threads: int | None = None) -> bool:
    """Write ``operand`` at ``path`` unless a whole one is there; True when written.

    Each chunk draws from its own generator seeded ``(seed, *chunk index)``, so
    the values depend on the seed, shape and chunks only; a ``.complete`` marker
    says the array is whole.
    """
    import numpy as np  # noqa: PLC0415
    import zarr  # noqa: PLC0415
    from zarr.codecs import ZstdCodec  # noqa: PLC0415

    if (path / ".complete").exists():
        return False
    array = zarr.create_array(
        str(path),
        shape=operand.shape,
        chunks=operand.chunks,
        dtype="float32",
        compressors=ZstdCodec(level=3),
        overwrite=True,
    )
    grid = [range(0, n, c) for n, c in zip(operand.shape, operand.chunks, strict=True)]

    def write_chunk(origin: tuple[int, ...]) -> None:
        box = tuple(
            slice(o, min(o + c, n))
            for o, c, n in zip(origin, operand.chunks, operand.shape, strict=True)
        )
        index = tuple(o // c for o, c in zip(origin, operand.chunks, strict=True))
        rng = np.random.default_rng((operand.seed, *index))
        array[box] = rng.standard_normal([s.stop - s.start for s in box], dtype=np.float32)

    from concurrent.futures import ThreadPoolExecutor  # noqa: PLC0415

    with ThreadPoolExecutor(max_workers=threads or os.cpu_count() or 1) as pool:
        list(pool.map(write_chunk, itertools.product(*grid)))
    (path / ".complete").touch()
    return True


def write_once(path: Path, fill: Callable[[Any], None], **array: Any) -> bool:
    """Make a zarr array at ``path`` and ``fill(array)`` it, unless a whole one is there.

    ``array`` holds :func:`zarr.create_array`'s arguments (shape, chunks, dtype, ...);
    a ``.complete`` marker, written last, says the array is whole.  True when written.
    """
    import zarr  # noqa: PLC0415

    if (path / ".complete").exists():
        return False
    fill(zarr.create_array(str(path), overwrite=True, **array))
    (path / ".complete").touch()
    return True


def stored_bytes(path: Path) -> int:
    """The bytes an array stores under ``path``: its chunk and metadata files.

    Dot-files are left out: they are the harness's own ``.complete`` marker (or a
    writer's temporary file), not part of the array, so a cached copy and a fresh
    one count the same and the compression ratio is the array's alone.
    """
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and f.name[0] != ".")


def input_paths(data_dir: Path, size: int, chunk: int) -> tuple[Path, Path]:
    return (data_dir / f"a-{size}-{chunk}.zarr", data_dir / f"b-{size}-{chunk}.zarr")


def ensure_inputs(data_dir: Path, size: int, chunk: int) -> tuple[Path, Path]:
    """Make A and B (seeds 0 and 1) unless a finished copy is cached in ``data_dir``."""
    paths = input_paths(data_dir, size, chunk)
    for seed, path in enumerate(paths):
        ensure_array(path, (size, size), (chunk, chunk), seed)
    return paths


def ensure_array(path: Path, shape: tuple[int, int], chunks: tuple[int, int], seed: int) -> Path:
    """Make a seeded random float32 zarr array (zstd) at ``path`` unless a finished copy is there.

    A ``.complete`` marker, written last, says the cached copy is whole.
    """
    from outofcore.frontends.generate import random_array  # noqa: PLC0415

    done = path / ".complete"
    if not done.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        started = time.perf_counter()
        random_array(path, shape, chunks, seed=seed, overwrite=True)
        done.write_text("ok\n")
        print(f"made {path.name} in {time.perf_counter() - started:.1f} s", file=sys.stderr)
    return path


def ensure_pair(folder: Path, name: str, m: int, k: int, n: int, chunk: int) -> tuple[Path, Path]:
    """A (``m x k``) and B (``k x n``) of :func:`ensure_array` in square ``chunk`` chunks,
    seeded 1 and 2, cached in ``folder`` under ``name``."""
    a = folder / f"{name}-a-{m}x{k}-c{chunk}.zarr"
    b = folder / f"{name}-b-{k}x{n}-c{chunk}.zarr"
    ensure_array(a, (m, k), (chunk, chunk), seed=1)
    ensure_array(b, (k, n), (chunk, chunk), seed=2)
    return a, b


def add_folder_arguments(parser: argparse.ArgumentParser) -> None:
    """``--data-dir`` (inputs, cached) and ``--out-dir`` (results), the harness's defaults."""
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--out-dir", type=Path, default=DEFAULT_RESULTS)


def add_tiling_arguments(
    parser: argparse.ArgumentParser, *, chunk: int, tile: int, tk: int
) -> None:
    """A timed-device case's ``--chunk`` (square zstd chunks of A and B), ``--tile`` (the
    square output tile), ``--tk`` (the panel depth), ``--data-dir`` (inputs, cached) and
    ``--json`` (where the figures go), with the case's defaults."""
    parser.add_argument("--chunk", type=int, default=chunk, help="square zstd chunks of A and B")
    parser.add_argument("--tile", type=int, default=tile, help="square output tile (tm = tn)")
    parser.add_argument("--tk", type=int, default=tk, help="panel depth")
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA, help="inputs, cached")
    parser.add_argument("--json", help="write the figures to this file")
