"""The ledger's measured GPU memory per workload over a window: what right-sizing judges.

Why in the store: ``turnstile rightsize`` looks at every GPU run of a month (a million ledger
rows at a large install) and needs, per workload and GPU resource, the card-hours it held and its
busiest GPU's peak memory, size and utilisation. One grouped query in PostgreSQL gives that
(hash-aggregated, in parallel), and ``queues.rightsizing`` judges each group in Python.

Only rows whose memory was measured count (``memory_peak_mib`` set): never a verdict without
data, and the GPU-hours a suggestion would save are of measured runs only. A window clips each
row's hold as ``turnstile usage`` does (an open row runs to ``until``); its peak and mean are the
run's (memory is not cut by time).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from sqlalchemy import DateTime, Float, String, and_, cast, func, literal, select, text
from sqlalchemy.ext.asyncio import AsyncSession

from admission.store import tables
from admission.store.config import load_config
from admission.store.usage import NO_LABEL, parse_by
from queues import gpu_units, rightsizing
from queues.rightsizing import Measured, Verdict


@dataclass(frozen=True, slots=True)
class WorkloadMemory:
    """One workload's measured runs on one resource within the window."""

    namespace: str
    workload: str  # its key, namespace/name
    cluster_queue: str
    resource: str
    group: str | None  # its --by group, when grouped
    unit_hours: float  # units held x hours (within the window)
    peak_mib: float
    total_mib: float | None
    busy: float | None  # mean utilisation over the measured time
    mean_mib: float | None  # mean memory of its busiest GPU over the time memory was measured


async def measured(
    session: AsyncSession, *, since: dt.datetime, until: dt.datetime, by: str | None = None, workload: str | None = None
) -> list[WorkloadMemory]:
    """Per (workload, resource) within ``[since, until]``, the runs whose memory was measured;
    ``workload`` (its key, ``namespace/name``) narrows to one."""
    u = tables.UsageInterval
    group: Any = literal(None, String)
    if by is not None:
        by = parse_by(by)
        if by == "namespace":
            group = u.namespace
        elif by == "clusterqueue":
            group = u.cluster_queue
        else:
            group = func.coalesce(u.labels[by[len("label:") :]].astext, literal(NO_LABEL, String))
    lo = literal(since, DateTime(timezone=True))
    hi = literal(until, DateTime(timezone=True))
    ends = func.coalesce(u.ended_at, hi)
    held = func.sum(
        cast(u.quantity, Float) * func.date_part("epoch", func.least(ends, hi) - func.greatest(u.started_at, lo))
    )
    where = [u.started_at < hi, ends > lo, u.memory_peak_mib.is_not(None)]
    if workload is not None:
        where.append(u.workload == workload)
    query = (
        select(
            group.label("g"),
            u.namespace,
            u.workload,
            u.cluster_queue,
            u.resource,
            held,
            func.max(u.memory_peak_mib),
            func.max(u.memory_total_mib),
            func.sum(u.busy_seconds),
            func.sum(u.measured_seconds),
            func.sum(u.memory_mib_seconds),
            func.sum(u.memory_seconds),
        )
        .where(and_(*where))
        .group_by(group, u.namespace, u.workload, u.cluster_queue, u.resource)
    )
    await session.execute(text("SET LOCAL work_mem = '64MB'"))
    out = []
    for g, ns, name, cq, resource, milli_seconds, peak, total, busy, seconds, mib_s, mem_s in await session.execute(
        query
    ):
        out.append(
            WorkloadMemory(
                ns,
                name,
                cq,
                resource,
                None if by is None else str(g),
                float(milli_seconds or 0) / 1000 / 3600,
                float(peak),
                float(total) if total else None,
                float(busy) / float(seconds) if seconds else None,
                float(mib_s) / float(mem_s) if mem_s else None,
            )
        )
    return out


async def offers(session: AsyncSession) -> tuple[str, ...]:
    """The MIG resources the install's ClusterQueues cover (the slices a job could be told to use)."""
    config = await load_config(session)
    return rightsizing.offered_in(config.cluster_queues.values())


@dataclass(frozen=True, slots=True)
class Judged:
    """A measured workload's use of a GPU resource, in card-hours, with its verdict."""

    use: WorkloadMemory
    card_hours: float
    verdict: Verdict


def judge(
    found: Iterable[WorkloadMemory], offers: Iterable[str], fractions: Mapping[str, Fraction] | None = None
) -> list[Judged]:
    """Each measured (workload, GPU resource) with its verdict (``queues.rightsizing``); what holds
    no GPU is left out."""
    offers = tuple(offers)
    out = []
    for use in found:
        share = gpu_units.card_fraction(use.resource, fractions)
        if share is None:
            continue
        card_hours = use.unit_hours * float(share)
        measured = Measured(use.resource, card_hours, use.peak_mib, use.total_mib, use.busy, use.mean_mib)
        verdict = rightsizing.verdict(measured, offers, fractions)
        if verdict is not None:
            out.append(Judged(use, card_hours, verdict))
    return out
