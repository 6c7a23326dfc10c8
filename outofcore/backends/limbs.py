"""Exact integer products at BLAS speed: 16-bit limbs multiplied in float64 ``gemm``.

numpy multiplies integer matrices with its own loops (under 1 GOP/s).  Here each
integer panel is split into 16-bit limbs, ``x = sum_i x_i * 2**(16 i)``, the lower limbs
in ``[0, 2**16)`` and, for a signed operand, the top one in ``[-2**15, 2**15)``; each
product of limbs is one float64 ``gemm`` whose every partial sum is an integer below
``2**53`` (so exact: :data:`MAX_DEPTH`), and the products are added back shifted, in
64-bit arithmetic that wraps modulo ``2**64``, as numpy's int64 and uint64 do.  Pairs
shifted by 64 bits or more vanish modulo ``2**64`` and are never computed.

An int32 product is 2 x 2 limbs (4 ``gemm``), an int64 one 4 x 4 limbs (10 ``gemm``:
the pairs of shift below 64 bits).  Beside the panels a multiply holds every limb of B's
panel, one of A's, a scratch buffer for the larger panel, and one shift's float64 sum and
its integer conversion (:func:`outofcore.planner.memory.limb_bytes`).  The result is bit
for bit numpy's ``np.matmul(a.astype(W), b.astype(W))`` for W the accumulator's dtype
(int64 or uint64).
"""

from __future__ import annotations

import numpy as np

from outofcore.backends.blas import multiply_into as gemm_into
from outofcore.operands.dtypes import Limbs

#: Bits of one limb.
LIMB_BITS = 16
#: Most limb products added in one float64 sum (those of one shift, at most 4).
_TERMS = 4
#: Deepest slice of k multiplied at once: ``_TERMS`` products of depth ``MAX_DEPTH`` of
#: limbs below ``2**16`` in magnitude sum to less than ``2**53``, every integer below which
#: float64 holds exactly.
MAX_DEPTH = 2**53 // (_TERMS * (2**LIMB_BITS - 1) ** 2)


def multiply_into(
    c: np.ndarray,
    a: np.ndarray,
    b: np.ndarray,
    *,
    accumulate: bool,
    limbs: Limbs,
) -> None:
    """``c += a @ b`` (or ``c = a @ b``) modulo ``2**64``, exactly, for int64 or uint64
    arrays (``c`` may be a block of rows of a larger accumulator); ``limbs`` says how many
    limbs hold A's and B's values and whether each is signed
    (:func:`outofcore.operands.dtypes.limb_count`)."""
    if c.dtype not in (np.dtype(np.int64), np.dtype(np.uint64)):
        raise TypeError(f"limb products accumulate in int64 or uint64, not {c.dtype}")
    total = c.view(np.uint64)
    if not accumulate:
        total[...] = 0
    k = a.shape[1]
    for k0 in range(0, k, MAX_DEPTH):
        k1 = min(k, k0 + MAX_DEPTH)
        _add_slice(total, a[:, k0:k1], b[k0:k1], limbs)


def _add_slice(total: np.ndarray, a: np.ndarray, b: np.ndarray, limbs: Limbs) -> None:
    """``total += a @ b`` modulo ``2**64`` for a slice of k at most :data:`MAX_DEPTH` deep.

    The limbs are counted on the slice's values, not only their dtype's: a panel whose
    largest magnitudes multiply, ``depth`` times, to at most ``2**53`` is one float64
    ``gemm`` (int32 counts below ``2**20``, say), and no slice takes more limbs than its
    values need (at most ``limbs.counts``).  Every buffer is made once per slice (what
    :func:`outofcore.planner.memory.limb_bytes` counts).
    """
    (a_signed, b_signed), depth = limbs.signed, a.shape[1]
    a_range, b_range = _value_range(a), _value_range(b)
    part = np.empty(total.shape, dtype=np.float64)
    whole = np.empty(total.shape, dtype=np.int64)
    if _magnitude(a_range) * _magnitude(b_range) * depth <= 2**53:
        gemm_into(part, a.astype(np.float64), b.astype(np.float64), accumulate=False)
        _add_shifted(total, part, whole, 0)
        return
    a_count = min(limbs.counts[0], _limbs_for(a_range, a_signed))
    b_count = min(limbs.counts[1], _limbs_for(b_range, b_signed))
    scratch = np.empty(max(a.size, b.size), dtype=np.uint64)
    b_limbs = [np.empty(b.shape, dtype=np.float64) for _ in range(b_count)]
    for j, limb in enumerate(b_limbs):
        _limb_into(limb, b, j, b_count, b_signed, scratch)
    a_limb = np.empty(a.shape, dtype=np.float64)
    for shift in range(min(a_count + b_count - 1, 64 // LIMB_BITS)):
        pairs = [(i, shift - i) for i in range(a_count) if 0 <= shift - i < b_count]
        for position, (i, j) in enumerate(pairs):
            _limb_into(a_limb, a, i, a_count, a_signed, scratch)
            gemm_into(part, a_limb, b_limbs[j], accumulate=position > 0)
        _add_shifted(total, part, whole, shift)


def _add_shifted(total: np.ndarray, part: np.ndarray, whole: np.ndarray, shift: int) -> None:
    """``total += part * 2**(16 shift)`` modulo ``2**64`` (``whole``: an int64 buffer of
    ``part``'s shape); ``part`` holds integers below ``2**53`` in magnitude (exact in
    float64 and in int64)."""
    np.copyto(whole, part, casting="unsafe")
    shifted = whole.view(np.uint64)
    if shift:
        np.left_shift(shifted, np.uint64(LIMB_BITS * shift), out=shifted)
    total += shifted  # modulo 2**64


def _value_range(x: np.ndarray) -> tuple[int, int]:
    """The smallest and largest value of ``x`` (0, 0 when empty), as Python integers."""
    if x.size == 0:
        return 0, 0
    return int(x.min()), int(x.max())


def _magnitude(value_range: tuple[int, int]) -> int:
    low, high = value_range
    return max(-low, high)


def _limbs_for(value_range: tuple[int, int], signed: bool) -> int:
    """How many 16-bit limbs hold every value in ``value_range`` (the top one signed
    when ``signed``)."""
    low, high = value_range
    bits = max(high.bit_length(), (-low - 1).bit_length() if low < 0 else 0) + int(signed)
    return max(1, -(-bits // LIMB_BITS))


def _limb_into(
    out: np.ndarray, x: np.ndarray, index: int, count: int, signed: bool, scratch: np.ndarray
) -> None:
    """Limb ``index`` of ``x``'s values (int64 or uint64) into the float64 ``out``: bits
    ``16 index`` to ``16 index + 15``; the top limb of a signed operand keeps the sign.
    ``scratch``: a flat uint64 buffer of at least ``x.size`` elements."""
    shift = LIMB_BITS * index
    bits = scratch[: x.size].reshape(x.shape)
    if signed and index == count - 1:
        signed_bits = bits.view(np.int64)
        np.right_shift(x.view(np.int64), np.int64(shift), out=signed_bits)
        np.copyto(out, signed_bits)
        return
    np.right_shift(x.view(np.uint64), np.uint64(shift), out=bits)
    np.bitwise_and(bits, np.uint64(2**LIMB_BITS - 1), out=bits)
    np.copyto(out, bits)
