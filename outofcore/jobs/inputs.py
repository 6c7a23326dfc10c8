"""A job's operands as the client checks them before anything is written: the product
(:class:`~outofcore.operands.product.Product`, its inputs located once with their options), the
output's location, journal and fingerprints (:class:`Operands`), and the room the output
needs on its disk."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import zarr

from outofcore.errors import InputError
from outofcore.jobs import opening
from outofcore.jobs.phases import Phases
from outofcore.jobs.spec import JobSpec
from outofcore.journal.identity import job_identity, output_layout
from outofcore.journal.records import Journal
from outofcore.journal.resume import Start, inspect_output
from outofcore.journal.status import describe_output
from outofcore.journal.targets import check_replaceable
from outofcore.operands import arrays
from outofcore.operands.product import Product
from outofcore.storage.fingerprint import Fingerprint, fingerprint
from outofcore.storage.locations import Location, locate


def open_product(a: arrays.ArrayLike, b: arrays.ArrayLike, spec: JobSpec) -> Product:
    """The product a job with ``spec`` computes, opened and checked (nothing is written)."""
    return opening.open_product(
        a,
        b,
        transpose_a=spec.transpose_a,
        transpose_b=spec.transpose_b,
        alpha=spec.alpha,
        beta=spec.beta,
        addend=spec.addend,
        out_dtype=spec.out_dtype,
        storage_options=spec.storage_options,
    )


@dataclass(frozen=True)
class Operands:
    """A job's inputs and output as checked in the client, before anything is written."""

    product: Product
    #: The output: a ``zarr.Array``, or the location of a path or URL (located once, with
    #: the options that open it: every step below takes it).
    out: zarr.Array | Location
    shape: tuple[int, ...]
    dtype: np.dtype
    journal: Journal
    #: How messages name the output.
    where: str
    fingerprints: dict[str, Fingerprint]
    #: What must match for a rerun to resume (:func:`outofcore.journal.identity.job_identity`).
    identity: dict[str, Any]
    #: Whether an output that is not this job's is replaced (``JobSpec.overwrite``).
    overwrite: bool = False

    @classmethod
    def open(
        cls,
        a: arrays.ArrayLike,
        b: arrays.ArrayLike,
        out: arrays.ArrayLike,
        spec: JobSpec,
        phases: Phases | None = None,
    ) -> Operands:
        """Open and check the product, check the output target and fingerprint the inputs
        (timed as the phase ``fingerprints`` of ``phases``)."""
        product = open_product(a, b, spec)
        names = spec.dimension_names
        if names is not None and len(names) != len(product.shape):
            raise InputError(
                f"dimension_names = {names}: {len(names)} names for an output of "
                f"{len(product.shape)} dimensions (shape {product.shape})"
            )
        inputs = product.inputs
        if not isinstance(out, zarr.Array):  # located once, with the options that open it
            out = locate(out, spec.storage_options)
        arrays.check_output_target(out, inputs)
        if isinstance(out, Location):  # nothing outofcore did not make
            check_replaceable(out)
        with (phases or Phases())("fingerprints"):
            fingerprints = {name: fingerprint(array) for name, array in inputs.items()}
        identity = job_identity(
            inputs,
            fingerprints,
            spec.memory,
            spec.tile,
            spec.tk,
            product.summary(),
            output_layout(spec.zarr_format, spec.shards),
        )
        return cls(
            product=product,
            out=out,
            shape=product.shape,
            dtype=product.types.output,
            journal=Journal.for_output(out),
            where=describe_output(out),
            fingerprints=fingerprints,
            identity=identity,
            overwrite=spec.overwrite,
        )

    @property
    def inputs(self) -> dict[str, zarr.Array]:
        """Every array the job reads, by name."""
        return self.product.inputs

    def inspect(self) -> Start:
        """How the job starts on its output now
        (:func:`outofcore.journal.resume.inspect_output`)."""
        return inspect_output(
            self.out,
            self.journal,
            self.shape,
            self.dtype,
            self.identity,
            self.overwrite,
            self.fingerprints,
        )
