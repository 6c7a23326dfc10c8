"""What a refusal of too many workers for the memory cap advises (issue 28, item 5)."""

from __future__ import annotations

import re

import pytest

from outofcore.errors import ClusterError
from outofcore.runtime import worker_sizing
from outofcore.runtime.memory_cap import MemoryCap

GiB = 2**30


@pytest.fixture
def cap(monkeypatch):
    """Set this process's memory cap to ``cap(nbytes)`` for the test."""

    def set_cap(nbytes: int) -> None:
        fake = MemoryCap(nbytes=nbytes, what="cgroup memory limit", where="/test")
        monkeypatch.setattr(worker_sizing, "memory_cap", lambda: fake)

    return set_cap


def refusal(budget: int, workers: int, gpu: bool = False) -> str:
    with pytest.raises(ClusterError) as refused:
        worker_sizing.local_worker_count(budget, workers, gpu=gpu)
    return str(refused.value)


def test_a_budget_that_fits_is_advised_as_it_was(cap):
    allowance = worker_sizing.worker_allowance()
    cap(8 * GiB)
    message = refusal(8 * GiB, 2)
    assert f"lower --memory to at most {4 * GiB - allowance} bytes or use fewer --workers" in (
        message
    )
    assert worker_sizing.local_worker_count(4 * GiB - allowance, 2) == 2  # and it does fit


def test_workers_whose_allowances_alone_exceed_the_cap_are_never_told_0_bytes(cap):
    """Issue 28: 'lower --memory to at most 0 bytes' where no budget could make the
    workers fit (their allowances alone exceed the cap)."""
    allowance = worker_sizing.worker_allowance()
    cap(8 * GiB)
    message = refusal(2**16, 500)
    assert "at most 0 bytes" not in message and "lower --memory" not in message
    fits = int(re.search(r"use at most (\d+) worker\(s\) \(--workers\)", message).group(1))
    assert fits == 8 * GiB // (2**16 + allowance)
    assert worker_sizing.local_worker_count(2**16, fits) == fits  # the advice is true
    gpu = refusal(2**16, 16, gpu=True)
    assert "(--gpus)" in gpu and "lower --memory" not in gpu


def test_a_cap_that_holds_one_worker_or_none(cap):
    allowance = worker_sizing.worker_allowance()
    cap(allowance + GiB)
    assert f"lower --memory to at most {GiB} bytes" in refusal(2 * GiB, 1)
    three = refusal(2 * GiB, 3)  # not even one worker at this budget: one, with less
    assert f"use one worker (--workers) with --memory at most {GiB} bytes" in three
    cap(allowance // 2)
    assert "less than one worker's allowance" in refusal(2**16, 1)
