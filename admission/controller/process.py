"""The ``turnstile controller`` process: controller, webhook over TLS, and health/metrics endpoints.

``serve`` is what runs in each replica's pod (and, with a simulated cluster, in ``turnstile
sim up``): migrations first, then the controller (informers everywhere, the scheduler on the
leader), the webhook on ``webhook_port`` with the certificate from ``cert_dir`` (or one it
issues and keeps there), and ``/healthz``, ``/readyz`` and ``/metrics`` on ``metrics_port``.
Readiness is false until the database answers, the configuration is loaded, every informer
has listed and the webhook serves its certificate, so no request reaches a replica that
would answer wrongly.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import socket
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST

from admission.controller import visibility
from admission.controller.controller import Controller, Options
from admission.kube import client as kube_client
from admission.kube.client import Kube, KubeError
from admission.store import database
from admission.webhook.keeper import FolderKeeper, Keeper, SecretKeeper, Serving
from admission.webhook.server import WebhookServer

log = logging.getLogger(__name__)

WEBHOOK_CONFIGURATIONS = (
    ("mutatingwebhookconfigurations", "turnstile-mutate"),
    ("validatingwebhookconfigurations", "turnstile-validate"),
)


def identity() -> str:
    """This replica's name in the lease: the pod's name when Kubernetes gives it, else host and pid."""
    base = os.environ.get("POD_NAME") or f"{socket.gethostname()}-{os.getpid()}"
    return f"{base}-{secrets.token_hex(3)}"


def health_app(
    ready: Callable[[], bool], render: Callable[[], bytes], controller: Controller | None = None
) -> web.Application:
    """``/healthz``, ``/readyz``, ``/metrics`` and (with a controller) Kueue's visibility API."""

    async def healthz(_: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def readyz(_: web.Request) -> web.Response:
        return web.Response(text="ok\n") if ready() else web.Response(status=503, text="not ready\n")

    async def metrics(_: web.Request) -> web.Response:
        return web.Response(body=render(), headers={"Content-Type": CONTENT_TYPE_LATEST})

    app = web.Application()
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics)
    if controller is not None:
        visibility.routes(app, lambda: controller.term, controller.enactor.view)
    return app


@dataclass(slots=True)
class Endpoints:
    webhook: web.AppRunner
    health: web.AppRunner
    webhook_port: int
    metrics_port: int
    serving: Serving


@contextlib.asynccontextmanager
async def endpoints(
    controller: Controller,
    *,
    host: str,
    webhook_port: int,
    metrics_port: int,
    serving: Serving,
) -> AsyncIterator[Endpoints]:
    """The webhook (TLS, from ``serving``) and health/metrics listeners; ready only once the
    webhook serves its certificate and the controller is ready."""
    context = await serving.start()
    webhook = web.AppRunner(WebhookServer(lambda: controller.config).app, handle_signals=False)
    listening = {"tls": False}
    health = web.AppRunner(
        health_app(lambda: listening["tls"] and controller.ready(), controller.metrics.render, controller),
        handle_signals=False,
    )
    await webhook.setup()
    await health.setup()
    keeping = asyncio.create_task(serving.keep(), name="webhook-certificate")
    try:
        await web.TCPSite(webhook, host, webhook_port, ssl_context=context).start()
        listening["tls"] = True
        await web.TCPSite(health, host, metrics_port).start()
        yield Endpoints(webhook, health, webhook.addresses[0][1], health.addresses[0][1], serving)
    finally:
        keeping.cancel()
        await asyncio.gather(keeping, return_exceptions=True)
        await webhook.cleanup()
        await health.cleanup()


async def publish_ca_bundle(kube: Kube, ca_pem: bytes) -> None:
    """Put our CA into Turnstile's webhook configurations (when they exist and differ)."""
    import base64

    bundle = base64.b64encode(ca_pem).decode()
    for plural, name in WEBHOOK_CONFIGURATIONS:
        path = f"/apis/admissionregistration.k8s.io/v1/{plural}/{name}"
        try:
            current = await kube.request("GET", path)
        except KubeError as exc:
            if exc.status == 404:
                continue
            raise
        hooks = current.get("webhooks") or []
        if all((h.get("clientConfig") or {}).get("caBundle") == bundle for h in hooks):
            continue
        patch = [
            {"op": "add", "path": f"/webhooks/{i}/clientConfig/caBundle", "value": bundle} for i in range(len(hooks))
        ]
        await kube.request("PATCH", path, body=patch, content_type=kube_client.JSON_PATCH)
        log.info("published the webhook CA bundle to %s/%s", plural, name)


async def serve(
    *,
    kubeconfig: Path | None,
    database_url: str,
    webhook_port: int,
    metrics_port: int,
    cert_dir: Path,
    cert_secret: str | None = None,
    host: str = "0.0.0.0",
    names: list[str] | None = None,
    lease_ttl: float = 15.0,
    ledger_labels: tuple[str, ...] = ("team", "project"),
    on_ready: Callable[[Endpoints, Controller], None] | None = None,
) -> None:
    """Run one replica until cancelled.

    The webhook certificate is kept in the Secret ``cert_secret`` ("namespace/name", shared by
    the replicas) when given, else in ``cert_dir`` (issued there if absent; a cert-manager
    Secret mounted there is used and re-read as it is renewed)."""
    await database.upgrade(database_url)
    kube = Kube(await kube_client.connect(kubeconfig))
    engine = database.make_engine(database_url, idle_in_transaction_timeout=lease_ttl)
    controller = Controller(
        kube=kube,
        sessions=database.sessions(engine),
        database_url=database_url,
        options=Options(identity=identity(), lease_ttl=lease_ttl, ledger_labels=ledger_labels),
    )
    service = os.environ.get("TURNSTILE_WEBHOOK_SERVICE", "turnstile-webhook.turnstile-system.svc")
    names = names or [service, f"{service}.cluster.local"]
    keeper: Keeper = FolderKeeper(cert_dir, names)
    if cert_secret:
        namespace, _, secret = cert_secret.rpartition("/")
        keeper = SecretKeeper(kube, namespace or "turnstile-system", secret, names)

    async def publish(ca: bytes) -> None:
        try:
            await publish_ca_bundle(kube, ca)
        except KubeError as exc:
            log.warning("could not publish the webhook CA bundle: %s", exc)

    try:
        async with endpoints(
            controller,
            host=host,
            webhook_port=webhook_port,
            metrics_port=metrics_port,
            serving=Serving(keeper, cert_dir, publish),
        ) as ep:
            task = asyncio.create_task(controller.run(), name="controller")
            if on_ready is not None:
                while not controller.ready() and not task.done():
                    await asyncio.sleep(0.05)
                on_ready(ep, controller)
            await task
    finally:
        await kube.close()
        await engine.dispose()
