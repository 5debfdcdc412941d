"""The ``turnstile controller`` process: controller, webhook over TLS, and health/metrics endpoints.

``serve`` is what runs in each replica's pod (and, with a simulated cluster, in ``turnstile
sim up``): migrations first, then the controller (informers everywhere, the scheduler on the
leader), the webhook on ``webhook_port`` with the certificate from ``cert_dir`` (or one it
issues and keeps there), and ``/healthz``, ``/readyz`` and ``/metrics`` on ``metrics_port``,
both bound to ``bind_address``.

**Who may read what.** The metrics port serves health and metrics only: it is reached by the
kubelet's probes and Prometheus, which carry no identity. Queue data (the dashboard, ``/ui/``,
and Kueue's visibility API as a plain HTTP endpoint) names every namespace's jobs and the audit
log's editors, so it has a listener of its own, ``ui_port`` on ``ui_address``: loopback by
default, reached with ``kubectl port-forward`` (which the API server authorizes: RBAC on
``pods/portforward`` in Turnstile's namespace). Through the API server, the aggregated API serves
the same visibility data to each caller as RBAC allows. Binding the UI elsewhere is an explicit
choice (``--ui-address``), for an authenticating proxy in front of it.

``/readyz`` is the webhook's readiness (``admission.controller.readiness``): a replica that
serves a trusted certificate and has a configuration to answer from is ready, even while the
database is away, so a database outage never takes the webhook (and with it every queued job's
creation) away; ``/readyz?verbose`` also reports the database, the informers and leadership.

SIGTERM (or SIGINT) stops the replica cleanly within the pod's grace period: readiness false
at once, leadership handed over (the lease released and announced, so a standby leads within
a second), then the webhook keeps answering for ``shutdown_delay`` seconds while the API server
stops routing to this pod, and only then do the listeners close. A second signal skips the wait.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import signal
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST

from admission.aggregated.auth import Authorizer, FrontProxy
from admission.aggregated.server import AggregatedApi
from admission.app import wiring
from admission.controller.controller import Controller
from admission.controller.objects import visibility
from admission.controller.parts import Options
from admission.controller.readiness import Readiness
from admission.jobs import INTEGRATIONS
from admission.jobs.base import Integration
from admission.kube import client as kube_client
from admission.kube.client import Kube
from admission.policy import DEFAULT_POLICY, Policy
from admission.store import activity, database, deletion
from admission.ui.server import Dashboard
from admission.webhook.configurations import Scope
from admission.webhook.keeper import FolderKeeper, Keeper, SecretKeeper, Serving
from admission.webhook.registration import Registration
from admission.webhook.server import WebhookServer

log = logging.getLogger(__name__)


def identity() -> str:
    """This replica's name in the lease: the pod's name when Kubernetes gives it, else host and pid."""
    base = os.environ.get("POD_NAME") or f"{socket.gethostname()}-{os.getpid()}"
    return f"{base}-{secrets.token_hex(3)}"


def health_app(readiness: Readiness, render: Callable[[], bytes]) -> web.Application:
    """``/healthz``, ``/readyz`` (``?verbose``, ``/readyz/CHECK``) and ``/metrics``: nothing else,
    since whoever reaches the metrics port is not known (see the module docstring)."""

    async def healthz(_: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def readyz(request: web.Request) -> web.Response:
        ready = readiness.ready()
        if "verbose" in request.query:
            verdict = "readyz check passed" if ready else "readyz check failed"
            return web.Response(status=200 if ready else 503, text="\n".join([*readiness.report(), verdict]) + "\n")
        if ready:
            return web.Response(text="ok\n")
        why = "; ".join(f"{name}: {reason}" for name, reason in readiness.failing())
        return web.Response(status=503, text=f"not ready: {why}\n")

    async def readyz_check(request: web.Request) -> web.Response:
        answer = readiness.check(request.match_info["check"])
        if answer is False:
            return web.Response(status=404, text=f"no check {request.match_info['check']!r}\n")
        return web.Response(text="ok\n") if answer is None else web.Response(status=503, text=f"{answer}\n")

    async def metrics(_: web.Request) -> web.Response:
        return web.Response(body=render(), headers={"Content-Type": CONTENT_TYPE_LATEST})

    app = web.Application()
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/readyz/{check}", readyz_check)
    app.router.add_get("/metrics", metrics)
    return app


def ui_app(controller: Controller) -> web.Application:
    """The dashboard (``/ui/``, ``admission.ui``) and Kueue's visibility API, for the loopback listener."""
    app = web.Application()
    visibility.routes(app, lambda: controller.term, controller.enactor.view)
    dashboard(controller).routes(app)
    return app


def deletions(controller: Controller) -> Callable[[str, str, str, str], Awaitable[None]]:
    """Who deleted a queue object, from its DELETE review, into PostgreSQL for the audit log."""

    async def record(kind: str, key: str, uid: str, actor: str) -> None:
        async with database.transaction(controller.sessions) as session:
            await deletion.request(session, kind, key, uid=uid, actor=actor)

    return record


def activity_requests(controller: Controller) -> Callable[[str, str, bool, str], Awaitable[None]]:
    """A person's ``spec.active`` on a Workload object, from its UPDATE review, into PostgreSQL as a
    stop/resume request (``admission.store.activity``), audited with that person."""

    async def record(namespace: str, name: str, active: bool, actor: str) -> None:
        async with database.transaction(controller.sessions) as session:
            await activity.request(session, namespace, name, active=active, actor=actor)

    return record


def dashboard(controller: Controller) -> Dashboard:
    """The dashboard as a replica serves it: PostgreSQL, plus the leader's idle GPUs and the jobs' Events."""
    idle = controller.features.reclaimer.idle_held
    return Dashboard(
        controller.sessions,
        idle=idle,
        job_events=controller.job_events,
        fractions=controller.features.card_shares.fractions,
    )


@dataclass(slots=True)
class Endpoints:
    webhook: web.AppRunner
    health: web.AppRunner
    webhook_port: int
    metrics_port: int
    serving: Serving
    ui_port: int = 0  # where the dashboard and the visibility API are served (0: not served)
    ui: web.AppRunner | None = None


@contextlib.asynccontextmanager
async def endpoints(
    controller: Controller,
    *,
    host: str,
    webhook_port: int,
    metrics_port: int,
    serving: Serving,
    registration: Registration,
    ui_port: int = 0,
    ui_address: str = "127.0.0.1",
) -> AsyncIterator[Endpoints]:
    """The webhook (TLS, from ``serving``) and health/metrics listeners; ready only once the
    webhook serves its certificate and the controller is ready."""
    context = await serving.start()
    server = WebhookServer(
        lambda: controller.config,
        policy=controller.policy,
        group_totals=controller.pod_groups.totals,
        runtimes=controller.runtimes.lookup,
        devices=lambda: controller.watch.device_catalog.devices,
        deletions=deletions(controller),
        activity=activity_requests(controller),
    )
    # The aggregated API (kubectl get workloads, Kueue's visibility API) shares the webhook's port:
    # the API server presents its front-proxy certificate there, webhook calls present none.
    front_proxy = FrontProxy(controller.kube)
    AggregatedApi(
        controller.sessions, front_proxy, Authorizer(controller.kube), pods_ready=controller.policy.pods_ready.enable
    ).routes(server.app)
    webhook = web.AppRunner(server.app, handle_signals=False)
    listening = {"tls": False}

    def webhook_ready() -> str | None:
        return registration.trusted() if listening["tls"] else "not serving TLS yet"

    controller.readiness.add("webhook", webhook_ready, gates=True)
    follow_scope(controller, registration)
    health = web.AppRunner(health_app(controller.readiness, controller.metrics.render), handle_signals=False)
    ui = web.AppRunner(ui_app(controller), handle_signals=False)
    await webhook.setup()
    await health.setup()
    await ui.setup()
    keeping = asyncio.create_task(serving.keep(), name="webhook-certificate")
    proxying = asyncio.create_task(front_proxy.keep(context), name="front-proxy")
    registering = asyncio.create_task(registration.keep(), name="webhook-configurations")
    try:
        await web.TCPSite(webhook, host, webhook_port, ssl_context=context).start()
        listening["tls"] = True
        await web.TCPSite(health, host, metrics_port).start()
        if ui_address:
            await web.TCPSite(ui, ui_address, ui_port).start()
        ports = (webhook.addresses[0][1], health.addresses[0][1], ui.addresses[0][1] if ui_address else 0)
        yield Endpoints(webhook, health, ports[0], ports[1], serving, ports[2], ui)
    finally:
        keeping.cancel()
        registering.cancel()
        proxying.cancel()
        await asyncio.gather(keeping, registering, proxying, return_exceptions=True)
        await webhook.cleanup()
        await health.cleanup()
        await ui.cleanup()


def follow_scope(controller: Controller, registration: Registration) -> None:
    """The leading replica keeps the namespaces' webhook scope in step with the LocalQueues (and,
    for a managedJobsNamespaceSelector, with the namespaces' labels)."""

    def changed() -> None:
        leading = controller.leading() and controller.config is not None
        scope = Scope.of(controller.config, controller.policy) if leading and controller.config else None
        registration.keep_scope(scope)

    controller.config_watchers.append(changed)
    controller.namespace_watchers.append(registration.poke.set)


SHUTDOWN_DELAY = 5.0  # seconds the webhook keeps answering after SIGTERM, while endpoints are withdrawn


class Stop:
    """A request to stop: cleanly the first time; a second request skips the webhook's drain wait."""

    def __init__(self) -> None:
        self.requested = asyncio.Event()
        self.hurry = False

    def request(self, why: str) -> None:
        if self.requested.is_set():
            log.warning("%s again: stopping now", why)
            self.hurry = True
        else:
            log.info("%s: stopping cleanly", why)
        self.requested.set()

    async def drain(self, seconds: float) -> None:
        """Wait ``seconds`` unless hurried meanwhile."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and not self.hurry:
            await asyncio.sleep(min(0.1, deadline - time.monotonic()))


def _on_signals(stop: Stop) -> list[signal.Signals]:
    """SIGTERM and SIGINT request ``stop``."""
    loop = asyncio.get_running_loop()
    installed = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        try:
            loop.add_signal_handler(sig, stop.request, sig.name)
        except (NotImplementedError, RuntimeError, ValueError):  # not the main thread (tests), or no signals
            continue
        installed.append(sig)
    return installed


async def serve(
    *,
    kubeconfig: Path | None,
    database_url: str,
    webhook_port: int,
    metrics_port: int,
    cert_dir: Path,
    ui_port: int = 8081,
    ui_address: str = "127.0.0.1",
    cert_secret: str | None = None,
    bind_address: str = "0.0.0.0",
    names: list[str] | None = None,
    lease_ttl: float = 15.0,
    ledger_labels: tuple[str, ...] = ("team", "project"),
    shutdown_delay: float = SHUTDOWN_DELAY,
    integrations: Sequence[Integration] = INTEGRATIONS,
    policy: Policy = DEFAULT_POLICY,
    stop: Stop | None = None,
    on_ready: Callable[[Endpoints, Controller], None] | None = None,
) -> None:
    """Run one replica until ``stop`` is set (SIGTERM/SIGINT set it), then stop cleanly.

    The webhook certificate is kept in the Secret ``cert_secret`` ("namespace/name", shared by
    the replicas) when given, else in ``cert_dir`` (issued there if absent; a cert-manager
    Secret mounted there is used and re-read as it is renewed)."""
    stop = stop or Stop()
    signals = _on_signals(stop)
    await database.upgrade(database_url)
    kube = Kube(await kube_client.connect(kubeconfig))
    # Every statement bounded well below the lease: a black-holed connection fails a step or a
    # renewal in seconds instead of hanging it for a minute.
    engine = database.make_engine(
        database_url,
        idle_in_transaction_timeout=lease_ttl,
        command_timeout=max(10.0, lease_ttl),
        application_name="turnstile-controller",
    )
    controller = wiring.controller(
        kube=kube,
        sessions=database.sessions(engine),
        database_url=database_url,
        options=Options(identity=identity(), lease_ttl=lease_ttl, ledger_labels=ledger_labels),
        integrations=integrations,
        policy=policy,
    )
    service = os.environ.get("TURNSTILE_WEBHOOK_SERVICE", "turnstile-webhook.turnstile-system.svc")
    names = names or [service, f"{service}.cluster.local"]
    keeper: Keeper = FolderKeeper(cert_dir, names)
    if cert_secret:
        namespace, _, secret = cert_secret.rpartition("/")
        keeper = SecretKeeper(kube, namespace or "turnstile-system", secret, names)

    registration = Registration(
        kube, own_namespace=os.environ.get("POD_NAMESPACE", "turnstile-system"), owners=policy.owners
    )

    async def publish(ca: bytes) -> None:
        registration.serve_with(ca)

    try:
        async with endpoints(
            controller,
            host=bind_address,
            webhook_port=webhook_port,
            metrics_port=metrics_port,
            serving=Serving(keeper, cert_dir, publish),
            registration=registration,
            ui_port=ui_port,
            ui_address=ui_address,
        ) as ep:
            task = asyncio.create_task(controller.run(), name="controller")
            stopping = asyncio.create_task(stop.requested.wait(), name="stop")
            try:
                if on_ready is not None:
                    while not controller.ready() and not task.done() and not stop.requested.is_set():
                        await asyncio.sleep(0.05)
                    if not stop.requested.is_set() and not task.done():
                        on_ready(ep, controller)
                await asyncio.wait({task, stopping}, return_when=asyncio.FIRST_COMPLETED)
                if task.done():
                    task.result()  # the controller failed: say why
                    return
                await controller.shutdown()  # readiness false, lease released and announced
                await task
                if shutdown_delay > 0 and not stop.hurry:
                    log.info("webhook answers for %.0fs more while the API server stops routing here", shutdown_delay)
                    await stop.drain(shutdown_delay)
            finally:
                stopping.cancel()
                if not task.done():
                    task.cancel()
                await asyncio.gather(task, stopping, return_exceptions=True)
    finally:
        loop = asyncio.get_running_loop()
        for sig in signals:
            loop.remove_signal_handler(sig)
        await kube.close()
        await engine.dispose()
        log.info("stopped")
