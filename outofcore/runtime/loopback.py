"""Where the servers of a cluster outofcore starts listen: this machine's loopback.

Scheduler, workers, nannies and the dashboard of every local cluster (a LocalCluster,
outofcore's own GPU workers, a GPU vendor's own cluster) bind to :data:`LOCAL_HOST`,
never to every interface, so that no other host reaches a job's tasks, data or call
stacks.  A cluster other hosts join is the user's own (``dask scheduler``,
docs/cluster.md), with its own addresses and TLS.
"""

#: The address every server of a local cluster binds to.
LOCAL_HOST = "127.0.0.1"
#: The dashboard's address: loopback, a free port.
LOCAL_DASHBOARD_ADDRESS = f"{LOCAL_HOST}:0"


def local_dashboard_link(services: dict[str, int]) -> str | None:
    """The address of a local cluster's dashboard as it listens, on :data:`LOCAL_HOST`
    (``services``: the scheduler's, as ``Client.scheduler_info()`` gives them); None where
    it serves none.  Dask's own link names the machine's address, where nothing listens."""
    port = services.get("dashboard")
    return None if port is None else f"http://{LOCAL_HOST}:{port}/status"
