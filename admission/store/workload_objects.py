"""Workloads as Kubernetes objects, read from PostgreSQL: the queries behind them.

What ``kubectl get workloads`` (Kueue's objects the leader keeps, and the controller's aggregated
``workloads.turnstile.dev``), Kueue's visibility API and ``turnstile get wl -o json|yaml`` show,
found here and rendered by ``admission.store.workload_shape`` (``active`` as a person last asked
it, ``admission.store.activity``; a preemptor named by its Workload object). Named as Kueue names
them, ``<kind>-<job name>-<first 5 of the job's uid>``.

Finished workloads stay listed for ``RETENTION`` after they finish (their history: why one was
preempted), then only the usage ledger and ``turnstile usage`` have them. Lists are paged by
(namespace, name), so 100,000 workloads come in pages from an index, never all at once.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
from dataclasses import dataclass
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from admission.store.queries import query
from admission.store.workload_shape import JOB_UID_LABEL, timestamp, to_object
from queues.kueue import workload_crd

RETENTION = dt.timedelta(days=7)


def object_name(kind: str, name: str, job_uid: str) -> str:
    """The Workload object name of job ``kind``/``name``, as Kueue names them and kubectl shows
    them: <kind>-<job name>-<first 5 of the job's uid> (``job-big-train-99858``); in SQL, the
    ``object_name`` fragment of ``queries.sql``."""
    return f"{kind.lower()}-{name}-{job_uid[:5]}"


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
    params: dict[str, Any] = {"ns": ns, "name": name, "wid": wid, "retention": RETENTION.total_seconds()}
    params["limit"] = None if limit is None else limit + 1  # (one more: is there a next page?)
    if namespace is None:
        statement = query("workload_objects_page")
    else:
        statement, params["namespace"] = query("workload_objects_page_in_namespace"), namespace
    rows = list((await session.execute(statement, params)).mappings())
    more = limit is not None and len(rows) > limit
    rows = rows[:limit] if limit is not None else rows
    items = await _objects(session, rows, pods_ready)
    last = rows[-1] if rows else None
    return Page(items, _token(last["namespace"], last["name"], last["id"]) if more and last else None)


async def get(session: AsyncSession, namespace: str, name: str, *, pods_ready: bool = False) -> dict[str, Any] | None:
    """The workload ``name`` (its object name, or its job's name) in ``namespace``."""
    params = {"namespace": namespace, "name": name, "retention": RETENTION.total_seconds()}
    rows = list((await session.execute(query("workload_objects_get"), params)).mappings())
    items = await _objects(session, rows, pods_ready)
    return items[0] if items else None


async def by_job_uids(session: AsyncSession, uids: list[str], *, pods_ready: bool = False) -> dict[str, dict[str, Any]]:
    """The workloads of these jobs (by job uid) that are still shown (not finished, or finished
    within ``RETENTION``); a job missing from the answer has none."""
    params = {"uids": list(uids), "retention": RETENTION.total_seconds()}
    rows = list((await session.execute(query("workload_objects_by_job_uids"), params)).mappings())
    return {
        workload_crd.job_uid_of(obj["metadata"]["labels"][JOB_UID_LABEL]): obj
        for obj in await _objects(session, rows, pods_ready)
    }


async def _objects(session: AsyncSession, rows: list[Any], pods_ready: bool) -> list[dict[str, Any]]:
    evictions: dict[int, Any] = {}
    if rows:
        found = await session.execute(
            query("workload_objects_evictions"),
            {"ids": [r["id"] for r in rows]},
        )
        evictions = {e["workload_id"]: e for e in found.mappings()}
    names = await object_names(session, {e["by_workload"] for e in evictions.values() if e["by_workload"]})
    return [to_object(r, evictions.get(r["id"]), pods_ready=pods_ready, names=names) for r in rows]


async def object_names(session: AsyncSession, keys: set[str]) -> dict[str, str]:
    """``namespace/job`` keys (the store's name for a workload, e.g. a preemptor) as ``namespace/``
    and their Workload object's name, the one kubectl and the CLI show (the latest of that name);
    a key with no workload is left out."""
    if not keys:
        return {}
    pairs = [key.split("/", 1) for key in keys if "/" in key]
    found = await session.execute(
        query("workload_objects_names"),
        {"ns": [p[0] for p in pairs], "names": [p[1] for p in pairs]},
    )
    return {f"{r['namespace']}/{r['name']}": f"{r['namespace']}/{r['object_name']}" for r in found.mappings()}


async def pending(
    session: AsyncSession, cluster_queue: str, *, local_queue: tuple[str, str] | None, offset: int, limit: int
) -> list[dict[str, Any]]:
    """Kueue's visibility ``PendingWorkload`` items of ``cluster_queue`` (or of one of its
    LocalQueues), in queue order: priority, then queue time, then submission, as the scheduler
    orders them; positions in the ClusterQueue and in the LocalQueue count from 0."""
    params: dict[str, Any] = {"cq": cluster_queue, "offset": offset, "limit": limit, "namespace": None, "lq": None}
    if local_queue is not None:
        params |= {"namespace": local_queue[0], "lq": local_queue[1]}
    rows = (await session.execute(query("workload_objects_pending"), params)).mappings()
    return [
        {
            "metadata": {
                "name": r["object_name"],
                "namespace": r["namespace"],
                "creationTimestamp": timestamp(r["created_at"]),
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
        query("workload_objects_local_queue_target"),
        {"ns": namespace, "name": name},
    )
    value = found.scalar_one_or_none()
    return str(value) if value is not None else None


async def cluster_queue_exists(session: AsyncSession, name: str) -> bool:
    found = await session.execute(query("workload_objects_cluster_queue_exists"), {"name": name})
    return found.scalar_one_or_none() is not None
