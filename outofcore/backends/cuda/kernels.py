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

:func:`launch` picks the grid and launches on device arrays that the caller has
already checked (``outofcore.backends.cuda.gemm`` checks).
:func:`compile_options` is the one place that sets the tiled kernel's compile
options, for ``cuda.jit`` here and for ``cuda.compile`` in
:mod:`outofcore.backends.cuda.report`: launch bounds that keep two blocks on an SM.

Rules the tiled and the textbook kernel follow: loads outside ``A`` or ``B`` write
zeros, stores outside ``C`` are skipped, no thread leaves before a barrier, the ``k``
loop runs ``ceil(k / BK)`` times, and the accumulator has the inputs' precision.
"""

from __future__ import annotations

import ast
import copy
import inspect
import textwrap
from dataclasses import dataclass
from functools import cache

import numpy as np
from numba import cuda, uint32
from numba.cuda import config as cuda_config
from numba.cuda.cudadrv.driver import device_memset  # the simulator's, under NUMBA_ENABLE_CUDASIM

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
    """

    bm: int
    bn: int
    bk: int
    tm: int
    tn: int

    @property
    def threads(self) -> tuple[int, int]:
        """Block shape ``(x, y)``: x runs along the columns of ``C``."""
        return self.bn // self.tn, self.bm // self.tm

    def check(self) -> None:
        """Raise InputError unless the parameters make a valid kernel."""
        tx, ty = self.bn // max(self.tn, 1), self.bm // max(self.tm, 1)
        nt = tx * ty
        problems = []
        if min(self.bm, self.bn, self.bk, self.tm, self.tn) < 1:
            problems.append("every parameter must be >= 1")
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


#: Production parameters per dtype: 128x128 blocks of 16x16 threads for float32
#: (8x8 outputs per thread), 64x64 blocks with 4x4 per thread for float64 and
#: both complex dtypes (a complex multiply-add is four real FMAs).  The
#: block tiles ``(bm, bn, bk)`` are :data:`outofcore.backends.cuda.blocks.KERNEL_BLOCKS`,
#: the table the device tiling is sized by; only the per-thread tiles are here.
PRODUCTION = {
    np.dtype(np.float32): TileParams(*KERNEL_BLOCKS[4], tm=8, tn=8),
    np.dtype(np.float64): TileParams(*KERNEL_BLOCKS[8], tm=4, tn=4),
    np.dtype(np.complex64): TileParams(*KERNEL_BLOCKS[8], tm=4, tn=4),
    np.dtype(np.complex128): TileParams(*KERNEL_BLOCKS[16], tm=4, tn=4),
}


@cache
def build_gemm_kernel(params: TileParams, dtype: np.dtype):
    """Return the (lazily compiled) tiled kernel ``kernel(a, b, c, accumulate)``.

    Launch it with ``grid = (ceil(n / bn), ceil(m / bm))`` and
    ``block = params.threads``; ``a``, ``b`` and ``c`` are C-contiguous 2-D
    device arrays of ``dtype``.  ``accumulate`` false overwrites ``c``.
    """
    params.check()
    function = make_gemm_function(params, dtype)
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


def make_gemm_function(params: TileParams, dtype: np.dtype):
    """Return the Python function of the tiled kernel (for ``cuda.jit`` or ``cuda.compile``)."""
    dt = np.dtype(dtype).type
    cplx = np.dtype(dtype).kind == "c"  # accumulate real and imaginary parts apart
    rt = dt(0).real.dtype.type  # the real type of dt (dt itself for a real dtype)
    # complex128 is tight at 128 registers (its accumulators alone take 64): it holds
    # half of the next tile at a time (A's part stored halfway through the k-tile,
    # then B's part fetched) and loads its A fragment one element per row (a
    # complex128 is one 128-bit load anyway, so no load gets narrower)
    tight = np.dtype(dtype).itemsize == 16
    bm, bn, bk, tm, tn = params.bm, params.bn, params.bk, params.tm, params.tn
    ntx, nty = params.threads
    nt = ntx * nty
    hm, hn = tm // 2, tn // 2  # run length of a thread's rows / columns
    hbm, hbn = bm // 2, bn // 2  # offset of the second run
    a_run = bm * bk // nt  # consecutive A elements (along k) one thread loads
    b_run = bk * bn // nt  # consecutive B elements (along n) one thread loads

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
        while kt < ktiles:  # ceil(k / bk) steps, whatever the grid
            cur = u(kt & one)
            kt = u(kt + one)
            # Fetch tile kt into registers, and store it into the other buffer (which
            # no thread reads before the next barrier).  Past the last tile (kt ==
            # ktiles) every k index is >= k: nothing is read and zeros are stored.
            # No branch around it, which lets ptxas schedule the loop as one block.
            k0 = u(kt * ubk)
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
    name = f"gemm_{np.dtype(dtype).name}_{bm}x{bn}x{bk}_{tm}x{tn}"
    return _unroll_loop(gemm_tiled, "kk", name)


def _unroll_loop(func, var: str, name: str):
    """Return ``func`` with every ``for <var> in range(N)`` loop written out N times.

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
            if not (isinstance(target, ast.Name) and target.id == var):
                return node
            count = eval(compile(ast.Expression(it.args[0]), "<unroll>", "eval"), {}, free)
            body: list[ast.stmt] = []
            for value in range(count):
                body.append(ast.Assign([ast.Name(var, ast.Store())], ast.Constant(value)))
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


def launch(a, b, c, accumulate: bool, stream=0, params: TileParams | None = None) -> None:
    """Run the tiled kernel: ``c += a @ b`` (or ``c = a @ b``) on checked device arrays.

    A matrix taller than ``MAX_GRID_Y`` blocks takes one launch per slab of rows,
    on slices of ``a`` and ``c``; a single slab gets the arrays as they are.  With
    ``k == 0`` nothing is launched: ``c`` is zeroed (``accumulate`` false) or left.

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
    kernel = build_gemm_kernel(params, dtype)
    m, n = c.shape
    if a.shape[1] == 0:  # nothing to read; numba refuses slices of an empty device array
        if not accumulate:
            zero(c, stream)
        return
    cols = -(-n // params.bn)
    step = MAX_GRID_Y * params.bm
    if m <= step:  # one slab: the arrays as they are
        kernel[(cols, -(-m // params.bm)), params.threads, stream](a, b, c, bool(accumulate))
        return
    for r0 in range(0, m, step):
        r1 = min(m, r0 + step)
        grid = (cols, -(-(r1 - r0) // params.bm))
        kernel[grid, params.threads, stream](a[r0:r1], b, c[r0:r1], bool(accumulate))
