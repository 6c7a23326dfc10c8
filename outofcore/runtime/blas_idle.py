"""How long OpenBLAS's idle threads spin after a call: set before a process loads it.

OpenBLAS (numpy's and SciPy's wheels) keeps its threads spinning for about 2**28
cycles, a tenth of a second, after every call, ready for the next one.  On a worker
the next thing is rarely BLAS: the chunk threads decode the next panel, and the
spinning threads take the cores they need.  On the 2-core machine this cost a stack
of 16 products 1.3 s of CPU and 0.3 s of its 3.0 s (docs/performance.md, "Vectors and
stacks").  OpenBLAS reads the setting once, when the library loads, so it is set
where a process starts: first thing in the command (:mod:`outofcore.cli`), in the
environment of the LocalCluster worker processes outofcore starts
(:mod:`outofcore.runtime.cluster`, :mod:`outofcore.runtime.gpu_cluster`), and in the image
(``Dockerfile``, the same value: tests/outofcore/runtime/test_blas_idle.py compares).  A value
the user set is kept; a Python that loaded numpy before keeps what it loaded with.
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping
from types import MappingProxyType

#: OpenBLAS's idle spin before its threads sleep, as a power of two of CPU cycles
#: (OpenBLAS takes 4 to 30 and spins 2**28 by default): 2**16, tens of microseconds.
IDLE_SPIN = MappingProxyType({"OPENBLAS_THREAD_TIMEOUT": "16"})


def shorten_blas_spin(environ: MutableMapping[str, str] = os.environ) -> None:
    """Put :data:`IDLE_SPIN` into ``environ`` (this process's environment by default)
    where it does not say otherwise; takes effect where OpenBLAS is not loaded yet."""
    for name, value in IDLE_SPIN.items():
        environ.setdefault(name, value)
