"""Storage: bytes in stores, below everything that gives them meaning.

- ``locations`` and ``stores``: where an array lives; its store opened with its options.
- ``deadlines``, ``s3session``, ``obstores``, ``endpoints``: object-store clients that end.
- ``storeops``: conditional writes, exact deletes, fast listings.
- ``documents``: JSON read within bounds.
- ``codecs`` and ``bounded``: output compression; decodes within declared sizes.
- ``chunk_io``, ``chunk_layout``, ``chunkfiles``: chunk files without zarr's pipeline.
- ``presence``: which chunks an input's listing holds.
- ``writing``: the output's regions, written durably; ``digests``: what a written object holds.
- ``manifest``, ``output_keys``, ``deleting``: only keys outofcore wrote, read and deleted.
- ``stored_arrays``: a stored array named, compared and written through.
- ``fingerprint``: is an input still the data a job started on.

May import: outofcore.errors and outofcore.config, scheduler; nothing above.
"""
