"""The Python API: :func:`matmul`, :func:`gram`, :func:`run_job` (behind them and the CLI),
:func:`job_status` and :class:`JobSpec`; a public face.

The work is :mod:`outofcore.jobs.entry`'s (a job from its spec to its output) and
:mod:`outofcore.journal.status`'s.  ``outofcore.plan`` (a job's plan, not run: a
``PlanReport``) is :mod:`outofcore.frontends.plan_report`'s, which the package hands out
itself: this module stays below the front-ends.
"""

from __future__ import annotations

from outofcore.jobs.entry import ATTRIBUTE, gram, matmul, run_job
from outofcore.jobs.spec import JobSpec
from outofcore.journal.status import job_status

__all__ = ["ATTRIBUTE", "JobSpec", "gram", "job_status", "matmul", "run_job"]
