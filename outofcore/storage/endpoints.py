"""Whether the endpoint of an ``s3://`` URL speaks S3: asked once, when opening it failed.

A plain web server given as ``endpoint_url`` answers every request, 404 or an HTML
page, and zarr reads its 404s as "no array here": the user was told the bucket or
the array is missing.  :func:`not_s3` asks the endpoint one unsigned question any S3
API answers in its own way (``GET /<bucket>?list-type=2&max-keys=0``: an XML listing
or an XML error, with ``x-amz-*`` headers) and says so when the answer is something
else.  AWS itself (no endpoint given) is not asked.
"""

from __future__ import annotations

import os
import urllib.error
import urllib.request
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote, urlsplit

from outofcore.storage.deadlines import Deadlines
from outofcore.storage.locations import Location

#: What marks an S3 API's answer: its XML documents, or its own headers.
S3_BODIES = (b"<Error", b"<ListBucketResult", b"<ListAllMyBucketsResult")
#: Bytes of an answer read to look for :data:`S3_BODIES`.
BODY_BYTES = 4096


def endpoint_of(options: Mapping[str, Any] | None) -> str | None:
    """The S3 endpoint that s3fs would use with the fsspec ``options``: the option
    ``endpoint_url`` (or ``client_kwargs.endpoint_url``), else ``$AWS_ENDPOINT_URL_S3`` or
    ``$AWS_ENDPOINT_URL``; None for AWS itself."""
    options = dict(options or {})
    client = options.get("client_kwargs")
    client = client if isinstance(client, Mapping) else {}
    for value in (
        options.get("endpoint_url"),
        client.get("endpoint_url"),
        os.environ.get("AWS_ENDPOINT_URL_S3"),
        os.environ.get("AWS_ENDPOINT_URL"),
    ):
        if isinstance(value, str) and value.startswith(("http://", "https://")):
            return value.rstrip("/")
    return None


def not_s3(url: str, location: Location) -> str | None:
    """Why the endpoint of the ``s3://`` URL ``url`` (at ``location``, whose options name
    the endpoint) is not an S3 API, or None when it is one, is AWS, or does not answer
    (then the store's own error says more)."""
    endpoint = endpoint_of(location.options)
    if endpoint is None or not url.startswith(("s3://", "s3a://")):
        return None
    bucket = url.split("://", 1)[1].split("/", 1)[0]
    probe = f"{endpoint}/{quote(bucket)}?list-type=2&max-keys=0"
    limits = Deadlines.from_config()
    try:
        with urllib.request.urlopen(probe, timeout=limits.connect + limits.read) as reply:
            status, headers, body = reply.status, reply.headers, reply.read(BODY_BYTES)
    except urllib.error.HTTPError as refused:
        status, headers, body = refused.code, refused.headers, refused.read(BODY_BYTES)
    except (OSError, ValueError):  # no answer, or not HTTP at all: the store's error says it
        return None
    if any(name.lower().startswith(("x-amz", "x-goog", "x-minio")) for name in headers):
        return None
    if any(mark in body for mark in S3_BODIES):
        return None
    what = ", ".join(
        part
        for part in (
            f"HTTP {status}",
            headers.get("Server") and f"server {headers.get('Server')!r}",
            headers.get("Content-Type") and f"{headers.get('Content-Type')}",
        )
        if part
    )
    host = urlsplit(endpoint).netloc or endpoint
    return (
        f"{url}: the endpoint {endpoint} answered, but not as S3 ({what}, no S3 document or "
        f"x-amz header, to GET /{bucket}?list-type=2): is endpoint_url the address of an "
        f"S3 API, and {host} the right host and port?"
    )
