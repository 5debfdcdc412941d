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

Beside them, each run's GPU memory (its busiest GPU's, MiB; right-sizing, ``store.rightsizing``):
its peak, its size, and the time covered with that time weighted by the memory used (the mean).

With ``bucket``, every measure is cut into buckets of that length from ``since`` (``--plot``).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from sqlalchemy import DateTime, Numeric, String, and_, case, cast, func, literal, select
from sqlalchemy.ext.asyncio import AsyncSession

from admission.store import tables
from admission.store.queries import query
from queues.gpus.gpu_metrics import Memory

NO_LABEL = "(none)"


@dataclass(frozen=True, slots=True)
class Measurement:
    """What utilisation reads measured of one workload's run since the last: added to its open
    rows that run (``add_measured``)."""

    workload_id: int
    seconds: float = 0.0  # the time utilisation data covered
    busy_seconds: float = 0.0  # that time times the utilisation measured
    memory_seconds: float = 0.0  # the time GPU memory data covered
    memory_mib_seconds: float = 0.0  # that time times the MiB used (the mean's numerator)
    peak_mib: float | None = None  # the peak GPU memory of its busiest GPU
    total_mib: float | None = None  # that GPU's size


@dataclass(frozen=True, slots=True)
class RunMeasurement:
    """A run that ended, measured over its whole interval (``set_run_measured``); None: no data."""

    workload_id: int
    since: dt.datetime
    until: dt.datetime
    busy: float | None
    memory: Memory | None


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


def group_of(by: str) -> Any:
    """The ledger column (or label) a ``--by`` grouping groups by; ``ValueError`` for no grouping."""
    u = tables.UsageInterval
    by = parse_by(by)
    if by == "namespace":
        return u.namespace
    if by == "clusterqueue":
        return u.cluster_queue
    return func.coalesce(u.labels[by[len("label:") :]].astext, literal(NO_LABEL, String))


async def report(
    session: AsyncSession, *, by: str, since: dt.datetime, until: dt.datetime, bucket: dt.timedelta | None = None
) -> list[UsageRow]:
    """Resource-hours per (group, ClusterQueue, flavor, resource) within ``[since, until]``, and
    per bucket of that length from ``since`` if ``bucket`` is given."""
    u = tables.UsageInterval
    group = group_of(by)
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
        grouped = select(*columns).where(overlaps).group_by(group, u.cluster_queue, u.flavor, u.resource)
    else:
        grouped = (
            select(*columns, lo)
            .join(starts, and_(u.started_at < hi, ends > lo))
            .where(overlaps, lo < until)
            .group_by(group, u.cluster_queue, u.flavor, u.resource, lo)
        )
    # The planner takes groups of several columns for independent (namespace x queue x flavor x
    # resource) and sorts a million rows on disk under the default 4 MB: room to hash them instead.
    await session.execute(query("transaction_work_mem"), {"size": "64MB"})
    rows = []
    unit = Decimal(1000 * 3600)  # milli-unit-seconds per unit-hour
    for row in await session.execute(grouped):
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


_SET_RUNNING = query("usage_set_running")


async def add_measured(session: AsyncSession, measured: Sequence[Measurement]) -> None:
    """What reads measured, added to the workloads' open rows that are running (*used* hours and
    GPU memory)."""
    if measured:
        await session.execute(
            _ADD_MEASURED,
            {
                "id": [m.workload_id for m in measured],
                "seconds": [m.seconds for m in measured],
                "busy": [m.busy_seconds for m in measured],
                "mem_s": [m.memory_seconds for m in measured],
                "mib_s": [m.memory_mib_seconds for m in measured],
                "peak": [m.peak_mib for m in measured],
                "total": [m.total_mib for m in measured],
            },
        )


async def set_run_measured(session: AsyncSession, runs: Sequence[RunMeasurement]) -> None:
    """Runs that ended, measured whole: the rows of that admission that ran are measured for all
    the time they ran, busy by the mean, and their GPU memory by the run's (replacing what the
    periodic reads added; the peak is the larger of the two, a read's max may catch what the run's
    steps skip) (``admission.controller.features.metering``). A figure that is None leaves its columns."""
    if runs:
        await session.execute(
            _SET_RUN_MEASURED,
            {
                "id": [r.workload_id for r in runs],
                "since": [r.since for r in runs],
                "until": [r.until for r in runs],
                "mean": [r.busy for r in runs],
                "peak": [r.memory.peak_mib if r.memory else None for r in runs],
                "mib": [r.memory.mean_mib if r.memory else None for r in runs],
                "total": [r.memory.total_mib if r.memory else None for r in runs],
            },
        )


# the run's rows: this workload's, closed, that ran, and whose hold overlaps the run (one
# admission's rows; the next admission's are open or start after this run ended)
_SET_RUN_MEASURED = query("usage_set_run_measured")


# (GREATEST ignores NULLs: a read without memory figures leaves the peak as it was)
_ADD_MEASURED = query("usage_add_measured")
