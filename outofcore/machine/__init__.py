"""This machine: what the time model needs to know of it.

- ``probe``: BLAS, chunk files and the disk, measured.
- ``probe_cache``: the figures kept with the machine's identity.
- ``prediction``: the figures as the model's machine; a job's predicted seconds.

May import: compute, operands, storage, outofcore.errors and outofcore.config, scheduler;
never jobs, journal or the front-ends (it is given the job's settings as arguments).
"""
