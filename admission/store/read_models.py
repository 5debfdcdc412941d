"""The read models ``get`` and ``describe`` (the CLI's and the dashboard's) query: counts per
queue, the workload rows with their place in line, Kueue's Workload objects, what a ClusterQueue
holds per flavor. Here, in the store, because every SQL statement lives in ``admission.store``;
``admission.views`` turns them into text.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

from admission.policy import parse_fair_sharing
from admission.store import config as config_store
from admission.store import fair_usage, tables
from admission.store import workload_objects as workload_objects_store
from admission.store.queries import query
from queues.kueue import fair_sharing_config


async def queue_counts(session: AsyncSession) -> dict[str, Any]:
    """Pending and admitted workloads per ClusterQueue and per LocalQueue."""
    w = tables.Workload
    rows = await session.execute(
        select(w.cluster_queue, w.namespace, w.local_queue, w.state, func.count()).group_by(
            w.cluster_queue, w.namespace, w.local_queue, w.state
        )
    )
    out: dict[str, Any] = {}
    for cq, ns, lq, state, n in rows:
        for key in (f"cq/{cq}", f"lq/{ns}/{lq}"):
            out.setdefault(key, {}).setdefault(state, 0)
            out[key][state] += n
    return out


_WORKLOAD_ROWS = query("read_models_workloads")


async def workload_rows(session: AsyncSession, *, namespace: str | None, name: str | None) -> list[dict[str, Any]]:
    rows = [dict(r._mapping) for r in await session.execute(_WORKLOAD_ROWS)]
    if namespace is not None:
        rows = [r for r in rows if r["namespace"] == namespace]
    return named(rows, name) if name is not None else rows


def named(rows: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    """The rows of workload ``name`` (``NAME`` or ``NAMESPACE/NAME``; its job's name, or its Workload
    object's as kubectl shows it: ``job-NAME-xxxxx``)."""
    ns, _, short = name.rpartition("/")
    return [r for r in rows if short in (r["name"], r["object_name"]) and (not ns or r["namespace"] == ns)]


async def held_by_flavor(session: AsyncSession, cluster_queue: str) -> dict[tuple[str, str], int]:
    """What ``cluster_queue``'s admissions hold, per (flavor, resource)."""
    a = tables.Admission
    rows = await session.execute(
        select(a.flavor, a.resource, func.sum(a.quantity))
        .where(a.cluster_queue == cluster_queue)
        .group_by(a.flavor, a.resource)
    )
    return {(f, r): int(v) for f, r, v in rows}


async def workload_objects(session: AsyncSession, namespace: str | None, name: str | None) -> dict[str, Any]:
    """One workload (``NAME`` or ``NAMESPACE/NAME``: its object's or its job's name) or a List of
    them, as Kueue's Workload objects (``admission.store.workload_objects``)."""
    if name is not None:
        ns, _, short = name.rpartition("/")
        obj = await workload_objects_store.get(session, ns or namespace or "default", short)
        if obj is None:
            raise config_store.NotFound(f"workload/{name} not found in namespace {ns or namespace or 'default'}")
        return obj
    page = await workload_objects_store.page(session, namespace=namespace, limit=None)
    return {"apiVersion": "v1", "kind": "List", "items": page.items}


async def controller_fair_sharing(session: AsyncSession) -> fair_sharing_config.FairSharing | None:
    """The fair sharing the controller runs with, as its leader recorded it: a plan is made as it would."""
    try:
        return parse_fair_sharing(await fair_usage.get_setting(session))
    except ValueError:
        return None


async def reserved_while_checking(session: AsyncSession) -> dict[tuple[str, str], int]:
    """Quota held by admitted workloads whose admission checks have not all passed, per
    (flavor, resource): reserved, not yet running (the dashboard's overview)."""
    a, w = tables.Admission, tables.Workload
    checking = (
        select(a.flavor, a.resource, func.sum(a.quantity))
        .join(w, w.id == a.workload_id)
        .where(w.state == "Admitted", func.jsonb_array_length(w.checks) > 0)
        .group_by(a.flavor, a.resource)
    )
    return {(flavor, resource): int(qty) for flavor, resource, qty in await session.execute(checking)}


_PENDING = query("read_models_pending")


async def pending_page(session: AsyncSession, cluster_queue: str, *, offset: int, limit: int) -> tuple[int, list[Any]]:
    """How many workloads wait in ``cluster_queue``, and one page of them in queue order."""
    w = tables.Workload
    total = await session.scalar(
        select(func.count()).select_from(w).where(w.state == "Pending", w.cluster_queue == cluster_queue)
    )
    rows = await session.execute(_PENDING, {"cq": cluster_queue, "limit": limit, "offset": offset})
    return int(total or 0), list(rows)


async def audit_entries(session: AsyncSession, limit: int) -> list[tables.AuditEntry]:
    """The newest ``limit`` entries of the audit log, newest first."""
    a = tables.AuditEntry
    return list((await session.execute(select(a).order_by(a.id.desc()).limit(limit))).scalars())


async def change_marks(session: AsyncSession) -> tuple[int, ...]:
    """Numbers that move whenever something the dashboard shows may have changed: the last
    decision, the last edit, the workloads not finished, the last workload."""
    row = (await session.execute(query("read_models_marks"))).one()
    return tuple(int(v) for v in row)
