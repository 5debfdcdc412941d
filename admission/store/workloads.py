"""Workloads in PostgreSQL: upsert from jobs, the scheduler's snapshot, and committing its decisions.

Never over-commit (design principle 3): ``commit_cycle`` re-checks every admission inside its
transaction. It first verifies the caller's fencing token (a paused ex-leader cannot write),
then takes one transaction advisory lock per quota tree it touches, in sorted order (so two
writers never deadlock and never interleave on the same tree), recomputes the trees' usage
from the ``admissions`` rows under those locks, and admits only what still fits by the
scheduling core's own arithmetic. Every admission opens usage-ledger intervals; eviction,
finish and deletion close them.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import delete, func, select, text, update
from sqlalchemy import insert as sa_insert
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncSession

from admission.store import config as config_store
from admission.store import lease, tables
from queues import jobs, selectors
from queues.model import Admission, Config, Snapshot, Workload

UPSERT_CHUNK = 1000
LEDGER_LABELS = ("team", "project")


@dataclass(frozen=True, slots=True)
class Record:
    """A job as the controller saw it, ready to become (or refresh) a workload row."""

    job_uid: str
    job: jobs.JobInfo
    local_queue: str | None
    priority: int
    created_at: dt.datetime


def pod_sets_json(pod_sets: Iterable[jobs.PodSet]) -> dict[str, Any]:
    return {
        "podSets": [
            {
                "name": ps.name,
                "count": ps.count,
                "requests": {r: str(v) for r, v in ps.requests.items()},
                "nodeSelector": dict(ps.constraints.node_selector),
                "affinity": [
                    [[r.key, r.operator, list(r.values)] for r in term] for term in ps.constraints.affinity_terms
                ],
                "tolerations": [t.to_dict() for t in ps.tolerations],
            }
            for ps in pod_sets
        ]
    }


def pod_sets_from_json(body: dict[str, Any]) -> tuple[jobs.PodSet, ...]:
    out = []
    for ps in body.get("podSets", []):
        constraints = selectors.NodeConstraints(
            tuple(sorted(ps.get("nodeSelector", {}).items())),
            tuple(
                tuple(selectors.Requirement(k, op, tuple(vs)) for k, op, vs in term) for term in ps.get("affinity", [])
            ),
        )
        out.append(
            jobs.PodSet(
                name=ps["name"],
                count=int(ps["count"]),
                requests={r: int(v) for r, v in ps["requests"].items()},
                constraints=constraints,
                tolerations=tuple(selectors.Toleration.from_dict(t) for t in ps.get("tolerations", [])),
            )
        )
    return tuple(out)


async def upsert(session: AsyncSession, records: Sequence[Record]) -> None:
    """Insert new workloads; refresh queue, priority and labels of pending ones (idempotent by job uid)."""
    for start in range(0, len(records), UPSERT_CHUNK):
        chunk = records[start : start + UPSERT_CHUNK]
        rows = [
            {
                "job_uid": r.job_uid,
                "api_version": r.job.api_version,
                "kind": r.job.kind,
                "namespace": r.job.namespace,
                "name": r.job.name,
                "local_queue": r.local_queue,
                "priority": r.priority,
                "pod_sets": pod_sets_json(r.job.pod_sets),
                "labels": dict(r.job.labels),
                "state": "Pending",
                "queue_ts": r.created_at,
                "created_at": r.created_at,
            }
            for r in chunk
        ]
        stmt = insert(tables.Workload).values(rows)
        stmt = stmt.on_conflict_do_update(
            index_elements=["job_uid"],
            set_={
                "local_queue": stmt.excluded.local_queue,
                "priority": stmt.excluded.priority,
                "labels": stmt.excluded.labels,
                "pod_sets": stmt.excluded.pod_sets,
            },
            where=tables.Workload.state == "Pending",
        )
        await session.execute(stmt)


@dataclass(slots=True)
class StoreSnapshot:
    config: Config
    workloads: list[Workload]
    ids: dict[str, int] = field(default_factory=dict)  # workload key -> row id


def _epoch(t: dt.datetime) -> float:
    return t.timestamp()


async def load_snapshot(session: AsyncSession) -> StoreSnapshot:
    """Configuration, admitted usage and pending workloads, as the scheduling core reads them."""
    config = await config_store.load_config(session)
    w = tables.Workload
    rows = (
        await session.execute(
            select(
                w.id,
                w.namespace,
                w.name,
                w.local_queue,
                w.cluster_queue,
                w.priority,
                w.pod_sets,
                w.labels,
                w.state,
                w.queue_ts,
                w.created_at,
                w.admitted_at,
                w.assigned_flavors,
            )
            .where(w.state != "Finished")
            .order_by(w.id)
        )
    ).all()
    usage: dict[int, dict[tuple[str, str], int]] = {}
    a = tables.Admission
    for wid, flavor, resource, qty in await session.execute(select(a.workload_id, a.flavor, a.resource, a.quantity)):
        usage.setdefault(wid, {})[(flavor, resource)] = int(qty)
    out = StoreSnapshot(config, [])
    for r in rows:
        wl = Workload(
            key=f"{r.namespace}/{r.name}",
            seq=r.id,
            namespace=r.namespace,
            local_queue=r.local_queue,
            priority=r.priority,
            pod_sets=pod_sets_from_json(r.pod_sets),
            created=_epoch(r.created_at),
            queue_ts=_epoch(r.queue_ts),
            labels=r.labels or {},
            cluster_queue=r.cluster_queue,
        )
        if r.state == "Admitted" and r.cluster_queue is not None:
            flavors = r.assigned_flavors or {}
            wl.admission = Admission(
                r.cluster_queue, flavors.get("flavors", {}), usage.get(r.id, {}), bool(flavors.get("borrowing", False))
            )
            wl.admitted_at = _epoch(r.admitted_at)
        out.workloads.append(wl)
        out.ids[wl.key] = r.id
    return out


@dataclass(frozen=True, slots=True)
class Admit:
    workload_id: int
    admission: Admission


@dataclass(slots=True)
class CommitResult:
    admitted: list[int] = field(default_factory=list)
    refused: list[int] = field(default_factory=list)  # no longer fits, or no longer pending
    evicted: list[int] = field(default_factory=list)


def _tree_keys(snapshot: Snapshot, cluster_queues: Iterable[str]) -> list[str]:
    keys = set()
    for name in cluster_queues:
        cq = snapshot.queues.get(name)
        keys.add(f"tree/{cq.root().name}" if cq is not None and cq.parent is not None else f"cq/{name}")
    return sorted(keys)


async def _lock_trees(session: AsyncSession, keys: list[str]) -> None:
    for key in keys:  # sorted: every writer takes them in the same order
        await session.execute(text("SELECT pg_advisory_xact_lock(hashtext(:key))"), {"key": key})


async def _usage(session: AsyncSession, cluster_queues: Sequence[str]) -> dict[str, dict[tuple[str, str], int]]:
    a = tables.Admission
    rows = await session.execute(
        select(a.cluster_queue, a.flavor, a.resource, func.sum(a.quantity))
        .where(a.cluster_queue.in_(cluster_queues))
        .group_by(a.cluster_queue, a.flavor, a.resource)
    )
    out: dict[str, dict[tuple[str, str], int]] = {}
    for cq, flavor, resource, qty in rows:
        out.setdefault(cq, {})[(flavor, resource)] = int(qty)
    return out


async def _close_intervals(session: AsyncSession, ids: Sequence[int], now: dt.datetime) -> None:
    led = tables.UsageInterval
    await session.execute(update(led).where(led.workload_id.in_(ids), led.ended_at.is_(None)).values(ended_at=now))


async def _release(session: AsyncSession, ids: Sequence[int], now: dt.datetime) -> None:
    await session.execute(delete(tables.Admission).where(tables.Admission.workload_id.in_(ids)))
    await _close_intervals(session, ids, now)


async def commit_cycle(
    session: AsyncSession,
    *,
    admissions: Sequence[Admit],
    evictions: Sequence[int] = (),
    now: dt.datetime,
    fence: lease.Fence | None = None,
) -> CommitResult:
    """Commit one cycle's decisions: evictions first, then every admission that still fits."""
    if fence is not None:
        await lease.check(session, fence)
    result = CommitResult()
    w = tables.Workload
    if evictions:
        await _release(session, evictions, now)
        evicted = await session.execute(
            update(w)
            .where(w.id.in_(evictions), w.state == "Admitted")
            .values(state="Pending", queue_ts=now, admitted_at=None, assigned_flavors=None)
            .returning(w.id)
        )
        result.evicted = sorted(evicted.scalars())
    if not admissions:
        return result
    config = await config_store.load_config(session)
    snapshot = Snapshot(config)
    touched = {a.admission.cluster_queue for a in admissions}
    await _lock_trees(session, _tree_keys(snapshot, touched))
    tree_queues = sorted(
        {q.name for name in touched if name in snapshot.queues for q in snapshot.queues_in_tree(snapshot.queues[name])}
        | touched
    )
    for cq_name, usage in (await _usage(session, tree_queues)).items():
        if cq_name in snapshot.queues:
            snapshot.queues[cq_name].add_usage(usage, 1)
    info = {
        r.id: r
        for r in (
            await session.execute(
                select(w.id, w.namespace, w.name, w.local_queue, w.labels, w.state)
                .where(w.id.in_([a.workload_id for a in admissions]))
                .with_for_update()
            )
        ).all()
    }
    for a in admissions:
        cq = snapshot.queues.get(a.admission.cluster_queue)
        row = info.get(a.workload_id)
        fits = cq is not None and all(cq.available(fr) >= q for fr, q in a.admission.usage.items())
        if not fits or row is None or row.state != "Pending":
            result.refused.append(a.workload_id)
            continue
        assert cq is not None
        cq.add_usage(a.admission.usage, 1)
        await session.execute(
            update(w)
            .where(w.id == a.workload_id)
            .values(
                state="Admitted",
                cluster_queue=cq.name,
                admitted_at=now,
                reason="Admitted",
                message=None,
                assigned_flavors={"flavors": a.admission.flavors, "borrowing": a.admission.borrowing},
            )
        )
        labels = {k: v for k, v in (row.labels or {}).items() if k in LEDGER_LABELS}
        rows = [
            {"workload_id": a.workload_id, "flavor": f, "resource": r, "cluster_queue": cq.name, "quantity": q}
            for (f, r), q in sorted(a.admission.usage.items())
        ]
        if rows:
            await session.execute(sa_insert(tables.Admission), rows)
            await session.execute(
                sa_insert(tables.UsageInterval),
                [
                    {
                        "workload_id": a.workload_id,
                        "workload": f"{row.namespace}/{row.name}",
                        "namespace": row.namespace,
                        "cluster_queue": cq.name,
                        "local_queue": row.local_queue,
                        "flavor": x["flavor"],
                        "resource": x["resource"],
                        "quantity": x["quantity"],
                        "labels": labels,
                        "started_at": now,
                    }
                    for x in rows
                ],
            )
        result.admitted.append(a.workload_id)
    return result


async def finish(
    session: AsyncSession, ids: Sequence[int], *, now: dt.datetime, fence: lease.Fence | None = None
) -> None:
    """The jobs ended or were deleted: release their quota and close their ledger intervals."""
    if fence is not None:
        await lease.check(session, fence)
    await _release(session, ids, now)
    w = tables.Workload
    await session.execute(update(w).where(w.id.in_(ids)).values(state="Finished", finished_at=now, admitted_at=None))
