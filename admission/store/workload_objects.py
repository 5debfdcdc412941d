"""Workloads as Kubernetes objects, in Kueue's ``Workload`` shape, read from PostgreSQL.

What ``kubectl get workloads`` (the controller's aggregated API, ``admission.aggregated``) and
``turnstile get wl -o json|yaml`` show: ``spec`` (queueName, priority, active, podSets with
their requests as Kubernetes quantities: ``nvidia.com/gpu: "8"``, never milli-units; ``active``
as a person last asked it, ``admission.store.activity``) and
``status`` (conditions QuotaReserved, Admitted, Finished, Evicted and Preempted with Kueue's
reasons, ``admission`` with each pod set's flavors and resource usage). Named as Kueue names
them, ``<kind>-<job name>-<first 5 of the job's uid>``, owned by their job.

Finished workloads stay listed for ``RETENTION`` after they finish (their history: why one was
preempted), then only the usage ledger and ``turnstile usage`` have them. Lists are paged by
(namespace, name), so 100,000 workloads come in pages from an index, never all at once.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import uuid
from dataclasses import dataclass
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

from admission.kube.table import human_duration
from queues import jobs, quantity, workload_crd

GROUP, VERSION = "turnstile.dev", "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
RETENTION = dt.timedelta(days=7)
JOB_UID_LABEL = workload_crd.JOB_UID_LABEL
_UID_NAMESPACE = uuid.UUID("5e4d6c1a-7b2f-4c3e-9a8d-0f1e2d3c4b5a")  # (Turnstile's, for workload_uid)

# A workload's object name, as Kueue names them and kubectl shows them: <kind>-<job name>-<first 5
# of the job's uid> (``job-big-train-99858``); ``object_name`` is the same rule in Python.
OBJECT_NAME = "lower(w.kind) || '-' || w.name || '-' || left(w.job_uid, 5)"


def workload_uid(job_uid: str, workload_id: int) -> str:
    """A Workload object's ``metadata.uid``: an RFC 4122 UUID, as every object's is, the same on each
    read (a name-based UUID of the job's uid and the stored workload's id)."""
    return str(uuid.uuid5(_UID_NAMESPACE, f"{job_uid}/{workload_id}"))


def object_name(kind: str, name: str, job_uid: str) -> str:
    """The Workload object name of job ``kind``/``name`` (SQL: ``OBJECT_NAME``)."""
    return f"{kind.lower()}-{name}-{job_uid[:5]}"


_COLUMNS = f"""
    w.id, w.job_uid, w.api_version, w.kind, w.namespace, w.name, w.local_queue, w.cluster_queue,
    w.priority, w.pod_sets, w.state, w.reason, w.message, w.created_at, w.admitted_at, w.finished_at,
    w.assigned_flavors, w.checks, w.labels, w.executed_seconds, w.retries, w.requeue_at, w.pods_ready_at,
    COALESCE((SELECT r.active FROM activity_requests r WHERE r.workload_id = w.id), w.active) AS active,
    {OBJECT_NAME} AS object_name
"""
_VISIBLE = "(w.state <> 'Finished' OR w.finished_at > now() - make_interval(secs => :retention))"


@dataclass(frozen=True, slots=True)
class Page:
    items: list[dict[str, Any]]
    next: str | None  # the ``continue`` token of the next page, if any


def _token(namespace: str, name: str, wid: int) -> str:
    return base64.urlsafe_b64encode(json.dumps([namespace, name, wid]).encode()).decode()


def _after(token: str | None) -> tuple[str, str, int]:
    if not token:
        return ("", "", 0)
    try:
        namespace, name, wid = json.loads(base64.urlsafe_b64decode(token.encode()))
        return (str(namespace), str(name), int(wid))
    except (ValueError, TypeError) as exc:
        raise ValueError("the continue token is not one this server gave; list again from the start") from exc


async def page(
    session: AsyncSession,
    *,
    namespace: str | None,
    limit: int | None,
    token: str | None = None,
    pods_ready: bool = False,
) -> Page:
    """One page of workloads (all of them without ``limit``), in (namespace, name) order.
    ``pods_ready``: waitForPodsReady is on (the objects then carry Kueue's ``PodsReady`` condition)."""
    ns, name, wid = _after(token)
    where = [_VISIBLE, "(w.namespace, w.name, w.id) > (:ns, :name, :wid)"]
    if namespace is not None:
        where.append("w.namespace = :namespace")
    query = f"SELECT {_COLUMNS} FROM workloads w WHERE {' AND '.join(where)} ORDER BY w.namespace, w.name, w.id"
    params: dict[str, Any] = {"ns": ns, "name": name, "wid": wid, "namespace": namespace}
    params["retention"] = RETENTION.total_seconds()
    if limit is not None:
        query += " LIMIT :limit"
        params["limit"] = limit + 1
    rows = list((await session.execute(text(query), params)).mappings())
    more = limit is not None and len(rows) > limit
    rows = rows[:limit] if limit is not None else rows
    items = await _objects(session, rows, pods_ready)
    last = rows[-1] if rows else None
    return Page(items, _token(last["namespace"], last["name"], last["id"]) if more and last else None)


async def get(session: AsyncSession, namespace: str, name: str, *, pods_ready: bool = False) -> dict[str, Any] | None:
    """The workload ``name`` (its object name, or its job's name) in ``namespace``."""
    query = (
        f"SELECT {_COLUMNS} FROM workloads w WHERE {_VISIBLE} AND w.namespace = :namespace "
        f"AND ({OBJECT_NAME} = :name OR w.name = :name) "
        "ORDER BY (w.state = 'Finished'), w.id DESC LIMIT 1"
    )
    params = {"namespace": namespace, "name": name, "retention": RETENTION.total_seconds()}
    rows = list((await session.execute(text(query), params)).mappings())
    items = await _objects(session, rows, pods_ready)
    return items[0] if items else None


async def by_job_uids(session: AsyncSession, uids: list[str], *, pods_ready: bool = False) -> dict[str, dict[str, Any]]:
    """The workloads of these jobs (by job uid) that are still shown (not finished, or finished
    within ``RETENTION``); a job missing from the answer has none."""
    query = f"SELECT {_COLUMNS} FROM workloads w WHERE {_VISIBLE} AND w.job_uid = ANY(:uids)"
    params = {"uids": list(uids), "retention": RETENTION.total_seconds()}
    rows = list((await session.execute(text(query), params)).mappings())
    return {obj["metadata"]["labels"][JOB_UID_LABEL]: obj for obj in await _objects(session, rows, pods_ready)}


async def _objects(session: AsyncSession, rows: list[Any], pods_ready: bool) -> list[dict[str, Any]]:
    evictions: dict[int, Any] = {}
    if rows:
        found = await session.execute(
            text(
                "SELECT DISTINCT ON (workload_id) workload_id, at, reason, detail, by_workload FROM workload_events "
                "WHERE type = 'Evicted' AND workload_id = ANY(:ids) ORDER BY workload_id, id DESC"
            ),
            {"ids": [r["id"] for r in rows]},
        )
        evictions = {e["workload_id"]: e for e in found.mappings()}
    names = await _object_names(session, {e["by_workload"] for e in evictions.values() if e["by_workload"]})
    return [to_object(r, evictions.get(r["id"]), pods_ready=pods_ready, names=names) for r in rows]


async def _object_names(session: AsyncSession, keys: set[str]) -> dict[str, str]:
    """``namespace/job`` keys (the store's name for a workload, e.g. a preemptor) as ``namespace/``
    and their Workload object's name, the one kubectl and the CLI show (the latest of that name)."""
    if not keys:
        return {}
    pairs = [key.split("/", 1) for key in keys if "/" in key]
    found = await session.execute(
        text(
            f"SELECT DISTINCT ON (w.namespace, w.name) w.namespace, w.name, {OBJECT_NAME} AS object_name "
            "FROM workloads w JOIN unnest(CAST(:ns AS text[]), CAST(:names AS text[])) AS k(ns, name) "
            "ON w.namespace = k.ns AND w.name = k.name ORDER BY w.namespace, w.name, w.id DESC"
        ),
        {"ns": [p[0] for p in pairs], "names": [p[1] for p in pairs]},
    )
    return {f"{r['namespace']}/{r['name']}": f"{r['namespace']}/{r['object_name']}" for r in found.mappings()}


def _json(value: Any) -> Any:
    """A JSONB column from a plain SQL query (asyncpg hands jsonb over as text)."""
    return json.loads(value) if isinstance(value, str) else value


def _time(value: dt.datetime | None) -> str | None:
    return value.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ") if value is not None else None


def _condition(kind: str, ok: bool, reason: str, message: str, at: dt.datetime | None) -> dict[str, Any]:
    return {
        "type": kind,
        "status": "True" if ok else "False",
        "reason": reason,
        "message": message,
        "lastTransitionTime": _time(at),
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


def _admission(row: Any, pod_sets: list[dict[str, Any]]) -> dict[str, Any]:
    assigned_flavors = _json(row["assigned_flavors"]) or {}
    flavors, counts = assigned_flavors.get("flavors", {}), assigned_flavors.get("counts") or {}
    assignments = []
    for ps in pod_sets:
        requests = ps["template"]["spec"]["containers"][0]["resources"]["requests"]
        count = int(counts.get(ps["name"], ps["count"]))  # fewer where admitted partially
        usage = {r: quantity.format_milli(quantity.parse_milli(q) * count) for r, q in requests.items()}
        assigned = dict(flavors.get(ps["name"], {}))
        assignments.append({"name": ps["name"], "flavors": assigned, "resourceUsage": usage, "count": count})
    return {"clusterQueue": row["cluster_queue"], "podSetAssignments": assignments}


def to_object(
    row: Any, eviction: Any = None, *, pods_ready: bool = False, names: dict[str, str] | None = None
) -> dict[str, Any]:
    """One workload row (with its latest eviction, if any) as a Kueue-shaped Workload; with
    ``pods_ready`` (waitForPodsReady on) its ``PodsReady`` condition too, as Kueue sets it only then;
    ``names``: workload keys as their Workload objects are named (``_object_names``)."""
    pod_sets = _pod_sets(_json(row["pod_sets"]))
    state, reason, message = row["state"], row["reason"] or "", row["message"] or ""
    reserved = state == "Admitted"
    started = reserved and not _json(row["checks"]) and reason != "Preempting"
    conditions = [
        _condition(
            "QuotaReserved",
            reserved,
            "QuotaReserved" if reserved else (reason or "Pending"),
            f"Quota reserved in ClusterQueue {row['cluster_queue']}" if reserved else message,
            row["admitted_at"] if reserved else row["created_at"],
        )
    ]
    if reserved:
        conditions.append(
            _condition(
                "Admitted",
                started,
                "Admitted" if started else (reason or "AdmissionCheck"),
                "The workload is admitted" if started else message,
                row["admitted_at"],
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
        status["admission"] = _admission(row, pod_sets)  # (a finished one keeps what it ran with, as Kueue's)
    if row["retries"]:  # (Kueue's: how often it was requeued with a backoff, and until when it waits)
        requeue: dict[str, Any] = {"count": int(row["retries"])}
        if state == "Pending" and row["requeue_at"] is not None:
            requeue["requeueAt"] = _time(row["requeue_at"])
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
            "creationTimestamp": _time(row["created_at"]),
            "labels": {JOB_UID_LABEL: row["job_uid"]},
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
    named = (_json(row["labels"]) or {}).get(jobs.PRIORITY_LABEL)
    if named:
        return {"group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass", "name": str(named)}
    pod_class = (_json(row["pod_sets"]) or {}).get("priorityClassName")
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


async def pending(
    session: AsyncSession, cluster_queue: str, *, local_queue: tuple[str, str] | None, offset: int, limit: int
) -> list[dict[str, Any]]:
    """Kueue's visibility ``PendingWorkload`` items of ``cluster_queue`` (or of one of its
    LocalQueues), in queue order: priority, then queue time, then submission, as the scheduler
    orders them; positions in the ClusterQueue and in the LocalQueue count from 0."""
    query = f"""
        SELECT * FROM (
            SELECT w.namespace, w.name, w.kind, w.api_version, w.job_uid, w.local_queue, w.priority,
                   w.created_at, {OBJECT_NAME} AS object_name,
                   row_number() OVER (ORDER BY w.priority DESC, w.queue_ts, w.id) - 1 AS cq_position,
                   row_number() OVER (PARTITION BY w.namespace, w.local_queue
                                      ORDER BY w.priority DESC, w.queue_ts, w.id) - 1 AS lq_position
            FROM workloads w
            WHERE w.state = 'Pending' AND w.active AND w.cluster_queue = :cq
        ) ranked
    """
    params: dict[str, Any] = {"cq": cluster_queue, "offset": offset, "limit": limit}
    if local_queue is not None:
        query += " WHERE namespace = :namespace AND local_queue = :lq"
        params |= {"namespace": local_queue[0], "lq": local_queue[1]}
    query += " ORDER BY cq_position OFFSET :offset LIMIT :limit"
    rows = (await session.execute(text(query), params)).mappings()
    return [
        {
            "metadata": {
                "name": r["object_name"],
                "namespace": r["namespace"],
                "creationTimestamp": _time(r["created_at"]),
                "ownerReferences": [
                    {"apiVersion": r["api_version"], "kind": r["kind"], "name": r["name"], "uid": r["job_uid"]}
                ],
            },
            "priority": r["priority"],
            "localQueueName": r["local_queue"],
            "positionInClusterQueue": int(r["cq_position"]),
            "positionInLocalQueue": int(r["lq_position"]),
        }
        for r in rows
    ]


async def local_queue_target(session: AsyncSession, namespace: str, name: str) -> str | None:
    """The ClusterQueue of LocalQueue ``namespace/name``, or None if there is no such LocalQueue."""
    found = await session.execute(
        text("SELECT cluster_queue FROM local_queues WHERE namespace = :ns AND name = :name"),
        {"ns": namespace, "name": name},
    )
    value = found.scalar_one_or_none()
    return str(value) if value is not None else None


async def cluster_queue_exists(session: AsyncSession, name: str) -> bool:
    found = await session.execute(text("SELECT 1 FROM cluster_queues WHERE name = :name"), {"name": name})
    return found.scalar_one_or_none() is not None


def age(obj: dict[str, Any]) -> str:
    """kubectl's AGE of an object, from its creationTimestamp."""
    created = (obj.get("metadata") or {}).get("creationTimestamp")
    if not created:
        return "<unknown>"
    when = dt.datetime.strptime(str(created), "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.UTC)
    return human_duration((dt.datetime.now(dt.UTC) - when).total_seconds())
