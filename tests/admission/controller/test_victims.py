"""No GPU held twice through a preemption: a preemptor starts only once its victims' pods are gone.

Sampled from the pods themselves (every pod not yet ended, terminating or not, counts on its
flavor), on a cluster whose deleted pods run their whole grace period, with the Job status of
Kubernetes 1.29+ (``status.terminating``) and of 1.28 (no such field: only the pods say).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from admission.kube import client as kube_client
from admission.store import database, tables
from tests.admission.controller.world import JOBS, eventually, job, world

PODS = kube_client.ResourceRef("v1", "Pod", "pods")

TWO_FLAVORS = """
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
kind: ClusterQueue
metadata: {name: team-a}
spec:
  namespaceSelector: {}
  preemption: {withinClusterQueue: LowerPriority}
  resourceGroups:
  - coveredResources: [nvidia.com/gpu]
    flavors:
    - name: a100
      resources: [{name: nvidia.com/gpu, nominalQuota: "4"}]
    - name: h100
      resources: [{name: nvidia.com/gpu, nominalQuota: "4"}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: team-a, namespace: ml}
spec: {clusterQueue: team-a}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: WorkloadPriorityClass
metadata: {name: high}
value: 1000
"""


def _slow_to_stop(obj: dict[str, Any]) -> dict[str, Any]:
    obj["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = 300
    return obj


async def _gpus_by_flavor(w) -> dict[str, int]:  # type: ignore[no-untyped-def]
    """GPUs of every pod that has not ended, by the flavor its node selector names."""
    pods = await w.kube.request("GET", PODS.path("ml"))
    held: dict[str, int] = {}
    for pod in pods["items"]:
        if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        flavor = (pod["spec"].get("nodeSelector") or {}).get("gpu", "?")
        gpus = sum(int(c["resources"]["limits"].get("nvidia.com/gpu", 0)) for c in pod["spec"]["containers"])
        held[flavor] = held.get(flavor, 0) + gpus
    return held


@pytest.mark.parametrize("terminating_field", [True, False], ids=["status-terminating", "kubernetes-1.28"])
async def test_a_victim_admitted_again_on_another_flavor_never_overlaps_its_preemptor(
    tmp_path: Path, migrated_url: str, terminating_field: bool
) -> None:
    """The low job runs on a100; a high job pinned to a100 preempts it, and in the same step the low
    job is admitted again on h100. Its old pods stop over 3 s: until they are gone neither the
    preemptor nor the low job's new pods may run, so a100 never holds more than its 4 GPUs."""
    async with world(tmp_path, migrated_url) as w:
        w.host.cluster.termination_seconds = 300  # containers ignore SIGTERM: the whole grace period (3 s)
        w.host.cluster.job_terminating = terminating_field
        await w.apply(TWO_FLAVORS)
        w.start_controller("replica-1")
        await w.create(_slow_to_stop(job("low", gpus=4)))

        async def low_runs() -> bool:
            return (await _gpus_by_flavor(w)).get("a100") == 4

        await eventually(low_runs, what="the low job's pod on a100")
        await w.create(_slow_to_stop(job("high", gpus=4, priority="high", node_selector={"gpu": "a100"})))
        peak: dict[str, int] = {}
        seen_both = False
        for _ in range(400):  # up to ~8 s of samples, at least past the victim's 3 s
            held = await _gpus_by_flavor(w)
            for flavor, gpus in held.items():
                peak[flavor] = max(peak.get(flavor, 0), gpus)
            low, high = await w.get("low"), await w.get("high")
            if not low["spec"]["suspend"] and not high["spec"]["suspend"] and held.get("h100") == 4:
                seen_both = True
                break
            await asyncio.sleep(0.02)
        assert seen_both, f"both jobs should run in the end (high on a100, low on h100); pods: {held}"
        assert peak.get("a100", 0) <= 4, f"a100 held {peak['a100']} GPUs by pods on a 4-GPU quota"
        assert peak.get("h100", 0) <= 4, peak
        low = await w.get("low")
        assert low["spec"]["template"]["spec"]["nodeSelector"] == {"gpu": "h100"}


THREE_GPUS = """
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: a100}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: team-a}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [nvidia.com/gpu]
    flavors:
    - name: a100
      resources: [{name: nvidia.com/gpu, nominalQuota: "3"}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: team-a, namespace: ml}
spec: {clusterQueue: team-a}
"""


async def test_raising_a_running_jobs_parallelism_requeues_it_as_it_now_is(tmp_path: Path, migrated_url: str) -> None:
    """A real Job controller starts pods up to a raised parallelism at once: an admitted 2-pod Job
    patched to 6 on a 3-GPU queue is evicted (NoMatchingWorkload), suspended, and waits as the 6-pod
    job it now is; lowered again to 2, it is admitted again."""
    async with world(tmp_path, migrated_url) as w:
        await w.apply(THREE_GPUS)
        w.start_controller("replica-1")
        body = job("sweep", gpus=1)
        body["spec"].update(parallelism=2, completions=6)
        await w.create(body)

        async def runs(n: int) -> bool:
            j = await w.get("sweep")
            return not j["spec"]["suspend"] and (await _gpus_by_flavor(w)).get("?") == n

        await eventually(lambda: runs(2), what="the job running its 2 admitted pods")
        patch = [{"op": "replace", "path": "/spec/parallelism", "value": 6}]
        await w.kube.patch(JOBS, "ml", "sweep", patch, content_type=kube_client.JSON_PATCH)

        async def requeued() -> Any:
            async with database.transaction(w.sessions) as s:
                row = (await s.execute(select(tables.Workload).where(tables.Workload.name == "sweep"))).scalar_one()
            stopped = (await w.get("sweep"))["spec"]["suspend"] and not await _gpus_by_flavor(w)
            return row if stopped and row.state == "Pending" else None

        row = await eventually(requeued, timeout=15, what="the job suspended and its workload pending again")
        assert row.pod_sets["podSets"][0]["count"] == 6, row.pod_sets
        assert "nvidia.com/gpu" in (row.message or ""), row.message  # 6 GPUs do not fit 3
        async with database.transaction(w.sessions) as s:
            events = (
                await s.execute(select(tables.WorkloadEvent).where(tables.WorkloadEvent.type == "Evicted"))
            ).scalars()
            assert [(e.reason, e.detail) for e in events] == [("NoMatchingWorkload", "JobChanged")]
        patch = [{"op": "replace", "path": "/spec/parallelism", "value": 2}]
        await w.kube.patch(JOBS, "ml", "sweep", patch, content_type=kube_client.JSON_PATCH)
        await eventually(lambda: runs(2), timeout=15, what="the job admitted again at parallelism 2")
