"""The tiled numba CUDA kernel for ``C += A · B``.

:func:`build_gemm_kernel` makes the tiled kernel for given tile parameters.
A block of ``(BN // TN) x (BM // TM)`` threads computes a ``BM x BN`` tile of
``C``; each thread holds a ``TM x TN`` micro-tile of ``C`` in registers.  Per
``BK`` step of ``k`` the block copies ``A``'s ``BM x BK`` tile (transposed, so
a thread reads its ``TM`` rows as contiguous words) and ``B``'s ``BK x BN``
tile into double-buffered shared memory.  A thread's rows (columns) are two
runs of ``TM / 2`` (``TN / 2``): ``ty * TM/2 + i`` and ``BM/2 + ty * TM/2 + i``,
so that a quarter-warp reads consecutive words with wide loads and no bank
conflict.  A complex thread keeps the real and imaginary parts of its
micro-tile apart, in real registers: four real FMAs per complex
multiply-add.

The textbook kernel that tests compare it with is in :mod:`outofcore.backends.cuda.reference`,
the transpose kernel in :mod:`outofcore.backends.cuda.transpose`.

Each dtype and tile shape has two kernels.  The checked kernel takes any shape.  The
interior kernel (:func:`is_interior`: whole blocks, whole ``k`` tiles, C-contiguous
arrays on 16-byte boundaries; every dtype but complex128) has no bounds checks and
moves ``A``, ``B`` and ``C`` in 128-bit global accesses (:func:`vector_load`,
:func:`vector_store`: numba intrinsics, since numba's indexing loads one element at a
time).  Both run ``turn`` k-tiles per turn of their loop, written out, so that which
shared buffer is read and which written are constants.

:func:`launch` picks the kernel and the grid and launches on device arrays that the
caller has already checked (``outofcore.backends.cuda.gemm`` checks).
:func:`compile_options` is the one place that sets the tiled kernel's compile
options, for ``cuda.jit`` here and for ``cuda.compile`` in
:mod:`outofcore.backends.cuda.report`: launch bounds that keep two blocks on an SM.

Rules the checked and the textbook kernel follow: loads outside ``A`` or ``B`` write
zeros, stores outside ``C`` are skipped, no thread leaves before a barrier, the ``k``
loop runs ``ceil(k / BK)`` times, and the accumulator has the inputs' precision.  The
interior kernel reads and writes nothing outside the arrays by construction, and adds
the same products in the same order as the checked kernel: the same bits.
"""

from __future__ import annotations

import ast
import copy
import inspect
import math
import textwrap
from dataclasses import dataclass
from functools import cache

import numpy as np
from llvmlite import ir
from numba import cuda, types, uint32, uint64
from numba.cuda import cgutils
from numba.cuda import config as cuda_config
from numba.cuda.cudadrv.driver import device_memset  # the simulator's, under NUMBA_ENABLE_CUDASIM
from numba.cuda.extending import intrinsic

from outofcore.backends.cuda.blocks import KERNEL_BLOCKS
from outofcore.backends.cuda.cache_folder import configure_numba
from outofcore.errors import InputError

#: Largest grid extent along y (CUDA's limit); taller matrices take several launches.
MAX_GRID_Y = 65535
#: 32-bit registers of one SM (every architecture from sm_80 to sm_90).
SM_REGISTERS = 65536
#: Blocks of the tiled kernel that must fit on one SM at once (256 threads each in
#: production: at most 128 registers per thread).
BLOCKS_PER_SM = 2


@dataclass(frozen=True)
class TileParams:
    """Compile-time shape of the tiled kernel.

    Parameters
    ----------
    bm, bn, bk
        Rows, columns of ``C`` per block, and the ``k`` depth per shared tile.
    tm, tn
        Rows and columns of ``C`` per thread (both even).
    turn
        ``bk`` tiles of ``k`` per turn of the kernel's loop: 1, or even (the two shared
        buffers alternate within a turn, so that their offsets are constants).  More
        spreads the loop's fixed instructions over more FMAs, at the cost of a longer
        loop and, at the register limit, spills (1 keeps one offset per buffer live).
        The checked kernel turns at most :data:`CHECKED_TURN`.
    """

    bm: int
    bn: int
    bk: int
    tm: int
    tn: int
    turn: int = 2

    @property
    def threads(self) -> tuple[int, int]:
        """Block shape ``(x, y)``: x runs along the columns of ``C``."""
        return self.bn // self.tn, self.bm // self.tm

    def check(self) -> None:
        """Raise InputError unless the parameters make a valid kernel."""
        tx, ty = self.bn // max(self.tn, 1), self.bm // max(self.tm, 1)
        nt = tx * ty
        problems = []
        if min(self.bm, self.bn, self.bk, self.tm, self.tn, self.turn) < 1:
            problems.append("every parameter must be >= 1")
        elif self.turn % 2 and self.turn != 1:
            problems.append("turn must be 1 or even")
        elif self.tm % 2 or self.tn % 2:
            problems.append("tm and tn must be even")
        elif self.bm % self.tm or self.bn % self.tn:
            problems.append("bm must be a multiple of tm and bn of tn")
        elif nt > 1024:
            problems.append(f"{nt} threads per block exceed 1024")
        elif (self.bm * self.bk) % nt or (self.bk * self.bn) % nt:
            problems.append("bm*bk and bk*bn must be multiples of the thread count")
        elif self.bk % ((self.bm * self.bk) // nt) or self.bn % ((self.bk * self.bn) // nt):
            problems.append("each thread's load run must fit within one tile row")
        if problems:
            raise InputError(f"invalid tile parameters {self}: {problems[0]}")


def _production(itemsize: int, tm: int, tn: int, turn: int) -> TileParams:
    """The production kernel of ``itemsize``-byte elements: its block tile is the table's
    (:data:`outofcore.backends.cuda.blocks.KERNEL_BLOCKS`, which the device tiling is cut
    in, so that every device slice is a multiple of the kernel's depth)."""
    return TileParams(*KERNEL_BLOCKS[itemsize], tm=tm, tn=tn, turn=turn)


#: Production parameters per dtype: 128x128x16 blocks of 16x16 threads for float32
#: (8x8 outputs per thread, four k-tiles a turn of the loop), 64x64x16 blocks with 4x4
#: per thread for float64 and complex64 (a complex multiply-add is four real FMAs; two
#: k-tiles a turn), 64x64x8 for complex128 (one a turn: two spill).  The blocks' rows and
#: columns are the block table's; docs/gpu.md ("The kernel's inner loop") has what the
#: compile report measures of each.
PRODUCTION = {
    np.dtype(np.float32): _production(4, tm=8, tn=8, turn=4),
    np.dtype(np.float64): _production(8, tm=4, tn=4, turn=2),
    np.dtype(np.complex64): _production(8, tm=4, tn=4, turn=2),
    np.dtype(np.complex128): _production(16, tm=4, tn=4, turn=1),
}


@cache
def build_gemm_kernel(params: TileParams, dtype: np.dtype, interior: bool = False):
    """Return the (lazily compiled) tiled kernel ``kernel(a, b, c, accumulate)``.

    Launch it with ``grid = (ceil(n / bn), ceil(m / bm))`` and
    ``block = params.threads``; ``a``, ``b`` and ``c`` are C-contiguous 2-D
    device arrays of ``dtype``.  ``accumulate`` false overwrites ``c``.  The
    ``interior`` kernel is only for launches that :func:`is_interior`.
    """
    params.check()
    function = make_gemm_function(params, dtype, interior)
    if cuda_config.ENABLE_CUDASIM:  # no launch bounds (no registers to bound), no cache
        return cuda.jit(function)
    return cuda.jit(function, cache=cached(), **compile_options(params))


def cached() -> bool:
    """Whether kernels are compiled with numba-cuda's on-disk cache: where a folder for it
    is known (:mod:`outofcore.backends.cuda.cache_folder`)."""
    return configure_numba() is not None


def compile_options(params: TileParams) -> dict:
    """Return the ``cuda.jit`` options of the tiled kernel; the one place they are set.

    ``launch_bounds=(threads per block, BLOCKS_PER_SM)`` puts ``.maxntid`` and
    ``.minnctapersm`` into the kernel, so that ptxas keeps each thread within
    :func:`register_limit` registers (128 for the production 256 threads).
    ``lto=False``: numba-cuda links with LTO by default where nvJitLink is installed
    (both ``[cu12]`` and ``[cu13]`` install it), which runs NVVM twice; the kernel calls
    no device function to inline across modules, and no measurement showed a gain
    (issue 44).  The compile report (``outofcore.backends.cuda.report``) compiles with
    these options, so what it reports is what :func:`build_gemm_kernel` runs.
    The on-disk cache (``cache=True``) is :func:`build_gemm_kernel`'s, not an option of
    the code.
    """
    tx, ty = params.threads
    return {"launch_bounds": (tx * ty, BLOCKS_PER_SM), "lto": False}


def register_limit(params: TileParams) -> int:
    """Return the registers per thread that let ``BLOCKS_PER_SM`` blocks share an SM.

    ``SM_REGISTERS / (BLOCKS_PER_SM * threads)``, at most 255 (the
    architecture's limit per thread): 128 for 256 threads.
    """
    tx, ty = params.threads
    return min(255, SM_REGISTERS // (BLOCKS_PER_SM * tx * ty))


#: Most k-tiles a turn of the checked kernel's loop: its bounds checks take registers,
#: and float32 at four spilled on sm_80 (24 bytes stored, 56 loaded) for a loop 1 % richer.
CHECKED_TURN = 2
#: Version of :func:`vector_load` and :func:`vector_store`'s code generation: part of the
#: interior kernel's name (its on-disk cache key does not see an intrinsic's code).
VECTOR_CODE_VERSION = 1
#: Bytes of the widest global load and store (``ld.global.v4.f32``, ``LDG.E.128``).
VECTOR_BYTES = 16


def vector_width(run: int, dtype: np.dtype) -> int:
    """Return the elements one wide access of a ``run`` of consecutive elements moves.

    The largest divisor of ``run`` whose bytes are at most :data:`VECTOR_BYTES`
    (1 for complex128, whose one element is 16 bytes).
    """
    return math.gcd(run, max(1, VECTOR_BYTES // np.dtype(dtype).itemsize))


def _lanes(context, dtype) -> tuple[ir.Type, int]:
    """The LLVM scalar of ``dtype``'s vector and the lanes per element (2 for complex)."""
    if isinstance(dtype, types.Complex):
        return context.get_value_type(dtype.underlying_float), 2
    return context.get_value_type(dtype), 1


@intrinsic
def _address(typingctx, arr):
    sig = types.uint64(arr)

    def codegen(context, builder, sig, args):
        array = context.make_array(sig.args[0])(context, builder, value=args[0])
        return builder.ptrtoint(array.data, ir.IntType(64))

    return sig, codegen


def _address_sim(arr) -> int:
    return 0


#: ``address(arr)``: the device address (a uint64) of the first element of the device
#: array ``arr`` in a kernel; 0 under the simulator, whose :func:`vector_load` and
#: :func:`vector_store` take byte offsets from the array's first element instead.
address = _address_sim if cuda_config.ENABLE_CUDASIM else _address


def _global_vector_pointer(context, dtype, builder, at, width: int):
    """Pointer (global address space) to ``width`` elements of ``dtype`` at the device
    address ``at`` (a uint64), as one vector."""
    scalar, lanes = _lanes(context, dtype)
    vec = ir.VectorType(scalar, lanes * width)
    return builder.inttoptr(at, ir.PointerType(vec, 1)), vec, lanes


def _vector_align(context, arrty, width: int) -> int:
    """The alignment in bytes of ``width`` elements of ``arrty``'s dtype."""
    return width * context.get_abi_sizeof(context.get_data_type(arrty.dtype))


@cache
def vector_load(width: int):
    """Return ``load(dst, d0, src, at)``: ``width`` elements of the C-contiguous 2-D
    ``src`` at the device address ``at`` (a uint64: ``address(src)`` plus a byte offset)
    into ``dst[d0 : d0 + width]``, in one global load (aligned to its size); ``dst`` is a
    local array.

    Under the simulator, the same in plain Python.
    """
    if cuda_config.ENABLE_CUDASIM:

        def load_sim(dst, d0, src, at):
            row, col = divmod(int(at) // src.dtype.itemsize, src.shape[1])
            for i in range(width):
                dst[d0 + i] = src[row, col + i]

        return load_sim

    @intrinsic
    def load(typingctx, dst, d0, src, at):
        sig = types.void(dst, d0, src, at)

        def codegen(context, builder, sig, args):
            dstty, d0ty, srcty, atty = sig.args
            dst, d0, src, at = args
            gptr, vec, lanes = _global_vector_pointer(context, srcty.dtype, builder, at, width)
            value = builder.load(gptr, align=_vector_align(context, srcty, width))
            local = context.make_array(dstty)(context, builder, value=dst)
            i64 = ir.IntType(64)
            for i in range(width):
                if lanes == 2:
                    z = context.make_complex(builder, dstty.dtype)
                    z.real = builder.extract_element(value, ir.Constant(ir.IntType(32), 2 * i))
                    z.imag = builder.extract_element(value, ir.Constant(ir.IntType(32), 2 * i + 1))
                    item = z._getvalue()
                else:
                    item = builder.extract_element(value, ir.Constant(ir.IntType(32), i))
                index = builder.add(builder.zext(d0, i64), ir.Constant(i64, i))
                ptr = cgutils.get_item_pointer(context, builder, dstty, local, [index])
                context.pack_value(builder, dstty.dtype, item, ptr)
            return context.get_dummy_value()

        return sig, codegen

    return load


@cache
def vector_store(width: int):
    """Return ``store(dst, at, src, s0)``: ``src[s0 : s0 + width]`` into the C-contiguous
    2-D ``dst`` at the device address ``at`` (a uint64: ``address(dst)`` plus a byte
    offset), in one global store (aligned to its size); ``src`` is a local array.

    Under the simulator, the same in plain Python.
    """
    if cuda_config.ENABLE_CUDASIM:

        def store_sim(dst, at, src, s0):
            row, col = divmod(int(at) // dst.dtype.itemsize, dst.shape[1])
            for i in range(width):
                dst[row, col + i] = src[s0 + i]

        return store_sim

    @intrinsic
    def store(typingctx, dst, at, src, s0):
        sig = types.void(dst, at, src, s0)

        def codegen(context, builder, sig, args):
            dstty, atty, srcty, s0ty = sig.args
            dst, at, src, s0 = args
            gptr, vec, lanes = _global_vector_pointer(context, dstty.dtype, builder, at, width)
            local = context.make_array(srcty)(context, builder, value=src)
            i64 = ir.IntType(64)
            value = ir.Constant(vec, ir.Undefined)
            for i in range(width):
                index = builder.add(builder.zext(s0, i64), ir.Constant(i64, i))
                ptr = cgutils.get_item_pointer(context, builder, srcty, local, [index])
                item = context.unpack_value(builder, srcty.dtype, ptr)
                if lanes == 2:
                    z = context.make_complex(builder, srcty.dtype, item)
                    value = builder.insert_element(
                        value, z.real, ir.Constant(ir.IntType(32), 2 * i)
                    )
                    value = builder.insert_element(
                        value, z.imag, ir.Constant(ir.IntType(32), 2 * i + 1)
                    )
                else:
                    value = builder.insert_element(value, item, ir.Constant(ir.IntType(32), i))
            builder.store(value, gptr, align=_vector_align(context, dstty, width))
            return context.get_dummy_value()

        return sig, codegen

    return store


def make_gemm_function(params: TileParams, dtype: np.dtype, interior: bool = False):
    """Return the Python function of the tiled kernel (for ``cuda.jit`` or ``cuda.compile``).

    ``interior`` makes the kernel for launches that :func:`is_interior`: no bounds
    checks, and every global access of ``A``, ``B`` and ``C`` as wide as
    :func:`vector_width` allows (128 bits for float32 runs of four).
    """
    dt = np.dtype(dtype).type
    cplx = np.dtype(dtype).kind == "c"  # accumulate real and imaginary parts apart
    rt = dt(0).real.dtype.type  # the real type of dt (dt itself for a real dtype)
    # complex128 is tight at 128 registers (its accumulators alone take 64): it holds
    # half of the next tile at a time (A's part stored halfway through the k-tile,
    # then B's part fetched) and loads its A fragment one element per row (a
    # complex128 is one 128-bit load anyway, so no load gets narrower)
    tight = np.dtype(dtype).itemsize == 16
    turn = params.turn if interior else min(params.turn, CHECKED_TURN)
    bm, bn, bk, tm, tn = params.bm, params.bn, params.bk, params.tm, params.tn
    ntx, nty = params.threads
    nt = ntx * nty
    hm, hn = tm // 2, tn // 2  # run length of a thread's rows / columns
    hbm, hbn = bm // 2, bn // 2  # offset of the second run
    itemsize = np.dtype(dtype).itemsize
    a_run = bm * bk // nt  # A elements one thread loads
    b_run = bk * bn // nt  # consecutive B elements (along n) one thread loads
    # the interior kernel's wide accesses: elements per load of A, B, and per access of C
    wa, wb, wc = (vector_width(run, dtype) for run in (a_run, b_run, hn))
    a_vecs, b_vecs = a_run // wa, b_run // wb
    ld_a, ld_b, ld_c = vector_load(wa), vector_load(wb), vector_load(wc)
    isz = uint64(itemsize)
    if interior and not has_interior_kernel(dtype):
        raise InputError(f"no interior kernel for {np.dtype(dtype).name}")
    st_c = vector_store(wc)

    # Every index is unsigned (numba wraps negative signed indices, which costs
    # instructions and defeats wide loads), built from these uint32 constants.
    u = uint32
    ubm, ubn, ubk, uhm, uhn = u(bm), u(bn), u(bk), u(hm), u(hn)
    uhbm, uhbn, untx = u(hbm), u(hbn), u(ntx)
    ua_run, ub_run = u(a_run), u(b_run)
    one = u(1)
    a_buf, b_buf = u(bk * bm), u(bk * bn)  # elements per shared buffer
    a_len, b_len = 2 * bk * bm, 2 * bk * bn
    khalf = bk // 2  # where a tight kernel swaps A's prefetch for B's
    align = None if cuda_config.ENABLE_CUDASIM else 16  # 16 bytes: wide shared loads

    def gemm_tiled(a, b, c, accumulate):
        m = u(c.shape[0])
        n = u(c.shape[1])
        k = u(a.shape[1])
        tx = u(cuda.threadIdx.x)
        ty = u(cuda.threadIdx.y)
        tid = u(ty * untx + tx)
        row0 = u(u(cuda.blockIdx.y) * ubm)
        col0 = u(u(cuda.blockIdx.x) * ubn)

        # two buffers each: A transposed (bk rows of bm), B (bk rows of bn)
        a_sh = cuda.shared.array(a_len, dt, alignment=align)
        b_sh = cuda.shared.array(b_len, dt, alignment=align)
        acc = cuda.local.array((tm, tn), rt)  # real parts, for a complex dtype
        acc_im = cuda.local.array((tm, tn) if cplx else (1, 1), rt)
        a_frag = cuda.local.array(tm, dt)
        b_frag = cuda.local.array(tn, dt)
        a_next = cuda.local.array(a_run, dt)
        b_next = cuda.local.array(b_run, dt)
        for i in range(tm):
            for j in range(tn):
                acc[i, j] = rt(0)
                if cplx:
                    acc_im[i, j] = rt(0)

        # this thread loads A[a_row, k0+a_c : +a_run] and B[k0+b_r, b_col : +b_run]
        a_r = u((tid * ua_run) // ubk)
        a_c = u((tid * ua_run) % ubk)
        b_r = u((tid * ub_run) // ubn)
        b_c = u((tid * ub_run) % ubn)
        a_row = u(row0 + a_r)
        b_col = u(col0 + b_c)
        a_st = u(a_c * ubm + a_r)  # shared offset of its first A element (transposed)
        b_st = u(b_r * ubn + b_c)
        a_ld = u(ty * uhm)  # shared offsets of its fragments
        b_ld = u(tx * uhn)

        ktiles = u((k + (ubk - one)) // ubk)
        # prologue: tile 0 into buffer 0
        # the interior kernel's device addresses of this thread's A and B elements
        a_at = address(a) + (uint64(a_row) * uint64(k) + uint64(a_c)) * isz
        b_at = address(b) + (uint64(b_r) * uint64(n) + uint64(b_col)) * isz
        b_step = uint64(uint64(ubk) * uint64(n) * isz)  # one k-tile of B, in bytes
        if interior:
            for p in range(a_vecs):
                ld_a(a_next, u(p * wa), a, a_at + uint64(p * wa * itemsize))
            for p in range(b_vecs):
                ld_b(b_next, u(p * wb), b, b_at + uint64(p * wb * itemsize))
        else:
            for p in range(a_run):
                kc = u(a_c + u(p))
                a_next[p] = a[a_row, kc] if a_row < m and kc < k else dt(0)
            for p in range(b_run):
                bc = u(b_col + u(p))
                b_next[p] = b[b_r, bc] if b_r < k and bc < n else dt(0)
        for p in range(a_run):
            a_sh[a_st + u(p) * ubm] = a_next[p]
        for p in range(b_run):
            b_sh[b_st + u(p)] = b_next[p]
        cuda.syncthreads()

        kt = u(0)
        # ceil(k / bk) steps, whatever the grid, `turn` at a time: with an even turn the
        # buffer written and the one read are constants (no offset arithmetic), and the
        # loop leaves after the tile that is the last (a test per tile, no other: a
        # test at the top too cost float32 nine moves)
        while kt < ktiles if turn == 1 else True:
            for stage in range(turn):  # written out by _unroll_loop
                cur = u(kt & one) if turn == 1 else u(stage % 2)  # the buffer read
                kt = u(kt + one)
                # Fetch tile kt into registers, and store it into the other buffer (which
                # no thread reads before the next barrier).  Past the last tile (kt ==
                # ktiles) the checked kernel's k indices are all >= k: nothing is read and
                # zeros are stored, with no branch around it, which lets ptxas schedule
                # the loop as one block; the interior kernel's loads are predicated off
                # there (it stores what its registers hold, which no thread reads).
                k0 = u(kt * ubk)
                if interior:
                    a_at = uint64(a_at + uint64(bk * itemsize))
                    b_at = uint64(b_at + b_step)
                    if kt != ktiles:
                        for p in range(a_vecs):
                            ld_a(a_next, u(p * wa), a, a_at + uint64(p * wa * itemsize))
                        if not tight:
                            for p in range(b_vecs):
                                ld_b(b_next, u(p * wb), b, b_at + uint64(p * wb * itemsize))
                else:
                    for p in range(a_run):
                        kc = u(k0 + a_c + u(p))
                        a_next[p] = a[a_row, kc] if a_row < m and kc < k else dt(0)
                    if not tight:
                        kr = u(k0 + b_r)
                        for p in range(b_run):
                            bc = u(b_col + u(p))
                            b_next[p] = b[kr, bc] if kr < k and bc < n else dt(0)
                nxt = u(one - cur)
                a_cur = u(cur * a_buf + a_ld)
                b_cur = u(cur * b_buf + b_ld)
                for kk in range(bk):  # written out by _unroll_loop
                    a_kk = a_cur + u(kk) * ubm
                    b_kk = b_cur + u(kk) * ubn
                    if tight and kk == khalf:
                        for p in range(a_run):
                            a_sh[nxt * a_buf + a_st + u(p) * ubm] = a_next[p]
                        kr = u(k0 + b_r)
                        if interior:
                            if kt != ktiles:
                                for p in range(b_vecs):
                                    ld_b(b_next, u(p * wb), b, b_at + uint64(p * wb * itemsize))
                        else:
                            for p in range(b_run):
                                bc = u(b_col + u(p))
                                b_next[p] = b[kr, bc] if kr < k and bc < n else dt(0)
                    if not tight:
                        for i in range(hm):
                            a_frag[i] = a_sh[a_kk + u(i)]
                            a_frag[hm + i] = a_sh[a_kk + uhbm + u(i)]
                    for j in range(hn):
                        b_frag[j] = b_sh[b_kk + u(j)]
                        b_frag[hn + j] = b_sh[b_kk + uhbn + u(j)]
                    for i in range(tm):
                        if tight:
                            a_frag[i] = a_sh[a_kk + u(i // hm) * uhbm + u(i % hm)]
                        for j in range(tn):
                            if cplx:  # four real FMAs, not a complex multiply and add
                                x = a_frag[i]
                                y = b_frag[j]
                                acc[i, j] += x.real * y.real
                                acc[i, j] -= x.imag * y.imag
                                acc_im[i, j] += x.real * y.imag
                                acc_im[i, j] += x.imag * y.real
                            else:
                                acc[i, j] += a_frag[i] * b_frag[j]
                if not tight:
                    for p in range(a_run):
                        a_sh[nxt * a_buf + a_st + u(p) * ubm] = a_next[p]
                for p in range(b_run):
                    b_sh[nxt * b_buf + b_st + u(p)] = b_next[p]
                cuda.syncthreads()
                if turn > 1 and kt == ktiles:
                    break

        if interior:  # no bounds, each run of hn columns in wide accesses
            out = cuda.local.array(wc, dt)
            for i in range(tm):
                r = u(row0 + u(i // hm) * uhbm + a_ld + u(i % hm))
                c_row = address(c) + uint64(r) * uint64(n) * isz
                for j0 in range(0, tn, wc):
                    cc = u(col0 + u(j0 // hn) * uhbn + b_ld + u(j0 % hn))
                    c_at = c_row + uint64(cc) * isz
                    if accumulate:
                        ld_c(out, u(0), c, c_at)
                    for q in range(wc):
                        j = j0 + q
                        value = dt(complex(acc[i, j], acc_im[i, j])) if cplx else acc[i, j]
                        if accumulate:
                            out[q] += value
                        else:  # not 0 + value: -0.0 stays -0.0, as in the checked kernel
                            out[q] = value
                    st_c(c, c_at, out, u(0))
            return
        for i in range(tm):
            r = u(row0 + u(i // hm) * uhbm + a_ld + u(i % hm))  # 32-bit, like every index
            if r < m:
                for j in range(tn):
                    cc = u(col0 + u(j // hn) * uhbn + b_ld + u(j % hn))
                    if cc < n:
                        value = dt(complex(acc[i, j], acc_im[i, j])) if cplx else acc[i, j]
                        if accumulate:
                            c[r, cc] += value
                        else:
                            c[r, cc] = value

    # The name carries all that shapes the kernel (its on-disk cache entry is found by it)
    name = f"gemm_{np.dtype(dtype).name}_{bm}x{bn}x{bk}_{tm}x{tn}_t{turn}"
    if interior:  # the wide accesses' code (intrinsics, not in the cache key) is versioned
        name += f"_interior_v{VECTOR_CODE_VERSION}"
    return _unroll_loop(gemm_tiled, ("kk", "stage"), name)


def _unroll_loop(func, names: tuple[str, ...], name: str):
    """Return ``func`` with every ``for <name> in range(N)`` loop (``name`` in ``names``)
    written out N times.

    NVVM does not fully unroll the ``bk`` loop (its body is 64 FMAs), which
    leaves loop counters and address arithmetic in the innermost loop; written
    out, the offsets become constants folded into the shared loads.  ``N`` must
    be a constant that ``func`` closes over.
    """
    cells = (c.cell_contents for c in func.__closure__ or ())
    free = dict(zip(func.__code__.co_freevars, cells, strict=True))
    lines, first = inspect.getsourcelines(func)
    tree = ast.parse(textwrap.dedent("".join(lines)))
    ast.increment_lineno(tree, first - 1)  # tracebacks point into this file

    class Unroll(ast.NodeTransformer):
        def visit_For(self, node: ast.For):
            self.generic_visit(node)
            target, it = node.target, node.iter
            if not (isinstance(target, ast.Name) and target.id in names):
                return node
            count = eval(compile(ast.Expression(it.args[0]), "<unroll>", "eval"), {}, free)
            body: list[ast.stmt] = []
            for value in range(count):
                body.append(ast.Assign([ast.Name(target.id, ast.Store())], ast.Constant(value)))
                body.extend(copy.deepcopy(node.body))
            return body

    fdef = Unroll().visit(tree).body[0]
    fdef.name = name
    module = ast.fix_missing_locations(ast.Module([fdef], type_ignores=[]))
    namespace = {**func.__globals__, **free}
    exec(compile(module, inspect.getsourcefile(func) or "<kernel>", "exec"), namespace)
    return namespace[name]


def zero(c, stream=0) -> None:
    """Set the C-contiguous device array ``c`` to zero with a memset on ``stream``, no kernel."""
    device_memset(c, 0, c.nbytes, stream=stream)


def _device_address(x) -> int:
    """The address of the first element of the device array ``x`` (a host address
    under the simulator)."""
    if cuda_config.ENABLE_CUDASIM:
        return int(x.__array_interface__["data"][0])
    return int(x.__cuda_array_interface__["data"][0])


def has_interior_kernel(dtype: np.dtype) -> bool:
    """Whether ``dtype`` has an interior kernel: every dtype but complex128.

    A complex128 element is one 128-bit access already, and its kernel is at the
    register limit: without the checks, with the loads predicated past the last tile, it
    spills (24 to 96 bytes, by the compile report's toolchain) for a loop 2 % shorter.
    """
    return np.dtype(dtype).itemsize < VECTOR_BYTES


def is_interior(a, b, c, params: TileParams) -> bool:
    """Whether the interior kernel may run ``c (+)= a @ b``: no bounds to check, and its
    wide accesses aligned.

    The dtype :func:`has_interior_kernel`, ``m``, ``n`` and ``k`` are multiples of ``bm``,
    ``bn`` and ``bk`` (every block is
    whole, every ``k`` tile full), the three arrays are C-contiguous (rows of
    ``shape[1]`` elements) and start on :data:`VECTOR_BYTES` boundaries.  The rows'
    lengths then keep every thread's wide access aligned (the widest moves a divisor of
    ``bk`` or ``bn`` elements, :func:`vector_width`).
    """
    m, n = c.shape
    k = a.shape[1]
    if not has_interior_kernel(c.dtype):
        return False
    if m % params.bm or n % params.bn or k % params.bk or not (m and n and k):
        return False
    for x in (a, b, c):
        size = x.dtype.itemsize
        if tuple(x.strides) != (x.shape[1] * size, size):
            return False
        if _device_address(x) % VECTOR_BYTES:
            return False
    return True


def launch(a, b, c, accumulate: bool, stream=0, params: TileParams | None = None) -> None:
    """Run the tiled kernel: ``c += a @ b`` (or ``c = a @ b``) on checked device arrays.

    Where the launch :func:`is_interior` it runs the interior kernel (no bounds checks,
    wide global accesses); elsewhere the checked one.  A matrix taller than
    ``MAX_GRID_Y`` blocks takes one launch per slab of rows, on slices of ``a`` and
    ``c`` (whole blocks, aligned, when the whole is interior); a single slab gets the
    arrays as they are.  With ``k == 0`` nothing is launched: ``c`` is zeroed
    (``accumulate`` false) or left.

    Parameters
    ----------
    a, b, c
        C-contiguous 2-D device arrays of one dtype (float32, float64, complex64
        or complex128),
        ``(m, k)``, ``(k, n)`` and ``(m, n)`` with ``m, n >= 1`` and ``k >= 0``.
    accumulate
        Add to ``c`` when true, overwrite it when false.
    stream
        numba stream to launch on (0: the default stream).
    params
        Tile parameters; the production ones for the dtype when None.
    """
    dtype = np.dtype(c.dtype)
    params = params or PRODUCTION[dtype]
    m, n = c.shape
    if a.shape[1] == 0:  # nothing to read; numba refuses slices of an empty device array
        if not accumulate:
            zero(c, stream)
        return
    kernel = build_gemm_kernel(params, dtype, is_interior(a, b, c, params))
    cols = -(-n // params.bn)
    step = MAX_GRID_Y * params.bm
    if m <= step:  # one slab: the arrays as they are
        kernel[(cols, -(-m // params.bm)), params.threads, stream](a, b, c, bool(accumulate))
        return
    for r0 in range(0, m, step):
        r1 = min(m, r0 + step)
        grid = (cols, -(-(r1 - r0) // params.bm))
        kernel[grid, params.threads, stream](a[r0:r1], b, c[r0:r1], bool(accumulate))
