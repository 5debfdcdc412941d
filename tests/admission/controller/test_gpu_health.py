"""GPU health end to end: a Node's GPUs report Xid 79 through the simulated dcgm-exporter, a real
Prometheus scrapes it, and the leader evicts the job running there (``NodeFailures``, naming the
node, GPU and Xid), taints the node, and the job runs again elsewhere; clearing the Xid takes
the taint off."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from sqlalchemy import select

from admission.kube.client import ResourceRef
from admission.policy import Policy
from admission.sim.operators import autoscaler as sim_autoscaler
from admission.sim.operators import dcgm
from admission.store import database, tables
from queues.gpus.gpu_health import TAINT
from tests.admission.controller.test_metering import CONFIG, NODE, scraping
from tests.admission.controller.world import World, eventually, job, world
from tests.prometheus import needs_prometheus, running

pytestmark = needs_prometheus

NODES = ResourceRef("v1", "Node", "nodes", namespaced=False)


async def _nodes_of(w: World, name: str) -> set[str]:
    """The nodes ``name``'s live pods are bound to."""
    listed = await w.kube.request("GET", "/api/v1/namespaces/ml/pods")
    return {
        p["spec"]["nodeName"]
        for p in listed["items"]
        if p["metadata"].get("labels", {}).get("job-name") == name
        and p["spec"].get("nodeName")
        and not p["metadata"].get("deletionTimestamp")
        and p.get("status", {}).get("phase") in ("Pending", "Running")
    }


async def _evictions(w: World, name: str) -> list[Any]:
    """The workload's stored evictions (reason, detail)."""
    async with database.transaction(w.sessions) as s:
        rows = await s.execute(
            select(tables.WorkloadEvent.reason, tables.WorkloadEvent.detail)
            .join(tables.Workload, tables.Workload.id == tables.WorkloadEvent.workload_id)
            .where(tables.Workload.name == name, tables.WorkloadEvent.type == "Evicted")
        )
        return [tuple(r) for r in rows]


async def _job_events(w: World, name: str) -> list[tuple[str, str]]:
    events = await w.kube.request("GET", "/api/v1/namespaces/ml/events")
    return [(e["reason"], e["message"]) for e in events["items"] if e["involvedObject"]["name"] == name]


async def _node_events(w: World, node: str) -> list[tuple[str, str]]:
    events = await w.kube.request("GET", "/api/v1/namespaces/default/events")
    return [(e["reason"], e["message"]) for e in events["items"] if e["involvedObject"]["name"] == node]


async def test_an_xid_79_evicts_the_job_on_that_node_taints_it_and_the_job_runs_elsewhere(
    tmp_path: Path, migrated_url: str
) -> None:
    async with world(tmp_path, migrated_url) as w:
        for name in ("gpu-1", "gpu-2"):
            await w.kube.create(NODES, None, sim_autoscaler.node_object(name, NODE))
        await w.apply(CONFIG)
        target = urlparse(w.host.url).netloc
        async with running(tmp_path / "prometheus", target, dcgm.PATH, honor_labels=False) as prometheus:
            await scraping(prometheus)
            w.start_controller("replica-1", policy=Policy(prometheus_url=prometheus, reclaim_interval=0.5))
            await w.create(job("train", gpus=4))
            (first,) = await eventually(lambda: _nodes_of(w, "train"), timeout=20, what="train's pods bound")
            other = "gpu-2" if first == "gpu-1" else "gpu-1"

            await w.kube.patch(NODES, None, first, {"metadata": {"annotations": {dcgm.XID_ANNOTATION: "79"}}})
            (evicted,) = await eventually(lambda: _evictions(w, "train"), timeout=30, what="a NodeFailures eviction")
            assert evicted == ("NodeFailures", "GPUUnhealthy"), evicted

            async def said() -> list[str]:
                return [m for r, m in await _job_events(w, "train") if r == "Evicted"]

            # the node, a GPU and the Xid, in the job's Event
            (message,) = await eventually(said, timeout=10, what="the eviction's Event on the job")
            assert message.startswith("evicted: NodeFailures (GPUUnhealthy): "), message
            # (the simulated node's eight GPUs all report it)
            assert f"node {first} GPUs 0-7 reported Xid 79 (GPU has fallen off the bus), where its pods ran" in message

            async def tainted() -> Any:
                node = await w.kube.get(NODES, None, first)
                return [t for t in node["spec"].get("taints") or [] if t["key"] == TAINT]

            (taint,) = await eventually(tainted, timeout=20, what="the node tainted")
            assert taint == {"key": TAINT, "value": "Xid-79", "effect": "NoSchedule"}, taint
            assert any(r == "GPUUnhealthy" and "Xid 79" in m for r, m in await _node_events(w, first))

            async def elsewhere() -> bool:
                return await _nodes_of(w, "train") == {other}

            await eventually(elsewhere, timeout=30, what="train running again on the healthy node")

            # the GPU is reset (the exporter no longer reports the Xid): the taint comes off
            await w.kube.patch(NODES, None, first, {"metadata": {"annotations": {dcgm.XID_ANNOTATION: None}}})

            async def untainted() -> bool:
                return not await tainted()

            await eventually(untainted, timeout=30, what="the taint taken off")
            assert any(r == "GPUHealthy" for r, _ in await _node_events(w, first))
            assert len(await _evictions(w, "train")) == 1  # (evicted once; its new pods were elsewhere)


async def test_an_application_xid_changes_nothing(tmp_path: Path, migrated_url: str) -> None:
    """Xid 13 (graphics engine exception) is the job's own fault: the GPU stays healthy."""
    async with world(tmp_path, migrated_url) as w:
        await w.kube.create(NODES, None, sim_autoscaler.node_object("gpu-1", NODE))
        await w.apply(CONFIG)
        target = urlparse(w.host.url).netloc
        async with running(tmp_path / "prometheus", target, dcgm.PATH, honor_labels=False) as prometheus:
            await scraping(prometheus)
            controller = w.start_controller("replica-1", policy=Policy(prometheus_url=prometheus, reclaim_interval=0.5))
            await w.create(job("train", gpus=4))
            await eventually(lambda: _nodes_of(w, "train"), timeout=20, what="train's pods bound")
            await w.kube.patch(NODES, None, "gpu-1", {"metadata": {"annotations": {dcgm.XID_ANNOTATION: "13"}}})
            reads = controller.features.reclaimer.failures, controller.features.reclaimer.read_at

            async def read_again() -> bool:
                return controller.features.reclaimer.read_at > reads[1] + 2.0  # (a scrape and a read after the Xid)

            await eventually(read_again, timeout=20, what="reads after the Xid")
            assert controller.features.gpu_health.faults == {}
            assert await _evictions(w, "train") == []
            node = await w.kube.get(NODES, None, "gpu-1")
            assert not [t for t in node["spec"].get("taints") or [] if t["key"] == TAINT]
