"""Committing an elastic job's resize: its admission rows, pod sets and ledger follow its new size.

Why: an elastic batch Job (``queues.cycle.elastic``) changes ``parallelism`` while it runs and keeps
its admission; the core resizes that admission in place (a ``Resize`` decision). What PostgreSQL
holds must follow in the step's transaction, under the same rules as an admission (design
principle 3, never over-commit): ``commit_cycle`` calls ``apply`` under its quota trees' locks,
with the trees' usage loaded from the ``admissions`` rows, before the cycle's admissions (a
scale-down's quota is theirs at once). Each resize is re-checked there with the workload's own
rows counted as freed; one that no longer fits is refused and the caller undoes it.

What a resize writes: the workload's ``admissions`` rows replaced, its ``pod_sets`` (the counts) and
``assigned_flavors`` updated, its open ledger intervals closed and new ones opened at the new
quantities (GPU-hours are billed at each size for the time it held it; a run already seen keeps
being counted from the resize), and a ``Resized`` row in the event log with the counts (the new
admission rows and the event rows are inserted by ``commit_cycle``'s batched statements, with the
admissions' own).
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import delete, literal, select, update
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.ext.asyncio import AsyncSession

from admission.store import table_base, tables
from admission.store.queries import query
from admission.store.workloads.intake import pod_sets_json
from queues.model import Admission, Snapshot
from queues.podsets import jobs

_CLOSE_LEDGER = query("resize_close_ledger")
_OPEN_LEDGER = query("resize_open_ledger")


@dataclass(frozen=True, slots=True)
class Resize:
    workload_id: int
    admission: Admission  # the admission it holds from now on (same ClusterQueue and flavors)
    pod_sets: tuple[jobs.PodSet, ...]  # its job's pod sets at the new size


@dataclass(slots=True)
class Applied:
    """What ``apply`` leaves to ``commit_cycle``'s batched inserts, with the admissions' own rows."""

    refused: list[int] = field(default_factory=list)  # not admitted any more, or no longer fitting
    admission_rows: list[dict[str, Any]] = field(default_factory=list)  # their ``admissions`` rows now
    events: list[dict[str, Any]] = field(default_factory=list)  # their ``Resized`` event rows


async def apply(session: AsyncSession, snapshot: Snapshot, resizes: Sequence[Resize], now: dt.datetime) -> Applied:
    """Write ``resizes`` that still fit (``snapshot`` holds the locked trees' usage, and is updated):
    their old admission rows deleted, pod sets and flavors updated, ledger intervals split; their new
    admission rows and event rows returned for the caller's inserts."""
    applied = Applied()
    if not resizes:
        return applied
    a, w = tables.Admission, tables.Workload
    ids = [r.workload_id for r in resizes]
    held: dict[int, dict[tuple[str, str], int]] = {}
    for workload_id, flavor, resource, qty in await session.execute(
        select(a.workload_id, a.flavor, a.resource, a.quantity).where(table_base.among(a.workload_id, ids))
    ):
        held.setdefault(int(workload_id), {})[(flavor, resource)] = int(qty)
    admitted = set(
        await session.scalars(select(w.id).where(table_base.among(w.id, ids), w.state == "Admitted").with_for_update())
    )
    for r in resizes:
        cq = snapshot.queues.get(r.admission.cluster_queue)
        before = held.get(r.workload_id, {})
        if cq is None or r.workload_id not in admitted:
            applied.refused.append(r.workload_id)
            continue
        cq.add_usage(before, -1)  # (its own quota counts as freed, as the core decided it)
        if not all(cq.available(fr) >= q for fr, q in r.admission.usage.items()):
            cq.add_usage(before, 1)
            applied.refused.append(r.workload_id)
            continue
        cq.add_usage(r.admission.usage, 1)
        await session.execute(delete(a).where(a.workload_id == r.workload_id))
        usage = sorted(r.admission.usage.items())
        applied.admission_rows += [
            {"workload_id": r.workload_id, "flavor": f, "resource": res, "cluster_queue": cq.name, "quantity": q}
            for (f, res), q in usage
        ]
        flavors = {"flavors": r.admission.flavors, "borrowing": r.admission.borrowing}
        await session.execute(
            update(w)
            .where(w.id == r.workload_id)
            .values(
                pod_sets=w.pod_sets.op("||")(literal(pod_sets_json(r.pod_sets), type_=JSONB)),
                assigned_flavors=flavors,
            )
        )
        closed = (await session.execute(_CLOSE_LEDGER, {"id": r.workload_id, "now": now})).first()
        if closed is not None:  # (its intervals go on at the new size)
            await session.execute(
                _OPEN_LEDGER,
                {
                    "id": r.workload_id,
                    "workload": closed.workload,
                    "namespace": closed.namespace,
                    "cluster_queue": closed.cluster_queue,
                    "local_queue": closed.local_queue,
                    "labels": json.dumps(closed.labels),
                    "running": bool(closed.running),
                    "now": now,
                    "flavor": [f for (f, _), _ in usage],
                    "resource": [res for (_, res), _ in usage],
                    "quantity": [q for _, q in usage],
                },
            )
        counts = {ps.name: ps.count for ps in r.pod_sets}
        applied.events.append(
            {"workload_id": r.workload_id, "type": "Resized", "cluster_queue": cq.name, "counts": counts}
        )
    return applied
