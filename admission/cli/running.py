"""``turnstile controller`` and ``turnstile sim up``: the long-running processes.

``controller`` is what a replica runs in the cluster. ``sim up`` is a local playground: the
simulated cluster (serving Kueue's CRDs), the embedded PostgreSQL and one controller replica
with its webhook registered in the cluster as a real install would have it, so ``kubectl``
(with the printed kubeconfig) behaves as on a real cluster running Turnstile: queues are
Kubernetes objects there (``kubectl apply``/``edit``/``get cq,lq``).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import click

from admission import logs
from admission.cli import admin
from admission.cli.store_commands import actor
from admission.settings import Settings
from admission.webhook import configurations


def bind_address_option(default: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    return click.option(
        "--bind-address",
        default=default,
        show_default=True,
        help="Address the webhook and metrics/health listeners bind to (0.0.0.0: every interface). The "
        "metrics port serves /metrics, /healthz and /readyz only.",
    )


default_runtime_option = click.option(
    "--default-runtime",
    type=click.FloatRange(min=0),
    default=60.0,
    show_default=True,
    help="Seconds a job without a turnstile.dev/sim-runtime annotation runs in the simulated cluster.",
)

log_format_option = click.option(
    "--log-format",
    type=click.Choice(["text", "json"]),
    default="text",
    show_default=True,
    help="json: one object per line, with workload and queue fields on every decision.",
)


@click.command("controller")
@click.option(
    "--kubeconfig",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Default: TURNSTILE_KUBECONFIG, else in-cluster config, else ~/.kube/config.",
)
@click.option("--webhook-port", type=int, default=9443, show_default=True)
@click.option("--metrics-port", type=int, default=8080, show_default=True)
@click.option(
    "--ui-port",
    type=click.IntRange(min=0, max=65535),
    default=None,
    help="Port of the dashboard (/ui/) and the visibility API over plain HTTP. Default: TURNSTILE_UI_PORT, else 8081.",
)
@click.option(
    "--ui-address",
    default=None,
    help="Address the dashboard binds to. Default: TURNSTILE_UI_ADDRESS, else 127.0.0.1 (reach it with kubectl "
    "port-forward); empty: not served. It answers anyone who reaches it: bind it elsewhere only behind an "
    "authenticating proxy.",
)
@click.option(
    "--cert-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Webhook certificate (tls.crt, tls.key, ca.crt); issued and kept here if absent. "
    "Default: TURNSTILE_HOME/certs.",
)
@click.option(
    "--cert-secret",
    default=None,
    metavar="NAMESPACE/NAME",
    help="Keep the webhook certificate in this Secret, shared by every replica (issued, renewed and "
    "reloaded there); --cert-dir then only holds the served copy. Default: TURNSTILE_CERT_SECRET.",
)
@click.option(
    "--database-url",
    default=None,
    help="PostgreSQL; default TURNSTILE_DATABASE_URL, else embedded. Prefer the environment variable "
    "(from a Secret): a flag's value, password included, is visible in `ps` to every user of the host.",
)
@bind_address_option("0.0.0.0")
@click.option(
    "--shutdown-delay",
    type=click.FloatRange(min=0),
    default=5.0,
    show_default=True,
    help="Seconds the webhook keeps answering after SIGTERM (readiness already false, leadership "
    "already handed over) while the API server stops routing to this replica.",
)
@click.option(
    "--integrations",
    default=None,
    metavar="FRAMEWORKS",
    help="Comma-separated Kueue framework names to queue (batch/job, kubeflow.org/pytorchjob, "
    "kubeflow.org/jaxjob, jobset.x-k8s.io/jobset, ray.io/rayjob, ...; see docs/job-kinds.md). Default: "
    "TURNSTILE_INTEGRATIONS, else all; kinds whose CRD is not installed are skipped until it is.",
)
@click.option("--log-level", type=click.Choice(["debug", "info", "warning"]), default="info", show_default=True)
@log_format_option
def controller_cmd(
    kubeconfig: Path | None,
    webhook_port: int,
    metrics_port: int,
    ui_port: int | None,
    ui_address: str | None,
    cert_dir: Path | None,
    cert_secret: str | None,
    database_url: str | None,
    bind_address: str,
    shutdown_delay: float,
    integrations: str | None,
    log_level: str,
    log_format: str,
) -> None:
    """The in-cluster process: scheduler (leader only), reconcilers, webhook, metrics.

    SIGTERM stops it cleanly: readiness false, leadership handed over at once, the webhook kept
    for --shutdown-delay seconds; set the pod's terminationGracePeriodSeconds above that."""
    from admission import jobs, urls
    from admission.app import collector, process
    from admission.policy import Policy

    logs.configure(log_level, log_format)
    collector.tune()

    def ready(_endpoints: Any, _controller: Any) -> None:
        frozen = collector.freeze()  # (what a ready replica holds lives as long as it)
        logging.getLogger(__name__).info("ready: %d objects left out of the garbage collector's walks", frozen)

    settings = Settings()
    try:
        enabled = jobs.enabled(integrations if integrations is not None else settings.integrations)
    except ValueError as exc:
        click.echo(f"error: --integrations: {exc}", err=True)
        sys.exit(2)
    url = _database_url(settings, database_url)
    if database_url and "@" in database_url and urls.masked(url) != url:
        logging.getLogger(__name__).warning(
            "--database-url carries a password, visible in `ps`; set TURNSTILE_DATABASE_URL (from a Secret) instead"
        )
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(
            process.serve(
                kubeconfig=kubeconfig or settings.kubeconfig,
                database_url=url,
                webhook_port=webhook_port,
                metrics_port=metrics_port,
                ui_port=settings.ui_port if ui_port is None else ui_port,
                ui_address=settings.ui_address if ui_address is None else ui_address,
                cert_dir=cert_dir or settings.home / "certs",
                cert_secret=cert_secret or settings.cert_secret,
                bind_address=bind_address,
                lease_ttl=settings.lease_ttl,
                ledger_labels=settings.ledger_label_keys,
                shutdown_delay=shutdown_delay,
                integrations=enabled,
                policy=Policy.from_settings(
                    settings,
                    lambda _ns: None,
                    os.environ.get("POD_NAMESPACE", "turnstile-system"),
                    owners=jobs.owners_of(enabled),
                ),
                on_ready=ready,
            )
        )


def _database_url(settings: Settings, flag: str | None) -> str:
    """The URL to use, or exit 2 with what is wrong with it (never a traceback, never the password)."""
    from admission.store import database, embedded

    try:
        return database.resolve_url(settings, flag)
    except ValueError as exc:
        click.echo(f"error: --database-url/TURNSTILE_DATABASE_URL: {exc}", err=True)
        sys.exit(2)
    except embedded.EmbeddedPostgresError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)


async def _up(port: int, webhook_port: int, metrics_port: int, manifests: str | None, default_runtime: float) -> None:
    from admission import urls
    from admission.app import process
    from admission.jobs import INTEGRATIONS
    from admission.kube import client as kube_client
    from admission.policy import Policy
    from admission.sim import prometheus as sim_prometheus
    from admission.sim.host import SimHost
    from admission.sim.operators import dcgm
    from admission.store import config as config_store
    from admission.store import database, source
    from admission.webhook import certs

    settings = Settings()
    url = _database_url(settings, None)
    await database.upgrade(url)
    engine = database.make_engine(url)
    async with database.transaction(database.sessions(engine)) as session:
        # The simulated cluster is new each time and PostgreSQL is its only memory: the controller
        # exports the stored queues into it, and from then on they are Kubernetes objects.
        why = "turnstile sim up: a new simulated cluster"
        await source.put(session, source.DATABASE, actor=actor(settings), why=why)
        if manifests:
            for o in await config_store.apply(session, admin.parse_documents(manifests), actor=actor(settings)):
                click.echo(f"{o.kind.lower()}/{o.name} {o.result}")
    await engine.dispose()
    home = settings.home / "sim"
    host = await SimHost.start(home / "kubeconfig", port=port, default_runtime=default_runtime, kueue=True)
    service = {"name": "turnstile-webhook", "namespace": "turnstile-system", "port": 443}
    names = ["127.0.0.1", "localhost", f"{service['name']}.{service['namespace']}.svc"]
    cert = await asyncio.to_thread(certs.ensure, home / "certs", names)
    kube = kube_client.Kube(await kube_client.connect(host.kubeconfig))
    client = {"url": f"https://127.0.0.1:{webhook_port}"}
    for obj in configurations.configurations(client, cert.ca_crt, integrations=INTEGRATIONS):
        # as a real install's manifests: the leading replica fills in the namespaces in scope
        await kube.request("POST", f"/apis/admissionregistration.k8s.io/v1/{obj['kind'].lower()}s", body=obj)
    # the aggregated API (kubectl get workloads), as the install's APIServices route it
    host.route_service(str(service["namespace"]), str(service["name"]), 443, f"https://127.0.0.1:{webhook_port}")
    for obj in configurations.api_services(service, cert.ca_crt):
        await kube.request("POST", "/apis/apiregistration.k8s.io/v1/apiservices", body=obj)
    await kube.close()

    notes: list[str] = []

    def ready(ep: process.Endpoints, _controller: object) -> None:
        click.echo(f"simulated cluster: {host.url}   kubeconfig: {host.kubeconfig}")
        click.echo(f"GPU metrics (a simulated dcgm-exporter, for Prometheus): {host.url}{dcgm.PATH}")
        for note in notes:
            click.echo(note)
        click.echo(
            f"webhook: https://127.0.0.1:{ep.webhook_port}   metrics: http://127.0.0.1:{ep.metrics_port}/metrics"
        )
        click.echo(f"dashboard: http://127.0.0.1:{ep.ui_port}/ui/   (read-only, live)")
        # (whole: the embedded server's socket directory is in the query; the CLI finds it unasked)
        click.echo(f"database: {urls.masked(url)}   (the turnstile CLI finds it without TURNSTILE_DATABASE_URL)")
        click.echo("try:")
        click.echo(f"  export KUBECONFIG={host.kubeconfig}")
        click.echo("  kubectl apply -f examples/queues/gpu-teams.yaml   # or your own Kueue v1beta2 YAML")
        click.echo("  kubectl get cq,lq -A")
        ca = home / "apiserver-certs" / "ca.crt"
        click.echo(
            f"  kubectl --server {host.secure_url} --certificate-authority {ca} --token alice edit cq team-a"
            "   # as user alice (audited: turnstile history)"
        )
        click.echo("  kubectl create -f examples/queues/job.yaml && kubectl get jobs -w")
        click.echo("  kubectl get workloads -A   # Kueue's Workload objects (twl: state, flavor, reason)")
        click.echo("Ctrl-C stops everything.")

    policy = Policy.from_settings(settings, lambda _ns: None)
    try:
        async with contextlib.AsyncExitStack() as stack:
            if not policy.prometheus_url and sim_prometheus.binary() is not None:
                # as in a GPU cluster: Prometheus scrapes dcgm-exporter (through a ServiceMonitor,
                # hence honor_labels off) and the controller reads utilisation from it
                target = urlparse(host.url).netloc
                scraping = sim_prometheus.running(
                    home / "prometheus", target, dcgm.PATH, honor_labels=False, interval="5s"
                )
                prometheus_url = await stack.enter_async_context(scraping)
                policy = dataclasses.replace(policy, prometheus_url=prometheus_url)
                said = f"{prometheus_url} (scraping the simulated dcgm-exporter: idle reclaim, used GPU-hours)"
            elif policy.prometheus_url:
                said = f"{policy.prometheus_url} (TURNSTILE_PROMETHEUS_URL)"
            else:
                said = "none: no prometheus on PATH (apt-get install prometheus for idle reclaim and used GPU-hours)"
            notes.append(f"Prometheus: {said}")
            await process.serve(
                kubeconfig=host.kubeconfig,
                database_url=url,
                webhook_port=webhook_port,
                metrics_port=metrics_port,
                cert_dir=home / "certs",
                bind_address="127.0.0.1",
                names=names,
                shutdown_delay=0.0,  # nothing routes to it but the simulated cluster, which stops with it
                policy=policy,
                ui_port=settings.ui_port,
                on_ready=ready,
            )
    except sim_prometheus.PrometheusError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)
    finally:
        await host.stop()


@click.command("up")
@click.option("--port", type=int, default=6443, show_default=True)
@click.option("--webhook-port", type=int, default=9443, show_default=True)
@click.option("--metrics-port", type=int, default=8080, show_default=True)
@click.option("--manifests", default=None, help="Kueue YAML (file or folder) to apply before starting.")
@default_runtime_option
@click.option("--log-level", type=click.Choice(["debug", "info", "warning"]), default="warning", show_default=True)
@log_format_option
def up_cmd(
    port: int,
    webhook_port: int,
    metrics_port: int,
    manifests: str | None,
    default_runtime: float,
    log_level: str,
    log_format: str,
) -> None:
    """A local playground: simulated cluster + controller + webhook + embedded PostgreSQL."""
    logs.configure(log_level, log_format)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_up(port, webhook_port, metrics_port, manifests, default_runtime))
