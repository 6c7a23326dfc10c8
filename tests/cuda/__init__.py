"""Tests of ``outofcore.backends.cuda``: the kernels and the tile engine (on numba's simulator
unless NUMBA_ENABLE_CUDASIM=0), and the compile report."""
