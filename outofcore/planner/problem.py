"""The problem a plan is made for: the shapes, chunk grids and element sizes of one product.

Pure data, like :mod:`outofcore.planner.plan`: nothing here imports Dask, numba or zarr.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass

from outofcore.errors import InputError


@dataclass(frozen=True)
class Problem:
    """The shapes and chunkings of one product ``C (m×n) = op(A) (m×k) @ op(B) (k×n)``,
    or of a stack of them (``batch``: numpy.matmul's leading dimensions, flattened).

    Chunk grids are those of ``op(A)`` and ``op(B)``: a transposed operand's
    stored chunks, swapped (a stack's last two dimensions).  Element sizes are bytes.
    """

    m: int
    k: int
    n: int
    #: Size of the accumulation dtype (panels in memory and the tile).
    itemsize: int
    a_chunks: tuple[int, int]
    b_chunks: tuple[int, int]
    #: The grid the output is written in, fixed before the plan: an existing output's (its
    #: shards, else chunks), or the shards asked of one the job creates; tile edges fall on it.
    out_grid: tuple[int, int] | None = None
    #: Stored element sizes of A and B (bytes read); None: ``itemsize``.
    read_itemsizes: tuple[int, int] | None = None
    #: Bytes per element of A's and B's staging panels (0: decoded straight into the panel).
    staging: tuple[int, int] = (0, 0)
    #: Bytes per element of the slabs A's and B's elementwise steps are applied in, at most
    #: :data:`outofcore.planner.memory.STEP_SLAB_ELEMENTS` of a panel (0: an operand without steps).
    step_slabs: tuple[int, int] = (0, 0)
    #: Element size of the output; None: ``itemsize``.
    out_itemsize: int | None = None
    #: Bytes per output element of a write block's buffers (converted output, addend).
    block_extra: int = 0
    #: Stored element size of the addend (read once); 0: no addend.
    addend_itemsize: int = 0
    #: Decoded bytes of one chunk of the addend (its reads' buffers); 0: no addend.
    addend_chunk_bytes: int = 0
    #: Bytes a chunk request in flight holds beside the chunk's buffers (an object store
    #: client's request and response objects); 0 for files on a local disk.
    request_bytes: int = 0
    #: Shards of ``op(A)`` and ``op(B)`` that zarr's sharding codec reads (a remote store,
    #: codecs outofcore's reader does not decode): a read then holds a shard's part of the
    #: panel, encoded and decoded, at once (:func:`shard_read_bytes`).  None: read chunk by
    #: chunk (chunk files, local shard files, unsharded arrays).
    read_shards: tuple[tuple[int, int] | None, tuple[int, int] | None] = (None, None)
    #: ``op(A) @ op(B)`` is ``X.T @ X`` or ``X @ X.T`` of one array X: only the tiles on
    #: and above the diagonal are tasks; each writes its mirror tile too.
    symmetric: bool = False
    #: The output is created with one shard per tile: a tile is written, and
    #: encoded, as one object (:func:`make_output_plan`).
    shard_tiles: bool = False
    #: A wide integer product multiplied through 16-bit limbs: how many limbs B's values
    #: take (their float64 copies are held while a panel is multiplied); 0: none.
    limbs: int = 0
    #: Bytes every task holds beside its buffers: the vectors of the elementwise steps
    #: that compute an operand as it is read (:mod:`outofcore.operands.steps`).
    held_bytes: int = 0
    #: Matrices of a stacked output ``(E..., m, n)`` (the product of its leading
    #: dimensions); None: one matrix, no batch axis (keys, journals and summaries as ever).
    batch: int | None = None
    #: Matrices stored in A and in B: fewer than ``batch`` when one is broadcast.
    a_matrices: int = 1
    b_matrices: int = 1
    #: Batch entries one stored chunk of A and of B holds (the product of its extents
    #: over the leading dimensions): an entry's reads decode whole chunks.
    chunk_batch: tuple[int, int] = (1, 1)
    #: The chunks asked of an output the job creates (``chunks=``; with shards asked, their
    #: inner chunks, of which ``out_grid`` is a multiple); None: the plan chooses them
    #: (:func:`outofcore.planner.memory.output_chunk`) or an existing output has its own.  Tile
    #: edges fall on them; with ``shard_tiles`` each tile is a shard of them.
    out_chunks: tuple[int, int] | None = None

    def __post_init__(self) -> None:
        for name in ("m", "k", "n"):
            if getattr(self, name) < 1:
                raise InputError(f"{name} = {getattr(self, name)}: every dimension must be >= 1")
        self._check_batch()
        if self.symmetric and (self.m != self.n or self.a_chunks[::-1] != self.b_chunks):
            raise InputError(
                f"a symmetric product needs op(A) = op(B).T: got {self.m}x{self.k} in chunks "
                f"{self.a_chunks} and {self.k}x{self.n} in chunks {self.b_chunks}"
            )
        grids = {"a_chunks": self.a_chunks, "b_chunks": self.b_chunks}
        for name, shards in zip(("a_shards", "b_shards"), self.read_shards, strict=True):
            if shards is not None:
                grids[name] = shards
        if self.out_grid is not None:
            grids["out_grid"] = self.out_grid
            if self.shard_tiles:
                raise InputError(
                    f"out_grid = {self.out_grid} (an existing output's, or the shards asked) "
                    "cannot go with shard_tiles (one shard a tile)"
                )
        if self.out_chunks is not None:
            grids["out_chunks"] = self.out_chunks
        for name, grid in grids.items():
            if len(grid) != 2 or min(grid) < 1:
                raise InputError(f"{name} = {grid}: need two chunk sizes >= 1")
        self._check_out_chunks()
        sizes = [self.itemsize, *self.read_sizes, self.written_itemsize]
        extras = (
            *self.staging,
            *self.step_slabs,
            self.block_extra,
            self.addend_itemsize,
            self.request_bytes,
            self.limbs,
        )
        if min(sizes) < 1 or min(extras) < 0:
            raise InputError(f"element sizes must be >= 1 (staging >= 0), got {self}")

    def _check_out_chunks(self) -> None:
        """Refuse asked chunks the grid they are written in is not made of: shards
        (``out_grid``) hold whole chunks, and an existing output (an ``out_grid`` without
        them) keeps its own."""
        if self.out_chunks is None or self.out_grid is None:
            return
        if any(grid % chunk for grid, chunk in zip(self.out_grid, self.out_chunks, strict=True)):
            raise InputError(
                f"out_grid = {self.out_grid} (the output's shards) is not a multiple of "
                f"out_chunks = {self.out_chunks}: a shard holds whole chunks"
            )

    def _check_batch(self) -> None:
        """Refuse a batch, stored matrix counts or chunk batches no stack can have; the
        counts are kept as ints (a numpy integer is taken, and a bool refused)."""
        counts = {
            "a_matrices": self.a_matrices,
            "b_matrices": self.b_matrices,
            **({} if self.batch is None else {"batch": self.batch}),
        }
        try:
            if len(self.chunk_batch) != 2 or any(isinstance(v, bool) for v in counts.values()):
                raise TypeError
            counts = {name: operator.index(value) for name, value in counts.items()}
            chunk_batch = tuple(operator.index(entries) for entries in self.chunk_batch)
        except TypeError:
            raise InputError(
                f"batch = {self.batch!r}, a_matrices = {self.a_matrices!r}, b_matrices = "
                f"{self.b_matrices!r}, chunk_batch = {self.chunk_batch!r}: need integers "
                "(batch None or an int, chunk_batch two of them)"
            ) from None
        for name, value in (*counts.items(), ("chunk_batch", chunk_batch)):
            object.__setattr__(self, name, value)
        a, b = counts["a_matrices"], counts["b_matrices"]
        stored = f"a_matrices = {a}, b_matrices = {b}, chunk_batch = {chunk_batch}"
        if self.batch is None:
            if (a, b, chunk_batch) != (1, 1, (1, 1)):
                raise InputError(f"{stored} without a batch: one matrix has 1, 1 and (1, 1)")
            return
        if self.batch < 1 or min(chunk_batch) < 1:
            raise InputError(f"batch = {self.batch} with {stored}: every count must be >= 1")
        if min(a, b) < 1 or self.batch % a or self.batch % b or self.batch > a * b:
            raise InputError(
                f"batch = {self.batch} with {stored}: each operand stores 1 to batch matrices, "
                "a divisor of batch, and batch is at most a_matrices * b_matrices (broadcasting)"
            )
        if self.symmetric and (a, b, chunk_batch[0]) != (self.batch, self.batch, chunk_batch[1]):
            raise InputError(
                f"a symmetric product of a stack of {self.batch} reads that one stack: "
                f"a_matrices = b_matrices = batch and equal chunk batches, got {stored}"
            )

    @property
    def limb_gemms(self) -> int:
        """Float64 products one panel takes: 1, or for a product through 16-bit limbs
        each pair of limbs whose shift stays below 64 bits (int32: 4; int64: 10;
        :mod:`outofcore.backends.limbs`)."""
        if not self.limbs:
            return 1
        return sum(1 for i in range(self.limbs) for j in range(self.limbs) if i + j < 4)

    @property
    def entries(self) -> int:
        """Matrices of the output: ``batch``, or 1 without one."""
        return 1 if self.batch is None else self.batch

    @property
    def read_sizes(self) -> tuple[int, int]:
        """Stored element sizes of A and B."""
        return self.read_itemsizes or (self.itemsize, self.itemsize)

    @property
    def written_itemsize(self) -> int:
        """Element size of the output."""
        return self.out_itemsize or self.itemsize
