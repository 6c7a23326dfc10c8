"""Every server of a local job listens on loopback only (issue 28: loopback unless asked)."""

from __future__ import annotations

import ipaddress
import os

import psutil
import pytest

from outofcore.backends.cuda.workers import CUDA_NODE
from outofcore.runtime.cluster import open_executor
from outofcore.runtime.loopback import LOCAL_HOST


def listening_addresses() -> set[tuple[str, int]]:
    """(address, port) of every listening TCP socket of this process and its children."""
    me = psutil.Process()
    found = set()
    for process in [me, *me.children(recursive=True)]:
        try:
            connections = process.net_connections(kind="inet")
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        for connection in connections:
            if connection.status == psutil.CONN_LISTEN:
                found.add((connection.laddr.ip, connection.laddr.port))
    return found


def assert_loopback_only(before: set[tuple[str, int]]) -> set[tuple[str, int]]:
    opened = listening_addresses() - before
    assert opened, "the cluster opened no listening socket: the check would see nothing"
    public = {(ip, port) for ip, port in opened if not ipaddress.ip_address(ip).is_loopback}
    assert not public, f"listening beyond loopback: {sorted(public)}"
    return opened


@pytest.mark.parametrize("in_process", [False, True])
def test_a_local_cluster_with_its_dashboard_listens_on_loopback_only(in_process):
    before = listening_addresses()
    with open_executor(
        None, budget_bytes=64 << 20, workers=2, in_process=in_process, dashboard=True
    ) as executor:
        assert_loopback_only(before)  # in process: the dashboard's web server alone
        info = executor.client.scheduler_info()
        protocol = "inproc://" if in_process else f"tcp://{LOCAL_HOST}:"
        assert info["address"].startswith(protocol)
        assert all(address.startswith(protocol) for address in info["workers"])


def test_gpu_workers_listen_on_loopback_only():
    """outofcore's own GPU workers (on numba's simulator here): scheduler, nannies, workers."""
    if os.environ.get("NUMBA_ENABLE_CUDASIM") != "1":
        pytest.skip("runs GPU workers on the simulator (tests/conftest.py sets it)")
    before = listening_addresses()
    with open_executor(
        None, budget_bytes=64 << 20, gpus=(0,), dashboard=True, node=CUDA_NODE
    ) as executor:
        assert_loopback_only(before)
        workers = executor.client.scheduler_info()["workers"]
        assert workers and all(a.startswith(f"tcp://{LOCAL_HOST}:") for a in workers)


@pytest.mark.parametrize("in_process", [True, False])
def test_the_printed_dashboard_link_answers(in_process, capsys):
    """The start line's dashboard address is where the dashboard listens (loopback), not
    the machine's address that Dask's own link names."""
    import re  # noqa: PLC0415
    import urllib.request  # noqa: PLC0415

    from outofcore.runtime.cluster import serves_dashboard  # noqa: PLC0415

    if not serves_dashboard():
        pytest.skip("the dashboard needs bokeh, not installed here")
    with open_executor(
        None, budget_bytes=64 << 20, workers=1, in_process=in_process, dashboard=True
    ):
        line = capsys.readouterr().err
        [link] = re.findall(r"dashboard at (\S+)", line)
        assert link.startswith(f"http://{LOCAL_HOST}:")
        with urllib.request.urlopen(link, timeout=30) as answer:  # noqa: S310 (loopback)
            assert answer.status == 200
