"""Serving certificates for the webhook: a private CA and a certificate for the Service's names.

The API server calls webhooks over HTTPS and checks the certificate against the
configuration's ``caBundle``. A ``Bundle`` is the four PEM blobs Turnstile keeps: the CA
(certificate and key, ten years) and the serving certificate it signs (ECDSA P-256, one
year, renewed 30 days before it ends). Renewing the serving certificate keeps the CA, so the
``caBundle`` the API server trusts does not change; a new CA (years later) is published
together with the old one until the old one ends, so no call fails while replicas switch.

Bundles live in a folder (``ca.crt``, ``tls.crt``, ``tls.key``; the layout cert-manager and
``kubernetes.io/tls`` Secrets use, plus ``ca.key`` when Turnstile issued them) or in a Secret
(``admission.webhook.keeper``).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import ipaddress
import os
import secrets
import ssl
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALIDITY = dt.timedelta(days=365)
CA_VALIDITY = dt.timedelta(days=3650)
RENEW_BEFORE = dt.timedelta(days=30)
CA_RENEW_BEFORE = dt.timedelta(days=365)
FILES = {"ca_crt": "ca.crt", "ca_key": "ca.key", "tls_crt": "tls.crt", "tls_key": "tls.key"}


@dataclass(frozen=True, slots=True)
class Bundle:
    """PEM blobs: ``ca_crt`` may hold several CAs (newest first) while one is replaced;
    ``ca_key`` is empty when someone else (cert-manager) issues the certificates."""

    ca_crt: bytes
    ca_key: bytes
    tls_crt: bytes
    tls_key: bytes

    @property
    def not_after(self) -> dt.datetime:
        return x509.load_pem_x509_certificate(self.tls_crt).not_valid_after_utc

    def ca_not_after(self) -> dt.datetime:
        return x509.load_pem_x509_certificates(self.ca_crt)[0].not_valid_after_utc

    def covers(self, names: Sequence[str]) -> bool:
        cert = x509.load_pem_x509_certificate(self.tls_crt)
        try:
            san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        except x509.ExtensionNotFound:
            return False
        return san == _san(names)

    def needs_renewal(self, now: dt.datetime | None = None) -> bool:
        return (now or dt.datetime.now(dt.UTC)) >= self.not_after - RENEW_BEFORE

    def server_context(self, folder: Path) -> ssl.SSLContext:
        """A TLS server context serving this bundle (from its files in ``folder``)."""
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.load_cert_chain(folder / FILES["tls_crt"], folder / FILES["tls_key"])
        return ctx


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


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def new_ca(now: dt.datetime | None = None, validity: dt.timedelta = CA_VALIDITY) -> tuple[bytes, bytes]:
    """A new CA: (certificate PEM, key PEM)."""
    now = now or dt.datetime.now(dt.UTC)
    key = ec.generate_private_key(ec.SECP256R1())
    # A name of its own (and a key identifier): replicas that each issued a CA publish them side by
    # side, and a verifier must find the one that signed the certificate it is shown.
    name = _name(f"turnstile-webhook-ca-{secrets.token_hex(4)}")
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + validity)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.PEM), _pem_key(key)


def sign(
    ca_crt: bytes, ca_key: bytes, names: Sequence[str], *, validity: dt.timedelta = VALIDITY, client: bool = False
) -> tuple[bytes, bytes]:
    """A serving certificate for ``names`` (DNS names or IP addresses) signed by the first CA in
    ``ca_crt``: (certificate PEM, key PEM). ``client``: a client certificate instead, whose
    common name is ``names[0]`` (as the API server's front-proxy client, ``front-proxy-client``)."""
    now = dt.datetime.now(dt.UTC)
    ca = x509.load_pem_x509_certificates(ca_crt)[0]
    signer = serialization.load_pem_private_key(ca_key, password=None)
    assert isinstance(signer, ec.EllipticCurvePrivateKey)
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(names[0]))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(min(now + validity, ca.not_valid_after_utc))
        .add_extension(_san(names), critical=False)
        .add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH if client else ExtendedKeyUsageOID.SERVER_AUTH]),
            critical=False,
        )
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(signer.public_key()), critical=False)
        .sign(signer, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.PEM), _pem_key(key)


def renewed(current: Bundle | None, names: Sequence[str], *, validity: dt.timedelta = VALIDITY) -> Bundle | None:
    """What to keep instead of ``current``, or None when it is fine as it is.

    A missing bundle gets a new CA; a serving certificate that ends within 30 days or does not
    cover ``names`` is signed again by the same CA; a CA within a year of its end is replaced,
    and the old one stays in ``ca_crt`` behind the new one until it ends."""
    now = dt.datetime.now(dt.UTC)
    if current is None or not current.ca_key:
        ca_crt, ca_key = new_ca(now)
        return Bundle(ca_crt, ca_key, *sign(ca_crt, ca_key, names, validity=validity))
    ca_crt, ca_key = current.ca_crt, current.ca_key
    if now >= current.ca_not_after() - CA_RENEW_BEFORE:
        fresh_crt, ca_key = new_ca(now)
        still_valid = [
            c.public_bytes(serialization.Encoding.PEM)
            for c in x509.load_pem_x509_certificates(current.ca_crt)
            if c.not_valid_after_utc > now
        ]
        ca_crt = fresh_crt + b"".join(still_valid)
    elif current.covers(names) and not current.needs_renewal(now):
        return None
    return Bundle(ca_crt, ca_key, *sign(ca_crt, ca_key, names, validity=validity))


def write(folder: Path, bundle: Bundle) -> None:
    """Put ``bundle`` into ``folder``, each file replaced atomically (a reader never sees half)."""
    folder.mkdir(parents=True, exist_ok=True)
    for field, filename in FILES.items():
        data: bytes = getattr(bundle, field)
        if field == "ca_key" and not data:
            continue
        tmp = folder / f".{filename}.tmp"
        mode = 0o600 if filename.endswith(".key") else 0o644  # a key is never readable by others, not even briefly
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        os.replace(tmp, folder / filename)


def read(folder: Path) -> Bundle | None:
    """The bundle kept in ``folder``, or None if there is none (or it cannot be read)."""
    try:
        tls_crt = (folder / FILES["tls_crt"]).read_bytes()
        bundle = Bundle(
            (folder / FILES["ca_crt"]).read_bytes(),
            (folder / FILES["ca_key"]).read_bytes() if (folder / FILES["ca_key"]).exists() else b"",
            tls_crt,
            (folder / FILES["tls_key"]).read_bytes(),
        )
        bundle.not_after  # noqa: B018 - parses the certificate: unreadable files are no bundle
    except (OSError, ValueError):
        return None
    return bundle


def issue(folder: Path, names: Sequence[str], *, validity: dt.timedelta = VALIDITY) -> Bundle:
    """A new CA and serving certificate for ``names``, written to ``folder``."""
    bundle = renewed(None, names, validity=validity)
    assert bundle is not None
    write(folder, bundle)
    return bundle


def ensure(folder: Path, names: Sequence[str]) -> Bundle:
    """The bundle in ``folder``, renewed first if it is due (see ``renewed``); a folder Turnstile
    did not issue (no ``ca.key``, as cert-manager's) is used as it is: its issuer renews it."""
    current = read(folder)
    if current is not None and not current.ca_key:
        return current
    fresh = renewed(current, names)
    if fresh is None:
        assert current is not None
        return current
    write(folder, fresh)
    return fresh
