"""The fault proxy of the object-store tests (tests/faultproxy.py) does what it says, on a
real S3 API server (moto) through a real client (s3fs)."""

from __future__ import annotations

import time
import urllib.request

import pytest

from tests.faultproxy import Fault, FaultProxy

s3fs = pytest.importorskip("s3fs", reason="s3fs (the s3 extra) is not installed")


@pytest.fixture
def proxied(moto_server, s3_bucket):
    """An s3fs filesystem that reaches the moto server through a fault proxy; the bucket."""
    with FaultProxy(moto_server.endpoint) as proxy:
        options = {k: v for k, v in moto_server.options.items() if k != "endpoint_url"}
        options["client_kwargs"] = {"endpoint_url": proxy.endpoint}
        fs = s3fs.S3FileSystem(**options, skip_instance_cache=True)
        yield proxy, fs, s3_bucket.removeprefix("s3://")


def test_requests_are_forwarded_and_logged(proxied):
    proxy, fs, bucket = proxied
    data = bytes(range(256)) * 37
    fs.pipe(f"{bucket}/x", data)
    assert fs.cat(f"{bucket}/x") == data
    assert ("PUT", f"/{bucket}/x", "forward") in proxy.log
    assert proxy.requests("GET", r"/x$")


def test_statuses_and_lost_replies(proxied):
    proxy, fs, bucket = proxied
    fs.pipe(f"{bucket}/x", b"first")
    proxy.add(Fault("status", method="GET", key=r"/x$", status=503, times=2))
    assert fs.cat(f"{bucket}/x") == b"first"  # s3fs retries the 503s
    assert [kind for m, p, kind in proxy.log if m == "GET"][-3:] == ["status", "status", "forward"]
    proxy.add(Fault("lost", method="PUT", key=r"/y$"))
    fs.pipe(f"{bucket}/y", b"second")  # the reply was lost, the client sent it again
    assert [kind for m, p, kind in proxy.log if m == "PUT" and p.endswith("/y")] == [
        "lost",
        "forward",
    ]
    proxy.add(Fault("after", method="DELETE", key=r"/y$", status=500, times=None))
    with pytest.raises(OSError):
        fs.rm_file(f"{bucket}/y")
    proxy.clear()
    assert not fs.exists(f"{bucket}/y")  # the server acted on every one of them


def test_damaged_bodies_and_hangs(proxied):
    proxy, fs, bucket = proxied
    fs.pipe(f"{bucket}/x", b"0123456789" * 100)
    proxy.add(Fault("flip", method="GET", key=r"/x$", times=None))
    with pytest.raises(Exception, match="checksum"):  # botocore checks the body's checksum
        fs.cat(f"{bucket}/x")
    proxy.clear()
    proxy.add(Fault("hang", method="GET", key=r"/x$"))
    started = time.monotonic()
    with pytest.raises(TimeoutError):  # accepted, never answered
        urllib.request.urlopen(f"{proxy.endpoint}/{bucket}/x", timeout=1)
    assert time.monotonic() - started < 10
    assert "hang" in [kind for *_, kind in proxy.log]


def test_an_unknown_fault_kind_is_refused():
    with pytest.raises(ValueError, match="fault kind 'explode'"):
        Fault("explode")
