"""A preemption storm over two flavors and a cohort: never more GPUs held by pods than the quota.

Two teams' ClusterQueues share a cohort, each with 4 A100s and 4 H100s; jobs of 1 to 4 GPUs
arrive in both namespaces with random priorities, some pinned to a flavor, so victims are
preempted within a queue and reclaimed across the cohort, and many are admitted again on the
other flavor in the step that preempted them. Deleted pods run their whole grace period, and the
Job status is 1.28's (no ``status.terminating``): only the pods say when a victim has stopped.
Every 20 ms the pods that have not ended are summed per flavor: never above the cohort's 8.
"""

from __future__ import annotations

import asyncio
import random
from pathlib import Path
from typing import Any

from sqlalchemy import func, select

from admission.kube import client as kube_client
from admission.kube.client import KubeError
from admission.sim.operators import cluster as sim_cluster
from admission.store import database, tables
from tests.admission.controller.world import JOBS, eventually, job, world
from tests.e2e.books import pod_gpus

COHORT = """
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: a100}
spec: {nodeLabels: {gpu: a100}}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: h100}
spec: {nodeLabels: {gpu: h100}}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: WorkloadPriorityClass
metadata: {name: high}
value: 1000
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: WorkloadPriorityClass
metadata: {name: mid}
value: 500
"""
TEAM = """
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {{name: {team}}}
spec:
  cohortName: research
  namespaceSelector: {{}}
  preemption: {{withinClusterQueue: LowerPriority, reclaimWithinCohort: Any}}
  resourceGroups:
  - coveredResources: [nvidia.com/gpu]
    flavors:
    - name: a100
      resources: [{{name: nvidia.com/gpu, nominalQuota: "4"}}]
    - name: h100
      resources: [{{name: nvidia.com/gpu, nominalQuota: "4"}}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {{name: {team}, namespace: {team}}}
spec: {{clusterQueue: {team}}}
"""
PER_FLAVOR = 8 * 1000  # the cohort's GPUs of each flavor


def _storm_job(i: int, rng: random.Random) -> dict[str, Any]:
    """Low jobs that go wherever there is room, and high ones pinned to A100s: a pinned preemptor's
    victim is often admitted again on the H100s in the same step, while its pods still stop."""
    team = rng.choice(["team-a", "team-b"])
    high = i % 3 == 2
    body = job(
        f"j{i}",
        gpus=4 if high else rng.choice([2, 4]),
        runtime=rng.uniform(150, 400),  # (scenario seconds: 1.5-4 s at the world's time scale)
        queue=team,
        priority="high" if high else rng.choice([None, "mid"]),
        node_selector={"gpu": "a100"} if high else None,
    )
    body["metadata"]["namespace"] = team
    body["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = 60  # 0.6 s of holding on
    return body


async def test_a_preemption_storm_never_holds_more_gpus_than_the_cohort(tmp_path: Path, migrated_url: str) -> None:
    rng = random.Random(30)
    async with world(tmp_path, migrated_url) as w:
        w.host.cluster.termination_seconds = 1000  # containers ignore SIGTERM: the whole grace period
        w.host.cluster.job_terminating = False  # Kubernetes 1.28's Job status
        for team in ("team-a", "team-b"):
            await w.kube.create(kube_client.NAMESPACES, None, {"metadata": {"name": team}})
        await w.apply(COHORT + TEAM.format(team="team-a") + TEAM.format(team="team-b"))
        w.start_controller("replica-1")
        over: list[str] = []
        samples = 0
        done = asyncio.Event()

        async def sample() -> None:
            nonlocal samples
            while not done.is_set():
                held: dict[str, int] = {}
                for ns in ("team-a", "team-b"):
                    for pod in w.host.server.store.list(sim_cluster.PODS, ns)[0]:
                        if (pod.get("status") or {}).get("phase") in ("Pending", "Running"):
                            flavor = (pod["spec"].get("nodeSelector") or {}).get("gpu", "?")
                            held[flavor] = held.get(flavor, 0) + pod_gpus(pod)
                samples += 1
                over.extend(f"{f}: {g // 1000} GPUs" for f, g in held.items() if g > PER_FLAVOR)
                await asyncio.sleep(0.02)

        sampler = asyncio.create_task(sample())
        bodies = [_storm_job(i, rng) for i in range(40)]
        try:
            for body in bodies:
                try:
                    await w.kube.create(JOBS, body["metadata"]["namespace"], body)
                except KubeError as exc:  # pragma: no cover - the simulated server has no faults here
                    raise AssertionError(exc) from exc
                await asyncio.sleep(rng.uniform(0.05, 0.2))

            async def all_done() -> bool:
                for body in bodies:
                    got = await w.kube.get(JOBS, body["metadata"]["namespace"], body["metadata"]["name"])
                    conditions = (got.get("status") or {}).get("conditions") or []
                    if not any(c.get("type") == "Complete" and c.get("status") == "True" for c in conditions):
                        return False
                return True

            await eventually(all_done, timeout=120, what="every job of the storm to complete")
        finally:
            done.set()
            await sampler
        assert samples > 100
        assert not over, f"pods held more than the cohort's GPUs of a flavor: {over[:5]}"

        async with database.transaction(w.sessions) as s:
            evictions = (
                await s.execute(
                    select(tables.WorkloadEvent.reason, func.count())
                    .where(tables.WorkloadEvent.type == "Evicted")
                    .group_by(tables.WorkloadEvent.reason)
                )
            ).all()
        assert dict(evictions).get("Preempted", 0) >= 5, f"a storm needs preemptions: {evictions}"
