"""The dtypes of a product: what it is accumulated in, what it is written as, and why.

``out = alpha * op(A) @ op(B) + beta * addend`` takes the result type numpy
gives its operands (``np.result_type(A, B[, addend])``), with these rules:

* **float32, float64, complex64, complex128** results are accumulated in that
  dtype by BLAS (or the GPU kernel).
* **float16** results are accumulated in float32 (each panel is converted as it
  is read) and written as float32, unless ``out_dtype="float16"`` is asked; then
  each element is rounded once, at the end.
* **integer and bool** results are exact, and equal bit for bit to numpy's product
  computed in 64 bits (``np.matmul(a.astype(W), b.astype(W))``, W uint64 where numpy's
  result is unsigned, else int64: wrapping modulo ``2**64``).  Every partial sum is
  an integer of magnitude at most ``|alpha|·k·max|a|·max|b| + |beta|·max|addend|``
  (the largest magnitudes the dtypes allow: the *bound*).  A bound of at most
  ``2**53`` (int8, uint8, int16, uint16 and bool inputs, for most ``k``) is
  accumulated in float64, exact there, at BLAS speed, and written as int32 when the
  bound fits in int32, else int64.  A larger bound (int32, uint32, int64, uint64) is
  accumulated in W through 16-bit limbs (:mod:`outofcore.backends.limbs`: float64 ``gemm``
  on limbs, exact, summed modulo ``2**64``) and written as W; where the bound
  exceeds W the product can wrap as numpy's does, and the plan and the summary say
  so (``wraps``).  Scales of an integer product are exact integers (never rounded
  through float) from -2**63 to 2**64-1, applied modulo ``2**64``; others are
  refused.  ``bool @ bool`` is bool (whether any of the ands is true).  Where
  numpy's promotion gives a float (int64 with uint64), the product is that float's.

This module is pure numpy arithmetic on dtypes: it reads no data.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np

from outofcore.errors import InputError, InputTypeError
from outofcore.operands.scales import SCALE_RANGE, check_scale

#: Dtypes BLAS and the GPU kernels accumulate in.
COMPUTE_DTYPES = tuple(np.dtype(t) for t in ("float32", "float64", "complex64", "complex128"))
#: Integer and bool inputs, multiplied exactly (through float64, or 16-bit limbs).
EXACT_INTEGERS = tuple(
    np.dtype(t)
    for t in ("bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64")
)
#: Every input dtype a product takes: numpy's booleans, integers and inexact numbers.
INPUT_DTYPES = (np.dtype("float16"), *COMPUTE_DTYPES, *EXACT_INTEGERS)
#: An addend takes the same.
ADDEND_DTYPES = INPUT_DTYPES
#: Largest integer every smaller one of which float64 holds exactly.
EXACT_FLOAT64 = 2**53
INT32_MAX = 2**31 - 1


@dataclass(frozen=True)
class Limbs:
    """How an integer product too wide for float64 is split (:mod:`outofcore.backends.limbs`)."""

    #: How many 16-bit limbs hold A's and B's values.
    counts: tuple[int, int]
    #: Whether A's and B's dtypes are signed (the top limb keeps the sign).
    signed: tuple[bool, bool]


@dataclass(frozen=True)
class ProductTypes:
    """How one product is typed.

    Attributes
    ----------
    compute
        The dtype panels are converted to and accumulated in.
    output
        The dtype the output is written in.
    exact
        Whether the product is an exact integer one.
    bound
        For an exact product, the largest magnitude any partial result can reach.
    """

    compute: np.dtype
    output: np.dtype
    exact: bool = False
    bound: int | None = None
    #: An integer product accumulated in ``compute`` (int64 or uint64) through limbs.
    limbs: Limbs | None = None
    #: Whether the exact result can fall outside the output dtype, which then holds it
    #: modulo ``2**64`` as numpy's 64-bit product does.
    wraps: bool = False
    #: ``bool @ bool``: each element is whether any of the ands is true (numpy's bool
    #: product), whatever dtype it is written in.
    boolean: bool = False

    def unit_roundoff(self) -> float:
        """Unit roundoff of the accumulation (0 for an exact product)."""
        return 0.0 if self.exact else float(np.finfo(self.compute).eps) / 2

    def output_roundoff(self) -> float:
        """Unit roundoff added by writing the result (0 unless the output is coarser)."""
        if self.output.kind in "iub":
            return 0.0
        unit = float(np.finfo(self.output).eps) / 2
        return unit if self.exact or unit > self.unit_roundoff() else 0.0

    def summary(self) -> dict[str, Any]:
        """JSON-ready values for the job record."""
        return {
            "compute": str(self.compute),
            "output": str(self.output),
            "exact": self.exact,
            "bound": self.bound,
            # Only where they apply: a product typed before them keeps its job identity.
            **({"limbs": list(self.limbs.counts)} if self.limbs is not None else {}),
            **({"wraps": True} if self.wraps else {}),
            **({"boolean": True} if self.boolean else {}),
        }


def check_input_dtype(
    dtype: Any, what: str, allowed: tuple[np.dtype, ...] = INPUT_DTYPES
) -> np.dtype:
    """Return ``dtype`` as a numpy dtype in this machine's byte order if a product takes
    it, else raise saying what to do.  Byte order is the store's business (a big-endian
    zarr array is read into native buffers), not the product's."""
    dtype = np.dtype(dtype)
    if not dtype.isnative:
        dtype = dtype.newbyteorder("=")
    if dtype in allowed:
        return dtype
    raise InputTypeError(  # numpy's matmul of strings, objects, datetimes: a TypeError
        f"{what} has dtype {dtype}; outofcore multiplies numpy's bool, integer, float and "
        f"complex dtypes ({_names(allowed)}), not {dtype}. Convert it first: write it as "
        "float64 (in numpy, x.astype('float64')) to a new zarr array"
    )


def product_types(
    a: Any,
    b: Any,
    k: int,
    *,
    addend: Any = None,
    alpha: int | float | complex = 1.0,
    beta: int | float | complex = 0.0,
    out_dtype: Any = None,
) -> ProductTypes:
    """The dtypes of ``alpha * A @ B + beta * addend`` with inner dimension ``k``.

    ``a``, ``b`` and ``addend`` are dtypes (or anything ``np.dtype`` takes).

    Raises
    ------
    InputError
        For an input dtype not taken, a complex scale on a real product, a
        fractional scale on an integer one, an integer product that float64
        cannot hold exactly, or an ``out_dtype`` the result cannot be written as.
    """
    dtypes = {"A": a, "B": b} | ({} if addend is None else {"the addend": addend})
    dtypes = {
        name: check_input_dtype(
            dtype, name, ADDEND_DTYPES if name == "the addend" else INPUT_DTYPES
        )
        for name, dtype in dtypes.items()
    }
    alpha, beta = check_scale(alpha, "alpha"), check_scale(beta, "beta")
    result = np.result_type(*dtypes.values())
    _check_bool_product(dtypes, alpha, beta)
    scales = [("alpha", alpha), ("beta", beta)]
    if result.kind != "c":
        for name, value in scales:
            if isinstance(value, complex) and value.imag:
                raise InputError(
                    f"{name} = {value} is complex but the product is {result}; "
                    "use complex64 or complex128 inputs for complex scaling"
                )
    if result.kind in "biu":
        types = _exact_types(dtypes, result, k, alpha, beta)
    else:
        compute = np.dtype("float32") if result == np.float16 else result
        types = ProductTypes(compute=compute, output=compute)
    return _with_output(types, out_dtype, dtypes, (alpha, beta))


def _check_bool_product(dtypes: dict[str, np.dtype], alpha: Any, beta: Any) -> None:
    """Refuse what numpy computes from ``bool @ bool`` (whether any of the ands is true)
    that outofcore does not: that bool scaled (``2 * (a @ b)`` is 0 or 2, not twice the
    count), or added to an addend other than a bool one with ``beta = 1`` (a logical or)."""
    if dtypes["A"].kind != "b" or dtypes["B"].kind != "b":
        return
    addend = dtypes.get("the addend")
    if alpha == 1 and (addend is None or (addend.kind == "b" and beta == 1)):
        return
    given = f"alpha = {alpha}" if alpha != 1 else f"an addend ({addend}) with beta = {beta}"
    raise InputError(
        f"A and B are bool: numpy's A @ B is bool (whether any of the ands is true), and "
        f"{given} scales or adds to that bool, which outofcore does not compute (its bool "
        "product takes alpha = 1, and a bool addend with beta = 1); convert A or B to an "
        "integer dtype for the count of the ands, or scale the bool product afterwards"
    )


def parse_dtype(value: Any, name: str) -> np.dtype:
    """``value`` as a numpy dtype, or InputTypeError (a ``TypeError``, as numpy's) naming
    ``name`` and the value."""
    try:
        return np.dtype(value)
    except TypeError:
        raise InputTypeError(f"{name} = {value!r} is not a dtype") from None


def check_flag(value: Any, name: str) -> bool:
    """``value`` as a bool if it is one (numpy's too), else InputTypeError naming it."""
    if not isinstance(value, bool | np.bool_):
        raise InputTypeError(f"{name} = {value!r}: need True or False")
    return bool(value)


def _exact_types(
    dtypes: dict[str, np.dtype],
    result: np.dtype,
    k: int,
    alpha: int | float,
    beta: int | float,
) -> ProductTypes:
    """An integer or bool product, exact: through float64 when every partial result is
    exact there, else through 16-bit limbs in 64-bit integers (module docstring)."""
    described = ", ".join(f"{n} {d}" for n, d in dtypes.items())
    for name, value in (("alpha", alpha), ("beta", beta)):
        if not isinstance(value, int) and not float(value).is_integer():
            raise InputError(
                f"{name} = {value} is not a whole number, so the integer product "
                f"({described}) cannot stay exact; use a whole number, or convert the inputs "
                "to float"
            )
        if not SCALE_RANGE[0] <= int(value) <= SCALE_RANGE[1]:
            raise InputError(
                f"{name} = {int(value)} is beyond every 64-bit integer (-2**63 to 2**64-1), "
                f"so the integer product ({described}) cannot take it exactly (numpy raises "
                "OverflowError for it too); use a scale a 64-bit integer holds, or convert the "
                "inputs to float"
            )
    largest = {name: _largest_magnitude(dtype) for name, dtype in dtypes.items()}
    bound = abs(int(alpha)) * k * largest["A"] * largest["B"]
    if "the addend" in largest:
        bound += abs(int(beta)) * largest["the addend"]
    if bound <= EXACT_FLOAT64:
        output = np.dtype("int32") if bound <= INT32_MAX else np.dtype("int64")
        boolean = result.kind == "b"
        return ProductTypes(
            compute=np.dtype("float64"),
            output=result if boolean else output,
            exact=True,
            bound=1 if boolean else bound,
            boolean=boolean,
        )
    wide = np.dtype("uint64") if result.kind == "u" else np.dtype("int64")
    negative = alpha < 0 or (beta < 0 and "the addend" in dtypes)
    wraps = bound > int(np.iinfo(wide).max) or (wide.kind == "u" and negative)
    limbs = Limbs(
        counts=(limb_count(dtypes["A"]), limb_count(dtypes["B"])),
        signed=(dtypes["A"].kind == "i", dtypes["B"].kind == "i"),
    )
    return ProductTypes(wide, wide, exact=True, bound=bound, limbs=limbs, wraps=wraps)


def typed_scale(value: int | float | complex, types: ProductTypes) -> int | float | complex:
    """A checked scale as the product applies it: an int for an exact (integer) product,
    a float or complex for a floating one (a Python int converted once, as numpy converts
    it to the array's float dtype)."""
    if types.exact:
        return int(value.real)
    return float(value) if isinstance(value, int) else value


def limb_count(dtype: np.dtype) -> int:
    """How many 16-bit limbs hold a value of ``dtype`` (bool and 8-bit integers: one)."""
    return max(1, np.dtype(dtype).itemsize // 2)


def _largest_magnitude(dtype: np.dtype) -> int:
    if dtype.kind == "b":
        return 1
    info = np.iinfo(dtype)
    return max(abs(int(info.min)), int(info.max))


def _with_output(
    types: ProductTypes,
    out_dtype: Any,
    dtypes: dict[str, np.dtype],
    scales: tuple[int | float | complex, int | float | complex],
) -> ProductTypes:
    """``types`` written as ``out_dtype`` when asked, if numpy's ``out=`` would take the
    result (its ``same_kind`` casting: a real result into complex, an integer one into a
    float) and, for an integer dtype, if it holds every value (a narrowing that would wrap
    is refused on purpose)."""
    if out_dtype is None:
        return types
    wanted = parse_dtype(out_dtype, "out_dtype")
    natural = types.output
    described = ", ".join(f"{n} {d}" for n, d in dtypes.items())
    if wanted not in INPUT_DTYPES:
        raise InputError(f"out_dtype = {wanted}: outofcore writes {_names(INPUT_DTYPES)}")
    if wanted == natural:
        return types
    wraps = types.wraps
    if types.exact and wanted.kind in "iu":
        info = np.iinfo(wanted)
        negative = any(d.kind == "i" for d in dtypes.values()) or min(x.real for x in scales) < 0
        lowest = -types.bound if negative else 0
        if types.bound > int(info.max) or lowest < int(info.min):
            raise InputError(
                f"out_dtype = {wanted}: this integer product ({described}) can reach "
                f"{'-' if negative else ''}{types.bound}, which {wanted} does not hold; use "
                f"{natural} (the default here)"
            )
        wraps = False
    elif types.exact and wanted.kind in "fc":
        pass  # the 64-bit result (wrapped where it can: ``wraps``) rounded to the float, once
    elif not (wanted.kind == natural.kind or (natural.kind == "f" and wanted.kind == "c")):
        kinds = {
            "b": "bool, or an integer dtype that holds it",
            "i": "an integer dtype that holds it, or a float",
            "u": "an integer dtype that holds it, or a float",
            "f": "float16, float32, float64, complex64 or complex128",
            "c": "complex64 or complex128",
        }
        raise InputError(
            f"out_dtype = {wanted}: a {natural} result ({described}) is written as "
            f"{kinds[natural.kind]}"
        )
    return dataclasses.replace(types, output=wanted, wraps=wraps)


def _names(dtypes: tuple[np.dtype, ...]) -> str:
    return ", ".join(str(d) for d in dtypes)


def check_product(
    a: Any,
    b: Any,
    c: Any = None,
    *,
    names: tuple[str, str, str] = ("a", "b", "c"),
    one_dtype: bool = True,
) -> tuple[int, int, int]:
    """Check that ``a @ b`` (into ``c``, if given) is defined; return ``(m, n, k)``.

    Takes anything with ``shape`` and ``dtype``: numpy, CUDA device or zarr arrays.
    ``names`` are how messages call the operands.  With ``one_dtype`` (a kernel
    or BLAS call) all must share one of :data:`COMPUTE_DTYPES`;
    without, dtypes are left to :func:`product_types`.

    Raises
    ------
    InputError
        Naming the shapes or dtypes that do not fit.
    """
    operands = [(name, x) for name, x in zip(names, (a, b, c), strict=True) if x is not None]
    for name, x in operands:
        if len(x.shape) != 2:
            raise InputError(f"{name} must be 2-D, got shape {tuple(x.shape)}")
    (m, k), (k2, n) = a.shape, b.shape
    if k != k2:
        raise InputError(
            f"inner dimensions differ: {names[0]} is {m}x{k} and {names[1]} is {k2}x{n} "
            f"({k} != {k2})"
        )
    if c is not None and tuple(c.shape) != (m, n):
        raise InputError(
            f"{names[2]} has shape {tuple(c.shape)}; {names[0]} @ {names[1]} needs ({m}, {n})"
        )
    if not one_dtype:
        return m, n, k
    dtypes = {name: np.dtype(x.dtype) for name, x in operands}
    if len(set(dtypes.values())) != 1:
        said = [f"{name} is {dtype}" for name, dtype in dtypes.items()]
        described = ", ".join(said[:-1]) + f" and {said[-1]}"
        raise InputError(
            f"mixed dtypes: {described}; convert so that all share one of {_COMPUTE_NAMES}"
        )
    if dtypes[names[0]] not in COMPUTE_DTYPES:
        raise InputError(f"unsupported dtype {dtypes[names[0]]}; use one of {_COMPUTE_NAMES}")
    return m, n, k


_COMPUTE_NAMES = ", ".join(str(d) for d in COMPUTE_DTYPES)


@dataclass(frozen=True)
class OpView:
    """Shape, dtype and chunk grid of ``op(X)``, as the checks and the plan see it."""

    shape: tuple[int, int]
    dtype: np.dtype
    chunks: tuple[int, int]


def op_view(array: Any, transposed: bool) -> OpView:
    """The view of ``array`` or of its transpose (nothing is read)."""
    step = -1 if transposed else 1
    return OpView(tuple(array.shape[::step]), np.dtype(array.dtype), tuple(array.chunks[::step]))


def operand_names(transpose_a: bool, transpose_b: bool) -> tuple[str, str, str]:
    """How messages name op(A), op(B) and C."""
    return ("A.T" if transpose_a else "A", "B.T" if transpose_b else "B", "C")
