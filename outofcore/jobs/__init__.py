"""Jobs: a job from its spec to its output.

- ``spec``: what a job is asked to do, parsed and checked once (``JobSpec``).
- ``entry``: ``matmul``, ``gram`` and ``run_job`` behind them and the CLI.
- ``setup``, ``inputs``, ``opening``: everything checked before a write (operands opened,
  the output's location, the journal resumed or not).
- ``placement``: where a job runs (client, GPUs, budget), and whether it serves a dashboard.
- ``planning``: the plan, for the job's workers, and what it predicts.
- ``preview``: a job's plan without running it (behind ``outofcore.plan`` and ``outofcore plan``).
- ``run`` and ``tasks``: the lease, the executor, the tiles.
- ``recorded``: the recorded-task protocol (tile, split part, reduction).
- ``splitk``: parts over k and their reduction.
- ``output``: the output from start to complete.
- ``phases`` and ``progress``: where the wall time goes; the progress bar.

May import: machine, compute, journal, operands, storage, outofcore.errors and
outofcore.config, scheduler; never the front-ends or the faces.
"""
