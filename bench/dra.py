"""DRA figures (``python -m bench dra``): one load through ResourceClaimTemplates, and through
extended resources (issue 35).

10,000 jobs over 100 ClusterQueues (100 each) are put into the simulated cluster's store while
the quota is 0, and the controller settles (every pending job's Workload object made); then every
ClusterQueue's quota is raised so all of them fit, and the bench waits until every job is
unsuspended (admitted in PostgreSQL, patched, its pods created), and until the controller settles
again: the controller's CPU per admission is given both ways, to the last job unsuspended and in
all (the Workload objects' admissions, the Events, the job events the writes caused). Once with each
job asking ``nvidia.com/gpu: 1`` in its container's limits, once with each claiming one
``gpu.nvidia.com`` device through a ResourceClaimTemplate of its namespace (charged as
``whole-gpus`` by ``TURNSTILE_DEVICE_CLASS_MAPPINGS``). Each on a fresh stack: the simulated
cluster and this client in this process, the controller in its own (``turnstile controller``),
PostgreSQL embedded. There are no Nodes, so the simulated scheduler binds pods without
allocating devices: the figures are the queueing's, not the kube-scheduler's.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from admission.sim.server import resources as sim_resources
from bench.controller import running

MAPPINGS = "[{name: whole-gpus, deviceClassNames: [gpu.nvidia.com]}]"
FLAVOR = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": "h100"}}
TEMPLATES = next(r for r in sim_resources.ALL if r.plural == "resourceclaimtemplates")


def _queue(name: str, resource: str, quota: int) -> list[dict[str, Any]]:
    flavor = {"name": "h100", "resources": [{"name": resource, "nominalQuota": str(quota)}]}
    groups = [{"coveredResources": [resource], "flavors": [flavor]}]
    return [
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ClusterQueue",
            "metadata": {"name": name},
            "spec": {
                "namespaceSelector": {},
                "resourceGroups": groups,
            },
        },
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "LocalQueue",
            "metadata": {"name": "lq", "namespace": name},
            "spec": {"clusterQueue": name},
        },
    ]


def _job(name: str, namespace: str, claims: bool) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "c", "image": "x"}
    pod: dict[str, Any] = {"restartPolicy": "Never", "containers": [container]}
    if claims:
        container["resources"] = {"claims": [{"name": "gpu"}]}
        pod["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]
    else:
        container["resources"] = {"limits": {"nvidia.com/gpu": "1"}}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace, "labels": {"kueue.x-k8s.io/queue-name": "lq"}},
        "spec": {"suspend": True, "parallelism": 1, "completions": 1, "template": {"spec": pod}},
    }


async def _variant(claims: bool, queues: int, per_queue: int) -> None:
    env = {"TURNSTILE_DEVICE_CLASS_MAPPINGS": MAPPINGS} if claims else {}
    resource = "whole-gpus" if claims else "nvidia.com/gpu"
    names = [f"team-{q}" for q in range(queues)]
    async with running("turnstile-bench-dra-", env) as bench:
        store = bench.store
        request = {"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 1}}
        for ns in names:
            store.create(sim_resources.NAMESPACES, "", {"metadata": {"name": ns}}, namespaces=sim_resources.NAMESPACES)
            if claims:
                template = {"metadata": {"name": "one-gpu"}, "spec": {"spec": {"devices": {"requests": [request]}}}}
                store.create(TEMPLATES, ns, template, namespaces=sim_resources.NAMESPACES)
        await bench.apply([FLAVOR, *(d for ns in names for d in _queue(ns, resource, 0))])
        for i in range(per_queue):
            for ns in names:
                store.create(bench.jobs, ns, _job(f"job-{i}", ns, claims), namespaces=sim_resources.NAMESPACES)
            await asyncio.sleep(0)
        total = queues * per_queue
        while await bench.workloads("Pending") < total:
            await asyncio.sleep(0.5)
        await bench.settled()  # (every pending job's Workload object made: not counted as admitting)
        before = bench.cpu()
        start = time.perf_counter()
        await bench.apply([FLAVOR, *(d for ns in names for d in _queue(ns, resource, per_queue))])
        while bench.count_unsuspended() < total:
            await asyncio.sleep(0.2)
        wall = time.perf_counter() - start
        what = "claiming one GPU through a ResourceClaimTemplate" if claims else "asking nvidia.com/gpu: 1"
        print(f"{total:,} jobs {what}, {queues} ClusterQueues: all unsuspended {wall:.1f} s after the quota raise "
              f"= {total / wall:.0f} admissions/s")  # fmt: skip
        print("  " + bench.split(before, wall, total))
        waited = await bench.settled()
        per = (bench.cpu()[0] - before[0]) * 1000 / total
        print(f"  with the Workload objects' admissions, the Events and the job events the writes caused "
              f"(settled {waited:.0f} s later): controller {per:.2f} core-ms per admission in all")  # fmt: skip


def main(queues: int = 100, per_queue: int = 100) -> None:
    print("== DRA: the same load through extended resources and through ResourceClaimTemplates ==")
    for claims in (False, True, False, True):  # interleaved, twice: this machine's noise shows
        asyncio.run(_variant(claims, queues, per_queue))


if __name__ == "__main__":
    main()
