"""Queues as Kubernetes objects (``python -m bench objects``): issue 15's figures.

The controller runs as ``turnstile controller`` in its own process, its webhook and aggregated
API registered in the simulated cluster (this process) as the install's manifests register them;
PostgreSQL is embedded.

- 1,000 ClusterQueues (and a LocalQueue each) applied with ``kubectl apply -f``: the time kubectl
  takes (every object through the validating webhook), and the time until all 1,000 are active
  in the scheduler (their ``Active`` condition True, written back by the controller).
- status writes per second under churn: 5,000 small jobs created over HTTP across those queues
  while they are admitted and finish; the ClusterQueue/LocalQueue status writes the controller
  sends (coalesced, rate-limited to 50/s) against the changes it saw.
- ``kubectl get workloads -A`` with 100,000 workloads (rows put straight into PostgreSQL: setting
  up, not measured): kubectl's wall time (pages of 500, through the API server's aggregation)
  and each page's latency, p50 and p99.
"""

from __future__ import annotations

import asyncio
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import sqlalchemy as sa
import yaml

from admission.kube import client as kube_client
from admission.kube.client import Kube, ResourceRef
from admission.sim.host import SimHost
from admission.store import database, embedded
from admission.webhook import configurations
from bench.procs import SERVICE, ControllerProcess, cpu_seconds, route_webhook

CQS = ResourceRef("kueue.x-k8s.io/v1beta2", "ClusterQueue", "clusterqueues", namespaced=False)
JOBS = ResourceRef("batch/v1", "Job", "jobs")


def _config(queues: int) -> str:
    docs: list[dict[str, Any]] = [
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": "a100"}}
    ]
    quota = [{"name": "a100", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": "4"}]}]
    for i in range(queues):
        spec = {
            "cohortName": f"cohort-{i % 10}",
            "namespaceSelector": {},
            "resourceGroups": [{"coveredResources": ["nvidia.com/gpu"], "flavors": quota}],
        }
        docs.append({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": f"cq-{i}"}})
        docs[-1]["spec"] = spec
        lq = {"name": f"lq-{i}", "namespace": "bench"}
        docs.append({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue", "metadata": lq})
        docs[-1]["spec"] = {"clusterQueue": f"cq-{i}"}
    return yaml.safe_dump_all(docs)


def _job(name: str, queue: str) -> dict[str, Any]:
    container = {"name": "c", "image": "x", "resources": {"requests": {"cpu": "1"}, "limits": {"nvidia.com/gpu": "1"}}}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": "bench", "labels": {"kueue.x-k8s.io/queue-name": queue},
                     "annotations": {"turnstile.dev/sim-runtime": "2"}},
        "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [container]}}},
    }  # fmt: skip


def _kubectl(kubeconfig: Path, *args: str, stdin: str | None = None) -> tuple[float, str]:
    start = time.perf_counter()
    done = subprocess.run(
        ["kubectl", "--kubeconfig", str(kubeconfig), *args], input=stdin, capture_output=True, text=True, timeout=1800
    )
    if done.returncode != 0:
        raise RuntimeError(f"kubectl {' '.join(args)}: {done.stderr[-2000:]}")
    return time.perf_counter() - start, done.stdout


async def _active(kube: Kube, queues: int) -> int:
    listed = await kube.request("GET", CQS.path(None))
    count = 0
    for cq in listed.get("items") or []:
        for c in (cq.get("status") or {}).get("conditions") or []:
            if c.get("type") == "Active" and c.get("status") == "True":
                count += 1
    return count


def _scheduled(controller: ControllerProcess) -> int:
    """ClusterQueues the leader's scheduler holds and finds active (its kueue_cluster_queue_status)."""
    try:
        text = controller.scrape().decode()
    except OSError:
        return 0
    lines = text.splitlines()
    return sum(1 for x in lines if x.startswith("kueue_cluster_queue_status{") and 'status="active"} 1' in x)


async def apply_many(host: SimHost, kube: Kube, controller: ControllerProcess, tmp: Path, queues: int) -> None:
    path = tmp / "queues.yaml"
    path.write_text(_config(queues))
    start = time.perf_counter()
    cpu0 = cpu_seconds(controller.pid)
    applying = asyncio.create_task(asyncio.to_thread(_kubectl, host.kubeconfig, "apply", "-f", str(path)))
    while await asyncio.to_thread(_scheduled, controller) < queues:
        await asyncio.sleep(0.2)
    scheduled = time.perf_counter() - start
    took, _ = await applying
    while await _active(kube, queues) < queues:
        await asyncio.sleep(0.2)
    wall = time.perf_counter() - start
    print(
        f"{queues} ClusterQueues + {queues} LocalQueues: kubectl apply {took:.1f} s (each through the webhook); "
        f"all {queues} active in the scheduler {scheduled:.1f} s after the apply began; every status written "
        f"(2 objects each, at most 50 writes/s) after {wall:.1f} s "
        f"(controller CPU {cpu_seconds(controller.pid) - cpu0:.1f} s)"
    )


async def churn(host: SimHost, kube: Kube, controller: ControllerProcess, queues: int, jobs: int) -> None:
    server = host.server
    before = _status_writes(server)
    start = time.perf_counter()
    gate = asyncio.Semaphore(16)

    async def create(i: int) -> None:
        async with gate:
            await kube.create(JOBS, "bench", _job(f"churn-{i}", f"lq-{i % queues}"))

    await asyncio.gather(*(create(i) for i in range(jobs)))
    await asyncio.sleep(10)  # jobs run 2 s each: admissions and finishes keep changing the queues
    wall = time.perf_counter() - start
    writes = _status_writes(server) - before
    print(
        f"status under churn: {jobs} jobs over {queues} queues in {wall:.1f} s: {writes} status writes "
        f"= {writes / wall:.1f} writes/s to the API server (limit 50/s, coalesced per object per second)"
    )


def _status_writes(server: Any) -> int:
    return int(server.status_writes)


async def get_workloads(host: SimHost, url: str, count: int) -> None:
    engine = database.make_engine(url)
    async with database.transaction(database.sessions(engine)) as session:
        await session.execute(
            sa.text(
                """
                INSERT INTO workloads (job_uid, api_version, kind, namespace, name, local_queue, cluster_queue,
                                       priority, pod_sets, state, queue_ts, reason, message)
                SELECT 'bulk-' || g, 'batch/v1', 'Job', 'team-' || (g % 100), 'bulk-' || g, 'lq-0', 'cq-0', 0,
                       '{"podSets": [{"name": "main", "count": 1, "requests": {"nvidia.com/gpu": "1000"},
                         "nodeSelector": {}, "affinity": [], "tolerations": []}]}'::jsonb,
                       'Finished', now(), 'JobFinished', ''
                FROM generate_series(1, :n) g
                """
            ),
            {"n": count},
        )
        await session.execute(sa.text("UPDATE workloads SET finished_at = now() WHERE job_uid LIKE 'bulk-%'"))
    await engine.dispose()
    kube = Kube(await kube_client.connect(host.kubeconfig))
    pages: list[float] = []
    token = ""
    total = 0
    while True:
        start = time.perf_counter()
        query = f"?limit=500{'&continue=' + token if token else ''}"
        body = await kube.request("GET", f"/apis/turnstile.dev/v1alpha1/workloads{query}")
        pages.append(time.perf_counter() - start)
        total += len(body["items"])
        token = (body.get("metadata") or {}).get("continue") or ""
        if not token:
            break
    await kube.close()
    took, out = await asyncio.to_thread(_kubectl, host.kubeconfig, "get", "workloads", "-A", "--no-headers")
    rows = len(out.splitlines())
    q = statistics.quantiles([p * 1000 for p in pages], n=100)
    print(
        f"kubectl get workloads -A with {total:,} workloads: {took:.1f} s for {rows:,} rows (pages of 500 through "
        f"the aggregator); one page p50 {q[49]:.0f} ms, p99 {q[98]:.0f} ms"
    )


async def _run(queues: int, jobs: int, workloads: int) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="turnstile-bench-objects-"))
    url = await asyncio.to_thread(embedded.start, tmp / "pg", database="bench", cleanup="delete")
    await database.upgrade(url)
    host = await SimHost.start(tmp / "kubeconfig", time_scale=1.0, kueue=True, default_runtime=2.0)
    kube = Kube(await kube_client.connect(host.kubeconfig))
    port = await route_webhook(host, kube, ("bench",))
    for obj in configurations.api_services(SERVICE):
        await kube.request("POST", "/apis/apiregistration.k8s.io/v1/apiservices", body=obj)
    controller = ControllerProcess.start(host.kubeconfig, url, tmp, webhook_port=port)
    try:
        await controller.leading()
        await asyncio.sleep(2)  # the CA published, the configuration source settled
        await apply_many(host, kube, controller, tmp, queues)
        await churn(host, kube, controller, queues, jobs)
        await get_workloads(host, url, workloads)
    finally:
        controller.stop()
        await kube.close()
        await host.stop()


def main(queues: int = 1000, jobs: int = 5000, workloads: int = 100_000) -> None:
    print("== queues as Kubernetes objects (controller in its own process, simulated cluster) ==")
    asyncio.run(_run(queues, jobs, workloads))


if __name__ == "__main__":
    main()
