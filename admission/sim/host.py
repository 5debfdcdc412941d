"""The simulated cluster as one running thing: API server on a local port, operators, kubelet, autoscaler.

Used by ``turnstile sim serve``, ``sim up``, ``simulate --engine cluster`` and the tests, so
all of them get the same cluster. ``start`` binds 127.0.0.1 (port 0 picks a free one) and
writes a kubeconfig for it, which every client (kubectl, kubernetes_asyncio, the controller)
then uses exactly as it would a real cluster's. The same server also listens over HTTPS
(``secure_url``, a port of its own): kubectl, as every client-go client, sends credentials only
over TLS, so acting as a named user (``kubeconfig_for``) needs it.
"""

from __future__ import annotations

import asyncio
import base64
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from aiohttp import web

from admission.sim.operators import appwrappers, cronjobs, dcgm, rayjobs, serving
from admission.sim.operators.autoscaler import Autoscaler
from admission.sim.operators.cluster import Cluster
from admission.sim.operators.replicas import Replicas
from admission.sim.operators.spark import SparkPods
from admission.sim.server import resources
from admission.sim.server.apiserver import ApiServer
from admission.sim.server.faults import Faults
from admission.sim.server.objects import Resource
from admission.webhook import certs
from queues.kueue import crds as kueue_crds
from queues.kueue import workload_crd


def write_kubeconfig(path: Path, server: str, *, token: str = "turnstile-sim", ca: bytes | None = None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    cluster: dict[str, Any] = {"server": server}
    if ca is not None:
        cluster["certificate-authority-data"] = base64.b64encode(ca).decode()
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "turnstile-sim",
        "clusters": [{"name": "turnstile-sim", "cluster": cluster}],
        "users": [{"name": "turnstile-sim", "user": {"token": token}}],
        "contexts": [
            {
                "name": "turnstile-sim",
                "context": {"cluster": "turnstile-sim", "user": "turnstile-sim", "namespace": "default"},
            }
        ],
    }
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


@dataclass(slots=True)
class SimHost:
    server: ApiServer
    cluster: Cluster
    autoscaler: Autoscaler
    replicas: Replicas  # Deployment, ReplicaSet and StatefulSet controllers
    runner: web.AppRunner
    url: str
    kubeconfig: Path
    secure_url: str  # the same API server over HTTPS, where clients send who they are
    ca: bytes  # the CA of its serving certificate

    def route_service(self, namespace: str, name: str, port: int, url: str) -> None:
        """Send what the cluster sends to Service ``namespace/name:port`` (webhooks, APIServices) to
        ``url`` (``https://127.0.0.1:PORT``): the simulated cluster has no service network."""
        self.server.webhooks.services[f"{namespace}/{name}:{port}"] = url

    def kubeconfig_for(self, user: str, path: Path) -> Path:
        """A kubeconfig acting as ``user`` (its bearer token names the user, see ``webhooks.user_of``),
        over HTTPS: kubectl sends credentials only over TLS, as client-go does for every client."""
        return write_kubeconfig(path, self.secure_url, token=user, ca=self.ca)

    @classmethod
    async def start(
        cls,
        kubeconfig: Path,
        *,
        port: int = 0,
        time_scale: float = 1.0,
        faults: Faults | None = None,
        autoscaler: dict[str, Any] | None = None,
        crds: tuple[Resource, ...] = resources.OPERATORS,
        default_runtime: float | None = None,
        kueue: bool = False,
        workloads: bool = True,
    ) -> SimHost:
        """Serve a fresh simulated cluster; ``autoscaler`` takes scenario.md's ``autoscaler:`` fields;
        ``crds``: the operators' kinds whose CRDs are installed (default: all); ``default_runtime``:
        seconds a job without a ``turnstile.dev/sim-runtime`` annotation runs (None: forever);
        ``kueue``: Kueue's configuration kinds served as CRDs (queues as Kubernetes objects);
        ``workloads``: Kueue's Workload CRD served (as the install has it; False: a cluster without it)."""
        # (Kueue's Workload CRD is always served: the controller keeps one object per queued job)
        definitions = (*(kueue_crds.crds() if kueue else ()), *((workload_crd.crd(),) if workloads else ()))
        server = ApiServer(faults=faults, crds=crds, definitions=definitions)
        server.time_scale = time_scale
        # a dcgm-exporter's series, on the API server's port; a trace's times scaled as the kubelet's runtimes
        server.mount(dcgm.PATH, dcgm.handler(server.store, lambda: server.served, lambda: server.time_scale))
        cluster = Cluster(server.store, time_scale=time_scale, default_runtime=default_runtime)
        cluster.spark = SparkPods(server)
        options = autoscaler or {}
        scaler = Autoscaler(
            server.store,
            node_template=dict(options.get("nodeTemplate") or {}),
            max_nodes=int(options.get("maxNodes", 16)),
            provisioning_delay=float(options.get("provisioningDelay", 120)),
            booking_expiry=float(options.get("bookingExpiry", 600)),
            time_scale=time_scale,
        )
        replicas = Replicas(server.store, server)
        serving.install(replicas)  # LeaderWorkerSet and KServe, when their CRDs are served
        appwrappers.install(replicas)  # CodeFlare's AppWrapper controller
        cronjobs.CronJobs(replicas)
        rayjobs.RayJobs(replicas, default_runtime=default_runtime)  # KubeRay's: a RayCluster, then its submitter
        await cluster.start()
        await scaler.start()
        await replicas.start()
        runner = web.AppRunner(server.app, handle_signals=False)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", port)
        await site.start()
        bound = runner.addresses[0][1]
        url = f"http://127.0.0.1:{bound}"
        folder = kubeconfig.parent / "apiserver-certs"
        bundle = await asyncio.to_thread(certs.ensure, folder, ["127.0.0.1", "localhost"])
        secure = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=bundle.server_context(folder))
        await secure.start()
        secure_url = f"https://127.0.0.1:{runner.addresses[-1][1]}"
        kubeconfig_path = write_kubeconfig(kubeconfig, url)
        return cls(server, cluster, scaler, replicas, runner, url, kubeconfig_path, secure_url, bundle.ca_crt)

    async def stop(self) -> None:
        await self.replicas.stop()
        await self.autoscaler.stop()
        await self.cluster.stop()
        await self.runner.cleanup()
