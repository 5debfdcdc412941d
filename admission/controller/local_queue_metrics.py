"""Kueue's LocalQueue gauges on ``/metrics``: per LocalQueue (``name``, ``namespace``) the workloads
waiting (active, inadmissible), reserving quota and admitted, the quota reserved and used per
flavor-resource, and the ``Active`` status the LocalQueue object shows (``queues.status``).

Why a module of its own: unlike the ClusterQueue gauges, which the core keeps per ClusterQueue,
these need a pass over every workload (~40 ms at 100,000), so they are counted at most every
``LOCAL_QUEUE_SECONDS`` and a scrape in between shows the last count (Prometheus scrapes every
15-60 s); and the quota in use is taken from what the core keeps wherever it can
(``_local_queue_quota``), not summed over every admitted workload.
"""

from __future__ import annotations

import time
from collections import Counter as Tally
from typing import TYPE_CHECKING

from admission.controller.exposition import Exposition, escape
from queues import quantity
from queues.model import FlavorResource
from queues.status import local_queue_condition

if TYPE_CHECKING:
    from queues.scheduler import Scheduler

MIXED = ("", None)  # (a ClusterQueue whose quota is not all one LocalQueue's started work)
LOCAL_QUEUE_SECONDS = 10.0  # the LocalQueue gauges are counted at most this often (a pass over every workload)


class LocalQueueGauges:
    """The LocalQueue families, counted at most every ``LOCAL_QUEUE_SECONDS`` per scheduler: one
    pass over 100,000 workloads costs ~50 ms, and ``/metrics`` must stay under 100 ms; a scrape
    in between shows the last count (Prometheus scrapes every 15-60 s)."""

    def __init__(self) -> None:
        self.counted: tuple[Scheduler, float, list[tuple[str, str, str, Exposition]]] | None = None

    def families(self, sched: Scheduler) -> list[tuple[str, str, str, Exposition]]:
        now = time.monotonic()
        if self.counted is None or self.counted[0] is not sched or now - self.counted[1] >= LOCAL_QUEUE_SECONDS:
            self.counted = (sched, now, _local_queues(sched))
        return self.counted[2]


def _local_queues(sched: Scheduler) -> list[tuple[str, str, str, Exposition]]:
    """Kueue's LocalQueue gauges (``name``, ``namespace``): pending (active, inadmissible), reserving
    quota, admitted, quota reserved and used per flavor-resource, and the ``Active`` status that the
    LocalQueue object shows (``queues.status``); every LocalQueue of the configuration, at 0 where
    nothing is."""
    pending, reserving, admitted, status = Exposition(), Exposition(), Exposition(), Exposition()
    reservation, usage = Exposition(), Exposition()
    # (namespace, LocalQueue) -> [waiting, reserving, started]: one pass over the workloads, with
    # plain lists (/metrics must stay cheap at 100,000 workloads); and which LocalQueue holds each
    # ClusterQueue's quota (MIXED: several, or some of it awaits admission checks)
    counts: dict[tuple[str, str | None], list[int]] = {}
    holder: dict[str, tuple[str, str | None]] = {}
    where = sched.pending.where
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
        elif key in where:
            c[0] += 1
    held = _local_queue_quota(sched, holder)
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
    return [
        ("kueue_local_queue_pending_workloads", "gauge", "Workloads waiting, by LocalQueue and status", pending),
        ("kueue_local_queue_reserving_active_workloads", "gauge", "Workloads reserving quota", reserving),
        ("kueue_local_queue_admitted_active_workloads", "gauge", "Admitted workloads (their jobs started)", admitted),
        ("kueue_local_queue_resource_reservation", "gauge", "Quota reserved, per flavor and resource", reservation),
        ("kueue_local_queue_resource_usage", "gauge", "Quota used by admitted workloads", usage),
        ("kueue_local_queue_status", "gauge", "1 for the LocalQueue's Active condition status", status),
    ]


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
