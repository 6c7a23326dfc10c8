"""Tests of ``scheduler``: the plan, the device plan, the cost model, executors and clusters."""
