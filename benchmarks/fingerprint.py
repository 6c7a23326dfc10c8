"""Cost of an input's content fingerprint (outofcore/storage/fingerprint.py) per 10⁵ chunk files.

Writes (once) a float32 array of about ``--objects`` chunk files of 10x10
elements, then times :func:`outofcore.storage.fingerprint.fingerprint` on it: the
first run after asking the kernel to drop its caches (as root; a no-op
elsewhere) and the median of the warm runs after it.

    python -m benchmarks.fingerprint --objects 100000 --repeats 5 [--dir /data/tmp]

Internal floor: it times ``outofcore.storage.fingerprint.fingerprint`` itself.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import subprocess
import tempfile
import time

import numpy as np
import zarr

from outofcore.storage.fingerprint import fingerprint


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--objects", type=int, default=100_000, help="chunk files (about)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--dir", default=tempfile.gettempdir(), help="where the array goes")
    args = parser.parse_args()
    side = math.isqrt(args.objects) + 1
    path = os.path.join(args.dir, f"outofcore-fingerprint-{side}.zarr")
    if not os.path.exists(path):
        started = time.perf_counter()
        array = zarr.create_array(path, shape=(10 * side, 10 * side), chunks=(10, 10), dtype="f4")
        array[...] = np.random.default_rng(0).standard_normal(array.shape, dtype=np.float32)
        print(f"wrote {path} in {time.perf_counter() - started:.1f} s")
    array = zarr.open_array(path, mode="r")
    subprocess.run(
        ["sh", "-c", "sync; echo 3 > /proc/sys/vm/drop_caches"], check=False, capture_output=True
    )
    times = []
    for _ in range(args.repeats):
        started = time.perf_counter()
        result = fingerprint(array)
        _ = result.digest
        times.append(time.perf_counter() - started)
    objects = len(result.tokens)
    warm = statistics.median(times[1:]) if len(times) > 1 else times[0]
    print(
        f"{objects} objects ({result.nbytes / 2**20:.1f} MiB), method {result.method}: "
        f"first {times[0]:.3f} s, warm median {warm:.3f} s; per 10^5 objects: "
        f"first {times[0] * 1e5 / objects:.3f} s, warm {warm * 1e5 / objects:.3f} s"
    )


if __name__ == "__main__":
    main()
