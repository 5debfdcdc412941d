"""Kueue's Workload objects: what keeping them costs (``python -m bench workloads``).

The controller runs as ``turnstile controller`` in its own process; this process holds the
simulated cluster (time scale 1) and watches the Workload objects; PostgreSQL is embedded.

- churn: 1,000 ClusterQueues with 2 GPUs each, 5 one-GPU jobs queued in each (5,000), each running
  3 s: all admitted and finished. Run once on a cluster serving Kueue's Workload CRD and once on
  one that does not (the projection then writes nothing): the controller's CPU per admission
  with and without the objects; the projection's writes to the API server (every create, patch
  and delete of a Workload, seen as watch events) per second; and the lag from a decision to the
  object showing it: the store's ``admitted_at`` to the watch event that brings the object's
  ``QuotaReserved: True`` (p50 / p99).
- ``kubectl get workloads.kueue.x-k8s.io -A`` over 100,000 Workload objects (put straight into
  the simulated cluster's store: setting up, not measured), through kubectl's default pages of 500.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import sqlalchemy as sa
import yaml

from admission.controller.objects.workload_projection import WORKLOADS
from admission.kube import client as kube_client
from admission.kube.client import KubeError
from admission.sim.host import SimHost
from admission.sim.operators import cluster as sim_cluster
from admission.sim.server import resources as sim_resources
from admission.store import config as config_store
from admission.store import database, embedded
from bench.controller import FLAVOR, _queue
from bench.procs import ControllerProcess, cpu_seconds
from queues.kueue import codec, workload_crd

QUEUES, PER_QUEUE, QUOTA, RUNTIME = 1000, 5, 2, 3.0
OBJECTS = 100_000


def _job(name: str, namespace: str) -> dict[str, Any]:
    container = {"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"kueue.x-k8s.io/queue-name": "lq"},
            "annotations": {"turnstile.dev/sim-runtime": str(RUNTIME)},
        },
        "spec": {
            "suspend": True,
            "parallelism": 1,
            "completions": 1,
            "template": {"spec": {"restartPolicy": "Never", "containers": [container]}},
        },
    }


def _condition(obj: dict[str, Any], kind: str) -> bool:
    return any(
        c.get("type") == kind and c.get("status") == "True" for c in (obj.get("status") or {}).get("conditions") or []
    )


def _reserved(obj: dict[str, Any]) -> bool:
    return _condition(obj, "QuotaReserved")


async def _churn(with_objects: bool) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="turnstile-bench-"))
    url = await asyncio.to_thread(embedded.start, tmp / "pg", database="bench", cleanup="delete")
    await database.upgrade(url)
    host = await SimHost.start(tmp / "kubeconfig", time_scale=1.0, workloads=with_objects)
    kube = kube_client.Kube(await kube_client.connect(host.kubeconfig))
    engine = database.make_engine(url)
    sessions = database.sessions(engine)
    controller = ControllerProcess.start(host.kubeconfig, url, tmp)
    writes = 0
    seen: dict[str, float] = {}  # job uid -> when its object first showed QuotaReserved
    finished: set[str] = set()  # job uids whose object shows Finished

    def finished_objects() -> int:
        return len(finished)

    watching: asyncio.Task[None] | None = None

    async def watch() -> None:
        nonlocal writes
        version = "0"
        while True:
            try:
                async for event in kube.watch(WORKLOADS, resource_version=version, timeout_seconds=600):
                    obj = event["object"]
                    version = str(obj.get("metadata", {}).get("resourceVersion") or version)
                    if event["type"] == "BOOKMARK":
                        continue
                    writes += 1
                    uid = (obj["metadata"].get("labels") or {}).get(workload_crd.JOB_UID_LABEL)
                    if uid and uid not in seen and _reserved(obj):
                        seen[uid] = time.time()
                    if uid and _condition(obj, "Finished"):
                        finished.add(uid)
            except KubeError as exc:
                print(f"  (watch: {exc}; watching again)")
                await asyncio.sleep(0.1)
            except Exception as exc:
                print(f"  (watch failed: {exc!r})")
                raise

    try:
        await controller.leading()
        names = [f"cohort-{q // 100}-cq-{q % 100}" for q in range(QUEUES)]
        store = host.server.store
        jobs = next(r for r in sim_cluster.JOB_RESOURCES if r.kind == "Job")
        for ns in names:
            store.create(sim_resources.NAMESPACES, "", {"metadata": {"name": ns}}, namespaces=sim_resources.NAMESPACES)
        docs: list[dict[str, Any]] = list(yaml.safe_load_all(FLAVOR))
        for ns in names:
            docs += _queue(ns, ns, QUOTA, cohort=None)
        async with database.transaction(sessions) as s:
            await config_store.apply(s, [codec.parse(d) for d in docs], actor="bench")
        await asyncio.sleep(1.0)
        if with_objects:
            watching = asyncio.create_task(watch())
        before = cpu_seconds(controller.pid)
        start = time.perf_counter()
        for i in range(PER_QUEUE):
            for ns in names:
                store.create(jobs, ns, _job(f"job-{i}", ns), namespaces=sim_resources.NAMESPACES)
            await asyncio.sleep(0)
        total = QUEUES * PER_QUEUE
        while True:
            async with sessions() as s:
                done = int(await s.scalar(sa.text("SELECT count(*) FROM workloads WHERE state = 'Finished'")) or 0)
            if done >= total:
                break
            await asyncio.sleep(0.5)
        wall = time.perf_counter() - start
        if with_objects:  # until the objects have caught up (every job's shows it finished), 2 min at most
            caught = time.perf_counter()
            while time.perf_counter() - caught < 120 and finished_objects() < total:
                await asyncio.sleep(0.5)
            print(f"  (the objects caught up {time.perf_counter() - caught:.1f} s after the last job finished)")
        cpu = cpu_seconds(controller.pid) - before
        label = "with Workload objects" if with_objects else "without the Workload CRD (no objects)"
        print(
            f"churn {label}: {total:,} jobs over {QUEUES} ClusterQueues admitted and finished in {wall:.1f} s; "
            f"controller {cpu:.1f} CPU s = {cpu * 1000 / total:.2f} core-ms per admission"
        )
        if not with_objects:
            return
        listed = await kube.request("GET", WORKLOADS.path())
        print(f"  ({len(listed.get('items') or [])} Workload objects now; {len(seen)} seen reserved by the watch)")
        async with sessions() as s:
            rows = (
                await s.execute(
                    sa.text(
                        "SELECT w.job_uid, min(e.at) AS admitted_at FROM workload_events e "
                        "JOIN workloads w ON w.id = e.workload_id WHERE e.type = 'Admitted' GROUP BY w.job_uid"
                    )
                )
            ).all()
        admitted = {r.job_uid: r.admitted_at for r in rows}
        lags = sorted(seen[u] - at.timestamp() for u, at in admitted.items() if u in seen)
        missing = len([u for u in admitted if u not in seen])
        p99 = lags[min(len(lags) - 1, int(0.99 * len(lags)))] if lags else float("nan")
        print(
            f"  Workload object writes: {writes:,} ({writes / wall:.0f}/s, {writes / total:.1f} per job); "
            f"decision -> object shows it: p50 {statistics.median(lags) * 1000:.0f} ms, p99 {p99 * 1000:.0f} ms "
            f"over {len(lags):,} admissions ({missing} seen only later, already past QuotaReserved)"
        )
    finally:
        if watching is not None:
            watching.cancel()
        controller.stop()
        await kube.close()
        await engine.dispose()
        await host.stop()


async def _listing() -> None:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        print("kubectl get workloads.kueue.x-k8s.io -A: skipped (no kubectl on PATH)")
        return
    tmp = Path(tempfile.mkdtemp(prefix="turnstile-bench-"))
    host = await SimHost.start(tmp / "kubeconfig", time_scale=1.0)
    try:
        store = host.server.store
        res = host.server.by_path[(workload_crd.GROUP, workload_crd.VERSION, workload_crd.PLURAL)]
        created = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        for ns in (f"team-{i}" for i in range(100)):
            store.create(sim_resources.NAMESPACES, "", {"metadata": {"name": ns}}, namespaces=sim_resources.NAMESPACES)
        for i in range(OBJECTS):
            ns = f"team-{i % 100}"
            obj = {
                "apiVersion": WORKLOADS.api_version,
                "kind": "Workload",
                "metadata": {"name": f"job-train-{i}-{i % 99999:05d}", "namespace": ns, "creationTimestamp": created},
                "spec": {"queueName": "lq", "active": True, "priority": 0,
                         "podSets": [{"name": "main", "count": 1, "template": {"spec": {"containers": []}}}]},
                "status": {"conditions": [{"type": "QuotaReserved", "status": "False", "reason": "Pending",
                                           "message": "waiting", "lastTransitionTime": created}]},
            }  # fmt: skip
            store.create(res, ns, obj, namespaces=sim_resources.NAMESPACES)
        env = {**os.environ, "KUBECONFIG": str(host.kubeconfig)}
        took = []
        for _ in range(3):
            t0 = time.perf_counter()
            out = await asyncio.to_thread(
                subprocess.run,
                [kubectl, "get", "workloads.kueue.x-k8s.io", "-A", "--no-headers"],
                capture_output=True,
                text=True,
                env=env,
                check=True,
            )
            took.append(time.perf_counter() - t0)
            rows = len(out.stdout.splitlines())
        print(
            f"kubectl get workloads.kueue.x-k8s.io -A over {OBJECTS:,} objects (simulated API server, pages of 500): "
            f"{rows:,} rows, median {statistics.median(took):.1f} s of 3"
        )
    finally:
        await host.stop()


def main() -> None:
    print("== Kueue's Workload objects (controller in its own process, simulated cluster) ==")
    if os.environ.get("BENCH_ONLY") != "with":
        asyncio.run(_churn(with_objects=False))
    asyncio.run(_churn(with_objects=True))
    asyncio.run(_listing())


if __name__ == "__main__":
    main()
