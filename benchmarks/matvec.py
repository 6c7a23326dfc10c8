"""Matrix-vector product ``A @ x`` of a 1 GiB float32 zarr matrix: outofcore against
numpy and dask.array.

A is ``--n`` x ``--n`` float32 (16384²: 1 GiB) in zstd ``--chunk``² chunks, x a 1-D
float32 zarr array of ``--n`` in ``--vector-chunk`` chunks; both seeded standard
normal.  Each round runs, each in a fresh Python process (see benchmarks/harness/races.py):

* ``numpy``: ``zarr.open_array(A)[...] @ zarr.open_array(x)[...]``, y written;
* ``dask``: ``(da.from_zarr(A) @ da.from_zarr(x)).compute()``, threaded scheduler;
* ``dask-cluster``: the same on a LocalCluster (Dask's defaults, start-up included);
* ``outofcore``: ``outofcore matmul A x -o y --json`` (x a 1-D array, y 1-D).

Times are whole-process wall times (a matvec reads 1 GiB to do 2n² flops: it is
bound by reading and decoding).  The page cache is warm for all (an untimed numpy
run reads the inputs first).  Every y is compared with numpy's.  Target: outofcore
no slower than numpy or dask.array (threaded).  Exit status: 0 met, 1 a failure or a
wrong result (outofcore refusing 1-D operands included), 2 a target missed.

Usage::

    python -m benchmarks.matvec                 # 16384² (1 GiB), 3 rounds
    python -m benchmarks.matvec --quick         # 2048², 1 round: a smoke test
    python -m benchmarks.matvec --dir /data/bench --json benchmarks/results/matvec.json
"""

from __future__ import annotations

import sys

from benchmarks.harness.inputs import Operand
from benchmarks.harness.races import Race, Size, race_main


def spec(n: int, chunk: int, vector_chunk: int) -> Race:
    return Race(
        name="matvec",
        title=(
            f"matvec: A {n}x{n} float32 (zstd chunks {chunk}x{chunk}) @ x {n} "
            f"(chunks {vector_chunk}) -> y {n}"
        ),
        a=Operand("A", (n, n), (chunk, chunk), seed=1),
        b=Operand("x", (n,), (vector_chunk,), seed=2),
        k=n,
        out_chunks=(vector_chunk,),
        targets={"numpy": 1.0, "dask": 1.0},
        rate=("GiB/s in", 4 * (n * n + n) / 2**30),
    )


def main(argv: list[str] | None = None) -> int:
    sizes = {
        "--n": Size("rows = columns of A (default 16384: 1 GiB)", full=16384, quick=2048),
        "--chunk": Size("A's square chunks (default 2048)", full=2048, quick=512),
        "--vector-chunk": Size("x's chunks (default: --chunk)"),
    }
    return race_main(argv, __doc__.split("\n")[0], 3, sizes, by_chunks)


def by_chunks(n: int, chunk: int, vector_chunk: int | None) -> Race:
    """The race, x chunked as A's rows unless ``vector_chunk`` is given."""
    return spec(n, chunk, vector_chunk or chunk)


if __name__ == "__main__":
    sys.exit(main())
