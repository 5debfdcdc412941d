"""ClusterQueue and LocalQueue ``status`` in Kueue's v1beta2 shape, from the scheduler's state.

What ``kubectl get cq,lq`` and every Kueue client read: the ``Active`` condition (``Ready``, or
why not: ``FlavorNotFound``, ``Stopped``, ``Terminating``, an admission check's reason; for a
LocalQueue ``ClusterQueueDoesNotExist`` or ``ClusterQueueIsInactive``), pendingWorkloads,
reservingWorkloads (quota reserved), admittedWorkloads (quota reserved and every admission check
passed), and per flavor the quota reserved (``flavorsReservation``, with what is borrowed for a
ClusterQueue) and used by admitted workloads (``flavorsUsage``). Quantities are Kubernetes
quantities (``"8"`` GPUs, ``"500m"`` CPU).

Pure: conditions carry no timestamps here (the writer keeps ``lastTransitionTime`` from the
object when a condition's status did not change), so equal states give equal dicts and the
writer sends nothing when nothing changed.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from queues import quantity
from queues.cycle.scheduler import Scheduler
from queues.kueue import api
from queues.model import ClusterQueue, FlavorResource, Workload

Status = dict[str, Any]

CQ_READY = "Can admit new workloads"
LQ_READY = "Can submit new workloads to localQueue"
CANNOT = "Can't submit new workloads to clusterQueue"


def _condition(ok: bool, reason: str, message: str) -> dict[str, str]:
    return {"type": "Active", "status": "True" if ok else "False", "reason": reason, "message": message}


def _flavors(usage: dict[FlavorResource, int], nominal: dict[FlavorResource, int] | None) -> list[dict[str, Any]]:
    """Kueue's FlavorUsage list: flavors and resources in a stable order, borrowed when ``nominal`` is given."""
    by_flavor: dict[str, list[dict[str, str]]] = defaultdict(list)
    for (flavor, resource), used in sorted(usage.items()):
        entry = {"name": resource, "total": quantity.format_milli(used)}
        if nominal is not None:
            entry["borrowed"] = quantity.format_milli(max(0, used - nominal.get((flavor, resource), 0)))
        by_flavor[flavor].append(entry)
    return [{"name": flavor, "resources": resources} for flavor, resources in by_flavor.items()]


def _usage_of(workloads: list[Workload], keys: set[FlavorResource] | None = None) -> dict[FlavorResource, int]:
    total: dict[FlavorResource, int] = dict.fromkeys(keys or (), 0)
    for wl in workloads:
        if wl.admission is not None:
            for fr, v in wl.admission.usage.items():
                total[fr] = total.get(fr, 0) + v
    return total


def _cq_condition(cq: ClusterQueue) -> dict[str, str]:
    if cq.inactive_reason is None:
        return _condition(True, "Ready", CQ_READY)
    return _condition(False, cq.inactive_reason, cq.inactive_message)


def statuses(sched: Scheduler) -> tuple[dict[str, Status], dict[str, Status]]:
    """Every ClusterQueue's and LocalQueue's status (LocalQueues by ``namespace/name``)."""
    pending_cq: dict[str, int] = defaultdict(int)
    pending_lq: dict[str, int] = defaultdict(int)
    for key, cq_name in sched.pending.where.items():
        pending_cq[cq_name] += 1
        wl = sched.workloads.get(key)
        if wl is not None and wl.local_queue:
            pending_lq[f"{wl.namespace}/{wl.local_queue}"] += 1
    held_lq: dict[str, list[Workload]] = defaultdict(list)
    out_cq: dict[str, Status] = {}
    for name, cq in sched.snapshot.queues.items():
        held = list(cq.workloads.values())
        for wl in held:
            if wl.local_queue:
                held_lq[f"{wl.namespace}/{wl.local_queue}"].append(wl)
        quota_keys = set(cq.quotas)
        nominal = {fr: q.nominal for fr, q in cq.quotas.items()}
        started = [wl for wl in held if wl.started]
        out_cq[name] = {
            "conditions": [_cq_condition(cq)],
            "pendingWorkloads": pending_cq.get(name, 0),
            "reservingWorkloads": len(held),
            "admittedWorkloads": len(started),
            "flavorsReservation": _flavors(_usage_of(held, quota_keys), nominal),
            "flavorsUsage": _flavors(_usage_of(started, quota_keys), nominal),
        }
    out_lq: dict[str, Status] = {}
    for key, lq in sched.config.local_queues.items():
        condition = local_queue_condition(sched, lq)
        held = held_lq.get(key, [])
        started = [wl for wl in held if wl.started]
        out_lq[key] = {
            "conditions": [condition],
            "pendingWorkloads": pending_lq.get(key, 0),
            "reservingWorkloads": len(held),
            "admittedWorkloads": len(started),
            "flavorsReservation": _flavors(_usage_of(held), None),
            "flavorsUsage": _flavors(_usage_of(started), None),
        }
    return out_cq, out_lq


def local_queue_condition(sched: Scheduler, lq: api.LocalQueue) -> dict[str, str]:
    """A LocalQueue's ``Active`` condition: stopped, its ClusterQueue missing or inactive, or ready
    (the object's status, and ``kueue_local_queue_status``)."""
    cq_name = lq.spec.cluster_queue
    target = sched.snapshot.queues.get(cq_name)
    if lq.spec.stop_policy != "None":
        return _condition(False, "Stopped", f"LocalQueue is stopped (stopPolicy {lq.spec.stop_policy})")
    if target is None:
        return _condition(False, "ClusterQueueDoesNotExist", f"{CANNOT} {cq_name}")
    if target.inactive_reason is not None:
        return _condition(False, "ClusterQueueIsInactive", f"{CANNOT} {cq_name}")
    return _condition(True, "Ready", LQ_READY)
