"""Preemption: which admitted workloads to evict so that a pending one fits.

Follows Kueue's classic preemption (``pkg/scheduler/preemption``, its hierarchical candidate
generator included); the candidates and their order (1 and 2) are ``queues.cycle.victims``,
shared with fair-sharing preemption (``queues.cycle.fair_preemption``, used instead when fair
sharing is on):

1. Candidates, each with a *variant* that says when it may be taken and what the eviction is
   called, and 2. their order: see ``queues.cycle.victims``.
3. One or two runs, with and without borrowing allowed (as Kueue chooses them): remove candidates
   in order, skipping any whose ClusterQueue (or cohort on the way to where it was found) is by
   then back within its nominal quota, until the preemptor fits; then add back, newest-removed
   first, every one it still fits without.

The snapshot is changed only temporarily: whatever is removed is added back before return.
"""

from __future__ import annotations

from collections.abc import Collection

from queues.cycle import fair_preemption
from queues.cycle.assignment import Assignment, Mode
from queues.cycle.victims import Candidate as _Candidate
from queues.cycle.victims import (
    Target,
    Variant,
    borrow_threshold,
    candidates_by_kind,
    fill_back,
    fits,
    over_nominal,
)
from queues.model import ClusterQueue, FlavorResource, Node, Snapshot, Usage, Workload


def _still_valid(
    snapshot: Snapshot, cq: ClusterQueue, cand: _Candidate, frs: Collection[FlavorResource], allow_borrowing: bool
) -> bool:
    """Whether ``cand`` may still be taken, after the removals so far (Kueue's ``candidateIsValid``):
    its ClusterQueue, and every cohort up to where it was found, must still be over nominal quota."""
    if cand.variant is Variant.WITHIN_CLUSTER_QUEUE:
        return True
    if allow_borrowing and cand.variant is Variant.RECLAIM_WITHOUT_BORROWING:
        return False
    assert cand.workload.admission is not None
    node: Node | None = snapshot.queues[cand.workload.admission.cluster_queue]
    while node is not None and node is not cand.found_under:
        if not over_nominal(node, frs):
            return False
        node = node.parent
    return True


def _minimal(
    snapshot: Snapshot,
    cq: ClusterQueue,
    request: Usage,
    frs: Collection[FlavorResource],
    candidates: list[_Candidate],
    allow_borrowing: bool,
) -> list[Target]:
    targets: list[Target] = []
    for cand in candidates:
        if not _still_valid(snapshot, cq, cand, frs, allow_borrowing):
            continue
        snapshot.remove_workload(cand.workload)
        targets.append(Target(cand.workload, cand.variant.reason))
        if fits(cq, request, allow_borrowing):
            return fill_back(snapshot, cq, request, targets, allow_borrowing)
    for t in targets:
        snapshot.add_workload(t.workload)
    return []


def _under_nominal(cq: ClusterQueue, frs: Collection[FlavorResource]) -> bool:
    return all(cq.usage.get(fr, 0) < cq.nominal(fr) for fr in frs)


def targets(
    snapshot: Snapshot, cq: ClusterQueue, wl: Workload, usage: Usage, frs: Collection[FlavorResource]
) -> list[Target]:
    """The workloads to evict so that ``wl`` (needing ``usage``) fits in ``cq``; [] if impossible."""
    if snapshot.fair_sharing is not None:
        return fair_preemption.targets(snapshot, cq, wl, usage, frs, snapshot.fair_sharing.preemption_strategies)
    hierarchical, by_priority, own = candidates_by_kind(cq, wl, frs, usage)
    candidates = [*hierarchical, *by_priority, *own]
    if not candidates:
        return []
    # Which runs, in which order (Kueue's): with borrowing allowed there are fewer candidates.
    forbidden = not borrow_threshold(cq)[0]
    if not (hierarchical or by_priority) or (forbidden and not _under_nominal(cq, frs)):
        runs: tuple[bool, ...] = (True,)
    elif forbidden and not hierarchical:
        runs = (False, True)
    else:
        runs = (True, False)
    for allow_borrowing in runs:
        found = _minimal(snapshot, cq, usage, frs, candidates, allow_borrowing)
        if found:
            return found
    return []


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


def simulate(snapshot: Snapshot, cq: ClusterQueue, wl: Workload, fr: FlavorResource, value: int) -> tuple[Mode, int]:
    """Whether preemption could make room for ``value`` of one flavor-resource, how, and how far up
    the cohort tree the workload would then borrow (Kueue's ``SimulatePreemption``)."""
    found = targets(snapshot, cq, wl, {fr: value}, (fr,))
    if not found:
        return Mode.NO_CANDIDATES, 0
    for t in found:
        snapshot.remove_workload(t.workload)
    level = cq.borrow_height(fr, value)[0]
    for t in found:
        snapshot.add_workload(t.workload)
    return mode_of(found, cq), level
