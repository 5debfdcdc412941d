"""Where the webhook's certificate comes from, and keeping it fresh on every replica.

``SecretKeeper`` (the default install): the bundle lives in one Secret that every replica
shares. The first replica to start issues it (a create: if another replica won the race, its
bundle is read instead); whichever replica first sees it due renews it (an update carrying the
resourceVersion it read: a conflict means another replica renewed it, and that one is read).
So all replicas serve certificates of one CA, and the ``caBundle`` is published once.

``FolderKeeper``: the bundle lives in a folder, issued there when absent (``turnstile controller``
on a laptop, ``sim up``), or mounted from a Secret that cert-manager keeps (no ``ca.key``: used as
it is, and re-read when cert-manager renews it).

``Serving`` holds the TLS context the webhook listens with and reloads it in place when the
bundle changes: new connections get the new certificate, open ones are not cut.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import ssl
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Protocol

from admission.kube.client import Kube, KubeError, Obj, ResourceRef
from admission.webhook import certs

log = logging.getLogger(__name__)

SECRETS = ResourceRef("v1", "Secret", "secrets")
REFRESH_SECONDS = 300.0


class Keeper(Protocol):
    async def obtain(self) -> certs.Bundle:
        """The bundle to serve now, renewed first if it is due."""
        ...


class FolderKeeper:
    def __init__(self, folder: Path, names: Sequence[str]) -> None:
        self.folder = folder
        self.names = list(names)

    async def obtain(self) -> certs.Bundle:
        return await asyncio.to_thread(certs.ensure, self.folder, self.names)


def _decode(secret: Obj) -> certs.Bundle | None:
    data = secret.get("data") or {}
    try:
        blobs = {field: base64.b64decode(data.get(key, "")) for field, key in certs.FILES.items()}
        bundle = certs.Bundle(**blobs)
        bundle.not_after  # noqa: B018 - parses the certificate: a damaged Secret is issued again
    except ValueError:
        return None
    return bundle


def _encode(bundle: certs.Bundle) -> dict[str, str]:
    return {key: base64.b64encode(getattr(bundle, field)).decode() for field, key in certs.FILES.items()}


class SecretKeeper:
    def __init__(self, kube: Kube, namespace: str, name: str, names: Sequence[str]) -> None:
        self.kube = kube
        self.namespace = namespace
        self.name = name
        self.names = list(names)

    async def obtain(self) -> certs.Bundle:
        for _ in range(5):
            try:
                secret: Obj | None = await self.kube.get(SECRETS, self.namespace, self.name)
            except KubeError as exc:
                if exc.status != 404:
                    raise
                secret = None
            current = _decode(secret) if secret is not None else None
            fresh = await asyncio.to_thread(certs.renewed, current, self.names)
            if fresh is None:
                assert current is not None
                return current
            body: Obj = {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {
                    "name": self.name,
                    "namespace": self.namespace,
                    "labels": {"app.kubernetes.io/name": "turnstile", "app.kubernetes.io/component": "webhook-cert"},
                },
                "type": "Opaque",
                "data": _encode(fresh),
            }
            try:
                if secret is None:
                    await self.kube.create(SECRETS, self.namespace, body)
                    log.info("issued the webhook certificate into secret %s/%s", self.namespace, self.name)
                else:
                    body["metadata"]["resourceVersion"] = secret["metadata"]["resourceVersion"]
                    await self.kube.request("PUT", SECRETS.path(self.namespace, self.name), body=body)
                    log.info("renewed the webhook certificate in secret %s/%s", self.namespace, self.name)
            except KubeError as exc:
                if exc.status == 409:
                    continue  # another replica wrote it first: serve theirs
                raise
            return fresh
        raise RuntimeError(f"secret {self.namespace}/{self.name} kept changing while the certificate was renewed")


class Serving:
    """The webhook's TLS context, reloaded in place whenever the keeper's bundle changes."""

    def __init__(self, keeper: Keeper, folder: Path, on_new_ca: Callable[[bytes], Awaitable[None]]) -> None:
        self.keeper = keeper
        self.folder = folder  # where the served files are written (for a Secret) or read from
        self.on_new_ca = on_new_ca
        self.bundle: certs.Bundle | None = None
        self.context: ssl.SSLContext | None = None

    async def start(self) -> ssl.SSLContext:
        bundle = await self.keeper.obtain()
        await self._use(bundle)
        assert self.context is not None
        return self.context

    async def refresh(self) -> bool:
        """Obtain the bundle again; True if it changed (and is now served)."""
        bundle = await self.keeper.obtain()
        if bundle == self.bundle:
            return False
        await self._use(bundle)
        return True

    async def keep(self, every: float = REFRESH_SECONDS) -> None:
        while True:
            await asyncio.sleep(every)
            try:
                await self.refresh()
            except (KubeError, OSError, RuntimeError) as exc:
                log.warning("webhook certificate: %s; trying again in %.0fs", exc, every)

    async def _use(self, bundle: certs.Bundle) -> None:
        if bundle != certs.read(self.folder):
            await asyncio.to_thread(certs.write, self.folder, bundle)
        if self.context is None:
            self.context = bundle.server_context(self.folder)
        else:
            self.context.load_cert_chain(self.folder / certs.FILES["tls_crt"], self.folder / certs.FILES["tls_key"])
        new_ca = self.bundle is None or bundle.ca_crt != self.bundle.ca_crt
        self.bundle = bundle
        if new_ca:
            await self.on_new_ca(bundle.ca_crt)
