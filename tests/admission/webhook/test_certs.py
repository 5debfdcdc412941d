"""The webhook certificate: issued once, shared by replicas through a Secret, renewed with the
same CA, a new CA published beside the old one, and reloaded by a serving replica in place."""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import pytest_asyncio
from aiohttp import web
from cryptography import x509

from admission.kube import client as kube_client
from admission.kube.client import Kube
from admission.sim.host import SimHost
from admission.webhook import certs
from admission.webhook.keeper import SECRETS, FolderKeeper, SecretKeeper, Serving

NAMES = ["turnstile-webhook.turnstile-system.svc", "127.0.0.1"]


def _serial(pem: bytes) -> int:
    return x509.load_pem_x509_certificate(pem).serial_number


def _cas(bundle: certs.Bundle) -> list[int]:
    return [c.serial_number for c in x509.load_pem_x509_certificates(bundle.ca_crt)]


def test_renewal_keeps_the_ca_and_a_new_ca_is_published_beside_the_old() -> None:
    first = certs.renewed(None, NAMES)
    assert first is not None and first.covers(NAMES) and first.ca_key
    assert certs.renewed(first, NAMES) is None  # fresh and covering: kept as it is
    # A serving certificate due for renewal is signed again by the same CA.
    ca_crt, ca_key = first.ca_crt, first.ca_key
    due = certs.Bundle(ca_crt, ca_key, *certs.sign(ca_crt, ca_key, NAMES, validity=dt.timedelta(days=10)))
    assert due.needs_renewal()
    renewed = certs.renewed(due, NAMES)
    assert renewed is not None and not renewed.needs_renewal() and renewed.ca_crt == ca_crt
    # Other names (the Service was renamed): signed again, same CA.
    moved = certs.renewed(first, ["other.turnstile-system.svc"])
    assert moved is not None and moved.covers(["other.turnstile-system.svc"]) and moved.ca_crt == ca_crt
    # A CA near its end: a new one signs, and the old one stays trusted until it ends.
    old_crt, old_key = certs.new_ca(validity=dt.timedelta(days=100))
    ageing = certs.Bundle(old_crt, old_key, *certs.sign(old_crt, old_key, NAMES))
    replaced = certs.renewed(ageing, NAMES)
    assert replaced is not None and len(_cas(replaced)) == 2 and _cas(replaced)[1] == _serial(old_crt)
    issuer = x509.load_pem_x509_certificate(replaced.tls_crt).issuer
    assert issuer == x509.load_pem_x509_certificates(replaced.ca_crt)[0].subject


def test_a_folder_without_ca_key_is_used_as_its_issuer_left_it(tmp_path: Path) -> None:
    issued = certs.renewed(None, NAMES)
    assert issued is not None
    managed = certs.Bundle(issued.ca_crt, b"", issued.tls_crt, issued.tls_key)  # as cert-manager mounts it
    certs.write(tmp_path, managed)
    assert not (tmp_path / "ca.key").exists()
    assert certs.ensure(tmp_path, ["some-other-name"]) == managed  # never re-issued over cert-manager's files


@pytest_asyncio.fixture
async def kube(tmp_path: Path) -> AsyncIterator[Kube]:
    host = await SimHost.start(tmp_path / "kubeconfig")
    client = Kube(await kube_client.connect(host.kubeconfig))
    await client.create(kube_client.NAMESPACES, None, {"metadata": {"name": "turnstile-system"}})
    try:
        yield client
    finally:
        await client.close()
        await host.stop()


async def test_replicas_starting_together_share_one_secret_and_renew_it_once(kube: Kube) -> None:
    replicas = [SecretKeeper(kube, "turnstile-system", "turnstile-webhook-tls", NAMES) for _ in range(4)]
    bundles = await asyncio.gather(*(r.obtain() for r in replicas))
    assert all(b == bundles[0] for b in bundles), "every replica serves the one certificate that won"
    secret = await kube.get(SECRETS, "turnstile-system", "turnstile-webhook-tls")
    assert set(secret["data"]) == {"ca.crt", "ca.key", "tls.crt", "tls.key"}
    # The serving certificate comes due: the replicas renew it at once; one write wins, all serve it.
    ca_crt, ca_key = bundles[0].ca_crt, bundles[0].ca_key
    due = certs.Bundle(ca_crt, ca_key, *certs.sign(ca_crt, ca_key, NAMES, validity=dt.timedelta(days=1)))
    secret["data"] = {
        "ca.crt": _b64(due.ca_crt),
        "ca.key": _b64(due.ca_key),
        "tls.crt": _b64(due.tls_crt),
        "tls.key": _b64(due.tls_key),
    }
    await kube.request("PUT", SECRETS.path("turnstile-system", "turnstile-webhook-tls"), body=secret)
    renewed = await asyncio.gather(*(r.obtain() for r in replicas))
    assert all(b == renewed[0] for b in renewed)
    assert not renewed[0].needs_renewal() and renewed[0].ca_crt == ca_crt and renewed[0].tls_crt != due.tls_crt
    stored = await kube.get(SECRETS, "turnstile-system", "turnstile-webhook-tls")
    assert int(stored["metadata"]["resourceVersion"]) > int(secret["metadata"]["resourceVersion"])


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


async def _served_serial(port: int, ca: bytes) -> int:
    ctx = ssl.create_default_context(cadata=ca.decode())
    _, writer = await asyncio.open_connection("127.0.0.1", port, ssl=ctx, server_hostname="127.0.0.1")
    try:
        peer = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
    finally:
        writer.close()
    return x509.load_der_x509_certificate(peer).serial_number


async def test_a_serving_replica_reloads_a_renewed_certificate_in_place(tmp_path: Path) -> None:
    published: list[bytes] = []

    async def publish(ca: bytes) -> None:
        published.append(ca)

    serving = Serving(FolderKeeper(tmp_path, NAMES), tmp_path, publish)
    context = await serving.start()
    app = web.Application()
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context)
    await site.start()
    port = runner.addresses[0][1]
    try:
        first = serving.bundle
        assert first is not None and published == [first.ca_crt]
        assert await _served_serial(port, first.ca_crt) == _serial(first.tls_crt)
        assert not await serving.refresh()  # nothing due: nothing changes
        # Renewed behind its back (another replica, or cert-manager): the next refresh serves it.
        ca_crt, ca_key = first.ca_crt, first.ca_key
        certs.write(tmp_path, certs.Bundle(ca_crt, ca_key, *certs.sign(ca_crt, ca_key, NAMES)))
        assert await serving.refresh()
        assert serving.bundle is not None and serving.bundle.tls_crt != first.tls_crt
        assert await _served_serial(port, ca_crt) == _serial(serving.bundle.tls_crt)
        assert published == [first.ca_crt], "the same CA: nothing to publish again"
    finally:
        await runner.cleanup()


def test_key_files_are_never_readable_by_others(tmp_path: Path) -> None:
    """Written 0600 from the start (not written 0644 and chmodded after), whatever the umask."""
    import os

    old = os.umask(0o022)
    try:
        certs.issue(tmp_path, ["127.0.0.1"])
    finally:
        os.umask(old)
    modes = {p.name: p.stat().st_mode & 0o777 for p in tmp_path.iterdir()}
    assert modes["ca.key"] == modes["tls.key"] == 0o600, modes
    assert modes["tls.crt"] == 0o644
    assert not [n for n in modes if n.endswith(".tmp")], "no temporary file left behind"
