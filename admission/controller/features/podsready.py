"""waitForPodsReady in the controller: watch started jobs until their pods are Ready, evict the late.

The policy is the core's (``queues.podsready``); this module feeds it what the cluster says. Each
step hands it the workloads whose jobs changed (``observe``): a started workload whose job's status
says every pod is Ready (``JobView.ready``, read per kind as Kueue reads it) is Ready, and the first
time it is, when is stored (``workloads.pods_ready_at``) so a restart knows it was. One that is not
Ready gets a deadline: its start (the last Admitted event, kept in PostgreSQL) plus the timeout (its
job's own, ``kueue.x-k8s.io/pods-ready-timeout``, where it says one), or, if it was Ready and lost a
pod, when that was seen plus the recovery timeout. ``due`` hands the step the workloads past their
deadline; the scheduler evicts them (``PodsReadyTimeout``) and the step commits that like any
decision. The step wakes itself for the next deadline.

Times are wall seconds; in ``turnstile simulate --engine cluster`` the policy's durations are scaled
by the time scale, as the scenario's runtimes are. After a failover, a workload that lost a pod
before it is given the full recovery timeout from the new term (when it lost the pod is not stored):
late rather than early.
"""

from __future__ import annotations

import dataclasses
import heapq
from collections.abc import Callable, Collection, Sequence
from typing import TYPE_CHECKING

from admission.controller.capability import STAMPS_WAIT, Capability, StepContext
from admission.controller.term import timestamp
from admission.controller.watch.jobcache import JobCache
from admission.jobs.base import JobView
from admission.store import workloads as store
from queues.cycle.decisions import Decision
from queues.model import Workload
from queues.podsready import WaitForPodsReady

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncSession

    from admission.controller.monitoring.workload_metrics import WorkloadMetrics


def scaled(policy: WaitForPodsReady, scale: float) -> WaitForPodsReady:
    """The policy with its durations in wall seconds (``scale`` wall seconds per second)."""
    if scale == 1.0:
        return policy
    return dataclasses.replace(
        policy,
        timeout=policy.timeout * scale,
        recovery_timeout=policy.recovery_timeout * scale,
        backoff_base_seconds=policy.backoff_base_seconds * scale,
        backoff_max_seconds=policy.backoff_max_seconds * scale,
        time_scale=policy.time_scale * scale,
    )


class PodsReadyWatch:
    def __init__(self, policy: WaitForPodsReady) -> None:
        self.policy = policy
        self.deadlines: dict[str, tuple[float, bool]] = {}  # key -> (when it is evicted, whether recovering)
        # the same deadlines in time order, stale entries skipped as they surface: a step asks for the
        # next deadline and the due ones without looking at every started workload
        self._order: list[tuple[float, str, bool]] = []
        self.lost_at: dict[str, float] = {}  # key -> when a workload that was Ready lost a pod
        self.newly_ready: dict[str, float] = {}  # key -> when first Ready: to store (the step drains it)
        # why a workload's pods wait, as last read (``admission.controller.features.pod_waits``): said on eviction
        self.why: Callable[[str], str | None] = lambda _key: None

    def observe(self, wl: Workload | None, view: JobView | None, now: float) -> None:
        """Look at one workload and its job as last seen."""
        if wl is None:
            return
        key = wl.key
        if not self.policy.enable or view is None or not wl.started or wl.started_at is None or view.finished:
            self.forget(key)
            return
        ready = view.ready
        if not ready and view.ready_pods is not None and view.info is not None and view.info.elastic:
            ready = view.ready_pods >= sum(ps.count for ps in wl.running_pod_sets)  # (its admitted pods)
        if ready:
            if wl.ready_at is None:
                wl.ready_at = now
                self.newly_ready[key] = now
            self.lost_at.pop(key, None)
            self.deadlines.pop(key, None)
            return
        if wl.ready_at is not None:
            lost = self.lost_at.setdefault(key, max(now, wl.ready_at))
            self._set(key, lost + self.policy.recovery_timeout, True)
        else:  # (from this admission's start: a workload admitted again starts afresh)
            self.lost_at.pop(key, None)
            own = self.policy.timeout_of(view.info.annotations) if view.info is not None else self.policy.timeout
            self._set(key, wl.started_at + own, False)

    def _set(self, key: str, at: float, recovering: bool) -> None:
        if self.deadlines.get(key) != (at, recovering):
            self.deadlines[key] = (at, recovering)
            heapq.heappush(self._order, (at, key, recovering))

    def forget(self, key: str) -> None:
        self.deadlines.pop(key, None)
        self.lost_at.pop(key, None)
        self.newly_ready.pop(key, None)

    def due(self, now: float) -> list[tuple[str, bool]]:
        """(key, recovering) of the workloads past their deadline, oldest deadline first; forgotten here."""
        late: list[tuple[str, bool]] = []
        order = self._order
        while order and order[0][0] <= now:
            at, key, recovering = heapq.heappop(order)
            if self.deadlines.get(key) == (at, recovering):  # (else: a deadline changed or dropped since)
                late.append((key, recovering))
                self.forget(key)
        return late

    def next_deadline(self) -> float | None:
        order = self._order
        while order and self.deadlines.get(order[0][1]) != (order[0][0], order[0][2]):
            heapq.heappop(order)
        return order[0][0] if order else None


class PodsReady(Capability):
    """waitForPodsReady as the kernel sees it (``admission.controller.capability``): in each step,
    the started workloads whose jobs changed are looked at and those whose pods were not all Ready
    in time evicted (``PodsReadyTimeout``); when every pod of one first was Ready is stored with
    the next step's decisions, at most ``STAMPS_WAIT`` later (a restart keeps the recovery
    timeout); the next deadline wakes a step."""

    def __init__(self, watch: PodsReadyWatch, *, jobs: JobCache, metrics: WorkloadMetrics) -> None:
        self.watch = watch
        self.jobs = jobs
        self.metrics = metrics
        self.storing: dict[str, float] = {}  # first Ready, being stored by this step's commit

    def decide(self, step: StepContext) -> Sequence[Decision]:
        term, watch = step.term, self.watch
        sched = term.scheduler
        for uid in step.dirty:
            row = term.rows.get(uid)
            if row is not None:
                watch.observe(sched.workloads.get(row.key), self.jobs.views.get(uid), step.now)
        out: list[Decision] = []
        for key, recovering in watch.due(step.now):
            evict = sched.retries.pods_ready_timeout(key, watch.policy, recovery=recovering, why=watch.why(key))
            if evict is not None:
                out.append(evict)
        return out

    def commit_due(self) -> float | None:
        first = min(self.watch.newly_ready.values(), default=None)  # (a stamp: it may wait for a commit)
        return None if first is None else first + STAMPS_WAIT

    async def write_in_commit(self, session: AsyncSession, step: StepContext) -> None:
        self.storing, self.watch.newly_ready = self.watch.newly_ready, {}
        by_key = step.term.by_key
        await store.set_pods_ready(
            session, [(row.id, timestamp(t)) for key, t in self.storing.items() if (row := by_key.get(key))]
        )

    def committed(self, step: StepContext) -> Collection[str]:
        stored, self.storing = self.storing, {}
        for key, t in stored.items():  # (the first time all its pods were Ready in this admission)
            if (became := step.term.scheduler.workloads.get(key)) is not None:
                self.metrics.ready_workload(became, t)
        return stored.keys()  # (their objects' PodsReady condition)

    def next_wake(self) -> float | None:
        return self.watch.next_deadline()
