"""obstore stores behind zarr stores: atomic conditional writes and listings with versions.

:func:`handle_of` gives the obstore store that reaches the same objects as a
zarr store, with the key prefix of the zarr store's root inside it, or None:

* zarr's ``ObjectStore``: the obstore store it wraps (``S3Store``,
  ``GCSStore``, ``AzureStore``, a local or memory store), as it is;
* an fsspec ``s3://`` store (s3fs): an ``S3Store`` of its bucket, made once per
  filesystem and bucket in each process from what s3fs itself uses: the
  endpoint and region its client resolved (options, ``AWS_*`` variables,
  ``~/.aws/config``), the credentials given as options or else botocore's
  chain (environment, profile, instance role, refreshed as they expire),
  ``anon``, ``requester_pays`` and the server-side encryption of
  ``s3_additional_kwargs``; with the deadlines of :mod:`outofcore.storage.deadlines` (or the
  timeouts and attempts of the filesystem's ``config_kwargs``).

obstore is in the ``s3`` extra; where it is not installed, None.  What these
handles do is in :mod:`outofcore.storage.stores` (conditional writes) and
:mod:`outofcore.storage.fingerprint` (listings), always through obstore's synchronous
functions (:func:`call`).
"""

from __future__ import annotations

import asyncio
import datetime
import functools
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import urlparse

from zarr.abc.store import Store
from zarr.storage import FsspecStore, ObjectStore

from outofcore.storage import deadlines

#: fsspec protocols whose stores get an obstore ``S3Store``.
S3_PROTOCOLS = frozenset({"s3", "s3a"})
#: obstore's stores without compare-and-swap puts (``PutMode::Update``).
NO_COMPARE_AND_SWAP = frozenset({"LocalStore", "HTTPStore"})
#: obstore's stores that are not remote.
LOCAL_KINDS = frozenset({"LocalStore", "MemoryStore"})
#: How long obstore keeps credentials from botocore's chain before asking again
#: (botocore refreshes expiring ones when asked).
CREDENTIALS_TTL = datetime.timedelta(minutes=5)

_T = TypeVar("_T")

_made: weakref.WeakKeyDictionary[Any, dict[str, Any]] = weakref.WeakKeyDictionary()
_making = threading.Lock()


@dataclass(frozen=True)
class Handle:
    """An obstore store and the prefix of a zarr store's root inside it."""

    #: The obstore store (``obstore.store.S3Store``, ``GCSStore``, ``AzureStore``, ...).
    store: Any
    #: Prefix of the zarr store's keys inside ``store`` ("" or ending without a slash).
    prefix: str

    def path(self, key: str) -> str:
        """The obstore path of the zarr store's ``key``."""
        return "/".join(part for part in (self.prefix, key.strip("/")) if part)

    def key(self, path: str) -> str:
        """The zarr store's key of the obstore ``path`` (inverse of :meth:`path`)."""
        return path[len(self.prefix) :].lstrip("/") if self.prefix else path

    @property
    def kind(self) -> str:
        """The obstore store's class name, for messages (``S3Store``)."""
        return type(self.store).__name__

    @property
    def compare_and_swap(self) -> bool:
        """Whether ``put(mode={"e_tag": ...})`` works here (not on obstore's ``LocalStore``
        or ``HTTPStore``, which raise ``NotImplementedError``)."""
        return self.kind not in NO_COMPARE_AND_SWAP


async def call(function: Callable[..., _T], /, *args: Any, **kwargs: Any) -> _T:
    """Run a synchronous obstore call in a Python thread and await its result.

    Never obstore's ``*_async`` functions: they complete their asyncio futures from
    tokio's own threads (``loop.call_soon_threadsafe``), and a tokio thread still inside
    that call when the interpreter exits takes the GIL during finalization and aborts
    the process (SIGABRT on Python 3.11 to 3.13, after the job's outcome was printed).
    A synchronous call blocks the Python thread that made it, so no Rust thread ever
    enters Python; the thread is joined before the interpreter exits.
    """
    return await asyncio.to_thread(function, *args, **kwargs)


@functools.cache
def installed() -> bool:
    """Whether obstore can be imported here."""
    try:
        import obstore  # noqa: F401, PLC0415 (the s3 extra)
    except ImportError:
        return False
    return True


def protocols(store: FsspecStore) -> set[str]:
    """The protocols of an fsspec store's filesystem (``{"s3", "s3a"}``)."""
    protocol = store.fs.protocol
    return {protocol} if isinstance(protocol, str) else set(protocol)


def is_s3(store: Store) -> bool:
    """Whether ``store`` is an fsspec store on S3 (s3fs)."""
    return isinstance(store, FsspecStore) and bool(protocols(store) & S3_PROTOCOLS)


def is_remote(store: Store) -> bool:
    """Whether ``store`` is a zarr ``ObjectStore`` on a remote obstore store (not its
    ``LocalStore`` or ``MemoryStore``)."""
    return isinstance(store, ObjectStore) and type(store.store).__name__ not in LOCAL_KINDS


async def handle_of(store: Store) -> Handle | None:
    """The obstore store behind ``store`` (see the module docstring), or None."""
    if isinstance(store, ObjectStore):
        return Handle(store.store, "")
    if not (is_s3(store) and installed()):
        return None
    bucket, _, prefix = store.path.strip("/").partition("/")
    with _making:
        made = _made.setdefault(store.fs, {}).get(bucket)
    if made is None:
        made = await _s3_store(store.fs, bucket)
        with _making:
            made = _made[store.fs].setdefault(bucket, made)
    return Handle(made, prefix.strip("/"))


async def _s3_store(fs: Any, bucket: str) -> Any:
    """An obstore ``S3Store`` of ``bucket`` reaching what the s3fs filesystem ``fs`` reaches."""
    from obstore.store import S3Store  # noqa: PLC0415 (the s3 extra)

    client = await fs.set_session()
    endpoint = client.meta.endpoint_url or ""
    config: dict[str, Any] = {"region": client.meta.region_name, "conditional_put": "etag"}
    if _is_aws(endpoint):
        config["region"] = await _bucket_region(client, bucket, config["region"])
    else:
        config["endpoint"] = endpoint
    if fs.requester_pays:
        config["request_payer"] = True
    extra = fs.s3_additional_kwargs
    if extra.get("ServerSideEncryption"):
        config["server_side_encryption"] = extra["ServerSideEncryption"]
    if extra.get("SSEKMSKeyId"):
        config["sse_kms_key_id"] = extra["SSEKMSKeyId"]
    provider = None
    key = fs.key or fs.client_kwargs.get("aws_access_key_id")
    secret = fs.secret or fs.client_kwargs.get("aws_secret_access_key")
    if fs.anon:
        config["skip_signature"] = True
    elif key and secret:
        config["access_key_id"], config["secret_access_key"] = key, secret
        token = fs.token or fs.client_kwargs.get("aws_session_token")
        if token:
            config["session_token"] = token
    else:
        provider = _botocore_credentials(fs.kwargs.get("profile"))
    limits = deadlines.obstore_options(fs.config_kwargs)  # the same deadlines as s3fs's
    options = limits["client_options"]
    if endpoint.startswith("http://"):
        options["allow_http"] = True
    return S3Store(
        bucket,
        config=config,
        client_options=options,
        retry_config=limits["retry_config"],
        credential_provider=provider,
    )


def _is_aws(endpoint: str) -> bool:
    host = urlparse(endpoint).hostname or ""
    return not endpoint or host.endswith((".amazonaws.com", ".amazonaws.com.cn"))


async def _bucket_region(client: Any, bucket: str, default: str | None) -> str | None:
    """The region of an AWS bucket (s3fs finds it itself; obstore must be told)."""
    try:
        response = await client.head_bucket(Bucket=bucket)
    except Exception as exc:  # noqa: BLE001 (a redirect or refusal still names the region)
        response = getattr(exc, "response", {})
    headers = response.get("ResponseMetadata", {}).get("HTTPHeaders", {})
    return headers.get("x-amz-bucket-region") or default


class _BotocoreCredentials:
    """Credentials from botocore's chain, as obstore's ``credential_provider`` asks."""

    def __init__(self, credentials: Any) -> None:
        self.credentials = credentials

    def __call__(self) -> dict[str, Any]:
        frozen = self.credentials.get_frozen_credentials()
        return {
            "access_key_id": frozen.access_key,
            "secret_access_key": frozen.secret_key,
            "token": frozen.token,
            "expires_at": datetime.datetime.now(datetime.UTC) + CREDENTIALS_TTL,
        }


def _botocore_credentials(profile: str | None) -> _BotocoreCredentials | None:
    """botocore's credentials for ``profile`` (None: obstore reads ``AWS_*`` itself)."""
    import botocore.session  # noqa: PLC0415 (s3fs's dependency)

    credentials = botocore.session.Session(profile=profile).get_credentials()
    return None if credentials is None else _BotocoreCredentials(credentials)
