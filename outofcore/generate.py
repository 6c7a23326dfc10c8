"""``outofcore.generate.random_array``: seeded random zarr arrays, a public face.

The work is :mod:`outofcore.frontends.generate`'s (also the ``outofcore generate``
command's); this module is where the documented name lives.
"""

from __future__ import annotations

from outofcore.frontends.generate import random_array

__all__ = ["random_array"]
