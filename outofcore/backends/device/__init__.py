"""The device seam: one device engine written against one small runtime interface.

- ``runtime``: the :class:`~outofcore.backends.device.runtime.DeviceRuntime` protocol
  (streams, events, pinned and device buffers, 1-D and 2-D copies, the transpose, the GEMM
  launch), which each device backend implements: numba-cuda in
  ``outofcore.backends.cuda.runtime``, the timed device in ``outofcore.backends.timed``.
- ``engine``: the device tile engine (panel slots, double buffering, resident and
  sub-tiled device plans, the device ``C`` buffers, event timings) over any runtime.
- ``buffers``, ``accumulator``, ``share``, ``event_timer``: its buffers and copies, the
  sub-tiled host accumulator, the device memory the engines of a process share, and the
  timings read from events.

Imports no GPU library.
"""
