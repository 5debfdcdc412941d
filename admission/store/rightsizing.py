"""The ledger's measured GPU memory per workload over a window: what right-sizing judges.

Why in the store: ``turnstile rightsize`` looks at every GPU run of a month (a million ledger
rows at a large install) and needs, per workload and GPU resource, the card-hours it held and its
busiest GPU's peak memory, size and utilisation: one grouped aggregate (``rightsizing_grouped``; a workload
that moved ClusterQueue is judged on all its runs of a resource, under the last queue by name).
For one workload (``describe workload``) ``of_workload`` brings its groups out for
``queues.gpus.rightsizing`` to judge in Python. ``report`` judges half a million workloads without
bringing them out: the verdict's only number, the part of each card a slice frees, is a step
function of the peak (``rightsizing.ladder``), written into the query as a ``CASE``; PostgreSQL
sums the savings per group and in total and names the workloads that save most, in one statement
and one pass over the ledger (one aggregate per workload, its resources side by side); then
``rightsizing_grouped`` brings out those workloads' figures and Python judges them again for their lines
(the same ladder).

Only rows whose memory was measured count (``memory_peak_mib`` set): never a verdict without
data, and the GPU-hours a suggestion would save are of measured runs only. A window clips each
row's hold as ``turnstile usage`` does (an open row runs to ``until``); its peak and mean are the
run's (memory is not cut by time).

Its SQL is in ``queries.sql`` (``rightsizing_*``): the report is the one statement the store
builds, as templates this module fills with one set of columns per GPU resource measured.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from admission.store.config import load_config
from admission.store.queries import built, query, template
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
    grouped = built("rightsizing_grouped", group="NULL::text", only="workload = :workload")
    rows = await session.execute(grouped, params)
    return [
        _memory(None, name, cq, r, hours, peak, total, busy, mean)
        for _, name, cq, r, hours, peak, total, busy, mean in rows
    ]


def _memory(
    group: str | None, name: str, cq: str, resource: str, hours: Any, peak: Any, total: Any, busy: Any, mean: Any
) -> WorkloadMemory:
    """A ``rightsizing_grouped`` row as a ``WorkloadMemory``."""
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
            query("rightsizing_resources"),
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
        per_resource.append(template("rightsizing_per_resource").format(i=i, only=f"FILTER (WHERE ri = {i + 1})"))
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
    await session.execute(query("transaction_work_mem"), {"size": "256MB"})
    statement = built(
        "rightsizing_judged",
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
        statement, {**params, "limit": limit}
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
    details = built("rightsizing_grouped", group=group, only="workload = ANY(CAST(:names AS text[]))")
    found = [_memory(None if by is None else str(row[0]), *row[1:]) for row in await session.execute(
        details, {**params, "names": names}
    )]  # fmt: skip
    judged = judge(found, offers, fractions)
    judged.sort(key=lambda j: (-j.verdict.saved_hours, -j.card_hours, j.use.workload, j.use.resource))
    listed = [j for j in judged if show_all or j.verdict.saved_hours > 0][:limit]
    groups.sort(key=lambda g: (-g["gpuHoursSaved"], g["group"]))
    return Report(listed, groups, total)
