"""The usage ledger as chargeback: resource-hours per group over a time window.

Every admitted interval is a ledger row (``tables.UsageInterval``): who held how much of a
flavor-resource from when to when. A report clips each interval to the window (an open one
runs up to ``until``), multiplies by its quantity and sums per group, in PostgreSQL and in
exact numeric arithmetic (milli-units times microsecond-exact seconds), so an interval cut
short by a preemption counts exactly what ran. Groups: namespace, ClusterQueue, or any label
recorded with the interval (``label:team``).

Three measures per row (GPU efficiency, ``docs/gpu-efficiency.md``):

- *requested* (``hours``): quota held, from the admission to its end;
- *started*: from when the job was seen running under that admission (``running_at``): the wait
  for an admission check or for preempted workloads to stop is held but not started;
- *used*: the started time DCGM data covered (``measured_seconds``) weighted by the utilisation
  measured (``busy_seconds``). Both are totals of the run; a window that clips the run takes the
  clipped share of them (utilisation is taken as even over the run). None where nothing was
  measured: missing data is unknown, never idle.

With ``bucket``, every measure is cut into buckets of that length from ``since`` (``--plot``).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from sqlalchemy import ColumnElement, DateTime, Numeric, String, and_, case, cast, func, literal, select, text
from sqlalchemy.ext.asyncio import AsyncSession

from admission.store import tables

NO_LABEL = "(none)"


@dataclass(frozen=True, slots=True)
class UsageRow:
    group: str
    cluster_queue: str
    flavor: str
    resource: str
    hours: Decimal  # requested resource-hours (GPU-hours for GPUs, core-hours for cpu, ...)
    started: Decimal = Decimal(0)  # of those, the hours its job ran
    measured: Decimal = Decimal(0)  # of those, the hours DCGM data covered
    busy: Decimal = Decimal(0)  # measured hours times the utilisation measured (used hours)
    bucket: dt.datetime | None = None  # the bucket's start, in a report cut into buckets

    @property
    def used(self) -> Decimal | None:
        """Used resource-hours, or None where nothing was measured (unknown, never idle)."""
        return self.busy if self.measured > 0 else None

    @property
    def efficiency(self) -> Decimal | None:
        """Mean utilisation over the measured time (used / started where DCGM covered the whole run)."""
        return self.busy / self.measured if self.measured > 0 else None


def parse_by(by: str) -> str:
    """Check a grouping: ``namespace``, ``clusterqueue`` or ``label:KEY``; returns it normalised."""
    if by in ("namespace", "clusterqueue"):
        return by
    if by.startswith("label:") and by[len("label:") :].strip():
        return by
    raise ValueError(f"--by {by!r}: use namespace, clusterqueue or label:KEY (e.g. label:team)")


async def report(
    session: AsyncSession, *, by: str, since: dt.datetime, until: dt.datetime, bucket: dt.timedelta | None = None
) -> list[UsageRow]:
    """Resource-hours per (group, ClusterQueue, flavor, resource) within ``[since, until]``, and
    per bucket of that length from ``since`` if ``bucket`` is given."""
    u = tables.UsageInterval
    by = parse_by(by)
    overlaps = and_(u.started_at < until, func.coalesce(u.ended_at, until) > since)
    if bucket is None:
        lo: ColumnElement[dt.datetime] = literal(since, DateTime(timezone=True))
        source = select(u, lo.label("lo"), literal(until, DateTime(timezone=True)).label("hi")).where(overlaps)
    else:
        starts = func.generate_series(since, until, bucket).table_valued("lo").render_derived()
        hi = func.least(starts.c.lo + bucket, until)
        source = (
            select(u, starts.c.lo, hi.label("hi"))
            .join(starts, and_(u.started_at < hi, func.coalesce(u.ended_at, until) > starts.c.lo))
            .where(overlaps, starts.c.lo < until)
        )
    c = source.subquery().c
    group: Any
    if by == "namespace":
        group = c.namespace
    elif by == "clusterqueue":
        group = c.cluster_queue
    else:
        group = func.coalesce(c.labels[by[len("label:") :]].astext, literal(NO_LABEL, String))
    ends = func.coalesce(c.ended_at, until)
    end = func.least(ends, c.hi)
    held = _seconds(end - func.greatest(c.started_at, c.lo))
    # (PostgreSQL's GREATEST skips NULLs: a row that never ran is said so explicitly)
    ran = case((c.running_at.is_(None), literal(0, Numeric)), else_=_seconds(end - func.greatest(c.running_at, c.lo)))
    whole_run = _seconds(ends - c.running_at)
    share = case((whole_run > 0, func.least(literal(1, Numeric), ran / whole_run)), else_=literal(0, Numeric))
    qty = cast(c.quantity, Numeric)
    query = select(
        group.label("g"),
        c.cluster_queue,
        c.flavor,
        c.resource,
        func.sum(qty * held),
        func.sum(qty * func.greatest(ran, 0)),
        func.sum(qty * cast(c.measured_seconds, Numeric) * func.coalesce(share, 0)),
        func.sum(qty * cast(c.busy_seconds, Numeric) * func.coalesce(share, 0)),
        c.lo,
    ).group_by(group, c.cluster_queue, c.flavor, c.resource, c.lo)
    rows = []
    unit = Decimal(1000 * 3600)  # milli-unit-seconds per unit-hour
    for g_, cq, flavor, resource, total, started, measured, busy, lo_ in await session.execute(query):
        rows.append(
            UsageRow(
                str(g_),
                cq,
                flavor,
                resource,
                Decimal(total or 0) / unit,
                Decimal(started or 0) / unit,
                Decimal(measured or 0) / unit,
                Decimal(busy or 0) / unit,
                lo_ if bucket is not None else None,
            )
        )
    return rows


def _seconds(span: ColumnElement[dt.timedelta]) -> ColumnElement[Decimal]:
    return cast(func.extract("epoch", span), Numeric)


async def set_running(session: AsyncSession, running: Sequence[tuple[int, dt.datetime]]) -> None:
    """When these workloads' jobs were first seen running under their current admission: their
    open rows start counting *started* hours from then (a restart seeing them again changes nothing)."""
    if running:
        await session.execute(_SET_RUNNING, {"id": [wid for wid, _ in running], "at": [at for _, at in running]})


_SET_RUNNING = text(
    """
    UPDATE usage_ledger AS l SET running_at = GREATEST(u.at, l.started_at)
    FROM unnest(CAST(:id AS bigint[]), CAST(:at AS timestamptz[])) AS u(id, at)
    WHERE l.workload_id = u.id AND l.ended_at IS NULL AND l.running_at IS NULL
    """
)


async def add_utilisation(session: AsyncSession, measured: Sequence[tuple[int, float, float]]) -> None:
    """(workload id, seconds measured, those seconds times the utilisation measured): added to the
    workloads' open rows that are running (*used* hours)."""
    if measured:
        await session.execute(
            _ADD_UTILISATION,
            {"id": [m[0] for m in measured], "seconds": [m[1] for m in measured], "busy": [m[2] for m in measured]},
        )


_ADD_UTILISATION = text(
    """
    UPDATE usage_ledger AS l
    SET measured_seconds = l.measured_seconds + u.seconds, busy_seconds = l.busy_seconds + u.busy
    FROM unnest(CAST(:id AS bigint[]), CAST(:seconds AS float8[]), CAST(:busy AS float8[])) AS u(id, seconds, busy)
    WHERE l.workload_id = u.id AND l.ended_at IS NULL AND l.running_at IS NOT NULL
    """
)
