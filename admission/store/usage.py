"""The usage ledger as chargeback: resource-hours per group over a time window.

Every admitted interval is a ledger row (``tables.UsageInterval``): who held how much of a
flavor-resource from when to when. A report clips each interval to the window (an open one
runs up to ``until``), multiplies by its quantity and sums per group, in PostgreSQL and in
exact numeric arithmetic (milli-units times microsecond-exact seconds), so an interval cut
short by a preemption counts exactly what ran. Groups: namespace, ClusterQueue, or any label
recorded with the interval (``label:team``).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from decimal import Decimal

from sqlalchemy import ColumnElement, Numeric, String, and_, cast, func, literal, select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import InstrumentedAttribute

from admission.store import tables

NO_LABEL = "(none)"


@dataclass(frozen=True, slots=True)
class UsageRow:
    group: str
    cluster_queue: str
    flavor: str
    resource: str
    hours: Decimal  # resource-hours (GPU-hours for GPUs, core-hours for cpu, ...)


def parse_by(by: str) -> str:
    """Check a grouping: ``namespace``, ``clusterqueue`` or ``label:KEY``; returns it normalised."""
    if by in ("namespace", "clusterqueue"):
        return by
    if by.startswith("label:") and by[len("label:") :].strip():
        return by
    raise ValueError(f"--by {by!r}: use namespace, clusterqueue or label:KEY (e.g. label:team)")


async def report(session: AsyncSession, *, by: str, since: dt.datetime, until: dt.datetime) -> list[UsageRow]:
    """Resource-hours per (group, ClusterQueue, flavor, resource) within ``[since, until]``."""
    u = tables.UsageInterval
    by = parse_by(by)
    group: ColumnElement[str] | InstrumentedAttribute[str]
    if by == "namespace":
        group = u.namespace
    elif by == "clusterqueue":
        group = u.cluster_queue
    else:
        group = func.coalesce(u.labels[by[len("label:") :]].astext, literal(NO_LABEL, String))
    end = func.least(func.coalesce(u.ended_at, until), until)
    start = func.greatest(u.started_at, since)
    seconds = func.extract("epoch", end - start)
    milli_seconds = func.sum(cast(u.quantity, Numeric) * seconds)
    query = (
        select(group.label("g"), u.cluster_queue, u.flavor, u.resource, milli_seconds)
        .where(and_(u.started_at < until, func.coalesce(u.ended_at, until) > since))
        .group_by(group, u.cluster_queue, u.flavor, u.resource)
    )
    rows = []
    for g, cq, flavor, resource, total in await session.execute(query):
        hours = Decimal(total or 0) / Decimal(1000 * 3600)
        rows.append(UsageRow(str(g), cq, flavor, resource, hours))
    return rows
