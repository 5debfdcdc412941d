"""Resource transformations in the running system: ``TURNSTILE_RESOURCE_TRANSFORMATIONS`` (Kueue's
``resources.transformations``) read as the process reads it, HAMi's per-vGPU memory counted as a
total by the controller, and a job whose total would pass the quota waiting for it."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from sqlalchemy import select

from admission.policy import DEFAULT_POLICY, parse_transformations
from admission.settings import Settings
from admission.store import database, tables
from tests.admission.controller.world import eventually, world

CONFIG = """
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: hami-flavor}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: hami-queue}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [nvidia.com/gpu, nvidia.com/total-gpumem]
    flavors:
    - name: hami-flavor
      resources:
      - {name: nvidia.com/gpu, nominalQuota: 20}
      - {name: nvidia.com/total-gpumem, nominalQuota: 8192}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: user-queue, namespace: ml}
spec: {clusterQueue: hami-queue}
"""

TRANSFORMATIONS = """
- input: nvidia.com/gpumem
  strategy: Replace
  multiplyBy: nvidia.com/gpu
  outputs: {nvidia.com/total-gpumem: "1"}
"""


def vgpu_job(name: str, vgpus: str, memory: str) -> dict[str, Any]:
    limits = {"nvidia.com/gpu": vgpus, "nvidia.com/gpumem": memory, "example.com/telemetry": "1"}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": "ml", "labels": {"kueue.x-k8s.io/queue-name": "user-queue"}},
        "spec": {
            "suspend": True,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "main", "image": "gpu-burn", "resources": {"limits": limits}}],
                }
            },
        },
    }


async def stored(w) -> dict[str, tuple[str, str | None, str | None, Any]]:  # type: ignore[no-untyped-def]
    async with database.transaction(w.sessions) as s:
        found = await s.execute(
            select(tables.Workload.name, tables.Workload.state, tables.Workload.reason, tables.Workload.message,
                   tables.Workload.pod_sets)
        )  # fmt: skip
        return {name: (state, reason, message, pod_sets) for name, state, reason, message, pod_sets in found.all()}


async def test_per_vgpu_memory_is_charged_as_a_total_and_the_next_job_waits_for_it(
    tmp_path: Path, migrated_url: str
) -> None:
    settings = Settings(resource_transformations=TRANSFORMATIONS, exclude_resource_prefixes="example.com/")
    policy = dataclasses.replace(
        DEFAULT_POLICY,
        transformations=parse_transformations(settings.resource_transformations, settings.exclude_resource_prefixes),
    )
    async with world(tmp_path, migrated_url) as w:
        await w.apply(CONFIG)
        w.start_controller("replica-1", policy=policy)
        await w.create(vgpu_job("big", "2", "3072"))  # 6 GiB of vGPU memory in all, of 8
        await eventually(lambda: _state(w, "big", "Admitted"), what="big admitted")
        await w.create(vgpu_job("next", "1", "4096"))  # 4 more: over the quota, though vGPUs are free
        now = await eventually(lambda: _state(w, "next", "Pending", reason="WaitingForQuota"), what="next waiting")
        assert "nvidia.com/total-gpumem" in str(now["next"][2]), now["next"]
        assert not (await w.get("big"))["spec"]["suspend"] and (await w.get("next"))["spec"]["suspend"]
        (pod_set,) = now["big"][3]["podSets"]
        assert pod_set["requests"] == {"nvidia.com/gpu": "2000", "nvidia.com/total-gpumem": "6144000"}
        assert pod_set["containerRequests"] == {
            "nvidia.com/gpu": "2000", "nvidia.com/gpumem": "3072000", "example.com/telemetry": "1000"
        }  # fmt: skip


async def _state(w, name: str, state: str, *, reason: str | None = None) -> Any:  # type: ignore[no-untyped-def]
    now = await stored(w)
    row = now.get(name)
    return now if row is not None and row[0] == state and (reason is None or row[1] == reason) else None
