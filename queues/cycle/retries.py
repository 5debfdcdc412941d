"""Workloads that give their quota back to try again later, and the backoff they wait out.

Three mechanisms end a reservation without a preemption: admission checks (two-phase admission,
``queues.cycle.provisioning``: a check passes, waits, asks for a retry, or rejects), waitForPodsReady
(``queues.podsready``: a started workload whose pods were not Ready in time), and a lost node
(``node_lost``: a workload placed on it by topology is placed again). The first two release the
quota and either park the workload until its backoff ends or deactivate it; the last requeues it at
once, as does a running job whose pods no longer match its admission (``job_changed``). A person
can also stop one workload and let it go again (``deactivate``/``activate``: Kueue's
``spec.active``, ``turnstile stop|resume workload``), or delete its Workload object
(``workload_lost``: requeued, as Kueue requeues a job whose Workload is missing).
A collaborator of the ``Scheduler`` (``scheduler.retries``), as Kueue's ``Preemptor`` is of its
scheduler: it reads the scheduler through ``Evicting`` (its workloads, queues, clock, eviction and
words) and keeps no state of its own; what it says of admission checks goes to the scheduler's
``Told``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from queues import podsready
from queues.cycle import provisioning
from queues.cycle.assignment import WAITING_FOR_QUOTA
from queues.cycle.decisions import (
    ADMISSION_CHECK,
    DEACTIVATED,
    DEACTIVATED_MESSAGE,
    NO_MATCHING_WORKLOAD,
    NODE_FAILURES,
    Decision,
    Evict,
    Told,
)
from queues.cycle.elastic import Elastic, resizable
from queues.cycle.intake import Intake
from queues.cycle.queueing import PendingQueues
from queues.efficiency import GPU_IDLE
from queues.gpus.gpu_health import GPU_UNHEALTHY
from queues.model import Workload
from queues.placement.inventory import Inventory
from queues.podsets import jobs


class Evicting(Protocol):
    """What ``Retries`` reads of its scheduler (``queues.cycle.scheduler.Scheduler`` is one)."""

    workloads: dict[str, Workload]
    pending: PendingQueues
    now: float
    inventory: Inventory | None
    intake: Intake  # where a workload waits (parked, unresolved, queued)
    elastic: Elastic  # elastic jobs' resizes (``job_changed``)
    told: Told  # what it says besides deciding; admission checks' states go here

    def evict(self, wl: Workload, reason: str, detail: str, by: str | None, *, message: str = "") -> Evict: ...

    def say(self, wl: Workload, reason: str, message: str) -> None: ...


class Retries:
    """Admission checks' verdicts, waitForPodsReady's timeouts, lost nodes, stop and resume: the
    events that evict or park one workload (see the module docstring)."""

    def __init__(self, scheduler: Evicting) -> None:
        self.s = scheduler

    def check_passed(self, key: str, check: str) -> bool:
        """``check`` is Ready for ``key``'s quota reservation; True when that was the last one
        (the job may start now)."""
        wl = self.s.workloads.get(key)
        if wl is None or wl.admission is None or check not in wl.checks:
            return False
        wl.checks = tuple(c for c in wl.checks if c != check)
        self.s.told.checked[key] = not wl.checks
        if wl.checks:
            return False
        wl.started_at = self.s.now
        self.s.say(wl, "Admitted", f"admitted by ClusterQueue {wl.admission.cluster_queue}")
        return True

    def check_waiting(self, key: str, message: str) -> None:
        """What a pending admission check says while ``key`` waits for it (reason WaitingForCapacity)."""
        wl = self.s.workloads.get(key)
        if wl is not None and wl.admission is not None and wl.checks:
            self.s.say(wl, provisioning.WAITING_FOR_CAPACITY, message)
            if key in self.s.told.said:
                self.s.told.checked.setdefault(key, False)

    def check_retry(self, key: str, message: str, until: float) -> Evict | None:
        """An admission check asks for a retry: release the quota and queue the workload again at
        ``until`` (its backoff)."""
        wl = self.s.workloads.get(key)
        if wl is None or wl.admission is None:
            return None
        wl.retries += 1
        wl.requeue_at = until
        self.s.told.checked[key] = False
        return self.s.evict(wl, ADMISSION_CHECK, "Retry", None, message=message)

    def check_rejected(self, key: str, message: str) -> Evict | None:
        """An admission check rejected the workload: release its quota and deactivate it."""
        wl = self.s.workloads.get(key)
        if wl is None or (wl.admission is None and not wl.active):
            return None
        wl.active = False
        wl.checks = ()
        wl.requeue_at = None
        self.s.told.checked[key] = False
        if wl.admission is None:
            self.s.pending.remove(wl)
            self.s.intake.enqueue(wl, message)
            return None
        return self.s.evict(wl, ADMISSION_CHECK, "Rejected", None, message=message)

    def pods_ready_timeout(
        self,
        key: str,
        policy: podsready.WaitForPodsReady,
        *,
        recovery: bool = False,
        scale: float = 1.0,
        why: str | None = None,
    ) -> Evict | None:
        """waitForPodsReady (``queues.podsready``): ``key`` started, but its pods were not all Ready
        in time. Release its quota and requeue it after a backoff (``scale`` time units per second),
        or deactivate it once it has been requeued ``backoffLimitCount`` times. ``why``: what the
        cluster said of its pods (the kube-scheduler's words), added to the message."""
        wl = self.s.workloads.get(key)
        if wl is None or not wl.started:
            return None
        wl.retries += 1
        message = f"Exceeded the PodsReady {'recovery timeout' if recovery else 'timeout'} {key}"
        if why:
            message += f": {why}"
        self.s.told.checked[key] = False  # its retries, backoff and activity are stored with the eviction
        if policy.backoff_limit_count is not None and wl.retries > policy.backoff_limit_count:
            wl.active = False
            wl.requeue_at = None
            limit = f"requeued {policy.backoff_limit_count} times, the limit (backoffLimitCount)"
            return self.s.evict(wl, podsready.REASON, podsready.LIMIT_EXCEEDED, None, message=f"{message}; {limit}")
        wl.requeue_at = self.s.now + policy.backoff(wl.retries) * scale
        wl.requeue_reason = podsready.REASON
        evict = self.s.evict(wl, podsready.REASON, "RecoveryTimeout" if recovery else "Timeout", None, message=message)
        if policy.requeue_by_creation:
            wl.queue_ts = wl.created  # requeuingStrategy.timestamp: Creation
        return evict

    def reclaim_idle(self, key: str, message: str, *, deactivate: bool, backoff: float = 60.0) -> Evict | None:
        """``key`` idles on its GPUs (``queues.efficiency``): evict it with reason ``GPUIdle`` and
        requeue it after ``backoff`` seconds (so what waits for its quota goes first), or
        deactivate it (it is never admitted again)."""
        wl = self.s.workloads.get(key)
        if wl is None or wl.admission is None:
            return None
        if deactivate:
            wl.active = False
            wl.requeue_at = None
        else:
            wl.requeue_at = self.s.now + backoff
            wl.requeue_reason = WAITING_FOR_QUOTA
        return self.s.evict(wl, GPU_IDLE, "Deactivated" if deactivate else "Requeued", None, message=message)

    def deactivate(self, key: str, message: str = DEACTIVATED_MESSAGE) -> Evict | None:
        """``spec.active: false`` (Kueue's deactivation): ``key`` releases any quota it holds (evicted
        with reason ``Deactivated``) and waits, parked, admitted never, until ``activate``; its
        retries and backoff are forgotten, as Kueue clears ``requeueState``. None if it held no quota."""
        wl = self.s.workloads.get(key)
        if wl is None or not wl.active:
            return None
        wl.active = False
        wl.retries, wl.requeue_at = 0, None
        self.s.told.checked[key] = False  # (stored with the step: its activity, retries and backoff)
        if wl.admission is not None:
            return self.s.evict(wl, DEACTIVATED, "Deactivated", None, message=message)
        self.s.intake.withdraw(wl)
        wl.queue_ts = self.s.now  # (as an eviction: Kueue marks a pending workload Evicted too)
        self.s.intake.enqueue(wl, message)
        return None

    def activate(self, key: str) -> bool:
        """``spec.active: true``: a deactivated ``key`` queues again now, in line as a workload
        evicted when it was deactivated (Kueue's ``Requeued`` reason ``Reactivated``); False if it
        was active."""
        wl = self.s.workloads.get(key)
        if wl is None or wl.active:
            return False
        wl.active = True
        wl.retries, wl.requeue_at = 0, None
        self.s.told.checked[key] = False
        self.s.intake.withdraw(wl)
        self.s.intake.enqueue(wl)
        return True

    def workload_lost(self, key: str) -> Evict | None:
        """Someone deleted ``key``'s Workload object while it held quota: as Kueue, which stops a job
        whose Workload is missing (``NoMatchingWorkload``) and queues it under a new one, release
        its quota and queue it again. A waiting workload keeps its place (only its object is new)."""
        wl = self.s.workloads.get(key)
        if wl is None or wl.admission is None:
            return None
        message = "its Workload object was deleted; it is queued again under a new one"
        return self.s.evict(wl, NO_MATCHING_WORKLOAD, "WorkloadDeleted", None, message=message)

    def node_lost(self, node: str) -> list[Decision]:
        """A node is gone: every workload placed on it by topology is evicted and requeued (Kueue's
        ``NodeFailures``; Kueue first tries to replace the node, Turnstile places it afresh)."""
        out: list[Decision] = []
        for wl in sorted(self.s.workloads.values(), key=lambda w: w.seq):
            if wl.admission is not None and any(node in nodes for nodes in wl.admission.placement.values()):
                message = f"node {node}, where its pods were placed, is gone; it is placed again"
                out.append(self.s.evict(wl, NODE_FAILURES, "NodeDeleted", None, message=message))
        if self.s.inventory is not None:
            self.s.inventory.remove(node)
        return out

    def node_failed(self, node: str, keys: Iterable[str], fault: str) -> list[Decision]:
        """``node``'s GPUs report a fatal fault (``queues.gpus.gpu_health``; ``fault`` says which): the
        workloads whose pods run there are evicted and requeued (``NodeFailures``, detail
        ``GPUUnhealthy``), to be admitted again on healthy nodes."""
        out: list[Decision] = []
        for key in sorted(keys):
            wl = self.s.workloads.get(key)
            if wl is not None and wl.admission is not None:
                message = f"{fault}, where its pods ran; it is requeued"
                out.append(self.s.evict(wl, NODE_FAILURES, GPU_UNHEALTHY, None, message=message))
        return out

    def node_unusable(self, node: str, keys: Iterable[str]) -> list[Decision]:
        """``node`` was cordoned (or tainted against its pods) before the pods placed there by
        these workloads were bound: they would wait for it for ever, so each is evicted and placed
        again (Kueue replaces such a node when the pods cannot schedule; what already runs there
        stays, and so does its workload)."""
        out: list[Decision] = []
        for key in sorted(keys):
            wl = self.s.workloads.get(key)
            if wl is not None and wl.admission is not None and any(node in n for n in wl.admission.placement.values()):
                message = (
                    f"node {node}, where its pods were placed, was cordoned before they started; it is placed again"
                )
                out.append(self.s.evict(wl, NODE_FAILURES, "NodeUnschedulable", None, message=message))
        return out

    def job_changed(
        self, key: str, pod_sets: tuple[jobs.PodSet, ...], shape: tuple[object, ...], *, elastic: bool = False
    ) -> Decision | None:
        """``key``'s job runs with other pods than were admitted (a Job's ``parallelism`` raised: a real
        Job controller starts the new pods at once, outside quota). As Kueue, which stops such a job
        (``NoMatchingWorkload``): release its quota and requeue it with the pod sets (and ``shape``)
        its job now has, so it is admitted again as it is. An ``elastic`` job whose pods changed only
        in number is resized in place instead (``queues.cycle.elastic``: None while a growth waits)."""
        wl = self.s.workloads.get(key)
        if wl is None or wl.admission is None:
            return None
        admitted = {_asked(ps) for ps in wl.running_pod_sets}
        now = {_asked(ps) for ps in pod_sets}
        if admitted == now:
            self.s.elastic.forget(key)  # (scaled back to what it holds: no growth waits)
            return None
        if elastic and resizable(wl, pod_sets):
            return self.s.elastic.changed(wl, pod_sets)
        self.s.elastic.forget(key)
        was = ", ".join(f"{ps.name}: {ps.count}" for ps in wl.running_pod_sets)
        asks = ", ".join(f"{ps.name}: {ps.count}" for ps in pod_sets)
        message = f"its job now runs other pods ({asks}) than were admitted ({was}); it is admitted again as it is"
        evict = self.s.evict(wl, NO_MATCHING_WORKLOAD, "JobChanged", None, message=message)
        self.s.pending.remove(wl)  # (queued again below with its new pod sets, which may fit elsewhere)
        wl.pod_sets, wl.shape = pod_sets, shape
        self.s.intake.enqueue(wl, message)
        return evict


def _asked(ps: jobs.PodSet) -> tuple[object, ...]:
    """What a running pod set's pods ask for: the containers' requests where resource
    transformations changed what quota counts (new transformations after a restart do not make a
    running job's pods different ones: it keeps the amounts it was admitted with)."""
    asked = ps.container_requests if ps.container_requests is not None else ps.requests
    return (ps.name, ps.count, tuple(sorted(asked.items())))
