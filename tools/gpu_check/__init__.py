"""The GPU check: one bounded, offline run on a lent GPU node (``python -m
tools.gpu_check`` from the checkout; :mod:`tools.gpu_check.runner`).  It drives the whole
job, so it stands above it, apart from the CUDA backend (:mod:`outofcore.backends.cuda`) it
measures.  Not installed: ``scripts/gpu-check`` runs it from the checkout's root."""
