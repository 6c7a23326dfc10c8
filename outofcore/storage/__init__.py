"""Storage: bytes in stores, below everything that gives them meaning.

``locations`` and ``stores`` (where an array lives, its store opened with its options),
``deadlines``, ``s3session``, ``obstores``, ``endpoints`` (object-store clients that end),
``storeops`` (conditional writes, exact deletes), ``documents`` (JSON read within
bounds), ``codecs`` and ``bounded`` (decodes within declared sizes), ``chunk_io``,
``chunk_layout`` and ``chunkfiles`` (chunk files without zarr's pipeline), ``presence``,
``writing`` (durable writes), ``manifest`` and ``deleting`` (only keys outofcore wrote),
``stored_arrays`` (an array named and compared), ``fingerprint`` (is it still the data).

May import: outofcore.errors and outofcore.config, scheduler; nothing above.
"""
