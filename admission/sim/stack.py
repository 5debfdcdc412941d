"""Engine cluster's running system: a fresh database, the simulated cluster, the webhook and the
controller, wired together as a production install wires them.

Why apart from the driver (``admission.sim.engine``): what makes up the system and what plays a
scenario against it change for different reasons; tests that need the whole system without a
timeline (``tests/e2e/test_ledger.py``) use this alone. Everything runs in one process over real
connections: PostgreSQL (embedded, or a new database on ``--database-url``'s server), the
simulated cluster over HTTP (``SimHost``), the webhook over TLS registered in it as a real
cluster would call it, the controller (``admission.controller``), and for a scenario that
measures GPU utilisation a real Prometheus (``admission.sim.efficiency``). The scenario's
cluster-side objects (namespaces, nodes, PriorityClasses, training runtimes) are created first,
its Kueue manifests and budgets stored as ``turnstile apply`` and ``turnstile budget`` would.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import secrets
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiohttp import web

from admission.app import process, wiring
from admission.controller.controller import Controller
from admission.controller.parts import Options
from admission.jobs import INTEGRATIONS
from admission.kube import client as kube_client
from admission.kube.client import Kube, KubeError
from admission.policy import DEFAULT_POLICY, Policy
from admission.sim import efficiency
from admission.sim.host import SimHost
from admission.sim.operators import autoscaler
from admission.store import config as config_store
from admission.store import database, embedded
from admission.webhook import certs, configurations, registration
from admission.webhook.server import WebhookServer
from queues.model import Config
from queues.podsets import trainjobs
from queues.simulation.scenario import Scenario

ACTOR = "turnstile-simulate"
QUIET = 0.05  # wall seconds without a write to the cluster before the system counts as settled


@dataclass(slots=True)
class Stack:
    """The running system: database, cluster, webhook, controller."""

    url: str
    host: SimHost
    kube: Kube
    controller: Controller
    task: asyncio.Task[None]
    webhook: web.AppRunner

    def settled(self, quiet: float = QUIET) -> bool:
        """Nothing left in hand: no write to the cluster for ``quiet`` seconds nor one under way (a
        create waits on its admission webhooks, which may take longer than ``quiet``), every watch
        event taken by its watcher (operators, kubelet, the controller's informers' streams), and
        the controller neither due to step nor stepping nor enacting."""
        server = self.host.server
        store = server.store
        return (
            not server.writing
            and time.monotonic() - store.changed_at >= quiet
            and all(w.queue.empty() for w in store.watchers)
            and not self.controller.busy()
        )

    async def settle(self, *, limit: float, quiet: float = QUIET) -> float:
        """Wait (at most ``limit`` seconds) until the system has ``settled``; the seconds waited."""
        start = time.monotonic()
        while not self.settled(quiet) and time.monotonic() - start < limit:
            await asyncio.sleep(0.005)
        return time.monotonic() - start


@contextlib.asynccontextmanager
async def fresh_database(database_url: str | None, workdir: Path) -> AsyncIterator[str]:
    """A new, migrated database: embedded in ``workdir``, or created on ``database_url``'s server."""
    if database_url is None:
        url = await asyncio.to_thread(embedded.start, workdir / "pg", database="turnstile", cleanup="delete")
        try:
            await database.upgrade(url)
            yield url
        finally:  # (stopped before the work folder goes, not at exit: nothing runs on, nothing is left)
            await asyncio.to_thread(embedded.stop, workdir / "pg")
        return
    async with database.scratch(database_url) as url:
        yield url


@contextlib.asynccontextmanager
async def running(
    scenario: Scenario, url: str, workdir: Path, *, time_scale: float, policy: Policy = DEFAULT_POLICY
) -> AsyncIterator[Stack]:
    host = await SimHost.start(
        workdir / "kubeconfig", time_scale=time_scale, autoscaler=dict(scenario.autoscaler or {})
    )
    try:
        async with (
            efficiency.prometheus(scenario, host.url, workdir, time_scale) as prometheus_url,
            _system(scenario, url, workdir, host, prometheus_url, time_scale=time_scale, policy=policy) as stack,
        ):
            yield stack
    finally:
        await host.stop()


@contextlib.asynccontextmanager
async def _system(
    scenario: Scenario,
    url: str,
    workdir: Path,
    host: SimHost,
    prometheus_url: str,
    *,
    time_scale: float,
    policy: Policy,
) -> AsyncIterator[Stack]:
    """The controller, the webhook and the store over a running simulated cluster."""
    kube = Kube(await kube_client.connect(host.kubeconfig))
    engine = database.make_engine(url)
    sessions = database.sessions(engine)
    controller = wiring.controller(
        kube=kube,
        sessions=sessions,
        database_url=url,
        options=Options(identity=f"simulate-{secrets.token_hex(3)}", backoff_scale=time_scale),
        # the scenario's waitForPodsReady, fairSharing, admissionFairSharing and topologyPacking;
        # GPU utilisation read every scenario minute (``admission.sim.efficiency``)
        policy=dataclasses.replace(
            policy,
            pods_ready=scenario.pods_ready,
            fair_sharing=scenario.fair_sharing,
            admission_fair_sharing=scenario.admission_fair_sharing,
            topology_packing=scenario.packing,
            device_mappings=scenario.devices.mappings,
            transformations=scenario.devices.transformations,
            # (GPU-hours of DRA claims are read off the devices by the controller, as engine core reads
            # them off the scenario's: ``CardShares``)
            card_fractions=policy.card_fractions,
            prometheus_url=prometheus_url or policy.prometheus_url,
            reclaim_interval=efficiency.look_interval(time_scale),
        ),
    )
    webhook = WebhookServer(
        lambda: controller.config,
        policy=controller.policy,
        group_totals=controller.pod_groups.totals,
        runtimes=controller.runtimes.lookup,
        devices=lambda: controller.watch.device_catalog.devices,
    )
    runner = web.AppRunner(webhook.app, handle_signals=False)
    task: asyncio.Task[None] | None = None
    registering: asyncio.Task[None] | None = None
    try:
        await _populate(kube, scenario)
        async with database.transaction(sessions) as session:
            await config_store.apply(session, efficiency.annotated(scenario.manifests, scenario.reclaim), actor=ACTOR)
            await efficiency.store_budgets(session, scenario.budgets, time_scale)
        cert = await asyncio.to_thread(certs.issue, workdir / "certs", ["127.0.0.1"])
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=cert.server_context(workdir / "certs"))
        await site.start()
        port = runner.addresses[0][1]
        for obj in configurations.configurations(
            {"url": f"https://127.0.0.1:{port}"}, cert.ca_crt, integrations=INTEGRATIONS
        ):
            plural = obj["kind"].lower() + "s"
            await kube.request("POST", f"/apis/admissionregistration.k8s.io/v1/{plural}", body=obj)
        keeper = registration.Registration(kube)
        keeper.serve_with(cert.ca_crt)
        keeper.keep_scope(configurations.Scope.of(Config.of(scenario.manifests), controller.policy))
        await keeper.sync()  # the namespaces labelled before the first job is created
        process.follow_scope(controller, keeper)  # edits may add or remove a namespace's default queue
        registering = asyncio.create_task(keeper.keep(), name="webhook-configurations")
        task = asyncio.create_task(controller.run(), name="controller")
        while controller.term is None or not controller.ready():
            if task.done():
                task.result()
            await asyncio.sleep(0.01)
        yield Stack(url, host, kube, controller, task, runner)
    finally:
        for running_task in (task, registering):
            if running_task is not None:
                running_task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await running_task
        await runner.cleanup()
        await kube.close()
        await engine.dispose()


NODES = kube_client.ResourceRef("v1", "Node", "nodes", namespaced=False)


async def _populate(kube: Kube, scenario: Scenario) -> None:
    names = set(scenario.namespaces) | {e.job.namespace for e in scenario.jobs}
    names |= {t.namespace for t in scenario.devices.templates.values()}
    for name in sorted(names):
        body = {"metadata": {"name": name, "labels": dict(scenario.namespaces.get(name, {}))}}
        with contextlib.suppress(KubeError):  # "default" exists already
            await kube.create(kube_client.NAMESPACES, None, body)
        if name == "default" and scenario.namespaces.get(name):
            await kube.patch(kube_client.NAMESPACES, None, name, {"metadata": body["metadata"]})
    for node in scenario.nodes:
        await kube.create(NODES, None, autoscaler.node_object(str(node["name"]), node))
    for name, (value, default) in sorted(scenario.pod_priorities.items()):
        priority_class: dict[str, Any] = {"metadata": {"name": name}, "value": value, "globalDefault": default}
        await kube.create(PRIORITY_CLASSES, None, priority_class)
    for obj in scenario.device_objects:  # DRA's DeviceClasses, ResourceDeviceCatalog and ResourceSlices, as given
        kind = str(obj["kind"])
        namespaced = kind == "ResourceClaimTemplate"
        plural = {
            "DeviceClass": "deviceclasses",
            "ResourceClaimTemplate": "resourceclaimtemplates",
            "ResourceSlice": "resourceslices",
        }[kind]
        ref = kube_client.ResourceRef(str(obj["apiVersion"]), kind, plural, namespaced=namespaced)
        namespace = (obj.get("metadata") or {}).get("namespace") or "default" if namespaced else None
        await kube.create(ref, namespace, dict(obj))
    for (kind, namespace, _), runtime in sorted(scenario.runtimes.items(), key=lambda kv: str(kv[0])):
        ref = kube_client.ResourceRef(trainjobs.API_VERSION, kind, f"{kind.lower()}s", namespaced=namespace is not None)
        await kube.create(ref, namespace, dict(runtime))


PRIORITY_CLASSES = kube_client.ResourceRef("scheduling.k8s.io/v1", "PriorityClass", "priorityclasses", namespaced=False)
