"""DRA in the running system: a job whose pods claim GPUs through a ResourceClaimTemplate is
charged as its DeviceClass's mapping says, over the real informers and the webhook's view; one
whose template does not exist yet waits Misconfigured and is charged once it is created."""

from __future__ import annotations

import dataclasses
import re
from fractions import Fraction
from pathlib import Path
from typing import Any

from sqlalchemy import select

from admission import views
from admission.controller.objects.workload_projection import WORKLOADS
from admission.controller.watch.device_catalog import DEVICE_CLASSES, NODES, RESOURCE_CLAIM_TEMPLATES, RESOURCE_SLICES
from admission.policy import DEFAULT_POLICY
from admission.sim.operators import autoscaler as sim_autoscaler
from admission.store import card_fractions, database, tables
from queues.dra import mappings
from tests.admission.controller.world import eventually, world


def queue_config(gpus: str, flavor_spec: str = "") -> str:
    """One ClusterQueue with ``gpus`` whole-gpus on flavor h100 (its ``spec``, if given), and its LocalQueue."""
    return f"""
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {{name: h100}}
{flavor_spec}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {{name: gpus}}
spec:
  namespaceSelector: {{}}
  resourceGroups:
  - coveredResources: [whole-gpus]
    flavors:
    - name: h100
      resources: [{{name: whole-gpus, nominalQuota: "{gpus}"}}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {{name: user-queue, namespace: ml}}
spec: {{clusterQueue: gpus}}
"""


CONFIG = queue_config("2")


def claiming(name: str, template: str) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": "ml", "labels": {"kueue.x-k8s.io/queue-name": "user-queue"}},
        "spec": {
            "suspend": True,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "c", "image": "x", "resources": {"claims": [{"name": "gpus"}]}}],
                    "resourceClaims": [{"name": "gpus", "resourceClaimTemplateName": template}],
                }
            },
        },
    }


def two_gpus(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": "ml"},
        "spec": {
            "spec": {
                "devices": {
                    "requests": [{"name": "gpus", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 2}}]
                }
            }
        },
    }


async def rows(w) -> dict[str, tuple[str, str | None, str | None]]:  # type: ignore[no-untyped-def]
    async with database.transaction(w.sessions) as s:
        found = await s.execute(
            select(tables.Workload.name, tables.Workload.state, tables.Workload.reason, tables.Workload.message)
        )
        return {name: (state, reason, message) for name, state, reason, message in found.all()}


async def test_claims_are_charged_a_second_waits_and_a_missing_template_holds_until_created(
    tmp_path: Path, migrated_url: str
) -> None:
    policy = dataclasses.replace(
        DEFAULT_POLICY, device_mappings=mappings.parse([{"name": "whole-gpus", "deviceClassNames": ["gpu.nvidia.com"]}])
    )
    async with world(tmp_path, migrated_url) as w:
        await w.apply(CONFIG)
        await w.kube.create(RESOURCE_CLAIM_TEMPLATES, "ml", two_gpus("two-gpus"))
        w.start_controller("replica-1", policy=policy)
        await w.create(claiming("first", "two-gpus"))
        await w.create(claiming("later", "not-yet"))

        async def settled() -> dict[str, Any] | None:
            now = await rows(w)
            return now if now.get("first", ("",))[0] == "Admitted" and "later" in now else None

        now = await eventually(settled, what="first admitted, later stored")
        state, reason, message = now["later"]
        assert (state, reason) == ("Pending", "Misconfigured"), now["later"]
        assert "ResourceClaimTemplate ml/not-yet" in str(message)
        assert not (await w.get("first"))["spec"]["suspend"]
        async with database.transaction(w.sessions) as s:  # describe (and the dashboard) name the claim's charge
            first, later = await views.describe(s, "Workload", "first"), await views.describe(s, "Workload", "later")
        assert "Devices (DRA): main: claim gpus (ResourceClaimTemplate two-gpus): whole-gpus 2 per pod" in first, first
        assert "Devices (DRA): main: claim gpus (ResourceClaimTemplate not-yet): not charged" in later, later
        # The template comes: the waiting job is charged (2 GPUs) and waits for quota, as first holds it all.
        await w.kube.create(RESOURCE_CLAIM_TEMPLATES, "ml", two_gpus("not-yet"))

        async def charged() -> tuple[str, str | None, str | None] | None:
            later = (await rows(w))["later"]
            return later if later[1] not in (None, "Misconfigured") else None

        state, reason, message = await eventually(charged, what="later charged once its template exists")
        assert (state, reason) == ("Pending", "WaitingForQuota"), (state, reason, message)
        assert "whole-gpus" in str(message)
        assert (await w.get("later"))["spec"]["suspend"] is True


def resource_slice(node: str, devices: list[dict[str, Any]], **spec: Any) -> dict[str, Any]:
    """What NVIDIA's DRA driver publishes for ``node``: ``devices`` (and ``spec``'s other fields)."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-gpu.nvidia.com"},
        "spec": {
            "driver": "gpu.nvidia.com",
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": devices,
            **spec,
        },
    }


def mig_card(node: str, memory: str) -> dict[str, Any]:
    """A MIG-partitioned card: its memory, and a partition of it."""
    partition = {
        "name": "gpu-0-mig-0",
        "attributes": {"type": {"string": "mig"}, "profile": {"string": "1g.18gb"}},
        "consumesCounters": [{"counterSet": "gpu-0", "counters": {"memory": {"value": "16Gi"}}}],
    }
    return resource_slice(
        node, [partition], sharedCounters=[{"name": "gpu-0", "counters": {"memory": {"value": memory}}}]
    )


async def test_the_leader_records_what_part_of_a_card_the_devices_say_a_unit_is(
    tmp_path: Path, migrated_url: str
) -> None:
    """MIG partitions charged by memory: with only H200s (140Gi) published, a GiB is 1/140 of a card,
    read off the slices and recorded for ``turnstile usage`` (no TURNSTILE_GPU_FRACTIONS needed);
    the dashboard's replica bills the same. Once an 80Gi card joins there is no one answer, and the
    record goes (the operator's TURNSTILE_GPU_FRACTIONS would say it)."""
    source = {
        "counter": {"name": "memory", "driver": "gpu.nvidia.com", "deviceSelector": {"cel": {"expression": "true"}}}
    }
    raw = [{"name": "gpu.memory", "deviceClassNames": ["mig.nvidia.com"], "sources": [source]}]
    policy = dataclasses.replace(DEFAULT_POLICY, device_mappings=mappings.parse(raw))
    mig_class = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": "mig.nvidia.com"},
        "spec": {"selectors": [{"cel": {"expression": "device.attributes['gpu.nvidia.com'].type == 'mig'"}}]},
    }
    async with world(tmp_path, migrated_url) as w:
        await w.apply(CONFIG)
        await w.kube.create(DEVICE_CLASSES, None, mig_class)
        await w.kube.create(RESOURCE_SLICES, None, mig_card("n1", "140Gi"))
        controller = w.start_controller("replica-1", policy=policy)

        async def recorded() -> dict[str, Fraction]:
            async with database.transaction(w.sessions) as s:
                return await card_fractions.get(s)

        h200 = {"gpu.memory": Fraction(1, 140 * 2**30)}
        assert await eventually(lambda: _equal(recorded, h200), what="the H200s' part of a card recorded")
        assert controller.features.card_shares.fractions() == h200
        await w.kube.create(RESOURCE_SLICES, None, mig_card("n2", "80Gi"))
        await eventually(lambda: _equal(recorded, {}), what="no one part of a card once the cards differ")
        assert controller.features.card_shares.fractions() == {}


async def _equal(read: Any, expected: dict[str, Fraction]) -> bool:
    return bool(await read() == expected)


ONE_H100_ELSE_TWO_A100 = queue_config("1", "spec: {nodeLabels: {gpu-type: h100}}")


def cards(node: str, product: str, n: int) -> dict[str, Any]:
    """``n`` whole GPUs of ``product``."""
    return resource_slice(
        node, [{"name": f"gpu-{i}", "attributes": {"productName": {"string": product}}} for i in range(n)]
    )


def prefix(product: str) -> list[dict[str, Any]]:
    return [{"cel": {"expression": f"device.attributes['gpu.nvidia.com'].productName.startsWith('{product}')"}}]


async def test_a_prioritized_list_is_charged_the_alternative_its_flavor_nodes_serve(
    tmp_path: Path, migrated_url: str
) -> None:
    """A prioritized list, "one H100, else two A100s", on a ClusterQueue with one GPU on an H100 flavor: while no Node
    carries the flavor's label the list costs its largest (two: more than the queue has), and once
    the H100 node is labelled it costs the one H100 and is admitted, with its Workload object
    saying so."""
    policy = dataclasses.replace(
        DEFAULT_POLICY, device_mappings=mappings.parse([{"name": "whole-gpus", "deviceClassNames": ["gpu.nvidia.com"]}])
    )
    gpu_class = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": "gpu.nvidia.com"},
        "spec": {"selectors": [{"cel": {"expression": "device.driver == 'gpu.nvidia.com'"}}]},
    }
    listed = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "h100-else-two-a100", "namespace": "ml"},
        "spec": {
            "spec": {
                "devices": {
                    "requests": [
                        {
                            "name": "gpus",
                            "firstAvailable": [
                                {
                                    "name": "h100",
                                    "deviceClassName": "gpu.nvidia.com",
                                    "selectors": prefix("NVIDIA H100"),
                                },
                                {
                                    "name": "a100",
                                    "deviceClassName": "gpu.nvidia.com",
                                    "count": 2,
                                    "selectors": prefix("NVIDIA A100"),
                                },
                            ],
                        }
                    ]
                }
            }
        },
    }
    async with world(tmp_path, migrated_url) as w:
        await w.apply(ONE_H100_ELSE_TWO_A100)
        await w.kube.create(DEVICE_CLASSES, None, gpu_class)
        await w.kube.create(RESOURCE_CLAIM_TEMPLATES, "ml", listed)
        for node, product, n in (("h100-node", "NVIDIA H100 80GB HBM3", 1), ("a100-node", "NVIDIA A100-SXM4-40GB", 2)):
            await w.kube.create(NODES, None, sim_autoscaler.node_object(node, {"capacity": {"cpu": "8"}}))
            await w.kube.create(RESOURCE_SLICES, None, cards(node, product, n))
        w.start_controller("replica-1", policy=policy)
        await w.create(claiming("first", "h100-else-two-a100"))

        async def waiting() -> tuple[str, str | None, str | None] | None:
            first = (await rows(w)).get("first")
            return first if first is not None and first[1] not in (None, "Misconfigured") else None

        state, reason, message = await eventually(waiting, what="first charged its largest alternative")
        assert state == "Pending" and "whole-gpus" in str(message), (state, reason, message)
        await w.kube.patch(NODES, None, "h100-node", {"metadata": {"labels": {"gpu-type": "h100"}}})

        async def admitted() -> dict[str, Any] | None:
            for obj in (await w.kube.request("GET", WORKLOADS.path("ml"))).get("items") or []:
                if obj["metadata"]["name"].startswith("job-first-") and (obj.get("status") or {}).get("admission"):
                    return dict(obj["status"]["admission"])
            return None

        admission = await eventually(admitted, what="first admitted on the H100 flavor", timeout=20)
        (assignment,) = admission["podSetAssignments"]
        assert assignment["flavors"] == {"whole-gpus": "h100"} and assignment["resourceUsage"] == {"whole-gpus": "1"}
        async with database.transaction(w.sessions) as s:
            described = await views.describe(s, "Workload", "first")
        assert (
            "(ResourceClaimTemplate h100-else-two-a100): whole-gpus 2 per pod, on flavor h100 whole-gpus 1" in described
        )
        assert re.search(r"whole-gpus\s*│\s*1\s*│\s*h100", described), described  # (what it needs on the flavor)
