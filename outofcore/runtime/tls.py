"""TLS to a scheduler the user runs: credentials from Dask's own settings, checked early.

A job that connects to a scheduler address uses ``distributed.security.Security()``,
which reads Dask's configuration (``distributed.comm.tls.ca-file``,
``distributed.comm.tls.client.cert``, ``distributed.comm.tls.client.key``,
``distributed.comm.require-encryption``; or the environment variables
``DASK_DISTRIBUTED__COMM__TLS__CA_FILE`` and so on).  The command's ``--tls-ca-file``,
``--tls-cert`` and ``--tls-key`` (as ``dask scheduler`` and ``dask worker`` spell them)
set those settings for the job (:func:`tls_settings`).  A ``distributed.Client`` made
with ``security=`` is used as it is.

Everything that can be known before connecting is checked here, so that each failure
is one line naming the file or setting to fix (:func:`client_security`); a handshake
that fails is explained by :func:`tls_failure`.
"""

from __future__ import annotations

import ssl
from typing import Any

from outofcore.errors import ClusterError

#: Address protocols whose connections are TLS: they need a CA and a client certificate.
TLS_PROTOCOLS = ("tls", "wss")
#: Dask's settings a job's TLS credentials come from, by the option that sets each.
TLS_SETTINGS = {
    "--tls-ca-file": "distributed.comm.tls.ca-file",
    "--tls-cert": "distributed.comm.tls.client.cert",
    "--tls-key": "distributed.comm.tls.client.key",
}
#: How messages name where the credentials come from.
GIVE_CREDENTIALS = (
    "--tls-ca-file CA.pem --tls-cert CLIENT.pem [--tls-key CLIENT.key] (Dask's settings "
    "distributed.comm.tls.ca-file, .client.cert, .client.key; or a distributed.Client made "
    "with security=)"
)
#: What servers answer in their TLS alert when they refuse the client's certificate.
_REFUSED_CERTIFICATE = (
    "unknown ca",
    "bad certificate",
    "certificate required",
    "certificate unknown",
    "unsupported certificate",
    "certificate expired",
    "certificate revoked",
    "access denied",
)


def protocol_of(address: str) -> str:
    """The protocol of a scheduler address (``"tcp"`` where it names none, as Dask reads it)."""
    scheme, sep, _ = address.partition("://")
    return scheme.lower() if sep else "tcp"


def tls_settings(
    address: str | None,
    ca_file: str | None = None,
    cert: str | None = None,
    key: str | None = None,
) -> dict[str, str]:
    """Dask settings for a job's TLS files given as options, checked against its address.

    Parameters
    ----------
    address
        The job's scheduler address (``None``: a LocalCluster of its own).
    ca_file, cert, key
        ``--tls-ca-file``, ``--tls-cert``, ``--tls-key``: paths to PEM files.

    Returns
    -------
    dict
        The settings to ``dask.config.set`` while the job runs (empty when none is given).

    Raises
    ------
    ClusterError
        For files given with no scheduler address, or with one that is not TLS
        (``tcp://``, ``ws://``: the files would go unused and the data unencrypted).
    """
    given = {
        option: value
        for option, value in zip(TLS_SETTINGS, (ca_file, cert, key), strict=True)
        if value is not None
    }
    if not given:
        return {}
    options = ", ".join(given)
    if address is None or address.lower() in ("sync", "synchronous"):
        raise ClusterError(
            f"{options} {'is' if len(given) == 1 else 'are'} for a TLS scheduler (--scheduler "
            "tls://HOST:PORT); a job's own cluster listens on this machine's loopback only and "
            "needs no certificates"
        )
    if protocol_of(address) not in TLS_PROTOCOLS:
        raise ClusterError(
            f"{options} given, but --scheduler {address!r} is not a TLS address: give "
            f"tls://{address.partition('://')[2] or address} (what `dask scheduler --tls-cert "
            "...` prints), or leave the certificates out"
        )
    return {TLS_SETTINGS[option]: value for option, value in given.items()}


def client_security(address: str) -> Any:
    """The ``distributed.security.Security`` a connection to ``address`` uses, checked.

    It is Dask's, from its configuration.  For a TLS address (``tls://``, ``wss://``)
    the CA file and the client certificate must be set and readable (a key that asks
    for a passphrase is refused, where OpenSSL would prompt on the terminal); a plain
    address is refused where the settings require encryption.

    Raises
    ------
    ClusterError
        Naming the missing setting, or the file that cannot be read and why.
    """
    from distributed.security import Security  # noqa: PLC0415

    try:
        security = Security()
    except (ValueError, TypeError) as exc:  # e.g. a TLS version Dask does not know
        raise ClusterError(f"Dask's TLS settings are not usable: {exc}") from None
    protocol = protocol_of(address)
    if protocol not in TLS_PROTOCOLS:
        if security.require_encryption and protocol != "inproc":
            raise ClusterError(
                f"--scheduler {address!r} is not encrypted, but Dask's settings require "
                "encryption (distributed.comm.require-encryption): give the scheduler's "
                "tls:// address"
            )
        return security
    tls = security.get_tls_config_for_role("client")
    missing = [
        option
        for option, value in (("--tls-ca-file", tls["ca_file"]), ("--tls-cert", tls["cert"]))
        if not value
    ]
    if missing:
        what = "no certificates are" if len(missing) == 2 else f"no {missing[0]} is"
        raise ClusterError(
            f"--scheduler {address!r} is a TLS address, but {what} given: {GIVE_CREDENTIALS}"
        )
    _check_files(tls["ca_file"], tls["cert"], tls["key"])
    return security


def _check_files(ca_file: str, cert: str, key: str | None) -> None:
    """Load the CA, certificate and key as Dask will, naming the one that fails."""
    in_memory = "\n" in ca_file  # Security.temporary() holds PEM text, not paths
    try:
        if in_memory:
            context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cadata=ca_file)
        else:
            context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=ca_file)
    except (OSError, ValueError) as exc:
        raise ClusterError(
            f"cannot read the CA file {ca_file!r} (--tls-ca-file): {_reason(exc)}"
        ) from None
    if "\n" in cert or (key is not None and "\n" in key):
        return  # in memory: Dask writes them to files of its own
    named = f"certificate {cert!r} (--tls-cert)" + (f" with key {key!r} (--tls-key)" if key else "")

    def no_passphrase() -> bytes:
        raise ClusterError(
            f"the key of the client {named} is encrypted: give a key without a passphrase"
        )

    try:
        context.load_cert_chain(cert, key, password=no_passphrase)
    except ClusterError:
        raise
    except (OSError, ValueError) as exc:
        raise ClusterError(f"cannot load the client {named}: {_reason(exc)}") from None


def _reason(exc: BaseException) -> str:
    """An OS or OpenSSL error, short: ``No such file or directory``, ``KEY_VALUES_MISMATCH``."""
    if isinstance(exc, ssl.SSLError) and exc.reason:
        return f"{exc.reason} ({(exc.library or 'SSL').lower()})"
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return " ".join(str(exc).split())[:160] or type(exc).__name__


def tls_failure(exc: BaseException, address: str) -> str | None:
    """What a failed TLS connection to ``address`` says, in one sentence with the fix;
    ``None`` where ``exc`` is no TLS failure."""
    chain = []
    seen: BaseException | None = exc
    while seen is not None and seen not in chain:
        chain.append(seen)
        seen = seen.__cause__ or seen.__context__
    if any(isinstance(error, ssl.SSLCertVerificationError) for error in chain):
        verify = next(e for e in chain if isinstance(e, ssl.SSLCertVerificationError))
        detail = getattr(verify, "verify_message", None) or _reason(verify)
        return (
            f"the scheduler at {address!r} presented a certificate the given CA does not "
            f"vouch for ({detail}): give the CA that signed the cluster's certificates "
            "(--tls-ca-file)"
        )
    text = " ".join(str(error) for error in chain).lower()
    alerts = _REFUSED_CERTIFICATE if "ssl" in text else ()  # OpenSSL's alerts only
    for alert in alerts:
        if alert in text:
            return (
                f"the scheduler at {address!r} refused this client's certificate (TLS alert: "
                f"{alert}): give a certificate signed by the cluster's CA (--tls-cert, --tls-key)"
            )
    ssl_errors = [error for error in chain if isinstance(error, ssl.SSLError)]
    if any(isinstance(error, ssl.SSLEOFError) for error in ssl_errors):
        # TLS 1.3: the client's side of the handshake is over before the server checks
        # the client's certificate; a server that refuses it may just close the stream.
        return (
            f"the scheduler at {address!r} closed the connection during the TLS handshake: "
            "most likely it refused this client's certificate; give one signed by the "
            "cluster's CA (--tls-cert, --tls-key)"
        )
    if ssl_errors:
        return (
            f"the TLS handshake with {address!r} failed ({_reason(ssl_errors[0])}); is it a "
            "TLS scheduler (`dask scheduler --tls-cert ...`), and are the certificates its?"
        )
    return None
