"""The GPU check: one bounded, offline run on a lent GPU node (``python -m
outofcore.gpu_check``; :mod:`outofcore.gpu_check.runner`).  It drives the whole job, so it
stands above it, apart from the CUDA backend (:mod:`outofcore.compute.cuda`) it measures."""
