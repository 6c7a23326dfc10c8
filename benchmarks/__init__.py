"""The benchmarks: thin case scripts run as ``python -m benchmarks.NAME`` from the checkout root.

Their shared scaffolding (processes, inputs, checking, systems, races, reports) is the
:mod:`benchmarks.harness` package; ``docs/performance.md`` lists every case.
"""
