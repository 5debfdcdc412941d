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
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Text, cast, delete, func, literal, select, text, update
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.ext.asyncio import AsyncSession

from admission.store import config as config_store
from admission.store import lease, tables
from queues import selectors
from queues.cycle import podsready
from queues.model import Admission, Config, Snapshot, Workload
from queues.podsets import jobs

UPSERT_CHUNK = 10_000
LEDGER_LABELS = ("team", "project")


@dataclass(frozen=True, slots=True)
class Record:
    """A job as the controller saw it, ready to become (or refresh) a workload row."""

    job_uid: str
    job: jobs.JobInfo
    local_queue: str | None
    priority: int
    created_at: dt.datetime


def pod_sets_json(pod_sets: Iterable[jobs.PodSet], priority_class_name: str | None = None) -> dict[str, Any]:
    """The stored pod sets (and, beside them, the pod template's ``priorityClassName``, which the
    Workload object's ``spec.priorityClassRef`` names when no WorkloadPriorityClass does)."""
    extra = {"priorityClassName": priority_class_name} if priority_class_name else {}
    return extra | {
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
                **({"minCount": ps.min_count} if ps.min_count is not None else {}),
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
                min_count=int(ps["minCount"]) if ps.get("minCount") is not None else None,
            )
        )
    return tuple(out)


_UPSERT = text(
    """
    INSERT INTO workloads (job_uid, api_version, kind, namespace, name, local_queue, priority, pod_sets, labels,
                           state, queue_ts, created_at)
    SELECT u.job_uid, u.api_version, u.kind, u.namespace, u.name, u.local_queue, u.priority, u.pod_sets::jsonb,
           u.labels::jsonb, 'Pending', u.ts, u.ts
    FROM unnest(CAST(:job_uid AS text[]), CAST(:api_version AS text[]), CAST(:kind AS text[]),
                CAST(:namespace AS text[]), CAST(:name AS text[]), CAST(:local_queue AS text[]),
                CAST(:priority AS integer[]), CAST(:pod_sets AS text[]), CAST(:labels AS text[]),
                CAST(:ts AS timestamptz[])) WITH ORDINALITY
         AS u(job_uid, api_version, kind, namespace, name, local_queue, priority, pod_sets, labels, ts, n)
    ORDER BY u.n  -- ids follow the records' order: the order jobs were seen is the order they queue
    ON CONFLICT (job_uid) DO UPDATE SET
        local_queue = EXCLUDED.local_queue, priority = EXCLUDED.priority,
        labels = EXCLUDED.labels, pod_sets = EXCLUDED.pod_sets
    WHERE workloads.state = 'Pending'
    RETURNING id, job_uid, state
    """
)


async def upsert(session: AsyncSession, records: Sequence[Record]) -> dict[str, tuple[int, str]]:
    """Insert new workloads; refresh queue, priority and labels of pending ones (idempotent by job uid).

    Returns job uid -> (row id, state) for every row inserted or refreshed; a job whose row is
    admitted or finished is left as it is and absent from the answer. One statement per chunk
    over column arrays (``unnest``), so the cost is the rows, not the bind parameters.
    """
    out: dict[str, tuple[int, str]] = {}
    for start in range(0, len(records), UPSERT_CHUNK):
        chunk = records[start : start + UPSERT_CHUNK]
        rows = await session.execute(
            _UPSERT,
            {
                "job_uid": [r.job_uid for r in chunk],
                "api_version": [r.job.api_version for r in chunk],
                "kind": [r.job.kind for r in chunk],
                "namespace": [r.job.namespace for r in chunk],
                "name": [r.job.name for r in chunk],
                "local_queue": [r.local_queue for r in chunk],
                "priority": [r.priority for r in chunk],
                "pod_sets": [json.dumps(pod_sets_json(r.job.pod_sets, r.job.priority_class_name)) for r in chunk],
                "labels": [json.dumps(dict(r.job.labels)) for r in chunk],
                "ts": [r.created_at for r in chunk],
            },
        )
        out.update((uid, (int(wid), state)) for wid, uid, state in rows)
    return out


@dataclass(slots=True)
class StoreSnapshot:
    config: Config
    workloads: list[Workload]
    ids: dict[str, int] = field(default_factory=dict)  # workload key -> row id
    uids: dict[str, str] = field(default_factory=dict)  # workload key -> job uid


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
                w.job_uid,
                w.namespace,
                w.name,
                w.local_queue,
                w.cluster_queue,
                w.priority,
                cast(w.pod_sets, Text).label("pod_sets"),
                w.labels,
                w.state,
                w.queue_ts,
                w.created_at,
                w.admitted_at,
                w.assigned_flavors,
                w.checks,
                w.retries,
                w.requeue_at,
                w.active,
                w.reason,
                w.pods_ready_at,
                w.executed_seconds,
            )
            .where(w.state != "Finished")
            .order_by(w.id)
        )
    ).all()
    # when each admitted workload's job started (its last Admitted event), for waitForPodsReady
    e = tables.WorkloadEvent
    started = dict(
        (
            await session.execute(
                select(e.workload_id, func.max(e.at))
                .join(w, w.id == e.workload_id)
                .where(w.state == "Admitted", e.type == "Admitted")
                .group_by(e.workload_id)
            )
        ).all()
    )
    usage: dict[int, dict[tuple[str, str], int]] = {}
    a = tables.Admission
    for wid, flavor, resource, qty in await session.execute(select(a.workload_id, a.flavor, a.resource, a.quantity)):
        usage.setdefault(wid, {})[(flavor, resource)] = int(qty)
    out = StoreSnapshot(config, [])
    # Workloads of one job template share their pod sets: decode each distinct JSON text once.
    decoded: dict[str, tuple[tuple[jobs.PodSet, ...], tuple[object, ...], str]] = {}
    for r in rows:
        shared = decoded.get(r.pod_sets)
        if shared is None:
            body = json.loads(r.pod_sets)
            pod_sets = pod_sets_from_json(body)
            probe = Workload(
                key="", seq=0, namespace="", local_queue=None, priority=0, pod_sets=pod_sets, created=0.0, queue_ts=0.0
            )
            shared = decoded[r.pod_sets] = (pod_sets, probe.shape, str(body.get("priorityClassName") or ""))
        labels = r.labels or {}
        wl = Workload(
            key=f"{r.namespace}/{r.name}",
            seq=r.id,
            namespace=r.namespace,
            local_queue=r.local_queue,
            priority=r.priority,
            pod_sets=shared[0],
            shape=shared[1],
            created=_epoch(r.created_at),
            queue_ts=_epoch(r.queue_ts),
            labels=labels,
            # (the class it was given: its WorkloadPriorityClass label, else its pods' PriorityClass;
            # one that took the globalDefault PriorityClass shows "" after a restart)
            priority_class=str(labels.get(jobs.PRIORITY_LABEL) or shared[2]),
            cluster_queue=r.cluster_queue,
            retries=r.retries,
            requeue_at=_epoch(r.requeue_at) if r.requeue_at is not None else None,
            active=r.active,
            past_run=float(r.executed_seconds),
        )
        if r.reason == podsready.REASON:
            wl.requeue_reason = podsready.REASON
        if r.state == "Admitted" and r.cluster_queue is not None:
            wl.checks = tuple(r.checks or ())
            flavors = r.assigned_flavors or {}
            wl.admission = Admission(
                r.cluster_queue,
                flavors.get("flavors", {}),
                usage.get(r.id, {}),
                bool(flavors.get("borrowing", False)),
                {str(k): int(v) for k, v in (flavors.get("counts") or {}).items()},
                {
                    str(ps): {str(n): int(c) for n, c in nodes.items()}
                    for ps, nodes in (flavors.get("placement") or {}).items()
                },
            )
            wl.admitted_at = _epoch(r.admitted_at)
            if not wl.checks and r.id in started:
                wl.started_at = _epoch(started[r.id])
            wl.ready_at = _epoch(r.pods_ready_at) if r.pods_ready_at is not None else None
        out.workloads.append(wl)
        out.ids[wl.key] = r.id
        out.uids[wl.key] = r.job_uid
    return out


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
        text(
            "SELECT count(pg_advisory_xact_lock(hashtext(k))) FROM (SELECT unnest(CAST(:keys AS text[])) AS k "
            "ORDER BY 1) AS ordered"
        ),
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
        query = query.where(tables.among(a.cluster_queue, cluster_queues))
    rows = await session.execute(query.group_by(a.cluster_queue, a.flavor, a.resource))
    out: dict[str, dict[tuple[str, str], int]] = {}
    for cq, flavor, resource, qty in rows:
        out.setdefault(cq, {})[(flavor, resource)] = int(qty)
    return out


async def _close_intervals(session: AsyncSession, ids: Sequence[int], now: dt.datetime) -> None:
    led = tables.UsageInterval
    await session.execute(
        update(led).where(tables.among(led.workload_id, ids), led.ended_at.is_(None)).values(ended_at=now)
    )


async def _release(session: AsyncSession, ids: Sequence[int], now: dt.datetime) -> None:
    await session.execute(delete(tables.Admission).where(tables.among(tables.Admission.workload_id, ids)))
    await _close_intervals(session, ids, now)


_ADMIT = text(
    """
    UPDATE workloads AS w
    SET state = 'Admitted', cluster_queue = u.cluster_queue, admitted_at = :now,
        reason = CASE WHEN u.checks::jsonb = '[]'::jsonb THEN 'Admitted' ELSE 'WaitingForCapacity' END,
        message = NULL, assigned_flavors = u.flavors::jsonb, checks = u.checks::jsonb
    FROM unnest(CAST(:id AS bigint[]), CAST(:cluster_queue AS text[]), CAST(:flavors AS text[]),
                CAST(:checks AS text[]))
         AS u(id, cluster_queue, flavors, checks)
    WHERE w.id = u.id
    """
)


_ADMISSION_COLUMNS = ("workload_id", "flavor", "resource", "cluster_queue", "quantity")
_INSERT_ADMISSIONS = text(
    """
    INSERT INTO admissions (workload_id, flavor, resource, cluster_queue, quantity)
    SELECT * FROM unnest(CAST(:workload_id AS bigint[]), CAST(:flavor AS text[]), CAST(:resource AS text[]),
                         CAST(:cluster_queue AS text[]), CAST(:quantity AS numeric[]))
    """
)
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
_INSERT_LEDGER = text(
    """
    INSERT INTO usage_ledger (workload_id, workload, namespace, cluster_queue, local_queue, flavor, resource,
                              quantity, labels, started_at)
    SELECT u.*, :now FROM unnest(CAST(:workload_id AS bigint[]), CAST(:workload AS text[]),
                                 CAST(:namespace AS text[]), CAST(:cluster_queue AS text[]),
                                 CAST(:local_queue AS text[]), CAST(:flavor AS text[]), CAST(:resource AS text[]),
                                 CAST(:quantity AS numeric[]), CAST(:labels AS text[])::jsonb[]) AS u
    """
)


def _columns(rows: list[dict[str, Any]], names: Sequence[str]) -> dict[str, list[Any]]:
    """Row dicts as one list per column, for inserts over ``unnest``."""
    return {name: [row[name] for row in rows] for name in names}


async def commit_cycle(
    session: AsyncSession,
    *,
    admissions: Sequence[Admit],
    evictions: Sequence[Evict] = (),
    now: dt.datetime,
    fence: lease.Fence | None = None,
    ledger_labels: Sequence[str] = LEDGER_LABELS,
) -> CommitResult:
    """Commit one cycle's decisions: evictions first, then every admission that still fits.

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
            .where(tables.among(w.id, ids), w.state == "Admitted")
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
    for cq_name, usage in (await held_usage(session, tree_queues)).items():
        if cq_name in snapshot.queues:
            snapshot.queues[cq_name].add_usage(usage, 1)
    info = {
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
                .where(tables.among(w.id, [a.workload_id for a in admissions]))
                .with_for_update()
            )
        ).all()
    }
    updates: list[dict[str, Any]] = []
    admission_rows: list[dict[str, Any]] = []
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
        ledger = _columns(ledger_rows, _LEDGER_COLUMNS)
        ledger["labels"] = [json.dumps(labels) for labels in ledger["labels"]]
        await session.execute(_INSERT_LEDGER, {**ledger, "now": now})
        await _events(
            session,
            [
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
            ],
            now,
        )
    return result


_EVENT_COLUMNS = (
    "workload_id", "type", "cluster_queue", "flavors", "borrowing", "counts", "reason", "detail", "by_workload",
    "placement",
)  # fmt: skip
_INSERT_EVENTS = text(
    """
    INSERT INTO workload_events (workload_id, type, cluster_queue, flavors, borrowing, counts, reason, detail,
                                 by_workload, placement, at)
    SELECT u.*, :now FROM unnest(CAST(:workload_id AS bigint[]), CAST(:type AS text[]),
                                 CAST(:cluster_queue AS text[]), CAST(:flavors AS text[])::jsonb[],
                                 CAST(:borrowing AS boolean[]), CAST(:counts AS text[])::jsonb[],
                                 CAST(:reason AS text[]), CAST(:detail AS text[]), CAST(:by_workload AS text[]),
                                 CAST(:placement AS text[])::jsonb[]) AS u
    """
)


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
        .where(tables.among(w.id, ids), w.state != "Finished")
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
    await session.execute(delete(w).where(tables.among(w.id, ids), w.state == "Pending"))


_SET_REASONS = text(
    """
    UPDATE workloads AS w SET reason = u.reason, message = u.message, cluster_queue = u.cluster_queue
    FROM unnest(CAST(:id AS bigint[]), CAST(:reason AS text[]), CAST(:message AS text[]),
                CAST(:cluster_queue AS text[])) AS u(id, reason, message, cluster_queue)
    WHERE w.id = u.id AND w.state = 'Pending'
    """
)


@dataclass(frozen=True, slots=True)
class CheckState:
    """Where a workload stands with its admission checks (two-phase admission)."""

    workload_id: int
    checks: tuple[str, ...]  # still to pass for the quota it holds
    retries: int
    requeue_at: dt.datetime | None  # waiting out a retry's backoff until then
    active: bool  # False: deactivated (a check rejected it)
    reason: str
    message: str
    started: bool = False  # its last check passed now: it is admitted (an Admitted event)


_SET_CHECKS = text(
    """
    UPDATE workloads AS w
    SET checks = u.checks::jsonb, retries = u.retries, requeue_at = u.requeue_at, active = u.active,
        reason = u.reason, message = u.message
    FROM unnest(CAST(:id AS bigint[]), CAST(:checks AS text[]), CAST(:retries AS integer[]),
                CAST(:requeue_at AS timestamptz[]), CAST(:active AS boolean[]), CAST(:reason AS text[]),
                CAST(:message AS text[])) AS u(id, checks, retries, requeue_at, active, reason, message)
    WHERE w.id = u.id
    """
)
_STARTED_EVENTS = text(
    """
    INSERT INTO workload_events (workload_id, type, cluster_queue, flavors, borrowing, counts, placement, at)
    SELECT w.id, 'Admitted', w.cluster_queue, w.assigned_flavors -> 'flavors',
           (w.assigned_flavors ->> 'borrowing')::boolean, w.assigned_flavors -> 'counts',
           w.assigned_flavors -> 'placement', :now
    FROM workloads AS w
    WHERE w.id = ANY(CAST(:id AS bigint[])) AND w.state = 'Admitted'
    """
)


async def set_checks(session: AsyncSession, states: Sequence[CheckState], now: dt.datetime) -> None:
    """Record where workloads stand with their admission checks; those whose last check passed
    are admitted now (their history's Admitted event)."""
    if not states:
        return
    await session.execute(
        _SET_CHECKS,
        {
            "id": [c.workload_id for c in states],
            "checks": [json.dumps(list(c.checks)) for c in states],
            "retries": [c.retries for c in states],
            "requeue_at": [c.requeue_at for c in states],
            "active": [c.active for c in states],
            "reason": [c.reason for c in states],
            "message": [c.message for c in states],
        },
    )
    started = [c.workload_id for c in states if c.started]
    if started:
        await session.execute(_STARTED_EVENTS, {"id": started, "now": now})


async def set_pods_ready(session: AsyncSession, ready: Sequence[tuple[int, dt.datetime]]) -> None:
    """waitForPodsReady: when every pod of these admitted workloads was first Ready (kept across
    restarts: a workload that was Ready and loses a pod has the recovery timeout, not the first one)."""
    if not ready:
        return
    await session.execute(_SET_PODS_READY, {"id": [wid for wid, _ in ready], "at": [at for _, at in ready]})


_EXECUTED = text(
    """
    UPDATE workloads AS w SET executed_seconds = u.s
    FROM unnest(CAST(:id AS bigint[]), CAST(:s AS float8[])) AS u(id, s)
    WHERE w.id = u.id
    """
)

_SET_PODS_READY = text(
    """
    UPDATE workloads AS w SET pods_ready_at = u.at
    FROM unnest(CAST(:id AS bigint[]), CAST(:at AS timestamptz[])) AS u(id, at)
    WHERE w.id = u.id AND w.state = 'Admitted'
    """
)


async def set_reasons(session: AsyncSession, reasons: Sequence[tuple[int, str, str, str | None]]) -> None:
    """Why each pending workload waits (id, reason, message, the ClusterQueue it waits in), for
    ``turnstile get/describe workload``."""
    if reasons:
        await session.execute(
            _SET_REASONS,
            {
                "id": [r[0] for r in reasons],
                "reason": [r[1] for r in reasons],
                "message": [r[2] for r in reasons],
                "cluster_queue": [r[3] for r in reasons],
            },
        )


_SET_ADMITTED_REASONS = text(
    """
    UPDATE workloads AS w SET reason = u.reason, message = u.message
    FROM unnest(CAST(:id AS bigint[]), CAST(:reason AS text[]), CAST(:message AS text[])) AS u(id, reason, message)
    WHERE w.id = u.id AND w.state = 'Admitted'
    """
)


async def set_admitted_reasons(session: AsyncSession, reasons: Sequence[tuple[int, str, str]]) -> None:
    """What an admitted workload's job waits for before it starts (id, reason, message): e.g. its
    victims' pods to stop (``Preempting``), for ``turnstile get/describe workload``."""
    if reasons:
        await session.execute(
            _SET_ADMITTED_REASONS,
            {"id": [r[0] for r in reasons], "reason": [r[1] for r in reasons], "message": [r[2] for r in reasons]},
        )


async def clear_admitted_reason(session: AsyncSession, ids: Sequence[int], reason: str) -> None:
    """Clear admitted workloads' reason where it is still ``reason`` (what was waited for is over)."""
    if ids:  # (an array, not an IN list: a new leader clears with every admitted workload's id)
        await session.execute(_CLEAR_ADMITTED_REASON, {"ids": list(ids), "reason": reason})


_CLEAR_ADMITTED_REASON = text(
    """
    UPDATE workloads SET reason = NULL, message = NULL
    WHERE id = ANY(CAST(:ids AS bigint[])) AND state = 'Admitted' AND reason = :reason
    """
)


@dataclass(frozen=True, slots=True)
class EventRow:
    id: int
    workload: str  # namespace/name
    at: dt.datetime
    type: str
    cluster_queue: str | None
    flavors: dict[str, dict[str, str]] | None
    borrowing: bool | None
    counts: dict[str, int] | None  # a partial admission's pods per pod set
    reason: str | None
    detail: str | None
    by: str | None
    placement: dict[str, dict[str, int]] | None = None  # pod set -> node -> pods, placed by topology


async def events(session: AsyncSession, *, after: int = 0, workload_id: int | None = None) -> list[EventRow]:
    """Workload events in commit order (after event id ``after``; of one workload if given)."""
    e, w = tables.WorkloadEvent, tables.Workload
    query = (
        select(
            e.id,
            w.namespace,
            w.name,
            e.at,
            e.type,
            e.cluster_queue,
            e.flavors,
            e.borrowing,
            e.counts,
            e.reason,
            e.detail,
            e.by_workload,
            e.placement,
        )
        .join(w, w.id == e.workload_id)
        .where(e.id > after)
        .order_by(e.id)
    )
    if workload_id is not None:
        query = query.where(e.workload_id == workload_id)
    return [
        EventRow(
            r.id,
            f"{r.namespace}/{r.name}",
            r.at,
            r.type,
            r.cluster_queue,
            r.flavors,
            r.borrowing,
            r.counts,
            r.reason,
            r.detail,
            r.by_workload,
            r.placement,
        )
        for r in await session.execute(query)
    ]


async def workload_states(session: AsyncSession) -> dict[str, tuple[str, str | None, str | None]]:
    """Every workload's state, reason and message by namespace/name (the latest row of a name)."""
    w = tables.Workload
    rows = await session.execute(select(w.namespace, w.name, w.state, w.reason, w.message).order_by(w.id))
    return {f"{r.namespace}/{r.name}": (r.state, r.reason, r.message) for r in rows}


async def last_progress(session: AsyncSession) -> tuple[dt.datetime | None, bool]:
    """For a simulation's end: the latest moment a job finished or had all its pods Ready, and
    whether some admitted workload's pods are all Ready now (it will finish by itself)."""
    w = tables.Workload
    latest = (await session.execute(select(func.max(w.finished_at), func.max(w.pods_ready_at)))).one()
    running = (
        await session.execute(select(w.id).where(w.state == "Admitted", w.pods_ready_at.is_not(None)).limit(1))
    ).first()
    moments = [t for t in latest if t is not None]
    return (max(moments) if moments else None), running is not None


async def next_requeue(session: AsyncSession) -> dt.datetime | None:
    """When the next workload waiting out an admission check's backoff queues again (None: none waits)."""
    w = tables.Workload
    found = await session.execute(
        select(func.min(w.requeue_at)).where(w.state == "Pending", w.active, w.requeue_at > func.now())
    )
    return found.scalar_one()


async def last_event_id(session: AsyncSession) -> int:
    found = await session.execute(select(func.max(tables.WorkloadEvent.id)))
    return int(found.scalar_one() or 0)
