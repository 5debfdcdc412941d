"""The ledger's measured GPU memory per workload over a window: what right-sizing judges.

Why in the store: ``turnstile rightsize`` looks at every GPU run of a month (a million ledger
rows at a large install) and needs, per workload and GPU resource, the card-hours it held and its
busiest GPU's peak memory, size and utilisation: one grouped aggregate (``_GROUPED``; a workload
that moved ClusterQueue is judged on all its runs of a resource, under the last queue by name).
For one workload (``describe workload``) ``of_workload`` brings its groups out for
``queues.gpus.rightsizing`` to judge in Python. ``report`` judges half a million workloads without
bringing them out: the verdict's only number, the part of each card a slice frees, is a step
function of the peak (``rightsizing.ladder``), written into the query as a ``CASE``; PostgreSQL
sums the savings per group and in total and names the workloads that save most, in one statement
and one pass over the ledger (one aggregate per workload, its resources side by side); then
``_GROUPED`` brings out those workloads' figures and Python judges them again for their lines
(the same ladder).

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

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

from admission.store.config import load_config
from admission.store.usage import NO_LABEL, parse_by
from queues.gpus import gpu_units, rightsizing
from queues.gpus.rightsizing import Measured, Offers, Verdict


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


async def of_workload(session: AsyncSession, key: str) -> list[WorkloadMemory]:
    """One workload's measured runs (``namespace/name``), over all its ledger, per resource
    (``describe workload``)."""
    params = {"lo": dt.datetime(1970, 1, 1, tzinfo=dt.UTC), "hi": dt.datetime.now(dt.UTC), "workload": key}
    query = _GROUPED.format(group="NULL::text", only="workload = :workload")
    rows = await session.execute(text(query), params)
    return [
        _memory(None, name, cq, r, hours, peak, total, busy, mean)
        for _, name, cq, r, hours, peak, total, busy, mean in rows
    ]


def _memory(
    group: str | None, name: str, cq: str, resource: str, hours: Any, peak: Any, total: Any, busy: Any, mean: Any
) -> WorkloadMemory:
    """A ``_GROUPED`` row as a ``WorkloadMemory``."""
    return WorkloadMemory(
        name.partition("/")[0], name, cq, resource, group, float(hours or 0), float(peak),
        float(total) if total else None, busy, mean,
    )  # fmt: skip


async def offers(session: AsyncSession) -> Offers:
    """What the install offers (``rightsizing.offered``): the MIG resources its ClusterQueues
    cover, and its whole-GPU flavors whose nodeLabels say their GPU's memory."""
    config = await load_config(session)
    return rightsizing.offered(config.cluster_queues.values(), config.flavors)


@dataclass(frozen=True, slots=True)
class Judged:
    """A measured workload's use of a GPU resource, in card-hours, with its verdict."""

    use: WorkloadMemory
    card_hours: float
    verdict: Verdict


def judge(
    found: Iterable[WorkloadMemory], offers: Offers, fractions: Mapping[str, Fraction] | None = None
) -> list[Judged]:
    """Each measured (workload, GPU resource) with its verdict (``queues.gpus.rightsizing``); what holds
    no GPU is left out."""
    out = []
    for use in found:
        share = gpu_units.card_fraction(use.resource, fractions)
        if share is None:
            continue
        card_hours = use.unit_hours * float(share)
        measured = Measured(use.resource, card_hours, use.peak_mib, use.total_mib, use.busy, use.mean_mib)
        verdict = rightsizing.verdict(measured, offers.mig, fractions, offers.cards)
        if verdict is not None:
            out.append(Judged(use, card_hours, verdict))
    return out


@dataclass(frozen=True, slots=True)
class Report:
    """``turnstile rightsize``'s answer: the workloads listed, the groups, the totals."""

    listed: list[Judged]
    groups: list[dict[str, Any]]  # group, workloads, fitting, gpuHours, gpuHoursSaved
    total: dict[str, Any]  # workloadsMeasured, workloadsFitting, gpuHours, gpuHoursSaved


_GROUPED = """
    SELECT {group} AS g, workload, max(cluster_queue) AS cluster_queue, resource,
           sum(quantity::float8 * date_part('epoch', least(coalesce(ended_at, :hi), :hi)
               - greatest(started_at, :lo))) / 3600000.0 AS unit_hours,
           max(memory_peak_mib) AS peak, max(memory_total_mib) AS total,
           sum(busy_seconds) / nullif(sum(measured_seconds), 0) AS busy,
           sum(memory_mib_seconds) / nullif(sum(memory_seconds), 0) AS mean_mib
    FROM usage_ledger
    WHERE started_at < :hi AND coalesce(ended_at, :hi) > :lo AND memory_peak_mib IS NOT NULL AND {only}
    GROUP BY 1, 2, 4
"""

# One statement, one pass over the ledger. ``a`` aggregates each (group, workload) once, with what
# each GPU resource's verdict needs side by side ({per_resource}: hours, peak, size, busy, each
# FILTERed to its resource), so the totals count workloads without a second aggregate over half a
# million of them; ``j`` (kept in memory) adds the card-hours and what the verdicts save (the
# ladder's CASE); part 1 names the workloads saving most, part 2 gives the totals per group and in
# all (GROUPING SETS; ``whole`` marks the grand total).
_JUDGED = """
    WITH a AS (
        SELECT {group} AS g, workload, {per_resource}
        FROM (SELECT *, array_position(CAST(:resources AS text[]), resource::text) AS ri FROM usage_ledger
              WHERE started_at < :hi AND coalesce(ended_at, :hi) > :lo AND memory_peak_mib IS NOT NULL
                    AND resource = ANY(CAST(:resources AS text[]))) AS l
        GROUP BY 1, 2
    ), j AS MATERIALIZED (
        SELECT g, workload, {card_hours} AS card_hours, {saved} AS saved FROM a
    )
    SELECT 1 AS part, 0 AS whole, g, workload, saved, card_hours, NULL::bigint AS n, NULL::bigint AS fitting
    FROM (SELECT * FROM j {where} ORDER BY saved DESC, card_hours DESC, workload LIMIT :limit) AS top
    UNION ALL
    SELECT 2, GROUPING(g), g, NULL, sum(saved), sum(card_hours), count(*), count(*) FILTER (WHERE saved > 0)
    FROM j GROUP BY GROUPING SETS ((g), ())
"""

# What resource {i}'s verdict needs, in ``a`` ({only}: its FILTER).
_PER_RESOURCE = """
    sum(quantity::float8 * date_part('epoch', least(coalesce(ended_at, :hi), :hi) - greatest(started_at, :lo)))
        {only} / 3600000.0 AS h{i},
    max(memory_peak_mib) {only} AS p{i}, max(memory_total_mib) {only} AS t{i},
    sum(busy_seconds) {only} / nullif(sum(measured_seconds) {only}, 0) AS b{i}
"""


async def report(
    session: AsyncSession,
    *,
    since: dt.datetime,
    until: dt.datetime,
    by: str | None,
    offers: Offers,
    fractions: Mapping[str, Fraction] | None,
    limit: int,
    show_all: bool = False,
) -> Report:
    """Every measured workload within ``[since, until]`` judged in PostgreSQL (see the module
    docstring): the ``limit`` saving most (with ``show_all``, also those saving nothing), totals,
    and per ``by`` group."""
    params: dict[str, Any] = {"lo": since, "hi": until}
    resources = (
        await session.execute(
            text(
                "SELECT DISTINCT resource FROM usage_ledger WHERE started_at < :hi AND coalesce(ended_at, :hi) > :lo"
                " AND memory_peak_mib IS NOT NULL"
            ),
            params,
        )
    ).scalars()
    shares = {r: f for r in resources if (f := gpu_units.card_fraction(r, fractions)) is not None}
    if not shares:  # (no GPU's memory measured in the window: nothing to judge)
        return Report([], [], {"workloadsMeasured": 0, "workloadsFitting": 0, "gpuHours": 0.0, "gpuHoursSaved": 0.0})
    params["resources"] = sorted(shares)
    params["max_busy"] = rightsizing.MAX_BUSY
    per_resource, card_hours, saved = [], [], []
    for i, (resource, share) in enumerate(sorted(shares.items())):
        per_resource.append(_PER_RESOURCE.format(i=i, only=f"FILTER (WHERE ri = {i + 1})"))
        card_hours.append(f"coalesce(h{i}, 0) * {float(share)!r}")
        freed = [f"CASE WHEN b{i} > :max_busy THEN 0.0"]
        for k, step in enumerate(rightsizing.ladder(resource, offers.mig, fractions, offers.cards)):
            params[f"t{i}_{k}"] = step.top
            smaller = ""  # (a whole GPU of a flavor: only for work that ran on a larger one)
            if step.card_mib is not None:
                params[f"c{i}_{k}"] = step.card_mib
                smaller = f" AND t{i} > :c{i}_{k}"
            freed.append(f"WHEN p{i} <= :t{i}_{k}{smaller} THEN {float(step.freed)!r}")
        saved.append(f"coalesce(h{i}, 0) * {float(share)!r} * {' '.join(freed)} ELSE 0.0 END")
    group = "NULL::text"
    if by is not None:
        by = parse_by(by)
        group = {"namespace": "namespace", "clusterqueue": "cluster_queue"}.get(by, "")
        if not group:
            params["label"], params["no_label"] = by[len("label:") :], NO_LABEL
            group = "coalesce(labels ->> :label, :no_label)"
    await session.execute(text("SET LOCAL work_mem = '256MB'"))
    query = _JUDGED.format(
        group=group,
        per_resource=",".join(per_resource),
        card_hours=" + ".join(card_hours),
        saved=" + ".join(f"({s})" for s in saved),
        where="" if show_all else "WHERE saved > 0",
    )
    names: list[str] = []
    groups: list[dict[str, Any]] = []
    total = {"workloadsMeasured": 0, "workloadsFitting": 0, "gpuHours": 0.0, "gpuHoursSaved": 0.0}
    for part, whole, g, name, saved_hours, held_hours, n, fitting in await session.execute(
        text(query), {**params, "limit": limit}
    ):
        if part == 1:
            names.append(name)
        elif whole:
            total = {"workloadsMeasured": n, "workloadsFitting": fitting, "gpuHours": round(float(held_hours or 0), 6),
                     "gpuHoursSaved": round(float(saved_hours or 0), 6)}  # fmt: skip
        elif by is not None:
            groups.append({"group": str(g), "workloads": n, "fitting": fitting, "gpuHours": round(held_hours, 6),
                           "gpuHoursSaved": round(saved_hours, 6)})  # fmt: skip
    # The listed workloads' figures per resource (the same aggregate as ``of_workload``'s), judged
    # in Python for their lines; most saved first: the ``limit`` (workload, resource) rows saving
    # most are among them, as no resource saves more than its workload.
    details = _GROUPED.format(group=group, only="workload = ANY(CAST(:names AS text[]))")
    found = [_memory(None if by is None else str(row[0]), *row[1:]) for row in await session.execute(
        text(details), {**params, "names": names}
    )]  # fmt: skip
    judged = judge(found, offers, fractions)
    judged.sort(key=lambda j: (-j.verdict.saved_hours, -j.card_hours, j.use.workload, j.use.resource))
    listed = [j for j in judged if show_all or j.verdict.saved_hours > 0][:limit]
    groups.sort(key=lambda g: (-g["gpuHoursSaved"], g["group"]))
    return Report(listed, groups, total)
