"""Controller figures on the simulated cluster (``python -m bench controller``).

- quota-raise latency: a ClusterQueue is full and one job waits; an admin raises the quota
  (``config.apply``, committed with NOTIFY); measured until the simulated API server receives
  the waiting job's unsuspend patch. Target p99 <= 250 ms (issue 5).
- admissions per second end to end: N queued jobs created through the API server (suspended,
  as the webhook would), enough quota for all; from the first creation until every job has been
  unsuspended by the controller. Kueue ~42/s; target >= 400/s.
- CPU split during the admissions run: this process holds the simulated cluster, the
  controller and the client; PostgreSQL is a separate process (measured from /proc).

Everything runs on this machine, the controller in-process with the simulated cluster, so the
split between them is by thread time, not process.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import tempfile
import time
from pathlib import Path

import yaml

from admission.controller.controller import Controller, Options
from admission.kube import client as kube_client
from admission.sim import cluster as sim_cluster
from admission.sim.host import SimHost
from admission.store import config as config_store
from admission.store import database, embedded
from queues import api

CONFIG = """
apiVersion: kueue.x-k8s.io/v1beta1
kind: ResourceFlavor
metadata: {name: a100}
spec: {nodeLabels: {gpu: a100}}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {name: team}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [nvidia.com/gpu]
    flavors: [{name: a100, resources: [{name: nvidia.com/gpu, nominalQuota: "QUOTA"}]}]
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata: {name: team, namespace: ml}
spec: {clusterQueue: team}
"""


def _job(name: str) -> dict:  # type: ignore[type-arg]
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": "ml", "labels": {"kueue.x-k8s.io/queue-name": "team"}},
        "spec": {
            "suspend": True,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "c", "image": "x", "resources": {"requests": {"nvidia.com/gpu": "1"}}}],
                }
            },
        },
    }


def _postgres_cpu(data_dir: Path) -> float:
    """CPU seconds of every postgres process whose command line names ``data_dir``."""
    total = 0.0
    tick = os.sysconf("SC_CLK_TCK")
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
            stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if b"postgres" in cmd:
            total += (int(stat[11]) + int(stat[12])) / tick
    return total


async def _run(n_jobs: int, trials: int) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="turnstile-bench-"))
    url = await asyncio.to_thread(embedded.start, tmp / "pg", database="bench", cleanup="delete")
    await database.upgrade(url)
    host = await SimHost.start(tmp / "kubeconfig", time_scale=1.0)
    kube = kube_client.Kube(await kube_client.connect(host.kubeconfig))
    await kube.create(kube_client.NAMESPACES, None, {"metadata": {"name": "ml"}})
    engine = database.make_engine(url)
    sessions = database.sessions(engine)
    jobs_ref = kube_client.ResourceRef("batch/v1", "Job", "jobs")
    store = host.server.store
    res = next(r for r in sim_cluster.JOB_RESOURCES if r.kind == "Job")

    async def apply(quota: int) -> None:
        objects = [api.parse(d) for d in yaml.safe_load_all(CONFIG.replace("QUOTA", str(quota))) if d]
        async with database.transaction(sessions) as s:
            await config_store.apply(s, objects, actor="bench")

    def unsuspended(name: str) -> bool:
        return not store.get(res, "ml", name)["spec"].get("suspend")

    await apply(0)
    controller = Controller(kube=kube, sessions=sessions, database_url=url, options=Options(identity="bench"))
    task = asyncio.create_task(controller.run())
    while controller.term is None:
        await asyncio.sleep(0.01)

    # 1. quota-raise latency
    latencies = []
    for i in range(trials):
        name = f"wait-{i}"
        await kube.create(jobs_ref, "ml", _job(name))
        await asyncio.sleep(0.05)  # it is queued and waits: no quota
        assert not unsuspended(name)
        start = time.perf_counter()
        await apply(i + 1)
        while not unsuspended(name):
            await asyncio.sleep(0.0005)
        latencies.append(time.perf_counter() - start)
    latencies.sort()
    p99 = latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))]
    print(
        f"quota raise -> unsuspend patch ({trials} trials): p50 {statistics.median(latencies) * 1000:.0f} ms, "
        f"p99 {p99 * 1000:.0f} ms, max {latencies[-1] * 1000:.0f} ms (target p99 <= 250 ms)"
    )

    # 2. admissions per second, with the CPU split
    await apply(trials + n_jobs)
    cpu0, pg0 = time.process_time(), _postgres_cpu(tmp / "pg")
    start = time.perf_counter()
    gate = asyncio.Semaphore(16)  # users submit concurrently

    async def create(i: int) -> None:
        async with gate:
            await kube.create(jobs_ref, "ml", _job(f"load-{i}"))

    await asyncio.gather(*(create(i) for i in range(n_jobs)))
    created = time.perf_counter()
    while not all(unsuspended(f"load-{i}") for i in range(0, n_jobs, max(1, n_jobs // 50))) or not unsuspended(
        f"load-{n_jobs - 1}"
    ):
        await asyncio.sleep(0.01)
    while sum(1 for j in store.list(res, "ml")[0] if not j["spec"].get("suspend")) < trials + n_jobs:
        await asyncio.sleep(0.01)
    wall = time.perf_counter() - start
    cpu, pg = time.process_time() - cpu0, _postgres_cpu(tmp / "pg") - pg0
    print(
        f"{n_jobs} jobs created in {created - start:.1f} s; all admitted and unsuspended after {wall:.1f} s: "
        f"{n_jobs / wall:.0f} admissions/s end to end (Kueue ~42/s; target >= 400/s)"
    )
    print(
        f"CPU over that run: controller + simulated cluster + client (one process) {cpu:.1f} s = "
        f"{cpu / wall * 100:.0f}% of a core; PostgreSQL {pg:.1f} s = {pg / wall * 100:.0f}% of a core"
    )
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    await kube.close()
    await engine.dispose()
    await host.stop()


def main(n_jobs: int = 2000, trials: int = 40) -> None:
    print("== controller on the simulated cluster ==")
    asyncio.run(_run(n_jobs, trials))


if __name__ == "__main__":
    main()
