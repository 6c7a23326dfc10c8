"""The Python API: :func:`matmul`, :func:`gram`, :func:`run_job` (behind them and the CLI),
:func:`plan` (a job's plan, not run: a :class:`PlanReport`), :func:`job_status` and
:class:`JobSpec`; a public face.

The work is :mod:`outofcore.jobs.entry`'s (a job from its spec to its output) and
:mod:`outofcore.journal.status`'s.
"""

from __future__ import annotations

from outofcore.frontends.plan_report import PlanReport, plan
from outofcore.jobs.entry import ATTRIBUTE, gram, matmul, run_job
from outofcore.jobs.spec import JobSpec
from outofcore.journal.status import job_status

__all__ = ["ATTRIBUTE", "JobSpec", "PlanReport", "gram", "job_status", "matmul", "plan", "run_job"]
