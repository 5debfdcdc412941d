"""What the dashboard shows, read as the CLI reads it: PostgreSQL, plus the leader's memory.

Every answer is plain JSON for the page (``admission/ui/static``), computed per request:

- ``overview``: the cohort tree; per ClusterQueue and (flavor, resource) its nominal quota, what
  its admitted workloads hold (``admissions``), what of that is borrowed (above nominal) and what
  of its unused nominal the cohort's borrowers use (lent; Kueue attributes lending to no one, so
  Turnstile lends each queue's unused quota in name order: the same totals, an arbitrary split);
  pending/admitted counts; with fair sharing on, each queue's weighted share; and GPUs by
  flavor: in use, reserved for pending admission checks, free under quota, and (on the leader,
  where DCGM data is read) held by workloads measured idle.
- ``pending``: one ClusterQueue's pending workloads in queue order (priority, then queue time),
  a page at a time, with position, reason and message: the order ``describe workload`` uses.
- ``workload``: ``describe workload``'s text and the workload's history (admitted, evicted and
  by whom, finished), each event with its time.
- ``usage``: GPU-hours per label value (``label:team`` by default) over a period, from the ledger.
- ``audit``: the newest admin edits.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from fractions import Fraction
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from admission import views
from admission.store import config as config_store
from admission.store import read_models, workload_objects
from admission.store import usage as usage_store
from admission.store import workloads as store
from queues.cycle import fairsharing
from queues.gpus.gpu_units import card_fraction
from queues.model import Config

PAGE = 50


Fractions = Mapping[str, Fraction]  # a GPU resource's part of a card, where not by its name (DRA mappings...)


async def overview(
    session: AsyncSession, idle: dict[tuple[str, str], int] | None = None, fractions: Fractions | None = None
) -> dict[str, Any]:
    """See the module docstring; ``idle``: (flavor, resource) -> milli-units held by idle workloads;
    ``fractions``: the parts of a card ``turnstile usage`` bills with (a DRA mapping of whole GPUs,
    ``TURNSTILE_GPU_FRACTIONS``), so a GPU claimed through DRA counts on the GPU bars too."""
    config = await config_store.load_config(session)
    held = await store.held_usage(session)
    reserved = await read_models.reserved_while_checking(session)
    counts = await read_models.queue_counts(session)
    queues = []
    for name, cq in sorted(config.cluster_queues.items()):
        rows = []
        for group in cq.spec.resource_groups:
            for fq in group.flavors:
                for rq in fq.resources:
                    used = held.get(name, {}).get((fq.name, rq.name), 0)
                    rows.append(
                        {
                            "flavor": fq.name,
                            "resource": rq.name,
                            "nominal": rq.nominal_quota,
                            "used": used,
                            "borrowed": max(0, used - rq.nominal_quota),
                            "borrowingLimit": rq.borrowing_limit,
                            "lent": 0,
                        }
                    )
        c = counts.get(f"cq/{name}", {})
        queues.append(
            {
                "name": name,
                "cohort": cq.spec.cohort_ref,
                "resources": rows,
                "pending": c.get("Pending", 0),
                "admitted": c.get("Admitted", 0),
                "stopPolicy": cq.spec.stop_policy,
            }
        )
    _lend(queues)
    if await read_models.controller_fair_sharing(session) is not None:
        _fair_shares(config, queues, held)
    cohorts = {name: obj.spec.parent_ref for name, obj in sorted(config.cohorts.items())}
    for q in queues:
        if q["cohort"] and q["cohort"] not in cohorts:
            cohorts[q["cohort"]] = None
    gpus: dict[str, dict[str, Any]] = {}
    for q in queues:
        for r in q["resources"]:
            fraction = card_fraction(r["resource"], fractions)
            if not fraction:
                continue
            g = gpus.setdefault(r["flavor"], {"flavor": r["flavor"], "nominal": 0.0, "inUse": 0.0})
            g["nominal"] += r["nominal"] / 1000 * float(fraction)
            g["inUse"] += r["used"] / 1000 * float(fraction)
    for flavor, g in gpus.items():
        g["reserved"] = sum(
            v / 1000 * float(card_fraction(r, fractions) or 0) for (f, r), v in reserved.items() if f == flavor
        )
        g["free"] = max(0.0, g["nominal"] - g["inUse"])
        g["idle"] = (
            None
            if idle is None
            else sum(v / 1000 * float(card_fraction(r, fractions) or 0) for (f, r), v in idle.items() if f == flavor)
        )
    return {
        "clusterQueues": queues,
        "cohorts": [{"name": n, "parent": p} for n, p in cohorts.items()],
        "gpus": sorted(gpus.values(), key=lambda g: str(g["flavor"])),
        "at": dt.datetime.now(dt.UTC).isoformat(),
    }


def _fair_shares(config: Config, queues: list[dict[str, Any]], held: dict[str, dict[tuple[str, str], int]]) -> None:
    """With fair sharing on: each ClusterQueue's weight and weighted share (Kueue's Dominant
    Resource Share) as its admitted quota stands, as ``describe clusterqueue`` computes it."""
    shares = fairsharing.shares_with(config, held)
    for q in queues:
        s = shares.get(q["name"])
        if s is not None:
            value = None if s.value == float("inf") else round(s.value, 4)
            q["fairShare"] = {"weight": s.weight, "share": value if s.borrowing else 0, "resource": s.resource}


def _lend(queues: list[dict[str, Any]]) -> None:
    """Attribute what a cohort's queues borrow to its members' unused nominal quota, in name order."""
    by_cohort: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for q in queues:
        if q["cohort"]:
            for r in q["resources"]:
                by_cohort.setdefault((q["cohort"], r["flavor"], r["resource"]), []).append(r)
    for rows in by_cohort.values():
        borrowed = sum(r["borrowed"] for r in rows)
        for r in rows:
            if borrowed <= 0:
                break
            spare = max(0, r["nominal"] - r["used"])
            r["lent"] = min(spare, borrowed)
            borrowed -= r["lent"]


async def pending(session: AsyncSession, cluster_queue: str, offset: int = 0, limit: int = PAGE) -> dict[str, Any]:
    total, rows = await read_models.pending_page(session, cluster_queue, offset=offset, limit=limit)
    items = [
        {
            "position": offset + i + 1,
            "workload": f"{r.namespace}/{r.name}",
            "kind": r.kind,
            "localQueue": r.local_queue,
            "priority": r.priority,
            "reason": r.reason,
            "message": r.message,
            "queued": r.queue_ts.isoformat() if r.queue_ts else None,
        }
        for i, r in enumerate(rows)
    ]
    return {"clusterQueue": cluster_queue, "total": int(total or 0), "offset": offset, "items": items}


async def workload(session: AsyncSession, name: str, fractions: Fractions | None = None) -> dict[str, Any]:
    """``describe workload``'s text (its GPU memory line billed with ``fractions``, as the CLI's) and
    the history; ``NotFound`` if there is none."""
    described = await views.describe(session, "Workload", name, fractions=fractions)
    rows = await read_models.workload_rows(session, namespace=None, name=name)  # (its job's name or its object's)
    history = []
    if rows:
        row = max(rows, key=lambda r: int(r["id"]))
        history.append({"at": row["created_at"].isoformat(), "type": "Created", "why": ""})
        events = await store.events(session, workload_id=int(row["id"]))
        named = await workload_objects.object_names(session, {e.by for e in events if e.by})
        for e in events:
            why = views.event_why(e, named)
            where = f"ClusterQueue {e.cluster_queue}" if e.cluster_queue else ""
            history.append({"at": e.at.isoformat(), "type": e.type, "why": why, "where": where})
    return {"workload": name, "describe": described, "history": history}


async def usage(session: AsyncSession, *, by: str, days: float, fractions: Fractions | None = None) -> dict[str, Any]:
    """GPU-hours (whole cards: MIG slices, shared replicas and DRA-mapped devices as their part,
    as ``turnstile usage`` bills them with ``fractions``) per group."""
    until = dt.datetime.now(dt.UTC)
    since = until - dt.timedelta(days=days)
    rows = await usage_store.report(session, by=by, since=since, until=until)
    groups: dict[str, float] = {}
    for r in rows:
        fraction = card_fraction(r.resource, fractions)
        if fraction:
            groups[r.group] = groups.get(r.group, 0.0) + float(r.hours) * float(fraction)
    return {
        "by": by,
        "since": since.isoformat(),
        "until": until.isoformat(),
        "groups": [{"group": g, "gpuHours": round(h, 2)} for g, h in sorted(groups.items(), key=lambda kv: -kv[1])],
    }


async def audit(session: AsyncSession, limit: int = 100) -> list[dict[str, Any]]:
    rows = await read_models.audit_entries(session, limit)
    return [
        {"at": r.at.isoformat(), "actor": r.actor, "action": r.action, "kind": r.kind, "name": r.name} for r in rows
    ]


async def version(session: AsyncSession) -> str:
    """Moves whenever something the page shows may have changed (a decision, an edit, a job)."""
    row = await read_models.change_marks(session)
    return "-".join(str(v) for v in row)
