"""The shape zoo's cases: five shapes of product, their seeded inputs, and issue 11's targets."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from benchmarks.harness.inputs import ensure_array

SYSTEMS = ("numpy", "dask", "outofcore")


FLOORS = {"read": ("read-floor", "read-floor-zarr"), "write": ("write-floor",)}


#: Dimensions (and chunk edges along them) at least this large are divided by ``--scale``.
BIG = 2048


#: Issue 11's targets.
COMPUTE_TARGET = 1.2  # time / numpy, compute-bound shapes


FLOOR_TARGET = 1.25  # time / floor, I/O-bound shapes


DASK_TARGET = 1.3  # dask.array time / outofcore time, every shape


READ_TARGET = 1.5  # bytes read / lower bound, every shape


#: A worker counts as busy when its tasks ran for at least this fraction of the job.
BUSY_FRACTION = 0.8


@dataclass(frozen=True)
class Shape:
    """One product of the zoo: ``C (m×n) = A (m×k) @ B (k×n)``, or ``X.T @ X`` (``gram``).

    For a Gram product the one stored input ``X`` is ``k×m`` with ``a_chunks``,
    and ``b_chunks`` is unused.
    """

    name: str
    m: int
    k: int
    n: int
    a_chunks: tuple[int, int]
    b_chunks: tuple[int, int]
    #: "compute", "read" (reading the inputs) or "write" (writing C).
    bound: str
    gram: bool = False

    @property
    def a_shape(self) -> tuple[int, int]:
        """Shape of the stored A (X for a Gram product)."""
        return (self.k, self.m) if self.gram else (self.m, self.k)

    @property
    def b_shape(self) -> tuple[int, int]:
        """Shape of the stored B (X again for a Gram product)."""
        return (self.k, self.n) if not self.gram else (self.k, self.m)

    def scaled(self, scale: float) -> Shape:
        """This shape with every dimension >= :data:`BIG` (and chunks along it) divided."""

        def dim(d: int) -> int:
            return max(1, int(d // scale)) if d >= BIG and scale != 1 else d

        def chunks(shape: tuple[int, int], chunk: tuple[int, int]) -> tuple[int, int]:
            return tuple(
                min(dim(d), max(1, int(c // scale)) if d >= BIG and scale != 1 else c)
                for d, c in zip(shape, chunk, strict=True)
            )

        return Shape(
            self.name,
            dim(self.m),
            dim(self.k),
            dim(self.n),
            chunks(self.a_shape, self.a_chunks),
            chunks(self.b_shape, self.b_chunks),
            self.bound,
            self.gram,
        )


SHAPES = {
    s.name: s
    for s in (
        Shape("square", 16384, 16384, 16384, (2048, 2048), (2048, 2048), "compute"),
        Shape("large-k", 2048, 262144, 2048, (2048, 2048), (2048, 2048), "compute"),
        Shape("gram", 512, 524288, 512, (8192, 512), (8192, 512), "compute", gram=True),
        Shape("skinny", 262144, 4096, 64, (2048, 2048), (2048, 64), "read"),
        Shape("flat", 32768, 256, 32768, (8192, 256), (256, 8192), "write"),
    )
}


def ensure_shape_inputs(data_dir: Path, shape: Shape) -> tuple[Path, Path]:
    """A and B of ``shape`` (X twice for a Gram product), made once and cached."""

    def name(tag: str, dims: tuple[int, int], chunks: tuple[int, int]) -> Path:
        return data_dir / f"zoo-{tag}-{dims[0]}x{dims[1]}-{chunks[0]}x{chunks[1]}.zarr"

    a = ensure_array(name("a", shape.a_shape, shape.a_chunks), shape.a_shape, shape.a_chunks, 0)
    if shape.gram:
        return a, a
    b = ensure_array(name("b", shape.b_shape, shape.b_chunks), shape.b_shape, shape.b_chunks, 1)
    return a, b
