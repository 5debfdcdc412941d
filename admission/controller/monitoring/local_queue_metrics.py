"""Kueue's LocalQueue gauges on ``/metrics``: per LocalQueue (``name``, ``namespace``) the workloads
waiting (active, inadmissible), reserving quota and admitted, the quota reserved and used per
flavor-resource, the ``Active`` status the LocalQueue object shows (``queues.status``) and, with
admission fair sharing, the usage it orders by; and beside them the one ClusterQueue gauge that
needs the same pass, ``kueue_cluster_queue_resource_pending{cluster_queue,resource}`` (what the
waiting workloads request, before any flavor is chosen; 0 for each resource the ClusterQueue
covers, as Kueue seeds it).

Why a module of its own: unlike the ClusterQueue gauges, which the core keeps per ClusterQueue,
these need a pass over every workload (100-150 ms at 100,000 on a 2-core machine), so they are
counted at most every ``LOCAL_QUEUE_SECONDS``, a scrape in between shows the last count
(Prometheus scrapes every 15-60 s), and a scrape that finds the count stale answers with it and
has it recounted just after, off its own answer (only a term's first scrape waits for a count);
and the quota in use is taken from what the core keeps wherever it can
(``_local_queue_quota``), not summed over every admitted workload.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter as Tally
from typing import TYPE_CHECKING

from admission.controller.monitoring.exposition import Exposition, escape
from queues import quantity
from queues.model import FlavorResource
from queues.podsets import jobs
from queues.quotas import weight_of
from queues.status import local_queue_condition

if TYPE_CHECKING:
    from queues.cycle.scheduler import Scheduler

FAIR_USAGE = "Admission fair sharing: the LocalQueue's weighted decayed usage, over its weight"
MIXED = ("", None)  # (a ClusterQueue whose quota is not all one LocalQueue's started work)
LOCAL_QUEUE_SECONDS = 10.0  # the LocalQueue gauges are counted at most this often (a pass over every workload)
RECOUNT_AFTER = 0.05  # seconds after a scrape that found them stale (its answer is sent by then)


class LocalQueueGauges:
    """The LocalQueue families, counted at most every ``LOCAL_QUEUE_SECONDS`` per scheduler: one
    pass over 100,000 workloads costs ~50 ms, and ``/metrics`` must stay under 100 ms; a scrape
    in between shows the last count (Prometheus scrapes every 15-60 s)."""

    def __init__(self) -> None:
        self.counted: tuple[Scheduler, float, list[tuple[str, str, str, Exposition]]] | None = None
        self.recounting = False  # a recount is scheduled on the event loop

    def families(self, sched: Scheduler, role: str = "") -> list[tuple[str, str, str, Exposition]]:
        """The last count; a stale one is recounted after this scrape is answered (on the running
        event loop; at once without one). (A scheduler is one term's: while it is counted, this
        replica leads, so ``role`` holds.)"""
        now = time.monotonic()
        if self.counted is None or self.counted[0] is not sched:
            self.recount(sched, role)
        elif now - self.counted[1] >= LOCAL_QUEUE_SECONDS and not self.recounting:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                self.recount(sched, role)
            else:
                self.recounting = True
                loop.call_later(RECOUNT_AFTER, self.recount, sched, role)
        assert self.counted is not None
        return self.counted[2]

    def recount(self, sched: Scheduler, role: str) -> None:
        self.recounting = False
        self.counted = (sched, time.monotonic(), _local_queues(sched, role))


def _local_queues(sched: Scheduler, role: str) -> list[tuple[str, str, str, Exposition]]:
    """Kueue's LocalQueue gauges (``name``, ``namespace``): pending (active, inadmissible), reserving
    quota, admitted, quota reserved and used per flavor-resource, and the ``Active`` status that the
    LocalQueue object shows (``queues.status``); every LocalQueue of the configuration, at 0 where
    nothing is."""
    pending, reserving, admitted, status = (Exposition(role) for _ in range(4))
    reservation, usage = Exposition(role), Exposition(role)
    # (namespace, LocalQueue) -> [waiting, reserving, started]: one pass over the workloads, with
    # plain lists (/metrics must stay cheap at 100,000 workloads); and which LocalQueue holds each
    # ClusterQueue's quota (MIXED: several, or some of it awaits admission checks)
    counts: dict[tuple[str, str | None], list[int]] = {}
    holder: dict[str, tuple[str, str | None]] = {}
    where = sched.pending.where
    # waiting workloads per (ClusterQueue, id of their pod sets): the workloads of one job template
    # share their pod sets, so what they request is added up once per template
    alike: dict[tuple[str, int], int] = {}
    templates: dict[int, tuple[jobs.PodSet, ...]] = {}
    for key, wl in sched.workloads.items():
        lq_key = (wl.namespace, wl.local_queue)
        c = counts.get(lq_key)
        if c is None:
            c = counts[lq_key] = [0, 0, 0]
        if wl.admission is not None:
            c[1] += 1
            cq_name = wl.admission.cluster_queue
            if wl.checks:  # (``Workload.started``, inlined)
                holder[cq_name] = MIXED
            else:
                c[2] += 1
                if holder.setdefault(cq_name, lq_key) != lq_key:
                    holder[cq_name] = MIXED
        elif (cq_waiting := where.get(key)) is not None:
            c[0] += 1
            shape = (cq_waiting, id(wl.pod_sets))  # (what they request is added up per template after)
            n = alike.get(shape)
            if n is None:
                alike[shape] = 1
                templates[shape[1]] = wl.pod_sets
            else:
                alike[shape] = n + 1
    held = _local_queue_quota(sched, holder)
    wanted: dict[str, dict[str, int]] = {}  # ClusterQueue -> resource -> milli-units its waiting workloads request
    for (cq_waiting, pod_sets_id), n in alike.items():
        into = wanted.setdefault(cq_waiting, {})
        for resource, milli in _requests(templates[pod_sets_id]).items():
            into[resource] = into.get(resource, 0) + milli * n
    aside: Tally[tuple[str, str | None]] = Tally()
    for state in sched.pending.queues.values():
        for wl in state.inadmissible.values():
            aside[(wl.namespace, wl.local_queue)] += 1
    none = [0, 0, 0]
    for key, lq_obj in sorted(sched.config.local_queues.items()):
        namespace, _, name = key.partition("/")
        lq = (namespace, name)
        labels = f'name="{escape(name)}",namespace="{escape(namespace)}"'
        waiting, holding, running = counts.get(lq, none)
        pending.sample("kueue_local_queue_pending_workloads", f'{labels},status="active"',
                       max(0, waiting - aside[lq]))  # fmt: skip
        pending.sample("kueue_local_queue_pending_workloads", f'{labels},status="inadmissible"', aside[lq])
        reserving.sample("kueue_local_queue_reserving_active_workloads", labels, holding)
        admitted.sample("kueue_local_queue_admitted_active_workloads", labels, running)
        for (flavor, resource), (reserved, used) in sorted(held.get(lq, {}).items()):
            lq_fr = f'{labels},flavor="{escape(flavor)}",resource="{escape(resource)}"'
            reservation.sample("kueue_local_queue_resource_reservation", lq_fr, reserved / quantity.MILLI)
            usage.sample("kueue_local_queue_resource_usage", lq_fr, used / quantity.MILLI)
        active = local_queue_condition(sched, lq_obj)["status"]
        for value in ("True", "False", "Unknown"):
            status.sample("kueue_local_queue_status", f'{labels},active="{value}"', 1.0 if value == active else 0.0)
    fair = Exposition(role)
    if sched.usage is not None:  # admission fair sharing: each LocalQueue's usage, in a ClusterQueue that orders by it
        now = time.time()
        for key, lq_obj in sorted(sched.config.local_queues.items()):
            cq_name = lq_obj.spec.cluster_queue
            if cq_name in sched.pending.fair_queues:
                namespace, _, name = key.partition("/")
                lq_usage = sched.usage.weighted(key, weight_of(lq_obj.spec.fair_sharing), now)
                labels = f'name="{escape(name)}",namespace="{escape(namespace)}",cluster_queue="{escape(cq_name)}"'
                fair.sample("kueue_local_queue_admission_fair_sharing_usage", labels, lq_usage)
    pending_quota = Exposition(role)
    for cq_name, cq in sorted(sched.snapshot.queues.items()):
        asked = dict.fromkeys(sorted({resource for _, resource in cq.quotas}), 0) | wanted.get(cq_name, {})
        for resource, milli in sorted(asked.items()):
            labels = f'cluster_queue="{escape(cq_name)}",resource="{escape(resource)}"'
            pending_quota.sample("kueue_cluster_queue_resource_pending", labels, milli / quantity.MILLI)
    return [
        ("kueue_local_queue_pending_workloads", "gauge", "Workloads waiting, by LocalQueue and status", pending),
        ("kueue_local_queue_reserving_active_workloads", "gauge", "Workloads reserving quota", reserving),
        ("kueue_local_queue_admitted_active_workloads", "gauge", "Admitted workloads (their jobs started)", admitted),
        ("kueue_local_queue_resource_reservation", "gauge", "Quota reserved, per flavor and resource", reservation),
        ("kueue_local_queue_resource_usage", "gauge", "Quota used by admitted workloads", usage),
        ("kueue_local_queue_status", "gauge", "1 for the LocalQueue's Active condition status", status),
        *([("kueue_local_queue_admission_fair_sharing_usage", "gauge", FAIR_USAGE, fair)] if fair.lines else []),
        ("kueue_cluster_queue_resource_pending", "gauge", "What waiting workloads request", pending_quota),
    ]


def _requests(pod_sets: tuple[jobs.PodSet, ...]) -> dict[str, int]:
    """What a workload requests in all (milli-units per resource), before any flavor is chosen."""
    out: dict[str, int] = {}
    for ps in pod_sets:
        for resource, milli in ps.requests.items():
            if milli:
                out[resource] = out.get(resource, 0) + milli * ps.count
    return out


def _local_queue_quota(
    sched: Scheduler, holder: dict[str, tuple[str, str | None]]
) -> dict[tuple[str, str | None], dict[FlavorResource, list[int]]]:
    """Quota reserved and used per LocalQueue and flavor-resource (``[reserved, used]``): a
    ClusterQueue whose admitted workloads are all one LocalQueue's and started gives it its usage
    as it stands (``ClusterQueue.usage``, kept by the core); the others sum their workloads."""
    held: dict[tuple[str, str | None], dict[FlavorResource, list[int]]] = {}
    for cq_name, lq_key in holder.items():
        cq = sched.snapshot.queues.get(cq_name)
        if cq is None:  # (quota of a ClusterQueue that is gone is charged nowhere)
            continue
        if lq_key != MIXED:
            quota = held.setdefault(lq_key, {})
            for fr, milli in cq.usage.items():
                if not milli:
                    continue
                q = quota.setdefault(fr, [0, 0])
                q[0] += milli
                q[1] += milli
            continue
        for wl in cq.workloads.values():
            quota = held.setdefault((wl.namespace, wl.local_queue), {})
            assert wl.admission is not None
            for fr, milli in wl.admission.usage.items():
                q = quota.setdefault(fr, [0, 0])
                q[0] += milli
                q[1] += 0 if wl.checks else milli
    return held
