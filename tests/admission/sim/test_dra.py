"""The simulated cluster's DRA (``admission.sim.operators.dra``): a pod's claims are made from their
templates, allocated from the devices a driver publishes for a node, and freed with the pod."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest_asyncio

from admission.sim.operators import dra
from admission.sim.operators.cluster import NODES, PODS, Cluster
from admission.sim.server import resources
from admission.sim.server.object_store import ObjectStore
from tests.admission.sim.test_cluster import until

NS = resources.NAMESPACES


@pytest_asyncio.fixture
async def cluster() -> AsyncIterator[tuple[ObjectStore, Cluster]]:
    store = ObjectStore()
    store.create(NS, "", {"metadata": {"name": "ml"}}, namespaces=NS)
    store.create(
        dra.DEVICE_CLASSES,
        "",
        {
            "metadata": {"name": "gpu.nvidia.com"},
            "spec": {"selectors": [{"cel": {"expression": "device.driver == 'gpu.nvidia.com'"}}]},
        },
        namespaces=NS,
    )
    for name, count in (("one", 1), ("two", 2)):
        request = {"name": "gpus", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": count}}
        template = {"metadata": {"name": name}, "spec": {"spec": {"devices": {"requests": [request]}}}}
        store.create(dra.TEMPLATES, "ml", template, namespaces=NS)
    sim = Cluster(store, time_scale=0.01)
    await sim.start()
    yield store, sim
    await sim.stop()


def pod(name: str, template: str, runtime: str = "100") -> dict[str, Any]:
    return {
        "metadata": {"name": name, "annotations": {"turnstile.dev/sim-runtime": runtime}},
        "spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "c", "image": "x", "resources": {"claims": [{"name": "gpus"}]}}],
            "resourceClaims": [{"name": "gpus", "resourceClaimTemplateName": template}],
        },
        "status": {"phase": "Pending"},
    }


def node_of(store: ObjectStore, name: str) -> str | None:
    got: str | None = store.get(PODS, "ml", name)["spec"].get("nodeName")
    return got


def unschedulable(store: ObjectStore, name: str) -> bool:
    """The kube-scheduler said the pod cannot be scheduled (its claims cannot all be allocated)."""
    conditions = store.get(PODS, "ml", name).get("status", {}).get("conditions", [])
    return any(c.get("reason") == "Unschedulable" for c in conditions)


def allocated(store: ObjectStore) -> list[dict[str, Any]]:
    """Every device result of the claims allocated in namespace ml."""
    return [
        r
        for c in store.list(dra.CLAIMS, "ml")[0]
        for r in ((c.get("status") or {}).get("allocation") or {}).get("devices", {}).get("results", [])
    ]


def publish(store: ObjectStore, node: str, devices: list[dict[str, Any]], **more: Any) -> None:
    """A ResourceSlice of ``devices`` for ``node``, its own pool (``more``: sharedCounters...)."""
    spec = {
        "driver": "gpu.nvidia.com",
        "nodeName": node,
        "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
        "devices": devices,
        **more,
    }
    store.create(dra.SLICES, "", {"metadata": {"name": f"{node}-gpus"}, "spec": spec}, namespaces=NS)


async def test_claims_are_made_allocated_on_a_node_with_the_devices_and_freed_with_the_pod(
    cluster: tuple[ObjectStore, Cluster],
) -> None:
    store, _ = cluster
    node = {
        "metadata": {"name": "gpu-1", "annotations": {dra.GPUS_ANNOTATION: "2"}},
        "status": {"allocatable": {"cpu": "64"}},
    }
    store.create(NODES, "", {"metadata": {"name": "cpu-1"}, "status": {"allocatable": {"cpu": "64"}}}, namespaces=NS)
    store.create(NODES, "", node, namespaces=NS)
    await until(lambda: bool(store.list(dra.SLICES, None)[0]))
    store.create(PODS, "ml", pod("a", "one"), namespaces=NS)
    await until(lambda: node_of(store, "a") is not None)
    assert node_of(store, "a") == "gpu-1"  # not cpu-1: it publishes no devices
    (claim,) = store.list(dra.CLAIMS, "ml")[0]
    assert claim["metadata"]["ownerReferences"][0]["name"] == "a"
    assert claim["metadata"]["annotations"][dra.POD_CLAIM_NAME] == "gpus"
    results = claim["status"]["allocation"]["devices"]["results"]
    assert [(r["driver"], r["device"]) for r in results] == [("gpu.nvidia.com", "gpu-0")]
    assert claim["status"]["reservedFor"][0]["name"] == "a"
    statuses = store.get(PODS, "ml", "a")["status"]["resourceClaimStatuses"]
    assert statuses == [{"name": "gpus", "resourceClaimName": claim["metadata"]["name"]}]
    # Two more GPUs are asked for where one is left: the pod waits, in the kube-scheduler's words.
    store.create(PODS, "ml", pod("b", "two"), namespaces=NS)
    await until(lambda: unschedulable(store, "b"))
    (said,) = [c for c in store.get(PODS, "ml", "b")["status"]["conditions"] if c["type"] == "PodScheduled"]
    assert dra.CANNOT_ALLOCATE in said["message"]
    # The first pod goes: its claim with it, and the waiting pod gets both GPUs.
    store.delete(PODS, "ml", "a")
    await until(lambda: node_of(store, "b") == "gpu-1", timeout=10)
    (claim,) = store.list(dra.CLAIMS, "ml")[0]
    assert sorted(r["device"] for r in claim["status"]["allocation"]["devices"]["results"]) == ["gpu-0", "gpu-1"]


async def test_partitions_of_one_card_are_allocated_only_while_its_counters_last(
    cluster: tuple[ObjectStore, Cluster],
) -> None:
    """A MIG partition takes part of its card (``consumesCounters`` of the pool's ``sharedCounters``):
    a 3g partition and a 4g one overlapping it cannot both be allocated, as on a real cluster."""
    store, _ = cluster
    store.create(NODES, "", {"metadata": {"name": "h200"}, "status": {"allocatable": {"cpu": "64"}}}, namespaces=NS)

    def part(name: str, memory: str) -> dict[str, Any]:
        consumes = [{"counterSet": "gpu-0", "counters": {"memory": {"value": memory}}}]
        return {"name": name, "attributes": {"type": {"string": "mig"}}, "consumesCounters": consumes}

    counters = [{"name": "gpu-0", "counters": {"memory": {"value": "140Gi"}}}]
    devices = [part("mig-4g", "70Gi"), part("mig-7g", "140Gi"), part("mig-3g", "70Gi")]
    publish(store, "h200", devices, sharedCounters=counters)
    for name in ("a", "b", "c"):
        store.create(PODS, "ml", pod(name, "one"), namespaces=NS)
    await until(lambda: node_of(store, "a") is not None and node_of(store, "b") is not None)
    await until(lambda: unschedulable(store, "c"))
    got = sorted(r["device"] for r in allocated(store))
    assert got == ["mig-3g", "mig-4g"]  # (the 7g partition would take the whole card: never with another)


async def test_a_shared_device_serves_claims_while_its_capacity_lasts(
    cluster: tuple[ObjectStore, Cluster],
) -> None:
    """A shared GPU (``allowMultipleAllocations``) is allocated to several claims, each taking what
    its request asks of its memory rounded up by the device's policy (25Gi -> 30Gi in 10Gi steps):
    two fit in 80Gi, a third waits until one goes, as the real allocator does (KEP-5075)."""
    store, _ = cluster
    store.create(NODES, "", {"metadata": {"name": "ts"}, "status": {"allocatable": {"cpu": "64"}}}, namespaces=NS)
    policy = {"default": "10Gi", "validRange": {"min": "10Gi", "step": "10Gi"}}
    device = {
        "name": "gpu-0",
        "allowMultipleAllocations": True,
        "capacity": {"memory": {"value": "80Gi", "requestPolicy": policy}},
    }
    publish(store, "ts", [device])
    exactly = {"deviceClassName": "gpu.nvidia.com", "capacity": {"requests": {"memory": "25Gi"}}}
    request = {"name": "gpus", "exactly": exactly}
    template = {"metadata": {"name": "part"}, "spec": {"spec": {"devices": {"requests": [request]}}}}
    store.create(dra.TEMPLATES, "ml", template, namespaces=NS)
    for name in ("a", "b", "c"):
        store.create(PODS, "ml", pod(name, "part"), namespaces=NS)
    await until(lambda: node_of(store, "a") is not None and node_of(store, "b") is not None)
    await until(lambda: unschedulable(store, "c"))
    results = allocated(store)
    assert [(r["device"], r["consumedCapacity"]) for r in results] == [("gpu-0", {"memory": "30Gi"})] * 2
    assert len({r["shareID"] for r in results}) == 2
    store.delete(PODS, "ml", "a")
    await until(lambda: node_of(store, "c") == "ts", timeout=10)


async def test_a_prioritized_list_gets_the_first_alternative_a_node_can_serve(
    cluster: tuple[ObjectStore, Cluster],
) -> None:
    """``firstAvailable`` ("one H100, else two A100s"): the node that serves the first alternative is
    preferred (the kube-scheduler's prioritized-list scoring), the allocation result names the
    subrequest (``gpus/h100``), and once the H100 is taken the next pod falls back to two A100s."""
    store, _ = cluster
    for node, product, count in (("a100-node", "A100", 4), ("h100-node", "H100", 1)):
        store.create(NODES, "", {"metadata": {"name": node}, "status": {"allocatable": {"cpu": "64"}}}, namespaces=NS)
        devices = [{"name": f"gpu-{i}", "attributes": {"productName": {"string": product}}} for i in range(count)]
        publish(store, node, devices)

    def product(name: str) -> dict[str, Any]:
        expression = f"device.attributes['gpu.nvidia.com'].productName == '{name}'"
        return {"cel": {"expression": expression}}

    alternatives = [
        {"name": "h100", "deviceClassName": "gpu.nvidia.com", "selectors": [product("H100")]},
        {"name": "a100", "deviceClassName": "gpu.nvidia.com", "count": 2, "selectors": [product("A100")]},
    ]
    request = {"name": "gpus", "firstAvailable": alternatives}
    template = {"metadata": {"name": "either"}, "spec": {"spec": {"devices": {"requests": [request]}}}}
    store.create(dra.TEMPLATES, "ml", template, namespaces=NS)
    store.create(PODS, "ml", pod("a", "either"), namespaces=NS)
    await until(lambda: node_of(store, "a") is not None)
    assert node_of(store, "a") == "h100-node"  # (listed second, preferred: its node serves gpus/h100)
    assert [(r["request"], r["device"]) for r in allocated(store)] == [("gpus/h100", "gpu-0")]
    store.create(PODS, "ml", pod("b", "either"), namespaces=NS)
    await until(lambda: node_of(store, "b") is not None)
    assert node_of(store, "b") == "a100-node"
    got = sorted((r["request"], r["device"]) for r in allocated(store))
    assert got == [("gpus/a100", "gpu-0"), ("gpus/a100", "gpu-1"), ("gpus/h100", "gpu-0")]
