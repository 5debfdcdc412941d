"""Plain-pod figures (``python -m bench pods``): issue 16's pods through the queue.

- **10,000 gated pods from 100 Deployments, admitted**: the controller runs as ``turnstile
  controller`` in its own process (its webhook registered in the simulated cluster, called over
  TLS by the API server for every pod); 100 Deployments of 100 one-GPU replicas are applied to a
  ClusterQueue whose quota holds them all. The simulated ReplicaSet controller creates each pod
  through the API server (so through the webhook, which gates it); the controller admits each pod
  and ungates it. Measured, from a watch on the cluster's store: pods created per second, pods
  ungated per second, and each pod's time from creation to ungating (p50, p99).
- **the webhook's p99 on pods at 200 AdmissionReviews/s** (pods are far more numerous than jobs):
  as ``bench webhook`` (its own process, TLS, open loop for 60 s), with AdmissionReviews of a
  Deployment's GPU pod alternating between ``/mutate`` and ``/validate``.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from admission.kube import client as kube_client
from admission.kube.client import Kube
from admission.sim.host import SimHost
from admission.sim.operators.replicas import PODS
from admission.sim.server.object_store import Watcher
from admission.store import config as config_store
from admission.store import database, embedded
from bench import webhook
from bench.procs import ControllerProcess, cpu_seconds, postgres_cpu, route_webhook
from queues.kueue import codec
from queues.podsets import pods

DEPLOYMENTS = kube_client.ResourceRef("apps/v1", "Deployment", "deployments")


def _config(quota: int) -> list[dict[str, Any]]:
    return [
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": "l40s"},
         "spec": {"nodeLabels": {"gpu": "l40s"}}},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": "serving"},
         "spec": {"namespaceSelector": {}, "resourceGroups": [{"coveredResources": ["nvidia.com/gpu"], "flavors": [
             {"name": "l40s", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": str(quota)}]}]}]}},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
         "metadata": {"name": "chat", "namespace": "serve"}, "spec": {"clusterQueue": "serving"}},
    ]  # fmt: skip


def _pod_spec() -> dict[str, Any]:
    return {"containers": [{"name": "vllm", "image": "vllm/vllm-openai:v0.6.0",
                            "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}  # fmt: skip


def _deployment(name: str, replicas: int) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "serve", "labels": {"kueue.x-k8s.io/queue-name": "chat"}},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": _pod_spec()},
        },
    }


def _quantile(values: list[float], q: float) -> float:
    return sorted(values)[min(len(values) - 1, int(q * len(values)))]


async def gated_pods(deployments: int, replicas: int) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="turnstile-bench-pods-"))
    url = await asyncio.to_thread(embedded.start, tmp / "pg", database="bench", cleanup="delete")
    await database.upgrade(url)
    engine = database.make_engine(url)
    async with database.transaction(database.sessions(engine)) as session:
        await config_store.apply(session, [codec.parse(d) for d in _config(deployments * replicas)], actor="bench")
    await engine.dispose()
    host = await SimHost.start(tmp / "kubeconfig", time_scale=1.0)
    kube = Kube(await kube_client.connect(host.kubeconfig))
    port = await route_webhook(host, kube, ("serve",))
    controller = ControllerProcess.start(host.kubeconfig, url, tmp, webhook_port=port)
    watcher = Watcher(PODS, "serve")
    created: dict[str, float] = {}
    ungated: dict[str, float] = {}

    async def watch() -> None:
        while (event := await watcher.queue.get()) is not None:
            uid = event.obj["metadata"]["uid"]
            if event.type == "ADDED" and pods.gated(event.obj):
                created[uid] = event.at
            elif event.type == "MODIFIED" and uid in created and uid not in ungated and not pods.gated(event.obj):
                ungated[uid] = event.at

    try:
        await controller.leading()
        await asyncio.sleep(2)  # the CA published to the webhook configurations
        host.server.store.watchers.append(watcher)
        watching = asyncio.create_task(watch())
        total = deployments * replicas
        before = cpu_seconds(controller.pid), time.process_time(), postgres_cpu()
        start = time.monotonic()
        for i in range(deployments):
            await kube.create(DEPLOYMENTS, "serve", _deployment(f"vllm-{i}", replicas))
        while len(ungated) < total:
            await asyncio.sleep(0.2)
            if time.monotonic() - start > 1800:
                raise TimeoutError(f"{len(ungated)} of {total} pods ungated after 30 min")
        wall = time.monotonic() - start
        made = max(created.values()) - start
        waits = [ungated[uid] - created[uid] for uid in ungated]
        ctl, sim, pg = (
            a - b
            for a, b in zip((cpu_seconds(controller.pid), time.process_time(), postgres_cpu()), before, strict=True)
        )
        print(
            f"{total:,} one-GPU pods of {deployments} Deployments: all created (through the webhook) in {made:.1f} s "
            f"= {total / made:.0f} pods/s; all admitted and ungated after {wall:.1f} s = {total / wall:.0f} pods/s; "
            f"creation -> ungated p50 {_quantile(waits, 0.5) * 1000:.0f} ms, p99 {_quantile(waits, 0.99) * 1000:.0f} ms"
        )
        print(
            f"  CPU: controller + webhook {ctl / wall * 100:.0f}% of a core, simulated cluster + client "
            f"{sim / wall * 100:.0f}%, PostgreSQL {pg / wall * 100:.0f}%"
        )
        watcher.queue.put_nowait(None)
        await watching
    finally:
        controller.stop()
        await kube.close()
        await host.stop()


def pod_review(i: int) -> bytes:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"vllm-7d9c-{i:05d}",
            "namespace": "ml-vision",
            "labels": {"kueue.x-k8s.io/queue-name": "vision", "app": "vllm", "pod-template-hash": "7d9c"},
            "ownerReferences": [
                {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "vllm-7d9c", "uid": "rs-1", "controller": True}
            ],
        },
        "spec": {
            "containers": [
                {
                    "name": "vllm",
                    "image": "vllm/vllm-openai:v0.6.0",
                    "resources": {"requests": {"cpu": "8", "memory": "64Gi"}, "limits": {"nvidia.com/gpu": "1"}},
                }
            ]
        },
    }
    request = {
        "uid": f"u-{i}",
        "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "operation": "CREATE",
        "namespace": "ml-vision",
        "object": pod,
    }
    return json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}).encode()


def main(deployments: int = 100, replicas: int = 100, rate: float = 200.0, seconds: float = 60.0) -> None:
    # the webhook first, on a quiet machine (the other run's teardown would show in its tail)
    print("== webhook on pods (its own process, TLS) ==")
    webhook.main(rate, seconds, review=pod_review)
    print("== plain pods: 10,000 gated pods from 100 Deployments (controller in its own process) ==")
    asyncio.run(gated_pods(deployments, replicas))


if __name__ == "__main__":
    main()
