"""The ProvisioningRequest admission check end to end: the real controller, the simulated
cluster-autoscaler over HTTP, PostgreSQL.

Scenario seconds are scaled by the world's time scale (0.01: the autoscaler's 100 s delay is
one wall second), as are job runtimes; the controller's backoffs by ``backoff_scale``.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

from sqlalchemy import select

from admission import views
from admission.controller.features.checks import JOB_UID_LABEL, Checks
from admission.kube.client import ResourceRef
from admission.kube.informer import Informer
from admission.sim.operators import autoscaler as sim_autoscaler
from admission.sim.operators import cluster as sim_cluster
from admission.store import database, read_models, tables
from queues.cycle import provisioning
from tests.admission.controller.world import GPU, World, eventually, job, world

NODES = ResourceRef("v1", "Node", "nodes", namespaced=False)
PROVISIONING_REQUESTS = sim_autoscaler.PROVISIONING_REQUESTS
NODE = {
    "labels": {"gpu": "a100"},
    "capacity": {"cpu": "96", GPU: "8"},
    "taints": [{"key": "gpu", "value": "a100", "effect": "NoSchedule"}],
}


def config(
    *, classes: tuple[tuple[str, str], ...] = (("capacity", "best-effort-atomic-scale-up"),), retry: str = ""
) -> str:
    docs = [
        """
apiVersion: kueue.x-k8s.io/v1beta1
kind: ResourceFlavor
metadata: {name: a100}
spec:
  nodeLabels: {gpu: a100}
  tolerations: [{key: gpu, operator: Equal, value: a100, effect: NoSchedule}]
""",
        f"""
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {{name: team-a}}
spec:
  namespaceSelector: {{}}
  admissionChecks: [{", ".join(name for name, _ in classes)}]
  resourceGroups:
  - coveredResources: [{GPU}]
    flavors:
    - name: a100
      resources: [{{name: {GPU}, nominalQuota: "16"}}]
""",
        """
apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata: {name: team-a, namespace: ml}
spec: {clusterQueue: team-a}
""",
    ]
    for name, cls in classes:
        docs.append(f"""
apiVersion: kueue.x-k8s.io/v1beta1
kind: ProvisioningRequestConfig
metadata: {{name: {name}-config}}
spec:
  provisioningClassName: {cls}.autoscaling.x-k8s.io
  managedResources: [{GPU}]
  parameters: {{from-config: "1"}}
  {retry}
""")
        docs.append(f"""
apiVersion: kueue.x-k8s.io/v1beta1
kind: AdmissionCheck
metadata: {{name: {name}}}
spec:
  controllerName: kueue.x-k8s.io/provisioning-request
  parameters: {{apiGroup: kueue.x-k8s.io, kind: ProvisioningRequestConfig, name: {name}-config}}
""")
    return "---".join(docs)


async def add_node(w: World, name: str) -> None:
    await w.kube.create(NODES, None, sim_autoscaler.node_object(name, NODE))


async def row(w: World, name: str) -> Any:
    async with database.transaction(w.sessions) as s:
        return (await s.execute(select(tables.Workload).where(tables.Workload.name == name))).scalar_one_or_none()


async def history(w: World, name: str) -> list[tuple[str, str | None]]:
    async with database.transaction(w.sessions) as s:
        rows = await s.execute(
            select(tables.WorkloadEvent.type, tables.WorkloadEvent.detail)
            .join(tables.Workload, tables.Workload.id == tables.WorkloadEvent.workload_id)
            .where(tables.Workload.name == name)
            .order_by(tables.WorkloadEvent.id)
        )
        return [(t, d) for t, d in rows.all()]


def pods_of(w: World, name: str) -> list[dict[str, Any]]:
    return [
        p
        for p in w.host.server.store.list(sim_cluster.PODS, "ml")[0]
        if p["metadata"]["labels"].get("job-name") == name
    ]


def bound_pods(w: World, name: str) -> list[dict[str, Any]]:
    """The job's pods the scheduler has bound to a node (a pod is created first, bound after)."""
    return [p for p in pods_of(w, name) if p["spec"].get("nodeName")]


def requests_of(w: World, uid: str) -> list[dict[str, Any]]:
    return w.host.server.store.list(sim_autoscaler.PROVISIONING_REQUESTS, "ml", labels=f"{JOB_UID_LABEL}={uid}")[0]


def templates_of(w: World, uid: str) -> list[dict[str, Any]]:
    return w.host.server.store.list(sim_autoscaler.POD_TEMPLATES, "ml", labels=f"{JOB_UID_LABEL}={uid}")[0]


async def test_a_job_starts_once_its_nodes_exist_and_quota_pending_jobs_never_reach_the_autoscaler(
    tmp_path: Path, migrated_url: str
) -> None:
    async with world(
        tmp_path, migrated_url, autoscaler={"provisioningDelay": 100, "maxNodes": 2, "nodeTemplate": NODE}
    ) as w:
        await add_node(w, "node-0")
        await w.apply(config())
        controller = w.start_controller("replica-1")
        never = asyncio.Event()
        quota_pending_pods: list[str] = []

        async def watch_third() -> None:  # no pod and no request of the quota-pending job, ever
            while not never.is_set():
                if pods_of(w, "third") or any(
                    pr["metadata"]["name"].startswith("third-")
                    for pr in w.host.server.store.list(PROVISIONING_REQUESTS, "ml")[0]
                ):
                    quota_pending_pods.append("third")
                await asyncio.sleep(0.01)

        watcher = asyncio.create_task(watch_third())
        first = await w.create(job("first", gpus=8, runtime=3000))
        (pod,) = await eventually(lambda: bound_pods(w, "first"), what="first's pod bound (capacity was there)")
        notes = pod["metadata"]["annotations"]
        assert notes[provisioning.CONSUME_ANNOTATION] == "first-capacity-1"
        assert notes[provisioning.CLASS_ANNOTATION] == "best-effort-atomic-scale-up.autoscaling.x-k8s.io"
        assert pod["spec"]["nodeName"] == "node-0"

        second_job = job("second", gpus=8, runtime=50)
        second_job["metadata"]["annotations"]["provreq.kueue.x-k8s.io/max-run-duration"] = "3600"
        second = await w.create(second_job)
        await w.create(job("third", gpus=8, runtime=10))  # quota 16 is taken by first and second

        waiting = await eventually(
            lambda: _reason(w, "second", provisioning.WAITING_FOR_CAPACITY), what="second waiting for capacity"
        )
        assert "ProvisioningRequest second-capacity-1" in waiting and "adding 1 node(s)" in waiting
        async with database.transaction(w.sessions) as s:  # what `turnstile get/describe workload` show
            (shown,) = await read_models.workload_rows(s, namespace="ml", name="second")
            described = await views.describe(s, "Workload", "ml/second")
        assert (shown["state"], shown["reason"]) == ("QuotaReserved", provisioning.WAITING_FOR_CAPACITY)
        assert "State:         QuotaReserved" in described and "second-capacity-1" in described
        page = controller.metrics.render().decode()
        assert (
            'kueue_quota_reserved_workloads_total{cluster_queue="team-a",priority_class="",replica_role="leader"} 2.0'
            in page
        )
        assert (
            'kueue_admitted_workloads_total{cluster_queue="team-a",priority_class="",replica_role="leader"} 1.0' in page
        )  # second has not started
        assert (await w.get("second"))["spec"]["suspend"] is True and pods_of(w, "second") == []
        (pr,) = requests_of(w, second["metadata"]["uid"])
        assert pr["metadata"]["name"] == "second-capacity-1"
        assert pr["metadata"]["ownerReferences"][0]["uid"] == second["metadata"]["uid"]
        assert pr["spec"]["parameters"] == {"from-config": "1", "max-run-duration": "3600"}
        (ps,) = pr["spec"]["podSets"]
        assert ps["count"] == 1
        (template,) = templates_of(w, second["metadata"]["uid"])
        assert template["metadata"]["name"] == ps["podTemplateRef"]["name"] == "ppt-second-capacity-1-main"
        assert template["template"]["spec"]["nodeSelector"] == {"gpu": "a100"}
        assert template["template"]["spec"]["tolerations"][0]["key"] == "gpu"

        # A controller restart while it waits changes nothing: the job stays suspended, then starts.
        await w.stop_controller(controller)
        w.start_controller("replica-2")
        (pod,) = await eventually(lambda: bound_pods(w, "second"), what="second's pod bound", timeout=15)
        assert pod["spec"]["nodeName"].startswith("sim-scaleup-")  # the node added for it
        assert pod["metadata"]["annotations"][provisioning.CONSUME_ANNOTATION] == "second-capacity-1"
        assert await history(w, "second") == [("Admitted", None)]
        # Until now first and second held the whole quota: third waited for quota, with no request
        # and no pod at any moment.
        assert (await row(w, "third")).state == "Pending"
        never.set()
        await watcher
        assert quota_pending_pods == []

        # Finished: its request and template are cleaned up.
        await eventually(lambda: _state(w, "second", "Finished"), what="second finished", timeout=15)
        await eventually(
            lambda: not requests_of(w, second["metadata"]["uid"]) and not templates_of(w, second["metadata"]["uid"]),
            what="second's request and template deleted",
        )
        assert requests_of(w, first["metadata"]["uid"])  # first still runs: its request stays


async def test_failed_requests_are_retried_with_backoff_then_the_workload_is_deactivated(
    tmp_path: Path, migrated_url: str
) -> None:
    async with world(
        tmp_path, migrated_url, autoscaler={"provisioningDelay": 100, "maxNodes": 1, "nodeTemplate": NODE}
    ) as w:
        await w.apply(
            config(retry="retryStrategy: {backoffLimitCount: 2, backoffBaseSeconds: 20, backoffMaxSeconds: 40}")
        )
        w.start_controller("replica-1", backoff_scale=0.01)
        giant = await w.create(job("giant", gpus=16, runtime=10))  # 2 nodes; the autoscaler may add 1

        await eventually(lambda: _state(w, "giant", "Pending", active=False), what="giant deactivated", timeout=20)
        assert await history(w, "giant") == [("Evicted", "Retry"), ("Evicted", "Retry"), ("Evicted", "Rejected")]
        r = await row(w, "giant")
        assert (r.reason, r.retries) == ("Inactive", 2)
        assert "more nodes than the autoscaler may add" in r.message
        assert (await w.get("giant"))["spec"]["suspend"] is True
        await eventually(lambda: not requests_of(w, giant["metadata"]["uid"]), what="its requests deleted")
        assert not templates_of(w, giant["metadata"]["uid"])


async def test_capacity_revoked_evicts_a_running_job_and_it_is_retried(tmp_path: Path, migrated_url: str) -> None:
    async with world(
        tmp_path, migrated_url, autoscaler={"provisioningDelay": 100, "maxNodes": 2, "nodeTemplate": NODE}
    ) as w:
        await add_node(w, "node-0")
        await w.apply(
            config(retry="retryStrategy: {backoffLimitCount: 3, backoffBaseSeconds: 100, backoffMaxSeconds: 100}")
        )
        w.start_controller("replica-1", backoff_scale=0.01)
        victim = await w.create(job("victim", gpus=8, runtime=5000))
        await eventually(lambda: pods_of(w, "victim"), what="victim running")
        store = w.host.server.store
        pr = store.get(PROVISIONING_REQUESTS, "ml", "victim-capacity-1")
        sim_cluster.set_condition(pr["status"], "CapacityRevoked", "True", "CapacityRevoked", "the node was reclaimed")
        store.replace(PROVISIONING_REQUESTS, "ml", "victim-capacity-1", pr, subresource="status")

        await eventually(lambda: _suspended(w, "victim"), what="victim suspended after the capacity was revoked")
        assert (await history(w, "victim"))[:2] == [("Admitted", None), ("Evicted", "Retry")]
        # After the backoff (1 s) it is admitted again through a new request (attempt 2).
        await eventually(
            lambda: any(
                p["metadata"]["annotations"].get(provisioning.CONSUME_ANNOTATION) == "victim-capacity-2"
                for p in pods_of(w, "victim")
            ),
            what="victim running again on attempt 2",
            timeout=15,
        )
        names = [pr["metadata"]["name"] for pr in requests_of(w, victim["metadata"]["uid"])]
        assert names == ["victim-capacity-2"]


async def _reason(w: World, name: str, reason: str) -> str | None:
    r = await row(w, name)
    return r.message if r is not None and r.reason == reason else None


async def _state(w: World, name: str, state: str, *, active: bool = True) -> bool:
    r = await row(w, name)
    return r is not None and r.state == state and r.active == active


async def _suspended(w: World, name: str) -> bool:
    return bool((await w.get(name))["spec"]["suspend"])


async def test_a_booking_that_expires_before_the_job_starts_is_retried(tmp_path: Path, migrated_url: str) -> None:
    # Two checks: "present" (check-capacity) finds node-0 busy and waits; "scale" gets a node
    # after 100 s and books it, but the job cannot start while "present" waits, so the booking
    # expires (200 s): retry. On attempt 2 "present" books the new node and "scale" adds another
    # within its booking.
    async with world(
        tmp_path,
        migrated_url,
        autoscaler={"provisioningDelay": 100, "maxNodes": 2, "bookingExpiry": 200, "nodeTemplate": NODE},
    ) as w:
        await add_node(w, "node-0")
        await w.apply(
            config(
                classes=(("present", "check-capacity"), ("scale", "best-effort-atomic-scale-up")),
                retry="retryStrategy: {backoffLimitCount: 3, backoffBaseSeconds: 100, backoffMaxSeconds: 100}",
            )
        )
        w.start_controller("replica-1", backoff_scale=0.01)
        busy = job("busy", gpus=8, runtime=100000, queue=None)  # not queued: it simply runs on node-0
        busy["spec"]["suspend"] = False
        busy["spec"]["template"]["spec"]["tolerations"] = [
            {"key": "gpu", "operator": "Equal", "value": "a100", "effect": "NoSchedule"}
        ]
        await w.create(busy)
        await eventually(lambda: pods_of(w, "busy"), what="busy running on node-0")
        await w.create(job("late", gpus=8, runtime=50))

        (pod,) = await eventually(lambda: bound_pods(w, "late"), what="late running after its retry", timeout=20)
        assert (await history(w, "late"))[:2] == [("Evicted", "Retry"), ("Admitted", None)]
        r = await row(w, "late")
        assert r.retries == 1
        assert pod["spec"]["nodeName"].startswith("sim-scaleup-")
        assert pod["metadata"]["annotations"][provisioning.CONSUME_ANNOTATION].endswith("-2")


async def test_dropping_the_check_from_the_cluster_queue_starts_a_waiting_job(
    tmp_path: Path, migrated_url: str
) -> None:
    async with world(
        tmp_path, migrated_url, autoscaler={"provisioningDelay": 100000, "maxNodes": 2, "nodeTemplate": NODE}
    ) as w:
        await w.apply(config())
        w.start_controller("replica-1")
        waiting = await w.create(job("waiting", gpus=8, runtime=100))
        await eventually(lambda: _reason(w, "waiting", provisioning.WAITING_FOR_CAPACITY), what="waiting for a node")
        await w.apply(config().replace("admissionChecks: [capacity]", "admissionChecks: []"))
        await eventually(lambda: _running(w, "waiting"), what="the job started without the check")
        assert await history(w, "waiting") == [("Admitted", None)]
        await eventually(lambda: not requests_of(w, waiting["metadata"]["uid"]), what="its request deleted")


async def _running(w: World, name: str) -> bool:
    return not (await w.get(name))["spec"]["suspend"]


async def test_without_the_provisioning_request_crd_the_informer_waits_quietly(
    tmp_path: Path, migrated_url: str, caplog: Any
) -> None:
    # A cluster without cluster-autoscaler's CRD: said once (INFO), no warnings every few seconds.
    caplog.set_level(logging.INFO, logger="admission.kube.informer")
    async with world(tmp_path, migrated_url) as w:
        absent = ResourceRef("example.com/v1", "Widget", "widgets")
        seen: list[str] = []
        informer = Informer(w.kube, absent, lambda kind, obj: seen.append(kind), optional=True)
        task = asyncio.create_task(informer.run())
        await eventually(lambda: informer.absent, what="the informer to notice the kind is not served")
        await asyncio.sleep(0.3)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        ours = [r for r in caplog.records if r.name == "admission.kube.informer"]
        assert [r.levelname for r in ours] == ["INFO"] and "not served" in ours[0].getMessage()
        # absent counts as listed and empty: it never holds back readiness or leadership
        assert informer.synced.is_set() and seen == []


def test_a_request_deleted_while_not_watching_leaves_the_cache() -> None:
    # On a relist the informer reports a deletion with uid, namespace and name only (no labels).
    changed: list[str] = []
    checks = Checks(
        None,  # type: ignore[arg-type]  # no API calls here
        views={},
        current_term=lambda: None,
        run_infos=lambda term, wl: [],
        changed=changed.append,
    )
    pr = {"metadata": {"uid": "pr-1", "namespace": "ml", "name": "j-capacity-1", "labels": {JOB_UID_LABEL: "job-1"}}}
    checks._on_request("ADDED", pr)
    assert checks.conditions("job-1", "j-capacity-1") == []
    checks._on_request("DELETED", {"metadata": {"uid": "pr-1", "namespace": "ml", "name": "j-capacity-1"}})
    assert checks.conditions("job-1", "j-capacity-1") is None and checks.requests == {}
    assert changed == ["job-1", "job-1"]
