# The outofcore image: the package, Dask (scheduler, workers, dashboard) and the CLI.
#
#   docker build -t outofcore .                                        # CPU workers, jobs
#   docker build -t outofcore-gpu --build-arg EXTRAS=s3,gpu .           # GPU workers
#
# EXTRAS are the package's extras: s3 (s3fs) always; gpu for the GPU variant: dask-cuda
# (`dask cuda worker`) and the cuda extra (numba-cuda with NVVM/NVRTC as wheels, CUDA 13),
# whose host's NVIDIA driver comes in through the container toolkit (see the gpu-worker
# service in docker-compose.yml). The CPU image has no numba. constraints.txt pins the
# dask and distributed that dask-cuda allows, so both images run the same ones.
FROM python:3.11-slim

ARG EXTRAS="s3"
ENV PYTHONDONTWRITEBYTECODE=1 \
    OPENBLAS_THREAD_TIMEOUT=16 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    NUMBA_CACHE_DIR=/var/cache/outofcore/kernels
# Compiled CUDA kernels are kept here between worker processes (numba-cuda's on-disk
# cache, private to the image's user; the gpu-worker service keeps it in a volume).
RUN mkdir -p -m 0700 /var/cache/outofcore/kernels

WORKDIR /src
COPY pyproject.toml README.md LICENSE constraints.txt ./
COPY outofcore ./outofcore
# bokeh serves the scheduler's dashboard on port 8787; the s3 extra (s3fs) opens s3:// arrays.
RUN pip install -c constraints.txt ".[${EXTRAS}]" "bokeh>=3.1" \
    && outofcore --help > /dev/null \
    && dask scheduler --version \
    && case ",${EXTRAS}," in *,gpu,*) dask cuda worker --help > /dev/null ;; esac

# The shared data volume (inputs and outputs) is mounted here.
WORKDIR /data
EXPOSE 8786 8787
CMD ["outofcore", "--help"]
