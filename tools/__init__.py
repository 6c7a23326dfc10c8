"""Tools run from a checkout, not installed with the package: ``python -m tools.NAME``.

- ``gpu_check/``: the GPU check of a lent GPU node (docs/gpu.md).

A tool may import anything of ``outofcore``; nothing there imports a tool.
"""
