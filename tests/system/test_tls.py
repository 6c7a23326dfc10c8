"""A TLS cluster (issue 28, item 3): `dask scheduler` and `dask worker` with certificates
made in the test, on loopback, and jobs over ``tls://``.

The scheduler's, the worker's and the first job's command lines are
docker-compose.tls.yml's, run natively (the address, ports, data and certificate
folders substituted; servers on loopback), so that file and this test cannot drift apart.

A job given the cluster's CA and a client certificate (the command's ``--tls-*`` flags,
Dask's settings from the environment, or a Client made with ``security=``) runs and is
right; one without certificates, with a certificate of another CA, trusting another
CA, or speaking plain TCP to the TLS port is refused in one line, exit 2, before
anything is written.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import dask
import numpy as np
import pytest
import yaml
import zarr
from distributed import Client, LocalCluster
from distributed.security import Security

import outofcore
from outofcore.errors import BAD_INPUT
from tests.certificates import Certificates, make_certificates
from tests.helpers import (
    ROOT,
    assert_product_close,
    free_port,
    interpolate,
    random_matrix,
    stop_processes,
    write_zarr,
)

BIN = Path(sys.executable).parent
#: This checkout first on the path; no AWS settings of this machine.
ENV = {
    **{k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "DASK_"))},
    "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
}


def client_security(certificates: Certificates) -> Security:
    """What a Python user of the cluster passes to ``distributed.Client(security=...)``."""
    return Security(
        tls_ca_file=str(certificates.ca),
        tls_client_cert=str(certificates.client.cert),
        tls_client_key=str(certificates.client.key),
        require_encryption=True,
    )


def compose_tls_command(service: str, port: int, data: Path, certificates: Path, **env) -> list:
    """docker-compose.tls.yml's command line of ``service`` for this machine: executables,
    the scheduler's address and ports on loopback, the data and certificate folders."""
    parts = yaml.safe_load((ROOT / "docker-compose.tls.yml").read_text())["services"][service]
    line = []
    for part in parts["command"]:
        text = interpolate(str(part), env)
        text = text.replace("tls://scheduler:8786", f"tls://127.0.0.1:{port}")
        text = {"8786": str(port), ":8787": "127.0.0.1:0"}.get(text, text)
        for folder, here in (("/data/", data), ("/certs/", certificates)):
            if text.startswith(folder):
                text = str(here / text.removeprefix(folder))
        line.append(text)
    if line[0] == "dask":  # containers listen on every interface; this test on loopback
        return [str(BIN / "dask"), *line[1:], "--host", "127.0.0.1"]
    assert line[0] == "outofcore", line
    return [sys.executable, "-m", "outofcore.cli", *line[1:]]


@pytest.fixture(scope="module")
def tls_cluster(tmp_path_factory):
    """A TLS scheduler and one TLS worker on loopback, with certificates made here."""
    folder = tmp_path_factory.mktemp("tls")
    certificates = make_certificates(folder / "certificates")
    port = free_port()
    address = f"tls://127.0.0.1:{port}"
    commands = {
        name: compose_tls_command(name, port, folder, certificates.ca.parent)
        for name in ("scheduler", "worker")
    }
    commands["worker"] += ["--dashboard-address", "127.0.0.1:0"]
    processes = []
    try:
        for name, command in commands.items():
            log = open(folder / f"{name}.log", "w")  # noqa: SIM115 (closed with the process)
            process = subprocess.Popen(command, stdout=log, stderr=log, env=ENV)
            processes.append((process, log))
        with Client(address, security=client_security(certificates), timeout=30) as client:
            client.wait_for_workers(1, timeout=60)
            yield {"address": address, "port": port, "certificates": certificates, "client": client}
    finally:
        stop_processes(processes)


@pytest.fixture
def operands(tmp_path):
    """Odd shapes, ragged chunks, seeded values: A 301x203, B 203x157 (float32)."""
    rng = np.random.default_rng(28)
    a = random_matrix(rng, (301, 203), "float32")
    b = random_matrix(rng, (203, 157), "float32")
    write_zarr(tmp_path / "a.zarr", a, (64, 50))
    write_zarr(tmp_path / "b.zarr", b, (50, 40))
    return tmp_path, a, b


def outofcore_command(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "outofcore.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**ENV, **(env or {})},
    )


def matmul_args(folder: Path, address: str, *extra: str) -> list[str]:
    a, b, c = (str(folder / name) for name in ("a.zarr", "b.zarr", "c.zarr"))
    return ["matmul", a, b, "-o", c, "--memory", "1MiB", "--scheduler", address, *extra]


def assert_refused(done: subprocess.CompletedProcess, folder: Path, *needles: str) -> str:
    """Exit 2, one error line naming ``needles``, no traceback, and no output written."""
    errors = [line for line in done.stderr.splitlines() if line.startswith("outofcore: error:")]
    assert done.returncode == BAD_INPUT, done.stderr
    assert len(errors) == 1 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    for needle in needles:
        assert needle in errors[0], (needle, errors[0])
    assert sorted(path.name for path in folder.iterdir()) == ["a.zarr", "b.zarr"]
    return errors[0]


def test_the_compose_job_over_tls_with_the_certificate_flags(tls_cluster, operands):
    folder, a, b = operands
    certificates = tls_cluster["certificates"].ca.parent
    env = {"JOB_MEMORY": "1MiB", "JOB_WORKERS": "1"}
    job = compose_tls_command("job", tls_cluster["port"], folder, certificates, **env)
    assert "--tls-cert" in job
    done = subprocess.run([*job, "--json"], capture_output=True, text=True, timeout=120, env=ENV)
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["tiles"] > 1 and summary["tiles_computed"] == summary["tiles"]
    assert_product_close(zarr.open_array(str(folder / "c.zarr"))[...], a, b)


def test_a_gram_over_tls_with_dask_settings_from_the_environment(tls_cluster, operands):
    folder, a, _ = operands
    certificates = tls_cluster["certificates"]
    env = {
        "DASK_DISTRIBUTED__COMM__TLS__CA_FILE": str(certificates.ca),
        "DASK_DISTRIBUTED__COMM__TLS__CLIENT__CERT": str(certificates.client.cert),
        "DASK_DISTRIBUTED__COMM__TLS__CLIENT__KEY": str(certificates.client.key),
        "DASK_DISTRIBUTED__COMM__REQUIRE_ENCRYPTION": "True",
    }
    gram = ["gram", str(folder / "a.zarr"), "-o", str(folder / "g.zarr"), "--memory", "1MiB"]
    done = outofcore_command(*gram, "--scheduler", tls_cluster["address"], "--quiet", env=env)
    assert done.returncode == 0, done.stderr
    got = zarr.open_array(str(folder / "g.zarr"))[...]
    assert_product_close(got, np.ascontiguousarray(a.T), a)


def test_the_api_over_tls(tls_cluster, operands):
    """A Client made with ``security=``, and an address with Dask's settings."""
    folder, a, b = operands
    a_path, b_path = str(folder / "a.zarr"), str(folder / "b.zarr")
    c = outofcore.matmul(a_path, b_path, str(folder / "c.zarr"), client=tls_cluster["client"])
    assert_product_close(c[...], a, b)
    certificates = tls_cluster["certificates"]
    settings = {
        "distributed.comm.tls.ca-file": str(certificates.ca),
        "distributed.comm.tls.client.cert": str(certificates.client.cert),
        "distributed.comm.tls.client.key": str(certificates.client.key),
    }
    with dask.config.set(settings):
        d = outofcore.matmul(a_path, b_path, str(folder / "d.zarr"), client=tls_cluster["address"])
    assert_product_close(d[...], a, b)


def test_a_job_without_certificates_is_refused_in_one_line(tls_cluster, operands):
    folder, _, _ = operands
    done = outofcore_command(*matmul_args(folder, tls_cluster["address"]))
    assert_refused(done, folder, "is a TLS address, but no certificates are given", "--tls-cert")


def test_a_certificate_signed_by_another_ca_is_refused(tls_cluster, operands):
    folder, _, _ = operands
    certificates = tls_cluster["certificates"]
    flags = certificates.stranger.flags(certificates.ca)
    done = outofcore_command(*matmul_args(folder, tls_cluster["address"], *flags))
    line = assert_refused(done, folder, "--tls-cert")
    # TLS 1.3 may show the server's alert, or only the stream it closed.
    assert "refused this client's certificate" in line or "most likely it refused" in line, line


def test_a_scheduler_the_given_ca_does_not_vouch_for_is_refused(tls_cluster, operands):
    folder, _, _ = operands
    certificates = tls_cluster["certificates"]
    flags = certificates.client.flags(certificates.other_ca)
    done = outofcore_command(*matmul_args(folder, tls_cluster["address"], *flags))
    assert_refused(done, folder, "presented a certificate the given CA does not vouch for")


def test_plain_tcp_to_the_tls_port_is_refused_in_time(tls_cluster, operands):
    folder, _, _ = operands
    address = f"tcp://127.0.0.1:{tls_cluster['port']}"
    done = outofcore_command(*matmul_args(folder, address), env={"OUTOFCORE_CONNECT_TIMEOUT": "3"})
    assert_refused(done, folder, "no Dask scheduler answered", "tls://")


def test_the_script_s_certificates_make_a_tls_cluster(operands):
    """scripts/make-certificates (openssl) writes what docker-compose.tls.yml reads, and
    a cluster and a job run with them (a LocalCluster in this process: the handshakes
    are the same)."""
    if not shutil.which("openssl"):
        pytest.skip("scripts/make-certificates needs openssl")
    folder, a, b = operands
    certificates = folder / "certs"
    subprocess.run(
        [str(ROOT / "scripts" / "make-certificates"), str(certificates), "2"],
        check=True,
        capture_output=True,
    )
    read = yaml.safe_load((ROOT / "docker-compose.tls.yml").read_text())
    wanted = {
        str(part).removeprefix("/certs/")
        for service in read["services"].values()
        for part in service["command"]
        if str(part).startswith("/certs/")
    }
    assert wanted == {path.name for path in certificates.iterdir()}  # no CA key left
    assert all(oct(certificates.joinpath(name).stat().st_mode)[-3:] == "600"
               for name in wanted if name.endswith(".key"))  # fmt: skip

    def role(name: str) -> dict[str, str]:
        return {
            f"tls_{name}_cert": str(certificates / f"{name}.pem"),
            f"tls_{name}_key": str(certificates / f"{name}.key"),
        }

    security = Security(
        tls_ca_file=str(certificates / "ca.pem"),
        **role("scheduler"),
        **role("worker"),
        **role("client"),
        require_encryption=True,
    )
    settings = {
        "distributed.comm.tls.ca-file": str(certificates / "ca.pem"),
        "distributed.comm.tls.client.cert": str(certificates / "client.pem"),
        "distributed.comm.tls.client.key": str(certificates / "client.key"),
    }
    with (  # a cluster of its own: a TLS one
        LocalCluster(
            n_workers=1,
            threads_per_worker=1,
            processes=False,
            protocol="tls://",
            host="127.0.0.1",
            security=security,
            dashboard_address=None,
        ) as cluster,
        dask.config.set(settings),
    ):
        assert cluster.scheduler_address.startswith("tls://")
        c = outofcore.matmul(
            str(folder / "a.zarr"),
            str(folder / "b.zarr"),
            str(folder / "c.zarr"),
            client=cluster.scheduler_address,
        )
    assert_product_close(c[...], a, b)
