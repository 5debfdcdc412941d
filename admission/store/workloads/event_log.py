"""The event log and progress queries: what happened to each workload, for the CLI and dashboard.

``events`` reads the log the commits write (admitted, evicted, finished...); ``workload_states``,
``last_progress``, ``next_requeue`` and ``last_event_id`` answer the read models' small questions.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

from admission.store import tables


@dataclass(frozen=True, slots=True)
class EventRow:
    id: int
    workload: str  # namespace/name
    at: dt.datetime
    type: str
    cluster_queue: str | None
    flavors: dict[str, dict[str, str]] | None
    borrowing: bool | None
    counts: dict[str, int] | None  # a partial admission's pods per pod set
    reason: str | None
    detail: str | None
    by: str | None
    placement: dict[str, dict[str, int]] | None = None  # pod set -> node -> pods, placed by topology


async def events(session: AsyncSession, *, after: int = 0, workload_id: int | None = None) -> list[EventRow]:
    """Workload events in commit order (after event id ``after``; of one workload if given)."""
    e, w = tables.WorkloadEvent, tables.Workload
    query = (
        select(
            e.id,
            w.namespace,
            w.name,
            e.at,
            e.type,
            e.cluster_queue,
            e.flavors,
            e.borrowing,
            e.counts,
            e.reason,
            e.detail,
            e.by_workload,
            e.placement,
        )
        .join(w, w.id == e.workload_id)
        .where(e.id > after)
        .order_by(e.id)
    )
    if workload_id is not None:
        query = query.where(e.workload_id == workload_id)
    return [
        EventRow(
            r.id,
            f"{r.namespace}/{r.name}",
            r.at,
            r.type,
            r.cluster_queue,
            r.flavors,
            r.borrowing,
            r.counts,
            r.reason,
            r.detail,
            r.by_workload,
            r.placement,
        )
        for r in await session.execute(query)
    ]


async def workload_states(session: AsyncSession) -> dict[str, tuple[str, str | None, str | None]]:
    """Every workload's state, reason and message by namespace/name (the latest row of a name)."""
    w = tables.Workload
    rows = await session.execute(select(w.namespace, w.name, w.state, w.reason, w.message).order_by(w.id))
    return {f"{r.namespace}/{r.name}": (r.state, r.reason, r.message) for r in rows}


async def last_progress(session: AsyncSession) -> tuple[dt.datetime | None, bool]:
    """For a simulation's end: the latest moment a job finished or had all its pods Ready, and
    whether some admitted workload's pods are all Ready now (it will finish by itself)."""
    w = tables.Workload
    latest = (await session.execute(select(func.max(w.finished_at), func.max(w.pods_ready_at)))).one()
    running = (
        await session.execute(select(w.id).where(w.state == "Admitted", w.pods_ready_at.is_not(None)).limit(1))
    ).first()
    moments = [t for t in latest if t is not None]
    return (max(moments) if moments else None), running is not None


async def next_requeue(session: AsyncSession) -> dt.datetime | None:
    """When the next workload waiting out an admission check's backoff queues again (None: none waits)."""
    w = tables.Workload
    found = await session.execute(
        select(func.min(w.requeue_at)).where(w.state == "Pending", w.active, w.requeue_at > func.now())
    )
    return found.scalar_one()


async def last_event_id(session: AsyncSession) -> int:
    found = await session.execute(select(func.max(tables.WorkloadEvent.id)))
    return int(found.scalar_one() or 0)
