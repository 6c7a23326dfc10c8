"""The Dask runtime: where a job's tasks run, and the cluster a job starts.

- ``addresses``: the client a job runs on (Dask's convention) and addresses given as text.
- ``cluster``: an executor for a job (a LocalCluster, a named scheduler, in-process);
  ``executors``: the interchangeable executors; ``job_argument``: what each task carries.
- ``in_process``: whether a job's tasks run in this process; ``gpu_cluster``: one worker
  process per GPU of a multi-GPU node.
- ``worker_sizing``: the memory and threads of a job's workers; ``memory_cap``: this process
  tree's memory cap; ``cores``: the cores a process may run on.
- ``stall``: a bounded wait (a cluster that runs nothing ends the run); ``tls``: TLS to a
  scheduler the user runs; ``loopback``: where the servers outofcore starts listen;
  ``blas_idle``: OpenBLAS's idle spin; ``worker_logs``: what the workers print.

May import: outofcore.errors; never the plan or any layer above.
"""
