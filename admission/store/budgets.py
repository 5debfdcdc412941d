"""GPU-hour budgets in PostgreSQL: kept, audited, and measured against the usage ledger.

A budget caps the GPU-hours a ClusterQueue's workloads, or the jobs carrying a label (a ledger
label: ``TURNSTILE_LEDGER_LABELS``, since the ledger is what is measured), may hold per period.
Periods are calendar months in UTC (``monthly``, the default) or fixed spans counted from the
Unix epoch (``720h``, ``168h``). What a budget used is what the ledger's intervals held inside the current
period, MIG slices and shared GPUs as their part of a card (``queues.gpus.gpu_units``), the same
arithmetic as ``turnstile usage``'s ``gpuHours``.

Once spent, a budget holds its new work back, or runs it at its ``lower_priority``
(``queues.cycle.budget_priority``). Edits are audited like every admin edit (``audit_log``, kind
``GPUBudget``); a budget is refused, with what is wrong, if it is negative or names no
ClusterQueue and no label.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from typing import Any

from sqlalchemy import Numeric, and_, cast, func, or_, select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncSession

from admission.store import tables
from queues.efficiency import Budget
from queues.gpus.gpu_units import card_fraction
from queues.quantity import duration

MONTHLY = "monthly"
KIND = "GPUBudget"  # how the audit log names a budget's edits


@dataclass(frozen=True, slots=True)
class StoredBudget:
    budget: Budget
    period: str  # monthly | a duration

    @property
    def name(self) -> str:
        return self.budget.name


def make(
    *,
    cluster_queue: str | None,
    labels: Mapping[str, str],
    gpu_hours: float,
    period: str,
    lower_priority: int | None = None,
) -> StoredBudget:
    """A budget from its parts; ``ValueError`` says what is wrong."""
    if (cluster_queue is None) == (not labels):
        raise ValueError("name exactly one of --cluster-queue and --label KEY=VALUE")
    if gpu_hours < 0 or gpu_hours != gpu_hours:
        raise ValueError(f"--gpu-hours {gpu_hours:g}: must be >= 0")
    seconds = period_seconds(period)
    pairs = tuple(sorted((str(k), str(v)) for k, v in labels.items()))
    if cluster_queue is not None:
        budget = Budget(
            f"clusterQueue {cluster_queue}",
            float(gpu_hours),
            seconds,
            cluster_queue=cluster_queue,
            lower_priority=lower_priority,
        )
    else:
        name = "label " + ",".join(f"{k}={v}" for k, v in pairs)
        budget = Budget(name, float(gpu_hours), seconds, labels=pairs, lower_priority=lower_priority)
    return StoredBudget(budget, period)


def period_seconds(period: str) -> float:
    """A period's nominal length (a month: 30 days); ``ValueError`` for one that is not a duration."""
    if period == MONTHLY:
        return 30 * 86400.0
    problems: list[Any] = []
    seconds = duration(period, "--period", problems)
    if problems or seconds <= 0:
        raise ValueError(f"--period {period!r}: use monthly or a duration such as 720h or 168h")
    return seconds


def current_period(period: str, now: dt.datetime, anchor: float = 0.0) -> tuple[dt.datetime, dt.datetime]:
    """The period ``now`` is in: [start, end). A duration's periods start at ``anchor`` (Unix
    seconds; the epoch by default, engine cluster's t=0 in a simulation) and every period after."""
    if period == MONTHLY:
        start = now.astimezone(dt.UTC).replace(day=1, hour=0, minute=0, second=0, microsecond=0)
        end = (start + dt.timedelta(days=32)).replace(day=1)
        return start, end
    seconds = period_seconds(period)
    index = (now.timestamp() - anchor) // seconds
    start = dt.datetime.fromtimestamp(anchor + index * seconds, dt.UTC)
    return start, start + dt.timedelta(seconds=seconds)


async def put(session: AsyncSession, stored: StoredBudget, *, actor: str) -> str:
    """Create or change a budget; returns ``created``, ``configured`` or ``unchanged`` (audited)."""
    b = stored.budget
    row = {
        "name": b.name,
        "cluster_queue": b.cluster_queue,
        "labels": dict(b.labels),
        "gpu_hours": Decimal(str(b.gpu_hours)),
        "period": stored.period,
        "lower_priority": b.lower_priority,
    }
    before = await session.get(tables.GpuBudget, b.name)
    old = _doc(before) if before is not None else None
    new = {**row, "gpu_hours": f"{b.gpu_hours:g}"}
    if old == new:
        return "unchanged"
    upsert = insert(tables.GpuBudget).values(**row)
    upsert = upsert.on_conflict_do_update(
        index_elements=["name"], set_={**{k: upsert.excluded[k] for k in row if k != "name"}, "updated_at": func.now()}
    )
    await session.execute(upsert)
    action = "create" if before is None else "update"
    session.add(tables.AuditEntry(actor=actor, action=action, kind=KIND, name=b.name, before=old, after=new))
    return "created" if before is None else "configured"


async def delete(session: AsyncSession, name: str, *, actor: str) -> bool:
    row = await session.get(tables.GpuBudget, name)
    if row is None:
        return False
    session.add(tables.AuditEntry(actor=actor, action="delete", kind=KIND, name=name, before=_doc(row), after=None))
    await session.delete(row)
    return True


async def load(session: AsyncSession) -> list[StoredBudget]:
    rows = (await session.execute(select(tables.GpuBudget).order_by(tables.GpuBudget.name))).scalars()
    out = []
    for r in rows:
        labels = {str(k): str(v) for k, v in (r.labels or {}).items()}
        out.append(
            make(
                cluster_queue=r.cluster_queue,
                labels=labels,
                gpu_hours=float(r.gpu_hours),
                period=r.period,
                lower_priority=r.lower_priority,
            )
        )
    return out


async def used_hours(
    session: AsyncSession,
    stored: StoredBudget,
    now: dt.datetime,
    anchor: float = 0.0,
    fractions: Mapping[str, Fraction] | None = None,
) -> float:
    """GPU-hours the budget's workloads held in the current period, up to ``now``; ``fractions``
    (TURNSTILE_GPU_FRACTIONS) over the MIG table, as ``turnstile usage`` bills."""
    since, _ = current_period(stored.period, now, anchor)
    u = tables.UsageInterval
    b = stored.budget
    end = func.least(func.coalesce(u.ended_at, now), now)
    start = func.greatest(u.started_at, since)
    covers = u.cluster_queue == b.cluster_queue if b.cluster_queue is not None else u.labels.contains(dict(b.labels))
    query = (
        select(u.resource, func.sum(cast(u.quantity, Numeric) * func.extract("epoch", end - start)))
        .where(covers, or_(u.ended_at.is_(None), u.ended_at > since), u.started_at < now, and_(end > start))
        .group_by(u.resource)
    )
    total = 0.0
    for resource, milli_seconds in await session.execute(query):
        fraction = card_fraction(resource, fractions)
        if fraction and milli_seconds is not None:  # (a resource given a part of a card is a GPU's: a DRA mapping's)
            total += float(milli_seconds) / 1000 / 3600 * float(fraction)
    return total


def _doc(row: tables.GpuBudget) -> dict[str, Any]:
    return {
        "name": row.name,
        "cluster_queue": row.cluster_queue,
        "labels": dict(row.labels or {}),
        "gpu_hours": f"{float(row.gpu_hours):g}",
        "period": row.period,
        "lower_priority": row.lower_priority,
    }
