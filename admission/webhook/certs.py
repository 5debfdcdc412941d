"""Serving certificates for the webhook: a private CA and a certificate for the Service's names.

The API server calls webhooks over HTTPS and checks the certificate against the
configuration's ``caBundle``. ``issue`` makes a CA and a serving certificate (ECDSA P-256)
for the given DNS names and IP addresses and writes ``ca.crt``, ``tls.crt`` and ``tls.key``
into a folder; ``load`` reads them back and says when they expire, so a caller can renew
them well before (``needs_renewal``).
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import ssl
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALIDITY = dt.timedelta(days=365)
RENEW_BEFORE = dt.timedelta(days=30)


@dataclass(frozen=True, slots=True)
class ServingCert:
    ca_pem: bytes
    cert_path: Path
    key_path: Path
    not_after: dt.datetime

    def server_context(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.load_cert_chain(self.cert_path, self.key_path)
        return ctx

    def needs_renewal(self, now: dt.datetime | None = None) -> bool:
        return (now or dt.datetime.now(dt.UTC)) >= self.not_after - RENEW_BEFORE


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _san(names: Sequence[str]) -> x509.SubjectAlternativeName:
    entries: list[x509.GeneralName] = []
    for name in names:
        try:
            entries.append(x509.IPAddress(ipaddress.ip_address(name)))
        except ValueError:
            entries.append(x509.DNSName(name))
    return x509.SubjectAlternativeName(entries)


def issue(folder: Path, names: Sequence[str], *, validity: dt.timedelta = VALIDITY) -> ServingCert:
    """A new CA and serving certificate for ``names`` (DNS names or IP addresses), written to ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    now = dt.datetime.now(dt.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (
        x509.CertificateBuilder()
        .subject_name(_name("turnstile-webhook-ca"))
        .issuer_name(_name("turnstile-webhook-ca"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + validity + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(names[0]))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + validity)
        .add_extension(_san(names), critical=False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    ca_pem = ca.public_bytes(serialization.Encoding.PEM)
    (folder / "ca.crt").write_bytes(ca_pem)
    cert_path, key_path = folder / "tls.crt", folder / "tls.key"
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    key_path.chmod(0o600)
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return ServingCert(ca_pem, cert_path, key_path, cert.not_valid_after_utc)


def load(folder: Path) -> ServingCert | None:
    """The certificate kept in ``folder``, or None if there is none (or it cannot be read)."""
    try:
        cert = x509.load_pem_x509_certificate((folder / "tls.crt").read_bytes())
        ca_pem = (folder / "ca.crt").read_bytes()
    except (OSError, ValueError):
        return None
    return ServingCert(ca_pem, folder / "tls.crt", folder / "tls.key", cert.not_valid_after_utc)


def ensure(folder: Path, names: Sequence[str]) -> ServingCert:
    """The certificate in ``folder`` if it covers ``names`` and is not due for renewal; else a new one."""
    current = load(folder)
    if current is not None and not current.needs_renewal():
        cert = x509.load_pem_x509_certificate(current.cert_path.read_bytes())
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        if san == _san(names):
            return current
    return issue(folder, names)
