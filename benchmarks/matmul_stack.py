"""A stack of products ``S @ T``, S and T of shape (16, 2048, 2048) float32 in zarr:
outofcore against numpy (and dask.array).

S and T are ``--batch`` x ``--n`` x ``--n`` float32 (16 x 2048²: 256 MiB each),
seeded standard normal, in zstd ``(1, --chunk, --chunk)`` chunks.  Each round runs,
each in a fresh Python process (see benchmarks/harness/races.py):

* ``numpy``: reads S and T with zarr, ``S @ T`` (batched BLAS), writes C;
* ``dask``: ``(da.from_zarr(S) @ da.from_zarr(T)).compute()``, threaded scheduler;
* ``dask-cluster``: the same on a LocalCluster (Dask's defaults, start-up included);
* ``outofcore``: ``outofcore matmul S T -o C --json`` (3-D operands, C 3-D).

Times are whole-process wall times; numpy's "job" is its read and multiply (its
process without the write of C, also reported with it).  The page cache is warm for
all (an untimed numpy run reads the inputs first).  Every C is compared with
numpy's.  Target: outofcore at most 0.9x numpy's job.  Exit status: 0 met, 1 a
failure or a wrong result (outofcore refusing stacks included), 2 a target missed.

Usage::

    python -m benchmarks.matmul_stack            # 16 x 2048², 2 rounds
    python -m benchmarks.matmul_stack --quick    # 4 x 256², 1 round: a smoke test
"""

from __future__ import annotations

import sys

from benchmarks.harness.inputs import Operand
from benchmarks.harness.races import Race, Size, race_main


def spec(batch: int, n: int, chunk: int) -> Race:
    chunks = (1, chunk, chunk)
    return Race(
        name="matmul-stack",
        title=(
            f"stack: S {batch}x{n}x{n} @ T {batch}x{n}x{n} float32 "
            f"(zstd chunks 1x{chunk}x{chunk}) -> C {batch}x{n}x{n}"
        ),
        a=Operand("S", (batch, n, n), chunks, seed=3),
        b=Operand("T", (batch, n, n), chunks, seed=4),
        k=n,
        out_chunks=chunks,
        targets={"numpy-job": 0.9},
        rate=("GFLOP/s", 2 * batch * n**3 / 1e9),
    )


def main(argv: list[str] | None = None) -> int:
    sizes = {
        "--batch": Size("products in the stack (default 16)", full=16, quick=4),
        "--n": Size("each product's n = m = k (default 2048)", full=2048, quick=256),
        "--chunk": Size("chunks (1, c, c) (default 1024)", full=1024, quick=128),
    }
    return race_main(argv, __doc__.split("\n")[0], 2, sizes, spec)


if __name__ == "__main__":
    sys.exit(main())
