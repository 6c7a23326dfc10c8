"""Scheduler addresses checked before anything is written (issue 28, items 3 and 6):
TLS credentials (outofcore/runtime/tls.py), and protocols no job can reach from here.

The TLS cluster itself runs in tests/system/test_tls.py.
"""

from __future__ import annotations

import os
import ssl
import subprocess
import sys
import time

import dask
import pytest
from cryptography.hazmat.primitives import serialization
from distributed.comm.core import FatalCommClosedError

from outofcore.errors import BAD_INPUT, ClusterError
from outofcore.frontends.cli_parser import build_parser
from outofcore.runtime.addresses import check_client
from outofcore.runtime.tls import client_security, protocol_of, tls_failure, tls_settings
from tests.certificates import make_certificates
from tests.helpers import ROOT, free_port, random_matrix, write_zarr


@pytest.fixture(scope="module")
def certificates(tmp_path_factory):
    return make_certificates(tmp_path_factory.mktemp("certificates"))


@pytest.fixture
def no_dask_tls():
    """Dask's TLS settings unset, whatever this machine's environment says."""
    settings = {
        "distributed.comm.tls.ca-file": None,
        "distributed.comm.tls.client.cert": None,
        "distributed.comm.tls.client.key": None,
        "distributed.comm.require-encryption": None,
    }
    with dask.config.set(settings):
        yield


def tls_config(ca=None, cert=None, key=None, require=None):
    return dask.config.set(
        {
            "distributed.comm.tls.ca-file": None if ca is None else str(ca),
            "distributed.comm.tls.client.cert": None if cert is None else str(cert),
            "distributed.comm.tls.client.key": None if key is None else str(key),
            "distributed.comm.require-encryption": require,
        }
    )


def test_protocol_of():
    assert protocol_of("tls://h:1") == "tls"
    assert protocol_of("WSS://h:1") == "wss"
    assert protocol_of("h:1") == "tcp"


def test_tls_settings_from_the_flags(certificates):
    files = (str(certificates.ca), str(certificates.client.cert), str(certificates.client.key))
    assert tls_settings("tls://h:8786", *files) == {
        "distributed.comm.tls.ca-file": files[0],
        "distributed.comm.tls.client.cert": files[1],
        "distributed.comm.tls.client.key": files[2],
    }
    assert tls_settings("wss://h:8786", ca_file=files[0]) == {
        "distributed.comm.tls.ca-file": files[0]
    }
    assert tls_settings(None) == {} and tls_settings("tcp://h:1") == {}


@pytest.mark.parametrize(
    ("address", "says"),
    [
        (None, "--tls-ca-file is for a TLS scheduler"),
        ("sync", "--tls-ca-file is for a TLS scheduler"),
        ("tcp://10.0.0.5:8786", "is not a TLS address: give tls://10.0.0.5:8786"),
        ("ws://10.0.0.5:8786", "is not a TLS address"),
    ],
)
def test_certificates_for_a_scheduler_that_is_not_tls_are_refused(address, says):
    with pytest.raises(ClusterError, match=says.replace(".", r"\.")):
        tls_settings(address, ca_file="ca.pem")


def test_the_cli_parses_dask_s_tls_flags():
    args = build_parser().parse_args(
        ["matmul", "a", "b", "-o", "c", "--scheduler", "tls://h:1", "--tls-ca-file", "ca.pem",
         "--tls-cert", "me.pem", "--tls-key", "me.key"]
    )  # fmt: skip
    assert (args.tls_ca_file, args.tls_cert, args.tls_key) == ("ca.pem", "me.pem", "me.key")
    gram = build_parser().parse_args(["gram", "x", "-o", "g", "--tls-cert", "me.pem"])
    assert gram.tls_cert == "me.pem" and gram.tls_ca_file is None


@pytest.mark.usefixtures("no_dask_tls")
@pytest.mark.parametrize("protocol", ["tls", "wss"])
def test_a_tls_address_without_certificates_is_refused_before_connecting(protocol):
    with pytest.raises(ClusterError, match="is a TLS address, but no certificates are given"):
        client_security(f"{protocol}://127.0.0.1:1")


def test_half_the_credentials_names_the_missing_one(certificates):
    with tls_config(ca=certificates.ca), pytest.raises(ClusterError, match="no --tls-cert is"):
        client_security("tls://127.0.0.1:1")
    with (
        tls_config(cert=certificates.client.cert),
        pytest.raises(ClusterError, match="no --tls-ca-file is"),
    ):
        client_security("tls://127.0.0.1:1")


def test_unreadable_files_are_named(certificates, tmp_path):
    client = certificates.client
    with (
        tls_config(tmp_path / "nope.pem", client.cert, client.key),
        pytest.raises(ClusterError, match="cannot read the CA file .*nope.pem.*No such file"),
    ):
        client_security("tls://127.0.0.1:1")
    with (
        tls_config(client.key, client.cert, client.key),  # a key is not a CA certificate
        pytest.raises(ClusterError, match="cannot read the CA file .*client.key"),
    ):
        client_security("tls://127.0.0.1:1")
    with (
        tls_config(certificates.ca, client.cert, certificates.stranger.key),
        pytest.raises(ClusterError, match="cannot load the client certificate .*KEY_VALUES"),
    ):
        client_security("tls://127.0.0.1:1")


def test_a_key_with_a_passphrase_is_refused_not_prompted_for(certificates, tmp_path):
    key = serialization.load_pem_private_key(certificates.client.key.read_bytes(), None)
    locked = tmp_path / "locked.key"
    locked.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"secret"),
        )
    )
    with (
        tls_config(certificates.ca, certificates.client.cert, locked),
        pytest.raises(ClusterError, match="is encrypted: give a key without a passphrase"),
    ):
        client_security("tls://127.0.0.1:1")


def test_good_credentials_pass(certificates):
    client = certificates.client
    with tls_config(certificates.ca, client.cert, client.key):
        security = client_security("tls://127.0.0.1:1")
    assert security.get_connection_args("client")["ssl_context"] is not None


def test_a_plain_address_where_dask_requires_encryption(certificates):
    client = certificates.client
    with (
        tls_config(certificates.ca, client.cert, client.key, require=True),
        pytest.raises(ClusterError, match="require encryption.*give the scheduler's tls://"),
    ):
        client_security("tcp://127.0.0.1:1")


def test_tls_failures_say_what_to_fix():
    address = "tls://h:1"
    verify = ssl.SSLCertVerificationError(1, "certificate verify failed")
    verify.verify_message = "self-signed certificate in certificate chain"
    untrusted = FatalCommClosedError("TLS certificate does not match")
    untrusted.__cause__ = verify
    assert "does not vouch for (self-signed certificate" in tls_failure(untrusted, address)

    alert = FatalCommClosedError(
        "in <TLS>: SSLError: [SSL: TLSV1_ALERT_UNKNOWN_CA] alert unknown ca"
    )
    assert "refused this client's certificate (TLS alert: unknown ca)" in tls_failure(
        alert, address
    )
    closed = OSError("closed")
    closed.__context__ = ssl.SSLEOFError(8, "EOF occurred in violation of protocol")
    assert "most likely it refused this client's certificate" in tls_failure(closed, address)
    assert tls_failure(TimeoutError(), address) is None
    assert tls_failure(ConnectionRefusedError(111, "refused"), address) is None


@pytest.mark.parametrize(
    ("address", "says"),
    [
        ("inproc://10.0.0.1/1/1", "inproc:// names a scheduler inside process 1"),
        ("inproc://x", "an inproc address is inproc://HOST/PID/N"),
        ("ucx://127.0.0.1:8786", "ucx:// needs distributed-ucxx"),
        ("foo://127.0.0.1:8786", "unknown protocol 'foo'"),
    ],
)
def test_protocols_no_job_reaches_from_here(address, says):
    with pytest.raises(ClusterError, match=says):
        check_client(address, 1)


@pytest.mark.usefixtures("no_dask_tls")
def test_a_ws_address_where_nothing_listens_is_refused_in_time():
    started = time.monotonic()
    with pytest.raises(ClusterError, match="no Dask scheduler answered at 'ws://"):
        check_client(f"ws://127.0.0.1:{free_port()}", 1)
    assert time.monotonic() - started < 5


@pytest.mark.parametrize(
    ("address", "says"),
    [
        ("tls://127.0.0.1:{port}", "is a TLS address, but no certificates are given"),
        ("wss://127.0.0.1:{port}", "is a TLS address, but no certificates are given"),
        ("ws://127.0.0.1:{port}", "no Dask scheduler answered at 'ws://"),
        ("foo://127.0.0.1:{port}", "unknown protocol 'foo'"),
    ],
)
def test_the_command_refuses_in_one_line_before_any_write(tmp_path, address, says):
    """Each was 'unexpected', exit 3 (tls:// without certificates, ws://) before."""
    import numpy as np  # noqa: PLC0415

    rng = np.random.default_rng(3)
    write_zarr(tmp_path / "a.zarr", random_matrix(rng, (23, 19), "float32"), (6, 5))
    write_zarr(tmp_path / "b.zarr", random_matrix(rng, (19, 17), "float32"), (5, 6))
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("DASK_")},
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        "OUTOFCORE_CONNECT_TIMEOUT": "1",
    }
    scheduler = address.format(port=free_port())
    done = subprocess.run(
        [sys.executable, "-m", "outofcore.cli", "matmul", "a.zarr", "b.zarr", "-o", "c.zarr",
         "--scheduler", scheduler],
        capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == BAD_INPUT, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("outofcore: error:"), done.stderr
    assert says in lines[0], lines[0]
    assert sorted(path.name for path in tmp_path.iterdir()) == ["a.zarr", "b.zarr"]


def test_plan_refuses_what_the_job_would_refuse(tmp_path, certificates):
    """``outofcore plan`` took the --tls-* flags and ignored them: it now refuses what the
    job refuses (missing or unreadable certificates), and with good ones asks the scheduler."""
    import numpy as np  # noqa: PLC0415

    rng = np.random.default_rng(5)
    write_zarr(tmp_path / "a.zarr", random_matrix(rng, (23, 19), "float32"), (6, 5))
    write_zarr(tmp_path / "b.zarr", random_matrix(rng, (19, 17), "float32"), (5, 6))
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("DASK_")},
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }
    plan = [sys.executable, "-m", "outofcore.cli", "plan", "a.zarr", "b.zarr", "--scheduler"]
    address = f"tls://127.0.0.1:{free_port()}"
    for extra, says in (
        ([], "is a TLS address, but no certificates are given"),
        (["--tls-ca-file", str(tmp_path / "none.pem"), "--tls-cert", "x"], "none.pem"),
        (["--tls-cert", "x.pem"], "--tls-cert is for a TLS scheduler"),
    ):
        target = address if extra[:1] != ["--tls-cert"] or len(extra) > 2 else "sync"
        done = subprocess.run(
            [*plan, target, *extra], capture_output=True, text=True, timeout=120, env=env,
            cwd=tmp_path,
        )  # fmt: skip
        assert done.returncode == BAD_INPUT, done.stderr
        assert says in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    # Good certificates pass every check; plan then asks the scheduler for its workers, as
    # the job would, and none listens there.
    done = subprocess.run(
        [*plan, address, *certificates.client.flags(certificates.ca)],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
        env={**env, "OUTOFCORE_CONNECT_TIMEOUT": "2"},
    )  # fmt: skip
    assert done.returncode == BAD_INPUT, done.stderr
    assert "no Dask scheduler answered at" in done.stderr and address in done.stderr
