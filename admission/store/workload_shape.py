"""A stored workload row as Kubernetes shows it: Kueue's ``Workload`` shape.

Why a module of its own: the same rendering serves Kueue's objects the leader projects into the
cluster (``admission.controller.objects.workload_projection``), the aggregated ``workloads.turnstile.dev``
(``admission.aggregated``) and ``turnstile get wl -o yaml``; it is pure (a row in, a dict out),
while ``admission.store.workload_objects`` holds the queries that find the rows. ``spec``
(queueName, priority, priorityClassRef, active, podSets with their requests as Kubernetes
quantities: ``nvidia.com/gpu: "8"``, never milli-units) and ``status`` (conditions QuotaReserved,
Admitted, Finished, Evicted and Preempted with Kueue's reasons, PodsReady with waitForPodsReady;
``admission`` with each pod set's flavors and usage; ``requeueState``;
``accumulatedPastExecutionTimeSeconds``), owned by the job.
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from typing import Any

from admission.kube.table import human_duration
from queues import quantity
from queues.kueue import workload_crd
from queues.podsets import jobs

GROUP, VERSION = "turnstile.dev", "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
JOB_UID_LABEL = workload_crd.JOB_UID_LABEL
_UID_NAMESPACE = uuid.UUID("5e4d6c1a-7b2f-4c3e-9a8d-0f1e2d3c4b5a")  # (Turnstile's, for workload_uid)


def workload_uid(job_uid: str, workload_id: int) -> str:
    """A Workload object's ``metadata.uid``: an RFC 4122 UUID, as every object's is, the same on each
    read (a name-based UUID of the job's uid and the stored workload's id)."""
    return str(uuid.uuid5(_UID_NAMESPACE, f"{job_uid}/{workload_id}"))


def json_value(value: Any) -> Any:
    """A JSONB column from a plain SQL query (asyncpg hands jsonb over as text)."""
    return json.loads(value) if isinstance(value, str) else value


def timestamp(value: dt.datetime | None) -> str | None:
    return value.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ") if value is not None else None


def _condition(kind: str, ok: bool, reason: str, message: str, at: dt.datetime | None) -> dict[str, Any]:
    return {
        "type": kind,
        "status": "True" if ok else "False",
        "reason": reason,
        "message": message,
        "lastTransitionTime": timestamp(at),
    }


def _pod_sets(body: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for ps in body.get("podSets", []):
        requests = {r: quantity.format_milli(int(v)) for r, v in (ps.get("requests") or {}).items()}
        spec: dict[str, Any] = {"containers": [{"name": ps["name"], "resources": {"requests": requests}}]}
        if ps.get("nodeSelector"):
            spec["nodeSelector"] = dict(ps["nodeSelector"])
        if ps.get("tolerations"):
            spec["tolerations"] = list(ps["tolerations"])
        entry: dict[str, Any] = {"name": ps["name"], "count": int(ps["count"]), "template": {"spec": spec}}
        if ps.get("minCount") is not None:
            entry["minCount"] = int(ps["minCount"])  # partial admission
        out.append(entry)
    return out


def _admission(row: Any, body: dict[str, Any]) -> dict[str, Any]:
    """``status.admission``, from the stored pod sets ``body`` (their requests in milli-units, and
    what a prioritized list costs on each flavor)."""
    assigned_flavors = json_value(row["assigned_flavors"]) or {}
    flavors, counts = assigned_flavors.get("flavors", {}), assigned_flavors.get("counts") or {}
    assignments = []
    for ps in body.get("podSets", []):
        name = ps["name"]
        count = int(counts.get(name, ps["count"]))  # fewer where admitted partially
        assigned = dict(flavors.get(name, {}))
        narrowed = ps.get("byFlavor") or {}  # (a prioritized list, on a flavor serving some of it)
        usage = {
            r: quantity.format_milli(int(narrowed.get(assigned.get(r, ""), {}).get(r, milli)) * count)
            for r, milli in (ps.get("requests") or {}).items()
        }
        assignments.append({"name": name, "flavors": assigned, "resourceUsage": usage, "count": count})
    return {"clusterQueue": row["cluster_queue"], "podSetAssignments": assignments}


def to_object(
    row: Any, eviction: Any = None, *, pods_ready: bool = False, names: dict[str, str] | None = None
) -> dict[str, Any]:
    """One workload row (with its latest eviction, if any) as a Kueue-shaped Workload; with
    ``pods_ready`` (waitForPodsReady on) its ``PodsReady`` condition too, as Kueue sets it only then;
    ``names``: workload keys as their Workload objects are named (``workload_objects.object_names``)."""
    body = json_value(row["pod_sets"]) or {}
    pod_sets = _pod_sets(body)
    state, reason, message = row["state"], row["reason"] or "", row["message"] or ""
    # (a finished workload that ran to its end keeps the conditions it ran with, as Kueue's: Finished
    # adds its own; an eviction clears its admission)
    ran_since = row.get("ran_since") if state == "Finished" else None
    admitted_at = row["admitted_at"] if ran_since is None else ran_since
    reserved = state == "Admitted" or ran_since is not None
    started = reserved and not json_value(row["checks"]) and reason != "Preempting"
    conditions = [
        _condition(
            "QuotaReserved",
            reserved,
            "QuotaReserved" if reserved else (reason or "Pending"),
            f"Quota reserved in ClusterQueue {row['cluster_queue']}" if reserved else message,
            admitted_at if reserved else row["created_at"],
        )
    ]
    if reserved:
        conditions.append(
            _condition(
                "Admitted",
                started,
                "Admitted" if started else (reason or "AdmissionCheck"),
                "The workload is admitted" if started else message,
                admitted_at,
            )
        )
    if pods_ready and (ready := _pods_ready(row, started)) is not None:
        conditions.append(ready)
    if state == "Finished":
        conditions.append(_condition("Finished", True, reason or "JobFinished", message, row["finished_at"]))
    if eviction is not None:
        evicted = not reserved and state != "Finished"
        why = eviction["reason"] or "Preempted"
        conditions.append(_condition("Evicted", evicted, why, message if evicted else "", eviction["at"]))
        if eviction["reason"] == "Preempted":
            by = eviction["by_workload"]
            by = (names or {}).get(by, by) if by else "another workload"
            conditions.append(
                _condition(
                    "Preempted",
                    evicted,
                    eviction["detail"] or "InClusterQueue",
                    f"Preempted to accommodate a workload ({by}) due to {eviction['detail'] or 'prioritization'}",
                    eviction["at"],
                )
            )
    status: dict[str, Any] = {"conditions": conditions}
    if reserved or (state == "Finished" and row["assigned_flavors"] and row["cluster_queue"]):
        status["admission"] = _admission(row, body)  # (a finished one keeps what it ran with, as Kueue's)
    if row["retries"]:  # (Kueue's: how often it was requeued with a backoff, and until when it waits)
        requeue: dict[str, Any] = {"count": int(row["retries"])}
        if state == "Pending" and row["requeue_at"] is not None:
            requeue["requeueAt"] = timestamp(row["requeue_at"])
        status["requeueState"] = requeue
    if row["executed_seconds"] >= 1:  # (what its job ran in its admissions that ended: evicted ones)
        status["accumulatedPastExecutionTimeSeconds"] = int(row["executed_seconds"])
    owner = {
        "apiVersion": row["api_version"],
        "kind": row["kind"],
        "name": row["name"],
        "uid": row["job_uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }
    spec: dict[str, Any] = {"podSets": pod_sets, "priority": row["priority"], "active": bool(row["active"])}
    if (ref := _priority_class_ref(row)) is not None:
        spec["priorityClassRef"] = ref
    if row["local_queue"]:
        spec["queueName"] = row["local_queue"]
    return {
        "apiVersion": API_VERSION,
        "kind": "Workload",
        "metadata": {
            "name": row["object_name"],
            "namespace": row["namespace"],
            "uid": workload_uid(row["job_uid"], row["id"]),
            "creationTimestamp": timestamp(row["created_at"]),
            "labels": {JOB_UID_LABEL: workload_crd.uid_label(row["job_uid"])},
            "ownerReferences": [owner],
        },
        "spec": spec,
        "status": status,
    }


def _pods_ready(row: Any, started: bool) -> dict[str, Any] | None:
    """Kueue's ``PodsReady`` condition: True (``Started``) once every pod of the running job was
    Ready in this admission (kept when it finishes); False (``WaitForStart``) while it is not,
    admitted or not; none on a finished workload that never was. Kueue's ``WaitForRecovery``, for
    one that was Ready and lost a pod, is not shown (when that happened is not stored): it stays
    ``Started`` until the recovery timeout evicts it."""
    if row["pods_ready_at"] is not None and (started or row["state"] == "Finished"):
        return _condition(
            "PodsReady", True, "Started", "All pods reached readiness and the workload is running", row["pods_ready_at"]
        )
    if row["state"] == "Finished":
        return None
    since = row["admitted_at"] if started else row["created_at"]
    return _condition("PodsReady", False, "WaitForStart", "Not all pods are ready or succeeded", since)


def _priority_class_ref(row: Any) -> dict[str, str] | None:
    """Kueue's ``spec.priorityClassRef``: the WorkloadPriorityClass the job's label names, else the
    PriorityClass its pod template names (the order in which they gave the priority), else none."""
    named = (json_value(row["labels"]) or {}).get(jobs.PRIORITY_LABEL)
    if named:
        return {"group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass", "name": str(named)}
    pod_class = (json_value(row["pod_sets"]) or {}).get("priorityClassName")
    if pod_class:
        return {"group": "scheduling.k8s.io", "kind": "PriorityClass", "name": str(pod_class)}
    return None


def summary(obj: dict[str, Any]) -> dict[str, str]:
    """The columns a list shows: state, queue, ClusterQueue, priority, flavors, reason."""
    conditions = {c["type"]: c for c in obj["status"]["conditions"]}
    if "Finished" in conditions:
        state = "Finished"
    elif conditions.get("Admitted", {}).get("status") == "True":
        state = "Admitted"
    elif conditions["QuotaReserved"]["status"] == "True":
        state = "QuotaReserved"
    else:
        state = "Pending"
    admission = obj["status"].get("admission") or {}
    flavors = sorted({f for a in admission.get("podSetAssignments", []) for f in a["flavors"].values()})
    waiting = conditions["QuotaReserved"]
    return {
        "state": state,
        "queue": obj["spec"].get("queueName", ""),
        "clusterQueue": admission.get("clusterQueue", ""),
        "priority": str(obj["spec"]["priority"]),
        "flavors": ",".join(flavors),
        "reason": waiting["reason"] if state == "Pending" else "",
    }


def age(obj: dict[str, Any]) -> str:
    """kubectl's AGE of an object, from its creationTimestamp."""
    created = (obj.get("metadata") or {}).get("creationTimestamp")
    if not created:
        return "<unknown>"
    when = dt.datetime.strptime(str(created), "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.UTC)
    return human_duration((dt.datetime.now(dt.UTC) - when).total_seconds())
