"""Backends: what multiplies a tile's panels, each behind the tile-engine protocol.

- ``registry``: each backend an object (GPU or not, capabilities, engine, probe, what to
  install, a device's rates and block tables), found by name; ``"auto"`` resolved there.
- ``protocol``: the tile-engine protocol and the capabilities an engine declares.
- ``cpu``: the CPU engine; ``blas``: ``gemm`` and ``syrk`` through ctypes; ``limbs``: exact
  64-bit integer products through 16-bit limbs.
- ``device/``: the device seam: the device tile engine, written once against one small
  runtime interface (streams, events, pinned and device buffers, copies, the GEMM launch);
  imports no GPU library.
- ``cuda/``: the CUDA backend, everything that imports ``numba.cuda`` or names NVIDIA's
  tools (the kernels, the CUDA engine's runtime, its probe, rates and compile report).
- ``timed/``: the timed device, a runtime on the host whose copies and kernels are real
  waits of their modelled time (the ``"timed"`` backend).

May import: operands, storage, outofcore.errors and outofcore.config, planner and runtime;
never compute, journal, jobs, machine or the front-ends.
"""
