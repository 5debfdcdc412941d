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

from sqlalchemy import DateTime, Numeric, String, and_, case, cast, func, literal, select, text
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
    group: Any
    if by == "namespace":
        group = u.namespace
    elif by == "clusterqueue":
        group = u.cluster_queue
    else:
        group = func.coalesce(u.labels[by[len("label:") :]].astext, literal(NO_LABEL, String))
    ends = func.coalesce(u.ended_at, until)
    lo: Any = literal(since, DateTime(timezone=True))
    hi: Any = literal(until, DateTime(timezone=True))
    starts = None
    if bucket is not None:
        starts = func.generate_series(since, until, bucket).table_valued("lo").render_derived()
        lo, hi = starts.c.lo, func.least(starts.c.lo + bucket, until)
    end = func.least(ends, hi)
    # One flat query, so PostgreSQL can scan and aggregate in parallel. Held hours in exact
    # numeric; started and measured in double precision (they are measurements, and numeric
    # arithmetic on every row would double the time of a report over a million rows).
    ran = case(
        (u.running_at.is_(None), literal(0.0)),
        else_=func.greatest(0.0, func.date_part("epoch", end - func.greatest(u.running_at, lo))),
    )
    share = case(  # of the run's measured and busy seconds, the part inside [lo, hi]
        (u.measured_seconds == 0, literal(0.0)),
        (and_(u.running_at >= lo, u.ended_at <= hi), literal(1.0)),
        else_=func.least(
            1.0,
            func.greatest(0.0, func.date_part("epoch", end - func.greatest(u.running_at, lo)))
            / func.nullif(func.date_part("epoch", ends - u.running_at), 0.0),
        ),
    )
    columns = [
        group.label("g"),
        u.cluster_queue,
        u.flavor,
        u.resource,
        func.sum(cast(u.quantity, Numeric) * func.extract("epoch", end - func.greatest(u.started_at, lo))),
        func.sum(u.quantity * ran),
        func.sum(u.quantity * u.measured_seconds * func.coalesce(share, 0.0)),
        func.sum(u.quantity * u.busy_seconds * func.coalesce(share, 0.0)),
    ]
    overlaps = and_(u.started_at < until, ends > since)
    if starts is None:
        query = select(*columns).where(overlaps).group_by(group, u.cluster_queue, u.flavor, u.resource)
    else:
        query = (
            select(*columns, lo)
            .join(starts, and_(u.started_at < hi, ends > lo))
            .where(overlaps, lo < until)
            .group_by(group, u.cluster_queue, u.flavor, u.resource, lo)
        )
    # The planner takes groups of several columns for independent (namespace x queue x flavor x
    # resource) and sorts a million rows on disk under the default 4 MB: room to hash them instead.
    await session.execute(text("SET LOCAL work_mem = '64MB'"))
    rows = []
    unit = Decimal(1000 * 3600)  # milli-unit-seconds per unit-hour
    for row in await session.execute(query):
        g_, cq, flavor, resource, total, started, measured, busy = tuple(row)[:8]
        rows.append(
            UsageRow(
                str(g_),
                cq,
                flavor,
                resource,
                Decimal(total or 0) / unit,
                Decimal(str(started or 0)) / unit,
                Decimal(str(measured or 0)) / unit,
                Decimal(str(busy or 0)) / unit,
                row[8] if bucket is not None else None,
            )
        )
    return rows


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


async def set_run_utilisation(
    session: AsyncSession, runs: Sequence[tuple[int, dt.datetime, dt.datetime, float]]
) -> None:
    """(workload id, run start, run end, mean utilisation over the run) of runs that ended,
    measured whole: the rows of that admission that ran are measured for all the time they ran,
    busy by the mean, replacing what the periodic reads added (``admission.controller.metering``)."""
    if runs:
        await session.execute(
            _SET_RUN_UTILISATION,
            {
                "id": [r[0] for r in runs],
                "since": [r[1] for r in runs],
                "until": [r[2] for r in runs],
                "mean": [r[3] for r in runs],
            },
        )


# the run's rows: this workload's, closed, that ran, and whose hold overlaps the run (one
# admission's rows; the next admission's are open or start after this run ended)
_SET_RUN_UTILISATION = text(
    """
    UPDATE usage_ledger AS l
    SET measured_seconds = EXTRACT(EPOCH FROM l.ended_at - l.running_at),
        busy_seconds = EXTRACT(EPOCH FROM l.ended_at - l.running_at) * u.mean
    FROM unnest(CAST(:id AS bigint[]), CAST(:since AS timestamptz[]), CAST(:until AS timestamptz[]),
                CAST(:mean AS float8[])) AS u(id, since, until, mean)
    WHERE l.workload_id = u.id AND l.ended_at IS NOT NULL AND l.running_at IS NOT NULL
      AND l.ended_at > l.running_at AND l.started_at < u.until AND l.ended_at > u.since
    """
)


_ADD_UTILISATION = text(
    """
    UPDATE usage_ledger AS l
    SET measured_seconds = l.measured_seconds + u.seconds, busy_seconds = l.busy_seconds + u.busy
    FROM unnest(CAST(:id AS bigint[]), CAST(:seconds AS float8[]), CAST(:busy AS float8[])) AS u(id, seconds, busy)
    WHERE l.workload_id = u.id AND l.ended_at IS NULL AND l.running_at IS NOT NULL
    """
)
