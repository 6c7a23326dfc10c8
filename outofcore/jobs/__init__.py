"""Jobs: a job from its spec to its output.

``spec`` (the options, parsed once), ``entry`` (``matmul``, ``gram``, ``run_job``),
``setup`` and ``inputs`` (everything checked before a write), ``planning`` (the plan, for
the job's workers), ``run`` and ``tasks`` (the lease, the executor, the tiles),
``recorded`` (the recorded-task protocol), ``splitk`` (parts over k and their reduction),
``output`` (the output from start to complete), ``phases`` and ``progress``.

May import: machine, compute, journal, operands, storage, outofcore.errors and
outofcore.config, scheduler; never the front-ends or the faces.
"""
