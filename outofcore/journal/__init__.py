"""The journal: what a job has done, kept with its output, and who may write it.

- ``records``: the job and tile records.
- ``job_schema``: what a job document may hold, checked before a journal is trusted.
- ``store``: the journal's keys, bounded reads, durable and conditional writes.
- ``lease`` and ``leasing``: one live job per output, and its heartbeat.
- ``resume`` and ``identity``: start afresh or resume; a job's identity and how two differ.
- ``status``: ``outofcore status``.
- ``targets``: what is at an output, and whether outofcore may replace it.

May import: storage, outofcore.errors and outofcore.config, scheduler; never operands,
compute, jobs or the front-ends (jobs -> journal -> storage).
"""
