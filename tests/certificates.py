"""Certificates made in the test: a cluster CA, its scheduler, worker and client
certificates, and a stranger signed by another CA (``cryptography``, in the test extra).

The files are named as scripts/make-certificates names them and docker-compose.tls.yml
reads them: ``ca.pem``, ``scheduler.pem`` and ``scheduler.key``, and so on.

EC P-256 keys (made in milliseconds, unlike RSA), valid for a day, with loopback's
address and name as subject alternative names.  Dask checks the chain against its CA
and, like ``Security``, not the host name.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True)
class Credentials:
    """A certificate and its key, as PEM files."""

    cert: Path
    key: Path

    def flags(self, ca: Path) -> list[str]:
        """``--tls-ca-file CA --tls-cert CERT --tls-key KEY``, as Dask's and outofcore's
        commands spell them."""
        return ["--tls-ca-file", str(ca), "--tls-cert", str(self.cert), "--tls-key", str(self.key)]


@dataclass(frozen=True)
class Certificates:
    """Everything :func:`make_certificates` wrote."""

    ca: Path
    other_ca: Path
    scheduler: Credentials
    worker: Credentials
    client: Credentials
    stranger: Credentials  # signed by other_ca


def make_certificates(folder: Path) -> Certificates:
    """Write a CA, scheduler, worker and client certificates it signs, and a stranger
    signed by another CA, into ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    ca_key, ca_cert, ca = _authority(folder, "ca")
    other_key, other_cert, other_ca = _authority(folder, "other-ca")
    made = {
        name: _leaf(folder, name, ca_key, ca_cert) for name in ("scheduler", "worker", "client")
    }
    stranger = _leaf(folder, "stranger", other_key, other_cert)
    return Certificates(ca=ca, other_ca=other_ca, stranger=stranger, **made)


_NOW = datetime.datetime.now(datetime.UTC)


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


def _builder(subject: str, issuer: x509.Name, key: ec.EllipticCurvePrivateKey):
    return (
        x509.CertificateBuilder()
        .subject_name(_name(subject))
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(_NOW - datetime.timedelta(minutes=5))
        .not_valid_after(_NOW + datetime.timedelta(days=1))
    )


def _authority(
    folder: Path, name: str
) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    usage = x509.KeyUsage(
        digital_signature=True,
        key_cert_sign=True,
        crl_sign=True,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        encipher_only=False,
        decipher_only=False,
    )
    cert = (
        _builder(name, _name(name), key)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(usage, critical=True)
        .sign(key, hashes.SHA256())
    )
    path = folder / f"{name}.pem"
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return key, cert, path


def _leaf(
    folder: Path, name: str, ca_key: ec.EllipticCurvePrivateKey, ca_cert: x509.Certificate
) -> Credentials:
    key = ec.generate_private_key(ec.SECP256R1())
    names = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
    purposes = [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
    cert = (
        _builder(name, ca_cert.subject, key)
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.ExtendedKeyUsage(purposes), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    credentials = Credentials(cert=folder / f"{name}.pem", key=folder / f"{name}.key")
    credentials.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    credentials.key.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    credentials.key.chmod(0o600)
    return credentials
