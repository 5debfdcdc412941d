"""waitForPodsReady through the controller: a job admitted by quota whose pods no node can take is
evicted (PodsReadyTimeout, with an Event), requeued after its backoff, and deactivated past the limit;
a job whose pods become Ready keeps running, and that it was Ready survives a restart."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

from sqlalchemy import select

from admission.controller.objects.workload_projection import WORKLOADS
from admission.kube.client import ResourceRef
from admission.policy import Policy
from admission.sim.operators import autoscaler as sim_autoscaler
from admission.store import database, tables
from queues import podsready
from tests.admission.controller.world import CONFIG, JOBS, World, eventually, job, world
from tests.admission.runner import turnstile

NODES = ResourceRef("v1", "Node", "nodes", namespaced=False)
NODE = {"labels": {"gpu": "a100"}, "capacity": {"cpu": "32", "memory": "256Gi", "nvidia.com/gpu": "4"}}
FAST = Policy(
    pods_ready=podsready.WaitForPodsReady(timeout=1.5, recovery_timeout=1.5, backoff_base_seconds=0.5,
                                          backoff_limit_count=1)
)  # fmt: skip


async def _row(w: World, name: str) -> Any:
    async with database.transaction(w.sessions) as s:
        return (await s.execute(select(tables.Workload).where(tables.Workload.name == name))).scalar_one_or_none()


async def _workload_object(w: World, job_name: str) -> Any:
    """The job's Kueue Workload object (``job-<name>-<uid prefix>``), if written yet."""
    listed = await w.kube.request("GET", WORKLOADS.path("ml"))
    found = [o for o in listed.get("items") or [] if o["metadata"]["name"].startswith(f"job-{job_name}-")]
    return found[0] if found else None


def _condition(obj: Any, kind: str) -> tuple[str, str, str]:
    found = next((c for c in obj["status"].get("conditions") or [] if c["type"] == kind), None)
    return (found["status"], found["reason"], found["message"]) if found else ("", "", "")


async def _events(w: World, name: str, reason: str) -> list[str]:
    events = await w.kube.request("GET", "/api/v1/namespaces/ml/events")
    return [e["message"] for e in events["items"] if e["involvedObject"]["name"] == name and e["reason"] == reason]


async def test_a_job_no_node_can_take_is_evicted_requeued_then_deactivated(tmp_path: Path, migrated_url: str) -> None:
    async with world(tmp_path, migrated_url) as w:
        await w.kube.create(NODES, None, sim_autoscaler.node_object("gpu-1", NODE))
        await w.apply(CONFIG)
        w.start_controller("replica-1", policy=FAST)
        await w.create(job("too-wide", gpus=6))  # 6 GPUs fit the quota (8), not the 4-GPU node

        async def evicted_once() -> list[str]:
            return await _events(w, "too-wide", "PodsReadyTimeout")

        (first, *_) = await eventually(evicted_once, what="a PodsReadyTimeout eviction")
        assert "Exceeded the PodsReady timeout ml/too-wide" in first
        assert "queues again after a 0s backoff (retry 1)" in first or "backoff (retry 1)" in first

        async def deactivated() -> Any:
            r = await _row(w, "too-wide")
            return r if r is not None and not r.active else None

        r = await eventually(deactivated, timeout=15, what="deactivated after its second timeout")
        assert (r.state, r.reason, r.retries) == ("Pending", "Inactive", 2)
        assert "requeued 1 times, the limit (backoffLimitCount)" in r.message

        async def shown_requeued() -> Any:  # its Kueue Workload object: requeueState and PodsReady
            obj = await _workload_object(w, "too-wide")
            return obj if obj is not None and (obj["status"].get("requeueState") or {}).get("count") == 2 else None

        obj = await eventually(shown_requeued, what="the Workload object's requeueState.count 2")
        assert _condition(obj, "PodsReady")[:3] == ("False", "WaitForStart", "Not all pods are ready or succeeded")
        assert _condition(obj, "Evicted")[:2] == ("True", "PodsReadyTimeout")

        async def suspended() -> bool:  # (the enactor suspends it once the eviction is committed)
            return (await w.kube.get(JOBS, "ml", "too-wide"))["spec"]["suspend"] is True

        await eventually(suspended, what="its job suspended and its pods gone")
        async with database.transaction(w.sessions) as s:
            history = (
                await s.execute(
                    select(tables.WorkloadEvent.type, tables.WorkloadEvent.reason, tables.WorkloadEvent.detail)
                    .where(tables.WorkloadEvent.workload_id == r.id)
                    .order_by(tables.WorkloadEvent.id)
                )
            ).all()
        assert [tuple(h) for h in history] == [
            ("Admitted", None, None),
            ("Evicted", "PodsReadyTimeout", "Timeout"),
            ("Admitted", None, None),
            ("Evicted", "PodsReadyTimeout", "RequeuingLimitExceeded"),
        ]


async def test_a_ready_job_runs_on_and_its_readiness_is_stored(tmp_path: Path, migrated_url: str) -> None:
    async with world(tmp_path, migrated_url) as w:
        await w.kube.create(NODES, None, sim_autoscaler.node_object("gpu-1", NODE))
        await w.apply(CONFIG)
        w.start_controller("replica-1", policy=FAST)
        await w.create(job("fits", gpus=4))

        async def ready() -> Any:
            r = await _row(w, "fits")
            return r if r is not None and r.pods_ready_at is not None else None

        r = await eventually(ready, what="its pods Ready, recorded")
        assert r.state == "Admitted"

        async def shown_ready() -> Any:
            obj = await _workload_object(w, "fits")
            return obj if obj is not None and _condition(obj, "PodsReady")[0] == "True" else None

        obj = await eventually(shown_ready, what="the Workload object's PodsReady True")
        assert _condition(obj, "PodsReady")[1:] == ("Started", "All pods reached readiness and the workload is running")
        assert "requeueState" not in obj["status"]
        await asyncio.sleep(2.5)  # past the timeout: nothing happens to a Ready job
        assert (await _row(w, "fits")).state == "Admitted"
        assert not await _events(w, "fits", "PodsReadyTimeout")


async def test_block_admission_holds_the_next_job_until_the_last_ones_pods_are_ready(
    tmp_path: Path, migrated_url: str
) -> None:
    """blockAdmission through the controller: "wide" (6 GPUs) fits the quota (8) but not the 4-GPU
    node, so its pods never get Ready; "small" (1 GPU) waits, saying why, until wide is evicted."""
    block = Policy(pods_ready=podsready.WaitForPodsReady(timeout=3, backoff_base_seconds=60, block_admission=True))
    async with world(tmp_path, migrated_url) as w:
        await w.kube.create(NODES, None, sim_autoscaler.node_object("gpu-1", NODE))
        await w.apply(CONFIG)
        w.start_controller("replica-1", policy=block)
        await w.create(job("wide", gpus=6))
        await eventually(lambda: _admitted(w, "wide"), what="wide admitted")
        await w.create(job("small", gpus=1))

        async def blocked() -> Any:
            r = await _row(w, "small")
            return r if r is not None and r.message and "blockAdmission" in r.message else None

        r = await eventually(blocked, what="small told it waits for wide")
        assert r.state == "Pending" and "ml/wide's pods are Ready" in r.message, r.message
        # wide's pods never get Ready: evicted by the timeout, after which small is admitted
        await eventually(lambda: _admitted(w, "small"), timeout=15, what="small admitted once wide is evicted")
        assert (await _row(w, "wide")).state == "Pending"


async def _admitted(w: World, name: str) -> bool:
    r = await _row(w, name)
    return r is not None and r.state == "Admitted"


async def test_why_an_admitted_jobs_pods_wait_is_said_in_the_schedulers_words(
    tmp_path: Path, migrated_url: str
) -> None:
    """Admitted by quota (8 GPUs), its one pod asks 6 of a 4-GPU node: describe workload shows the
    kube-scheduler's message, one Event on the job says it, waitForPodsReady's eviction says it; a
    job whose pods get a node again has its reason cleared."""
    slow = Policy(pods_ready=podsready.WaitForPodsReady(timeout=4.0, backoff_base_seconds=60))
    async with world(tmp_path, migrated_url) as w:
        await w.kube.create(NODES, None, sim_autoscaler.node_object("gpu-1", NODE))
        await w.apply(CONFIG)
        controller = w.start_controller("replica-1", policy=slow)
        controller.features.pod_waits.interval = controller.features.pod_waits.grace = 0.3
        await w.create(job("too-wide", gpus=6))
        words = (
            "0/1 nodes are available: 1 Insufficient nvidia.com/gpu. "
            "preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod."
        )

        async def waiting() -> Any:
            r = await _row(w, "too-wide")
            return r if r is not None and r.state == "Admitted" and r.reason == "PodsUnschedulable" else None

        r = await eventually(waiting, what="the admitted workload's pods said to wait")
        assert r.message == f"1 of its pods cannot be scheduled (pod ml/too-wide-main-0): {words}", r.message
        pod_events = await w.kube.request("GET", "/api/v1/namespaces/ml/events")
        failed = [e for e in pod_events["items"] if e["reason"] == "FailedScheduling"]
        assert [(e["involvedObject"]["kind"], e["message"], e["source"]["component"]) for e in failed] == [
            ("Pod", words, "default-scheduler")
        ]
        env = {**os.environ, "TURNSTILE_DATABASE_URL": migrated_url, "TURNSTILE_HOME": str(tmp_path / "home")}
        described = await asyncio.to_thread(turnstile, "describe", "workload", "ml/too-wide", env=env)
        assert described.returncode == 0, described.stderr
        assert (
            f"Pods waiting:  1 of its pods cannot be scheduled (pod ml/too-wide-main-0): {words}"
            in described.stdout.splitlines()
        )
        told = await eventually(lambda: _events(w, "too-wide", "PodsUnschedulable"), what="the job's Event")
        assert told == [r.message]
        (evicted,) = await eventually(lambda: _events(w, "too-wide", "PodsReadyTimeout"), timeout=15)
        assert (
            f"Exceeded the PodsReady timeout ml/too-wide: 1 of its pods cannot be scheduled (pod ml/too-wide-main-0): {words}"
            in (evicted)
        )

        await w.create(job("later", gpus=6))  # waits for a node too, until one with room joins
        await eventually(
            lambda: _events(w, "later", "PodsUnschedulable"), timeout=15, what="the second job's pods said to wait"
        )
        wide = {**NODE, "capacity": {**NODE["capacity"], "nvidia.com/gpu": "8"}}
        await w.kube.create(NODES, None, sim_autoscaler.node_object("gpu-2", wide))

        async def cleared() -> Any:
            r = await _row(w, "later")
            return r if r is not None and r.state == "Admitted" and r.reason != "PodsUnschedulable" else None

        await eventually(cleared, timeout=15, what="its reason cleared once its pod has a node")
