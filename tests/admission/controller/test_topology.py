"""Topology-aware placement through the controller, on the simulated cluster's Nodes.

Two racks of two 4-GPU nodes. The controller lists the Nodes once a ResourceFlavor names a
Topology, places each job by topology at admission, starts it with Kueue's
``kueue.x-k8s.io/topology`` gate on its template and pins each pod to its node (a hostname
nodeSelector) before ungating it: pods really run where the placement says, in rank order. A
deleted node evicts what was placed there (``NodeFailures``), which is placed again; a restart
keeps every placement's nodes held.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from sqlalchemy import select

from admission import views
from admission.kube.client import ResourceRef
from admission.sim.operators.cluster import PODS
from admission.store import database, tables
from tests.admission.controller.world import World, eventually, job, world

NODES = ResourceRef("v1", "Node", "nodes", namespaced=False)
RACK = "cloud.provider.com/topology-rack"
HOST = "kubernetes.io/hostname"
GATE = "kueue.x-k8s.io/topology"
CONFIG = """
apiVersion: kueue.x-k8s.io/v1beta2
kind: Topology
metadata: {name: racks}
spec:
  levels: [{nodeLabel: cloud.provider.com/topology-rack}, {nodeLabel: kubernetes.io/hostname}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: h100}
spec: {nodeLabels: {gpu: h100}, topologyName: racks}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: team-a}
spec:
  namespaceSelector: {}
  preemption: {withinClusterQueue: LowerPriority}
  resourceGroups:
  - coveredResources: [nvidia.com/gpu]
    flavors: [{name: h100, resources: [{name: nvidia.com/gpu, nominalQuota: "16"}]}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: team-a, namespace: ml}
spec: {clusterQueue: team-a}
"""


def node(name: str, rack: str, gpus: int = 4) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {RACK: rack, HOST: name, "gpu": "h100"}},
        "status": {
            "capacity": {"nvidia.com/gpu": str(gpus), "cpu": "64"},
            "allocatable": {"nvidia.com/gpu": str(gpus), "cpu": "64"},
        },
    }


def gang(name: str, pods: int, *, level: str | None = None, runtime: float | None = None) -> dict[str, Any]:
    """An Indexed Job of ``pods`` 1-GPU pods, asking for one domain of ``level`` if given."""
    obj = job(name, gpus=1, runtime=runtime)
    obj["spec"].update(parallelism=pods, completions=pods, completionMode="Indexed")
    if level is not None:
        obj["spec"]["template"]["metadata"] = {"annotations": {"kueue.x-k8s.io/podset-required-topology": level}}
    return obj


async def cluster(w: World) -> None:
    for name, rack in (("r0-a", "r0"), ("r0-b", "r0"), ("r1-a", "r1"), ("r1-b", "r1")):
        await w.kube.create(NODES, None, node(name, rack))
    await w.apply(CONFIG)


def pods_of(w: World, name: str) -> dict[str, dict[str, Any]]:
    items = w.host.server.store.list(PODS, "ml")[0]
    return {
        p["metadata"]["name"]: p
        for p in items
        if p["metadata"]["name"].startswith(f"{name}-") and not p["metadata"].get("deletionTimestamp")
    }


def where(w: World, name: str, count: int) -> dict[str, str] | None:
    """Pod -> node, once all ``count`` pods of job ``name`` run (else None)."""
    pods = pods_of(w, name)
    if len(pods) != count or any(p["status"].get("phase") != "Running" for p in pods.values()):
        return None
    return {n: p["spec"]["nodeName"] for n, p in pods.items()}


async def _row(w: World, name: str) -> Any:
    async with database.transaction(w.sessions) as s:
        return (await s.execute(select(tables.Workload).where(tables.Workload.name == name))).scalar_one_or_none()


async def test_pods_land_on_the_nodes_their_placement_names_in_rank_order(tmp_path: Path, migrated_url: str) -> None:
    async with world(tmp_path, migrated_url) as w:
        await cluster(w)
        w.start_controller("replica-1")
        await w.create(gang("small", 2))  # implicit TAS (every flavor of the queue is a TAS flavor)
        small = await eventually(lambda: where(w, "small", 2), what="the 2-pod job running")
        assert len(set(small.values())) == 1, f"two 1-GPU pods packed on one node, not spread: {small}"
        await w.create(gang("rack", 6, level=RACK))
        placed = await eventually(lambda: where(w, "rack", 6), what="the 6-pod job running")
        racks = {n[:2] for n in placed.values()}
        assert len(racks) == 1, f"required one rack: {placed}"
        assert small[next(iter(small))][:2] in racks, "best fit: the rack it fills exactly, the other stays whole"
        # ranks in order: neighbouring completion indexes share a node, nodes taken in topology order
        by_rank = {int(p["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"]): placed[n]
                   for n, p in pods_of(w, "rack").items()}  # fmt: skip
        in_order = [by_rank[i] for i in range(6)]
        assert in_order == sorted(in_order) and len(set(in_order)) == 2, by_rank
        for p in pods_of(w, "rack").values():
            assert p["spec"]["nodeSelector"][HOST] == p["spec"]["nodeName"], "pinned by a hostname nodeSelector"
            assert GATE not in [g["name"] for g in p["spec"].get("schedulingGates") or []]
        template = (await w.get("rack"))["spec"]["template"]
        assert [g["name"] for g in template["spec"]["schedulingGates"]] == [GATE]
        assert template["metadata"]["annotations"]["turnstile.dev/workload"] == "ml/rack"
        row = await _row(w, "rack")
        placement = row.assigned_flavors["placement"]["main"]
        assert Counter(placed.values()) == Counter({n: c for n, c in placement.items()})
        async with database.transaction(w.sessions) as s:
            described = await views.describe(s, "Workload", "rack")
        shown = ", ".join(f"{n} x{c}" for n, c in sorted(placement.items()))
        assert f"Placement:     main: {shown}" in described, described


async def test_a_job_that_fits_no_rack_waits_and_says_why(tmp_path: Path, migrated_url: str) -> None:
    async with world(tmp_path, migrated_url) as w:
        await cluster(w)
        w.start_controller("replica-1")
        await w.create(gang("wide", 10, level=RACK))  # 10 GPUs fit the quota (16), no rack (8)

        async def waiting() -> Any:
            r = await _row(w, "wide")
            return r if r is not None and r.message and "rack" in r.message else None

        r = await eventually(waiting, what="a message about the rack")
        assert r.state == "Pending"
        assert "10 pods" in r.message, r.message
        assert r.reason == "TopologyPlacementFailed", r.reason  # (Kueue's reason: the quota fits, no rack does)
        assert (await w.get("wide"))["spec"]["suspend"] is True
        async with database.transaction(w.sessions) as s:
            described = await views.describe(s, "Workload", "wide")
        assert "fits now" not in described, described
        assert "Preemption:    none possible: its quota fits, but no nodes hold it" in described, described


async def test_a_deleted_node_evicts_what_was_placed_there_and_it_is_placed_again(
    tmp_path: Path, migrated_url: str
) -> None:
    async with world(tmp_path, migrated_url) as w:
        await cluster(w)
        w.start_controller("replica-1")
        await w.create(gang("host", 4, level=HOST))
        first = await eventually(lambda: where(w, "host", 4), what="the 4-pod job on one node")
        (lost,) = set(first.values())
        await w.kube.request("DELETE", NODES.path(None, lost))

        async def elsewhere() -> dict[str, str] | None:
            now = where(w, "host", 4)
            return now if now and lost not in now.values() else None

        again = await eventually(elsewhere, timeout=20, what="the job placed again on a node left")
        assert len(set(again.values())) == 1
        events = await w.kube.request("GET", "/api/v1/namespaces/ml/events")
        evicted = [e["message"] for e in events["items"] if e["reason"] == "Evicted"]
        assert any("NodeFailures" in m and lost in m for m in evicted), evicted


async def test_a_restarted_controller_keeps_the_placed_nodes_held(tmp_path: Path, migrated_url: str) -> None:
    async with world(tmp_path, migrated_url) as w:
        await cluster(w)
        first = w.start_controller("replica-1")
        await w.create(gang("one", 4, level=HOST))
        held = await eventually(lambda: where(w, "one", 4), what="the first job running")
        await w.stop_controller(first)
        w.start_controller("replica-2")
        for name in ("two", "three", "four"):
            await w.create(gang(name, 4, level=HOST))
        nodes = {}
        for name in ("two", "three", "four"):
            placed = await eventually(lambda n=name: where(w, n, 4), timeout=20, what=f"{name} running")
            nodes[name] = set(placed.values())
        used = [next(iter(n)) for n in nodes.values()] + list(set(held.values()))
        assert len(set(used)) == 4, f"every job on a node of its own, the held one too: {nodes} {held}"


async def test_a_node_cordoned_before_its_pods_started_there_is_left_for_another(
    tmp_path: Path, migrated_url: str
) -> None:
    async with world(tmp_path, migrated_url) as w:
        await cluster(w)
        controller = w.start_controller("replica-1")
        controller.features.placement.pinner.request = lambda key: None  # type: ignore[method-assign]  # (its pods stay gated)
        await w.create(gang("host", 4, level=HOST))

        async def placed() -> dict[str, int] | None:
            r = await _row(w, "host")
            return r.assigned_flavors["placement"]["main"] if r is not None and r.state == "Admitted" else None

        first = await eventually(placed, what="the job placed")
        (node,) = first
        await eventually(lambda: len(pods_of(w, "host")) == 4, what="its pods made, gated")
        await w.kube.patch(NODES, None, node, {"spec": {"unschedulable": True}})

        async def elsewhere() -> dict[str, int] | None:
            now = await placed()
            return now if now and node not in now else None

        again = await eventually(elsewhere, timeout=20, what="placed again on another node")
        assert sum(again.values()) == 4
        events = await w.kube.request("GET", "/api/v1/namespaces/ml/events")
        evicted = [e["message"] for e in events["items"] if e["reason"] == "Evicted"]
        assert any("NodeFailures (NodeUnschedulable)" in m and f"node {node}" in m for m in evicted), evicted
