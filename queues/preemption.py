"""Preemption: which admitted workloads to evict so that a pending one fits.

Follows Kueue's classic preemption (``pkg/scheduler/preemption``):

1. Candidates: workloads in the preemptor's ClusterQueue allowed by ``withinClusterQueue``
   (lower priority; or equal priority and newer with ``LowerOrNewerEqualPriority``), and
   workloads of other ClusterQueues in the cohort tree that borrow one of the needed
   flavor-resources, allowed by ``reclaimWithinCohort`` (``Any``, or lower priority).
   Only workloads using a flavor-resource that needs preemption are candidates.
2. Candidates are ordered: other ClusterQueues first, then lower priority, then the most
   recently admitted, then the latest submitted (the deterministic tie-break).
3. Strategy: reclaim from other queues without borrowing while the preemptor's queue is
   under its nominal quota; ``borrowWithinCohort`` allows preempting lower-priority work
   elsewhere while borrowing; the last resort is own-queue candidates with borrowing.
4. Minimal set: remove candidates in order until the preemptor fits, then add back, in
   reverse order, every one it still fits without.

The snapshot is changed only temporarily: whatever is removed is added back before return.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from queues import pods
from queues.flavors import Assignment, Mode
from queues.model import ClusterQueue, FlavorResource, Snapshot, Usage, Workload

IN_CLUSTER_QUEUE = "InClusterQueue"
IN_COHORT_RECLAMATION = "InCohortReclamation"
IN_COHORT_RECLAIM_WHILE_BORROWING = "InCohortReclaimWhileBorrowing"


@dataclass(frozen=True, slots=True)
class Target:
    workload: Workload
    reason: str


def _uses(wl: Workload, frs: Collection[FlavorResource]) -> bool:
    assert wl.admission is not None
    return any(fr in wl.admission.usage for fr in frs)


def _cq_borrowing(cq: ClusterQueue, frs: Collection[FlavorResource]) -> bool:
    return any(cq.borrowing(fr) for fr in frs)


def _candidates(snapshot: Snapshot, cq: ClusterQueue, wl: Workload, frs: Collection[FlavorResource]) -> list[Workload]:
    out: list[Workload] = []
    pre = cq.spec.preemption
    if pre.within_cluster_queue != "Never":
        same_prio = pre.within_cluster_queue == "LowerOrNewerEqualPriority"
        equal: list[Workload] = []
        for cand in cq.workloads.values():
            if cand.priority > wl.priority:
                continue
            if cand.priority == wl.priority and not (same_prio and wl.queue_ts < cand.queue_ts):
                continue
            if _uses(cand, frs):
                (equal if cand.priority == wl.priority else out).append(cand)
        out.extend(_spare_replicas(cq, wl, equal))
    if cq.parent is not None and pre.reclaim_within_cohort != "Never":
        only_lower = pre.reclaim_within_cohort == "LowerPriority"
        for other in snapshot.queues_in_tree(cq):
            if other is cq or not _cq_borrowing(other, frs):
                continue
            for cand in other.workloads.values():
                if only_lower and cand.priority >= wl.priority:
                    continue
                if _uses(cand, frs):
                    out.append(cand)
    return out


def _spare_replicas(cq: ClusterQueue, wl: Workload, equal: list[Workload]) -> list[Workload]:
    """Of the equal-priority candidates in the preemptor's own ClusterQueue, those it may take.

    Turnstile's serving rule (Kueue has none; KAI makes inference non-preemptible): batch work does
    not preempt a service's replicas of its own priority below the service's minimum
    (``turnstile.dev/min-replicas``, default 1), so a service is never scaled to nothing by a
    training job that merely arrived later. Of a service's admitted replicas, only those above the
    minimum are candidates, newest first. Higher-priority work, another replica of a service, and
    reclaim by the cohort are not limited: priority and quota still decide."""
    if pods.service_of(wl.labels) is not None:
        return equal
    admitted: dict[str, int] = {}
    for other in cq.workloads.values():
        service = pods.service_of(other.labels)
        if service is not None:
            admitted[service[0]] = admitted.get(service[0], 0) + 1
    out: list[Workload] = []
    taken: dict[str, int] = {}
    for cand in sorted(equal, key=lambda w: (-(w.admitted_at or 0.0), -w.seq)):
        service = pods.service_of(cand.labels)
        if service is not None:
            name, minimum = service
            if admitted[name] - taken.get(name, 0) <= minimum:
                continue
            taken[name] = taken.get(name, 0) + 1
        out.append(cand)
    return out


def _ordering(cq_name: str) -> object:
    def key(w: Workload) -> tuple[bool, int, float, int]:
        assert w.admission is not None and w.admitted_at is not None
        return (w.admission.cluster_queue == cq_name, w.priority, -w.admitted_at, -w.seq)

    return key


def _fits(cq: ClusterQueue, request: Usage, allow_borrowing: bool) -> bool:
    for fr, v in request.items():
        if not allow_borrowing and cq.borrowing(fr, v):
            return False
        if v > cq.available(fr):
            return False
    return True


def _minimal(
    snapshot: Snapshot,
    cq: ClusterQueue,
    request: Usage,
    frs: Collection[FlavorResource],
    candidates: list[Workload],
    allow_borrowing: bool,
    threshold: int | None,
) -> list[Target]:
    targets: list[Target] = []
    fits = False
    for cand in candidates:
        assert cand.admission is not None
        cand_cq = snapshot.queues[cand.admission.cluster_queue]
        reason = IN_CLUSTER_QUEUE
        if cand_cq is not cq:
            if not _cq_borrowing(cand_cq, frs):
                continue  # earlier removals already brought that queue back under its quota
            reason = IN_COHORT_RECLAMATION
            if threshold is not None:
                if cand.priority > threshold:
                    allow_borrowing = False
                else:
                    reason = IN_COHORT_RECLAIM_WHILE_BORROWING
        snapshot.remove_workload(cand)
        targets.append(Target(cand, reason))
        if _fits(cq, request, allow_borrowing):
            fits = True
            break
    if not fits:
        for t in targets:
            snapshot.add_workload(t.workload)
        return []
    # Add back, newest-removed first, every candidate the preemptor still fits without.
    kept = [targets[-1]]
    for t in reversed(targets[:-1]):
        snapshot.add_workload(t.workload)
        if _fits(cq, request, allow_borrowing):
            continue
        snapshot.remove_workload(t.workload)
        kept.append(t)
    for t in kept:
        snapshot.add_workload(t.workload)
    kept.reverse()
    return kept


def _under_nominal(cq: ClusterQueue, frs: Collection[FlavorResource]) -> bool:
    return all(cq.usage.get(fr, 0) < cq.nominal(fr) for fr in frs)


def targets(
    snapshot: Snapshot, cq: ClusterQueue, wl: Workload, usage: Usage, frs: Collection[FlavorResource]
) -> list[Target]:
    """The workloads to evict so that ``wl`` (needing ``usage``) fits in ``cq``; [] if impossible."""
    candidates = _candidates(snapshot, cq, wl, frs)
    if not candidates:
        return []
    candidates.sort(key=_ordering(cq.name))  # type: ignore[arg-type]
    same_queue = [c for c in candidates if c.admission is not None and c.admission.cluster_queue == cq.name]
    if len(same_queue) == len(candidates):
        return _minimal(snapshot, cq, usage, frs, candidates, True, None)
    bwc = cq.spec.preemption.borrow_within_cohort
    if bwc is not None and bwc.policy != "Never":
        threshold = wl.priority - 1
        if bwc.max_priority_threshold is not None:
            threshold = min(threshold, bwc.max_priority_threshold)
        if not _under_nominal(cq, frs):
            candidates = [
                c
                for c in candidates
                if c.priority <= threshold or (c.admission is not None and c.admission.cluster_queue == cq.name)
            ]
        return _minimal(snapshot, cq, usage, frs, candidates, True, threshold)
    if _under_nominal(cq, frs):
        found = _minimal(snapshot, cq, usage, frs, candidates, False, None)
        if found:
            return found
    return _minimal(snapshot, cq, usage, frs, same_queue, True, None)


def can_always_reclaim(cq: ClusterQueue) -> bool:
    """Kueue's ``CanAlwaysReclaim``: the queue is sure to get back what others borrowed from it."""
    return cq.spec.preemption.reclaim_within_cohort == "Any"


def to_reserve(cq: ClusterQueue, assignment: Assignment) -> Usage:
    """What a head that needs preemption but found nothing to preempt holds for the rest of a cycle
    (Kueue's ``quotaResourcesToReserve``): while borrowing, all it asks (up to its borrowing limit);
    otherwise what is left of its nominal quota."""
    out: Usage = {}
    for fr, usage in assignment.usage.items():
        quota = cq.quotas.get(fr)
        used = cq.usage.get(fr, 0)
        nominal = quota.nominal if quota is not None else 0
        if assignment.borrowing:
            limit = quota.borrowing_limit if quota is not None else None
            out[fr] = usage if limit is None else max(0, min(usage, nominal + limit - used))
        else:
            out[fr] = max(0, min(usage, nominal - used))
    return {fr: v for fr, v in out.items() if v}


def mode_of(found: list[Target], cq: ClusterQueue) -> Mode:
    """What preempting ``found`` for a workload of ``cq`` is (Kueue's preemption possibility):
    ``RECLAIM`` when every target is another ClusterQueue's, ``PREEMPT`` otherwise, ``NO_FIT`` if none."""
    if not found:
        return Mode.NO_FIT
    own = any(t.workload.admission is not None and t.workload.admission.cluster_queue == cq.name for t in found)
    return Mode.PREEMPT if own else Mode.RECLAIM


def for_assignment(snapshot: Snapshot, cq: ClusterQueue, wl: Workload, assignment: Assignment) -> list[Target]:
    return targets(snapshot, cq, wl, assignment.usage, assignment.needs_preemption)


def oracle(snapshot: Snapshot) -> object:
    """Whether preemption could make room for one flavor-resource, and how (used while choosing flavors)."""

    def could_preempt(cq: ClusterQueue, wl: Workload, fr: FlavorResource, value: int) -> Mode:
        return mode_of(targets(snapshot, cq, wl, {fr: value}, (fr,)), cq)

    return could_preempt
