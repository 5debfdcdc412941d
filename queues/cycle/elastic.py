"""Elastic jobs: an admitted job that scales keeps running, its admission resized in place.

Why: Kueue's workload slices (``kueue.x-k8s.io/elastic-job: "true"`` on a batch Job or an
autoscaling RayCluster, RayJob or RayService; beta since v0.18) let a running job change its ``parallelism`` (a worker
group's ``replicas``) without being requeued. A scale-down is
written into its Workload at once and frees quota; a scale-up is a new slice admitted against
quota on the flavors the job already runs on, while its running pods go on; once admitted it
replaces the old slice. Any other job whose pods change while admitted is evicted and queued
again as it now is (``Retries.job_changed``, Kueue's ``NoMatchingWorkload``).

Turnstile keeps one workload per job and resizes its admission (a ``Resize`` decision: the
admission before and after, same ClusterQueue and flavors):

- **down**, at once: the freed quota goes to whoever waits, in the same ``schedule`` call;
- **up**: the added pods wait (they carry Kueue's ``kueue.x-k8s.io/elastic-job`` scheduling gate,
  which the controller lifts only up to the admitted count) until the whole new size fits in the
  ClusterQueue with the job's own usage counted as freed, on its flavors; then the admission grows
  in one step. A waiting growth is tried again at every ``schedule`` call, before the cycles (it is
  an admitted job's, older than anything pending), and says why it waits on the workload.

Where this differs from Kueue (docs/job-kinds.md): the growth never preempts (Kueue's new slice may
preempt lower-priority work), it is served before pending workloads of its ClusterQueue rather
than in their order, and one Workload shows the job (its pod counts change) instead of a chain of
slices. A pod set whose pods change in more than their count, a job placed by topology (Kueue
refuses elastic jobs with topology requests) and a job admitted partially are not resized: they
take ``job_changed``'s path.
"""

from __future__ import annotations

from typing import Protocol

from queues import quantity
from queues.cycle.decisions import Resize
from queues.cycle.usage_history import UsageOrdering
from queues.model import Admission, ClusterQueue, Snapshot, Workload, shape_of
from queues.podsets import jobs
from queues.workloads import usage_of

ELASTIC_GATE = "kueue.x-k8s.io/elastic-job"  # Kueue's scheduling gate on an elastic Job's pods
WAITING_TO_GROW = "WaitingForQuota"  # (the reason a growth waits with: Kueue's new slice's)


class Resizing(Protocol):
    """What ``Elastic`` reads of its scheduler (``queues.cycle.scheduler.Scheduler`` is one)."""

    workloads: dict[str, Workload]
    snapshot: Snapshot
    ordering: UsageOrdering
    now: float

    def say(self, wl: Workload, reason: str, message: str) -> None: ...

    def freed(self, cq: ClusterQueue) -> None: ...


class Elastic:
    """Elastic workloads' resizes, and the growths still waiting for quota (``growing``)."""

    def __init__(self, s: Resizing) -> None:
        self.s = s
        # workload key -> the pod sets (and their shape) its job now runs with, beyond its admission
        self.growing: dict[str, tuple[tuple[jobs.PodSet, ...], tuple[object, ...]]] = {}

    def changed(self, wl: Workload, asked: tuple[jobs.PodSet, ...]) -> Resize | None:
        """``wl`` (admitted, elastic, ``resizable`` to ``asked``) now runs ``asked``'s pod counts:
        shrunk at once, or grown once it fits (None: the growth waits). Only the counts change: its
        pod sets keep what they were admitted with (a running job's templates carry its flavor's
        node labels, which must not narrow where it may be admitted next)."""
        self.growing.pop(wl.key, None)
        counts = {ps.name: ps.count for ps in asked}
        pod_sets = jobs.with_counts(wl.pod_sets, counts)
        shape = shape_of(pod_sets)
        if all(counts[ps.name] <= ps.count for ps in wl.pod_sets):
            return self._apply(wl, pod_sets, shape)
        self.growing[wl.key] = (pod_sets, shape)
        return self._grow(wl.key)

    def forget(self, key: str) -> None:
        """``key``'s job runs as admitted again (or is gone, or was evicted): no growth waits."""
        if self.growing.pop(key, None) is not None and (wl := self.s.workloads.get(key)) is not None and wl.started:
            assert wl.admission is not None
            self.s.say(wl, "Admitted", f"admitted by ClusterQueue {wl.admission.cluster_queue}")

    def grow(self) -> list[Resize]:
        """Every waiting growth that fits now (in the order they were asked)."""
        return [r for key in list(self.growing) if (r := self._grow(key)) is not None]

    def _grow(self, key: str) -> Resize | None:
        wl = self.s.workloads.get(key)
        if wl is None or wl.admission is None:
            self.growing.pop(key, None)  # (evicted: it queues again at the size its job has)
            return None
        pod_sets, shape = self.growing[key]
        cq = self.s.snapshot.queues.get(wl.admission.cluster_queue)
        usage = None if cq is None else usage_of(pod_sets, wl.admission.flavors, cq.group_of)
        if cq is None or usage is None:
            self.growing.pop(key, None)
            return None
        self.s.snapshot.remove_workload(wl)  # (its own usage counts as freed, as for Kueue's new slice)
        try:
            short = {fr: need - room for fr, need in sorted(usage.items()) if need > (room := cq.available(fr))}
        finally:
            self.s.snapshot.add_workload(wl)
        if short:
            (flavor, resource), more = next(iter(short.items()))
            self.s.say(
                wl,
                WAITING_TO_GROW,
                f"scaling up to {_counts(pod_sets)} waits for quota: insufficient unused quota for {resource} in "
                f"flavor {flavor}, {quantity.format_milli(more)} more needed; the running pods go on",
            )
            return None
        del self.growing[key]
        return self._apply(wl, pod_sets, shape)

    def _apply(self, wl: Workload, pod_sets: tuple[jobs.PodSet, ...], shape: tuple[object, ...]) -> Resize | None:
        s, old = self.s, wl.admission
        assert old is not None
        cq = s.snapshot.queues.get(old.cluster_queue)
        usage = None if cq is None else usage_of(pod_sets, old.flavors, cq.group_of)
        if cq is None or usage is None:
            return None
        before = (wl.pod_sets, wl.shape)
        flavors = {ps.name: dict(old.flavors.get(ps.name, {})) for ps in pod_sets}
        borrowing = any(
            cq.usage.get(fr, 0) - old.usage.get(fr, 0) + q > cq.subtree_quota.get(fr, 0) for fr, q in usage.items()
        )
        new = Admission(cq.name, flavors, usage, borrowing)
        self._set(wl, pod_sets, shape, new)
        if wl.started:
            s.say(wl, "Admitted", f"admitted by ClusterQueue {cq.name}; resized to {_counts(pod_sets)}")
        return Resize(wl, old, new, before)

    def undo(self, resize: Resize) -> None:
        """Put back what ``resize`` changed (the store refused it: quota changed underneath); it is
        tried again at the next ``schedule``, as a growth is."""
        wl = resize.workload
        if self.s.workloads.get(wl.key) is wl and wl.admission is resize.admission:
            self.growing[wl.key] = (wl.pod_sets, wl.shape)
            self._set(wl, *resize.before, resize.released)

    def _set(self, wl: Workload, pod_sets: tuple[jobs.PodSet, ...], shape: tuple[object, ...], new: Admission) -> None:
        s, old = self.s, wl.admission
        assert old is not None
        s.snapshot.remove_workload(wl)
        s.ordering.record(wl, old.cluster_queue, old.usage, -1, s.now)
        wl.pod_sets, wl.shape, wl.admission = pod_sets, shape, new
        s.snapshot.add_workload(wl)
        s.ordering.record(wl, new.cluster_queue, new.usage, 1, s.now)
        cq = s.snapshot.queues.get(new.cluster_queue)
        if cq is not None and any(new.usage.get(fr, 0) < q for fr, q in old.usage.items()):
            s.freed(cq)


def resizable(wl: Workload, pod_sets: tuple[jobs.PodSet, ...]) -> bool:
    """Whether ``wl``'s admission can follow its job to ``pod_sets`` in place: the same pod sets,
    each pod asking the same, only counts changed (at least one pod each), admitted whole and not
    placed by topology. (A running Job's template cannot change but for its count.)"""
    admission = wl.admission
    if admission is None or admission.counts or admission.placement:
        return False
    old = {ps.name: ps for ps in wl.pod_sets}
    return set(old) == {ps.name for ps in pod_sets} and all(
        ps.count >= 1 and _per_pod(ps) == _per_pod(old[ps.name]) for ps in pod_sets
    )


def _per_pod(ps: jobs.PodSet) -> tuple[object, ...]:
    """What one pod asks for (its node selector is not compared: a running job's carries its flavor's)."""
    asked = ps.container_requests if ps.container_requests is not None else ps.requests
    return (tuple(sorted(asked.items())), tuple(sorted(ps.requests.items())))


def _counts(pod_sets: tuple[jobs.PodSet, ...]) -> str:
    return ", ".join(f"{ps.name}: {ps.count}" for ps in pod_sets)
