"""The scheduler's snapshot, read from PostgreSQL: what a new leadership term starts from.

``load_snapshot`` reads the queue configuration, the admitted workloads (their usage) and the
pending ones, with their admissions' flavors, admission checks, retries and requeue times, so a
term rebuilt after any crash decides as the one before it would have.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass, field

from sqlalchemy import Text, cast, func, select
from sqlalchemy.ext.asyncio import AsyncSession

from admission.store import config as config_store
from admission.store import tables
from admission.store.workloads.intake import pod_sets_from_json
from queues import podsready
from queues.model import Admission, Config, Workload
from queues.podsets import jobs


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
