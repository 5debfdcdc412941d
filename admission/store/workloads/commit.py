"""Committing the core's decisions: admissions and evictions re-checked under locks, the ledger opened and closed.

Never over-commit (design principle 3): ``commit_cycle`` re-checks every admission inside its
transaction. It first verifies the caller's fencing token (a paused ex-leader cannot write),
then takes one transaction advisory lock per quota tree it touches, in sorted order (so two
writers never deadlock and never interleave on the same tree), recomputes the trees' usage
from the ``admissions`` rows under those locks, and admits only what still fits by the
scheduling core's own arithmetic. Every admission opens usage-ledger intervals; eviction,
``finish`` and deletion (``dequeue``) close them. Each decision is also written to the event log.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import delete, func, literal, select, update
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.ext.asyncio import AsyncSession

from admission.store import config as config_store
from admission.store import lease, table_base, tables
from admission.store.queries import query
from admission.store.workloads import resize
from admission.store.workloads.intake import LEDGER_LABELS, pod_sets_json
from queues.model import Admission, Snapshot
from queues.podsets import jobs


@dataclass(frozen=True, slots=True)
class Admit:
    workload_id: int
    admission: Admission
    checks: tuple[str, ...] = ()  # admission checks to pass before the job starts (none: it starts now)


@dataclass(frozen=True, slots=True)
class Evict:
    workload_id: int
    reason: str  # Preempted | ClusterQueueStopped | ...
    detail: str | None = None
    by: str | None = None  # the preempting workload
    pod_sets: tuple[jobs.PodSet, ...] | None = None  # its job's pod sets now, if they changed (NoMatchingWorkload)
    executed: float = 0.0  # seconds its job has run in every admission so far, this one included


@dataclass(slots=True)
class CommitResult:
    admitted: list[int] = field(default_factory=list)
    refused: list[int] = field(default_factory=list)  # no longer fits, or no longer pending
    evicted: list[int] = field(default_factory=list)


def _tree_keys(snapshot: Snapshot, cluster_queues: Iterable[str]) -> list[str]:
    """The quota trees to lock: the core's key for each queue (its own name if it is unknown)."""
    return sorted({snapshot.queues[n].tree_key if n in snapshot.queues else f"cq/{n}" for n in cluster_queues})


async def _lock_trees(session: AsyncSession, keys: list[str]) -> None:
    """One round trip; the locks are taken in sorted order, so two writers never deadlock."""
    await session.execute(
        query("commit_lock_trees"),
        {"keys": sorted(keys)},
    )


async def held_usage(
    session: AsyncSession, cluster_queues: Sequence[str] | None = None
) -> dict[str, dict[tuple[str, str], int]]:
    """What admitted workloads hold now: ClusterQueue -> (flavor, resource) -> milli-units (of
    these ClusterQueues, or of all)."""
    a = tables.Admission
    query = select(a.cluster_queue, a.flavor, a.resource, func.sum(a.quantity))
    if cluster_queues is not None:
        query = query.where(table_base.among(a.cluster_queue, cluster_queues))
    rows = await session.execute(query.group_by(a.cluster_queue, a.flavor, a.resource))
    out: dict[str, dict[tuple[str, str], int]] = {}
    for cq, flavor, resource, qty in rows:
        out.setdefault(cq, {})[(flavor, resource)] = int(qty)
    return out


async def _close_intervals(session: AsyncSession, ids: Sequence[int], now: dt.datetime) -> None:
    led = tables.UsageInterval
    await session.execute(
        update(led).where(table_base.among(led.workload_id, ids), led.ended_at.is_(None)).values(ended_at=now)
    )


async def _release(session: AsyncSession, ids: Sequence[int], now: dt.datetime) -> None:
    await session.execute(delete(tables.Admission).where(table_base.among(tables.Admission.workload_id, ids)))
    await _close_intervals(session, ids, now)


_EXECUTED = query("commit_executed")  # what an evicted job ran so far

_ADMIT = query("commit_admit")


_ADMISSION_COLUMNS = ("workload_id", "flavor", "resource", "cluster_queue", "quantity")
_INSERT_ADMISSIONS = query("commit_insert_admissions")
_LEDGER_COLUMNS = (
    "workload_id",
    "workload",
    "namespace",
    "cluster_queue",
    "local_queue",
    "flavor",
    "resource",
    "quantity",
    "labels",
)
_INSERT_LEDGER = query("commit_insert_ledger")


def _columns(rows: list[dict[str, Any]], names: Sequence[str]) -> dict[str, list[Any]]:
    """Row dicts as one list per column, for inserts over ``unnest``."""
    return {name: [row[name] for row in rows] for name in names}


async def commit_cycle(
    session: AsyncSession,
    *,
    admissions: Sequence[Admit],
    evictions: Sequence[Evict] = (),
    resizes: Sequence[resize.Resize] = (),
    now: dt.datetime,
    fence: lease.Fence | None = None,
    ledger_labels: Sequence[str] = LEDGER_LABELS,
) -> CommitResult:
    """Commit one cycle's decisions: evictions first, then elastic jobs' resizes and every admission
    that still fits (``resize.apply``; a refused resize is in ``refused`` too).

    Each admission opens ledger intervals carrying the workload's ``ledger_labels`` (the job
    labels chargeback groups by; ``TURNSTILE_LEDGER_LABELS``)."""
    if fence is not None:
        await lease.check(session, fence)
    result = CommitResult()
    w = tables.Workload
    if evictions:
        ids = [e.workload_id for e in evictions]
        await _release(session, ids, now)
        evicted = await session.execute(
            update(w)
            .where(table_base.among(w.id, ids), w.state == "Admitted")
            .values(
                state="Pending", queue_ts=now, admitted_at=None, assigned_flavors=None, checks=[], pods_ready_at=None
            )
            .returning(w.id, w.cluster_queue)
        )
        queues = {int(i): cq for i, cq in evicted.all()}
        result.evicted = sorted(queues)
        ran = [(e.workload_id, e.executed) for e in evictions if e.executed > 0 and e.workload_id in queues]
        if ran:  # (what its job ran so far, Kueue's accumulatedPastExecutionTimeSeconds)
            await session.execute(_EXECUTED, {"id": [i for i, _ in ran], "s": [s for _, s in ran]})
        for e in evictions:  # a changed job: requeued as it now is, in the transaction that releases it
            if e.pod_sets is not None and e.workload_id in queues:
                # (``||``: the pod sets replaced, what is stored beside them kept)
                changed = literal(pod_sets_json(e.pod_sets), type_=JSONB)
                merged = w.pod_sets.op("||")(changed)
                await session.execute(update(w).where(w.id == e.workload_id).values(pod_sets=merged))
        await _events(
            session,
            [
                {
                    "workload_id": e.workload_id,
                    "type": "Evicted",
                    "cluster_queue": queues[e.workload_id],
                    "reason": e.reason,
                    "detail": e.detail,
                    "by_workload": e.by,
                }
                for e in evictions
                if e.workload_id in queues
            ],
            now,
        )
    if not admissions and not resizes:
        return result
    config = await config_store.load_config(session)
    snapshot = Snapshot(config)
    touched = {a.admission.cluster_queue for a in admissions} | {r.admission.cluster_queue for r in resizes}
    await _lock_trees(session, _tree_keys(snapshot, touched))
    tree_queues = sorted(
        {q.name for name in touched if name in snapshot.queues for q in snapshot.queues_in_tree(snapshot.queues[name])}
        | touched
    )
    for cq_name, usage in (await held_usage(session, tree_queues)).items():
        if cq_name in snapshot.queues:
            snapshot.queues[cq_name].add_usage(usage, 1)
    resized = await resize.apply(session, snapshot, resizes, now)  # (a scale-down's quota is theirs)
    result.refused = resized.refused
    info = (
        {
            r.id: r
            for r in (
                await session.execute(
                    select(
                        w.id,
                        w.namespace,
                        w.name,
                        w.local_queue,
                        w.state,
                        *(w.labels[k].astext.label(f"label_{i}") for i, k in enumerate(ledger_labels)),
                    )
                    .where(table_base.among(w.id, [a.workload_id for a in admissions]))
                    .with_for_update()
                )
            ).all()
        }
        if admissions
        else {}
    )
    updates: list[dict[str, Any]] = []
    admission_rows: list[dict[str, Any]] = list(resized.admission_rows)
    ledger_rows: list[dict[str, Any]] = []
    for a in admissions:
        cq = snapshot.queues.get(a.admission.cluster_queue)
        row = info.get(a.workload_id)
        fits = cq is not None and all(cq.available(fr) >= q for fr, q in a.admission.usage.items())
        if not fits or row is None or row.state != "Pending":
            result.refused.append(a.workload_id)
            continue
        assert cq is not None
        cq.add_usage(a.admission.usage, 1)
        updates.append(
            {
                "id": a.workload_id,
                "cluster_queue": cq.name,
                "assigned_flavors": {
                    "flavors": a.admission.flavors,
                    "borrowing": a.admission.borrowing,
                    **({"counts": a.admission.counts} if a.admission.counts else {}),
                    **({"placement": a.admission.placement} if a.admission.placement else {}),
                },
                "checks": list(a.checks),
            }
        )
        labels = {k: v for i, k in enumerate(ledger_labels) if (v := getattr(row, f"label_{i}")) is not None}
        for (flavor, resource), qty in sorted(a.admission.usage.items()):
            admission_rows.append(
                {
                    "workload_id": a.workload_id,
                    "flavor": flavor,
                    "resource": resource,
                    "cluster_queue": cq.name,
                    "quantity": qty,
                }
            )
            ledger_rows.append(
                {
                    "workload_id": a.workload_id,
                    "workload": f"{row.namespace}/{row.name}",
                    "namespace": row.namespace,
                    "cluster_queue": cq.name,
                    "local_queue": row.local_queue,
                    "flavor": flavor,
                    "resource": resource,
                    "quantity": qty,
                    "labels": labels,
                    "started_at": now,
                }
            )
        result.admitted.append(a.workload_id)
    # One statement each, whatever the cycle's size.
    if updates:
        await session.execute(
            _ADMIT,
            {
                "id": [u["id"] for u in updates],
                "cluster_queue": [u["cluster_queue"] for u in updates],
                "flavors": [json.dumps(u["assigned_flavors"]) for u in updates],
                "checks": [json.dumps(u["checks"]) for u in updates],
                "now": now,
            },
        )
    if admission_rows:
        await session.execute(_INSERT_ADMISSIONS, _columns(admission_rows, _ADMISSION_COLUMNS))
    if ledger_rows:
        ledger = _columns(ledger_rows, _LEDGER_COLUMNS)
        ledger["labels"] = [json.dumps(labels) for labels in ledger["labels"]]
        await session.execute(_INSERT_LEDGER, {**ledger, "now": now})
    await _events(
        session,
        [
            *resized.events,  # (before the admissions they made room for, as they happened)
            *(
                {
                    "workload_id": u["id"],
                    "type": "Admitted",
                    "cluster_queue": u["cluster_queue"],
                    "flavors": u["assigned_flavors"]["flavors"],
                    "borrowing": u["assigned_flavors"]["borrowing"],
                    "counts": u["assigned_flavors"].get("counts"),
                    "placement": u["assigned_flavors"].get("placement"),
                }
                for u in updates
                if not u["checks"]  # with checks, the job is admitted when they pass (``set_checks``)
            ),
        ],
        now,
    )
    return result


_EVENT_COLUMNS = (
    "workload_id", "type", "cluster_queue", "flavors", "borrowing", "counts", "reason", "detail", "by_workload",
    "placement",
)  # fmt: skip
_INSERT_EVENTS = query("commit_insert_events")


async def _events(session: AsyncSession, rows: list[dict[str, Any]], now: dt.datetime) -> None:
    if not rows:
        return
    columns = {name: [row.get(name) for row in rows] for name in _EVENT_COLUMNS}
    for name in ("flavors", "counts", "placement"):
        columns[name] = [None if f is None else json.dumps(f) for f in columns[name]]
    await session.execute(_INSERT_EVENTS, {**columns, "now": now})


async def finish(
    session: AsyncSession,
    ids: Sequence[int],
    *,
    now: dt.datetime,
    fence: lease.Fence | None = None,
    reason: str = "JobFinished",
) -> list[int]:
    """The jobs ended or were deleted: release their quota and close their ledger intervals.

    Idempotent: a workload already finished is left alone, so each finishes exactly once.
    Returns the ids this call finished.
    """
    if fence is not None:
        await lease.check(session, fence)
    w = tables.Workload
    finished = await session.execute(
        update(w)
        .where(table_base.among(w.id, ids), w.state != "Finished")
        .values(state="Finished", finished_at=now, admitted_at=None, reason=reason, message=None)
        .returning(w.id, w.cluster_queue)
    )
    done = {int(i): cq for i, cq in finished.all()}
    await _release(session, list(done), now)
    await _events(
        session,
        [
            {"workload_id": i, "type": "Finished", "cluster_queue": cq, "reason": reason}
            for i, cq in sorted(done.items())
        ],
        now,
    )
    return sorted(done)


async def dequeue(session: AsyncSession, ids: Sequence[int], *, fence: lease.Fence | None = None) -> None:
    """Pending workloads whose job left queueing (its queue label removed): forget them."""
    if fence is not None:
        await lease.check(session, fence)
    w = tables.Workload
    await session.execute(delete(w).where(table_base.among(w.id, ids), w.state == "Pending"))
