"""Preemption's candidates: who a pending workload may preempt, in which order, and why.

Kueue's classic candidates (``pkg/scheduler/preemption``, its hierarchical candidate generator
included), shared by classic preemption (``queues.cycle.preemption``), fair-sharing preemption
(``queues.cycle.fair_preemption``) and topology-aware preemption (``queues.cycle.tas``):

1. Candidates, each with a *variant* that says when it may be taken and what the eviction is
   called:

   - in the preemptor's own ClusterQueue, allowed by ``withinClusterQueue`` (lower priority; or
     equal priority and newer with ``LowerOrNewerEqualPriority``): ``InClusterQueue``;
   - in other ClusterQueues of the cohort tree, allowed by ``reclaimWithinCohort`` (``Any``, or
     lower priority), found by walking from the preemptor's cohort up to the root: at each cohort,
     the ClusterQueues and sub-cohorts past their nominal quota (never the subtree already
     visited). Once the request fits the nominal quota of the preemptor's queue or of a cohort
     below, the preemptor has the *hierarchical advantage* over everything found further up: that
     quota is its own subtree's, so those candidates are taken whatever the borrowing
     (``InCohortReclamation``). The others are *priority candidates*: with ``borrowWithinCohort``,
     lower-priority ones under its threshold may be taken while the preemptor borrows
     (``InCohortReclaimWhileBorrowing``); the rest only if it then borrows nothing.
2. Order: hierarchical candidates, then priority candidates, then its own queue's; within each,
   lower priority first, then the most recently admitted, then the latest submitted.

Also here: whether a request fits (``fits``) and the fill-back that keeps only the victims a
preemptor needs (``fill_back``), which both preemptions end with.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass
from enum import Enum
from typing import NamedTuple

from queues.model import ClusterQueue, CohortNode, FlavorResource, Node, Snapshot, Usage, Workload
from queues.podsets import pods

IN_CLUSTER_QUEUE = "InClusterQueue"
IN_COHORT_RECLAMATION = "InCohortReclamation"
IN_COHORT_RECLAIM_WHILE_BORROWING = "InCohortReclaimWhileBorrowing"
IN_COHORT_FAIR_SHARING = "InCohortFairSharing"


class Variant(Enum):
    """When a candidate may be preempted (Kueue's ``preemptionVariant``); the value is the reason."""

    WITHIN_CLUSTER_QUEUE = IN_CLUSTER_QUEUE
    HIERARCHICAL_RECLAIM = IN_COHORT_RECLAMATION
    RECLAIM_WITHOUT_BORROWING = "ReclaimWithoutBorrowing"
    RECLAIM_WHILE_BORROWING = IN_COHORT_RECLAIM_WHILE_BORROWING

    @property
    def reason(self) -> str:
        return IN_COHORT_RECLAMATION if self is Variant.RECLAIM_WITHOUT_BORROWING else self.value


@dataclass(frozen=True, slots=True)
class Target:
    workload: Workload
    reason: str


class Candidate(NamedTuple):  # (a tuple: tens of thousands are made per simulated hour)
    workload: Workload
    variant: Variant
    found_under: CohortNode | None = None  # the cohort whose subtree it was found in (own queue: None)


def uses(wl: Workload, frs: Collection[FlavorResource]) -> bool:
    assert wl.admission is not None
    return any(fr in wl.admission.usage for fr in frs)


def over_nominal(node: Node, frs: Collection[FlavorResource]) -> bool:
    """Whether ``node`` uses more than its nominal (subtree) quota of any of ``frs``."""
    return any(node.borrowing(fr) for fr in frs)


def borrow_threshold(cq: ClusterQueue) -> tuple[bool, int | None]:
    """Whether ``borrowWithinCohort`` lets ``cq`` preempt while borrowing, and its priority threshold."""
    bwc = cq.spec.preemption.borrow_within_cohort
    if bwc is None or bwc.policy == "Never":
        return False, None
    return True, bwc.max_priority_threshold


def in_chain(wl: Workload, cand: Workload) -> bool:
    """Whether ``cand`` evicted ``wl``, or evicted the workload that evicted it, and so on, with
    nobody on the way admitted again since: preempting it would close a preemption loop.

    Kueue's rules allow loops (a reclaims b's borrowed quota; c outranks a and borrows; b reclaims
    from c; a reclaims again...) that turn for ever, one link each time a victim's pods stop.
    Turnstile's rule, one it adds to Kueue's: a workload never preempts its own chain; it waits
    until that work finishes or something else frees room."""
    link, steps = wl.evicted_by, 0
    while link is not None and steps < 64:  # (acyclic by construction; the bound is a guard)
        if link is cand:
            return True
        link, steps = link.evicted_by, steps + 1
    return False


def chain_holds_quota(wl: Workload) -> bool:
    """Whether a workload on ``wl``'s chain (``in_chain``) holds quota now: only then can the chain
    rule exclude a candidate (candidates are admitted workloads), so only then does ``wl`` decide
    differently from an identical workload that was never preempted."""
    link, steps = wl.evicted_by, 0
    while link is not None and steps < 64:
        if link.admission is not None:
            return True
        link, steps = link.evicted_by, steps + 1
    return False


def priority_allows(cq: ClusterQueue, wl: Workload, cand: Workload, same_queue: bool) -> bool:
    if wl.evicted_by is not None and in_chain(wl, cand):
        return False
    pre = cq.spec.preemption
    policy = pre.within_cluster_queue if same_queue else pre.reclaim_within_cohort
    if policy == "LowerPriority":
        return cand.priority < wl.priority
    if policy == "LowerOrNewerEqualPriority":
        return cand.priority < wl.priority or (cand.priority == wl.priority and wl.queue_ts < cand.queue_ts)
    return policy == "Any"


def _variant(
    cq: ClusterQueue, wl: Workload, cand: Workload, frs: Collection[FlavorResource], advantage: bool
) -> Variant | None:
    """How ``cand`` may be preempted for ``wl`` (None: not at all; Kueue's ``classifyPreemptionVariant``)."""
    assert cand.admission is not None
    same_queue = cand.admission.cluster_queue == cq.name
    if not uses(cand, frs) or not priority_allows(cq, wl, cand, same_queue):
        return None
    if same_queue:
        return Variant.WITHIN_CLUSTER_QUEUE
    if advantage:
        return Variant.HIERARCHICAL_RECLAIM
    allowed, threshold = borrow_threshold(cq)
    if not allowed or cand.priority >= wl.priority or (threshold is not None and cand.priority > threshold):
        return Variant.RECLAIM_WITHOUT_BORROWING
    return Variant.RECLAIM_WHILE_BORROWING


def own_candidates(cq: ClusterQueue, wl: Workload, frs: Collection[FlavorResource]) -> list[Candidate]:
    if cq.spec.preemption.within_cluster_queue == "Never":
        return []
    allowed = [c for c in cq.workloads.values() if _variant(cq, wl, c, frs, False) is not None]
    lower = [c for c in allowed if c.priority < wl.priority]
    equal = [c for c in allowed if c.priority == wl.priority]
    return [Candidate(c, Variant.WITHIN_CLUSTER_QUEUE) for c in (*lower, *spare_replicas(cq, wl, equal))]


def _fit_in_quota(node: Node, requests: Usage) -> tuple[bool, Usage]:
    """Whether ``requests`` fit ``node``'s nominal (subtree) quota as used now, and what of them is
    left for its parent to hold (Kueue's ``QuantitiesFitInQuota``)."""
    fits = all(node.usage.get(fr, 0) + v <= node.subtree_quota.get(fr, 0) for fr, v in requests.items())
    return fits, {fr: max(0, v - node.local_available(fr)) for fr, v in requests.items()}


def _cohort_candidates(
    cq: ClusterQueue, wl: Workload, frs: Collection[FlavorResource], requests: Usage
) -> tuple[list[Candidate], list[Candidate]]:
    """Other ClusterQueues' candidates: (those ``wl`` has the hierarchical advantage over, the rest)."""
    hierarchical: list[Candidate] = []
    by_priority: list[Candidate] = []
    if cq.parent is None or cq.spec.preemption.reclaim_within_cohort == "Never":
        return hierarchical, by_priority
    advantage, remaining = _fit_in_quota(cq, requests)
    visited: CohortNode | None = None
    node: CohortNode | None = cq.parent
    while node is not None:
        out = hierarchical if advantage else by_priority
        _collect(cq, wl, frs, node, node, visited, advantage, out)
        fits, remaining = _fit_in_quota(node, remaining)
        advantage = advantage or fits
        visited, node = node, node.parent
    return hierarchical, by_priority


def _collect(
    cq: ClusterQueue,
    wl: Workload,
    frs: Collection[FlavorResource],
    cohort: CohortNode,
    subtree: CohortNode,
    visited: CohortNode | None,
    advantage: bool,
    out: list[Candidate],
) -> None:
    """Candidates in ``cohort``'s subtree, leaving out ``visited`` and whatever is within its quota."""
    for child in cohort.child_cohorts:
        if child is not visited and over_nominal(child, frs):
            _collect(cq, wl, frs, child, subtree, visited, advantage, out)
    for other in cohort.child_queues:
        if other is cq or not over_nominal(other, frs):
            continue
        for cand in other.workloads.values():
            variant = _variant(cq, wl, cand, frs, advantage)
            if variant is not None:
                out.append(Candidate(cand, variant, subtree))


def spare_replicas(cq: ClusterQueue, wl: Workload, equal: list[Workload]) -> list[Workload]:
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


def order_key(cq_name: str) -> Callable[[Workload], tuple[bool, int, float, int]]:
    """Kueue's ``CandidatesOrdering``: other ClusterQueues' first, then lower priority, then the most
    recently admitted, then the latest submitted."""

    def key(w: Workload) -> tuple[bool, int, float, int]:
        assert w.admission is not None and w.admitted_at is not None
        return (w.admission.cluster_queue == cq_name, w.priority, -w.admitted_at, -w.seq)

    return key


def fits(cq: ClusterQueue, request: Usage, allow_borrowing: bool) -> bool:
    """Whether ``request`` fits ``cq`` as the snapshot is now (Kueue's ``workloadFits``)."""
    for fr, v in request.items():
        if not allow_borrowing and cq.borrowing(fr, v):
            return False
        if v > cq.available(fr):
            return False
    return True


def fill_back(
    snapshot: Snapshot, cq: ClusterQueue, request: Usage, removed: list[Target], allow_borrowing: bool
) -> list[Target]:
    """Of ``removed`` (all out of the snapshot, the preemptor fitting without them), those it still
    needs: added back, newest-removed first, is every one it fits without (Kueue's
    ``fillBackWorkloads``). The snapshot is left as it was before any removal."""
    kept = [removed[-1]]
    for t in reversed(removed[:-1]):
        snapshot.add_workload(t.workload)
        if fits(cq, request, allow_borrowing):
            continue
        snapshot.remove_workload(t.workload)
        kept.append(t)
    for t in kept:
        snapshot.add_workload(t.workload)
    kept.reverse()
    return kept


def candidates_by_kind(
    cq: ClusterQueue, wl: Workload, frs: Collection[FlavorResource], usage: Usage
) -> tuple[list[Candidate], list[Candidate], list[Candidate]]:
    """Kueue's candidates, each kind in Kueue's order: other ClusterQueues' borrowed work that
    ``wl`` reclaims by hierarchy, the rest of the cohort's by priority, its own queue's."""
    by_order = order_key(cq.name)

    def key(c: Candidate) -> tuple[bool, int, float, int]:
        return by_order(c.workload)

    own = sorted(own_candidates(cq, wl, frs), key=key)
    hierarchical, by_priority = (sorted(found, key=key) for found in _cohort_candidates(cq, wl, frs, usage))
    return hierarchical, by_priority, own


def candidates(cq: ClusterQueue, wl: Workload, frs: Collection[FlavorResource], usage: Usage) -> list[Target]:
    """Everyone ``wl`` may preempt for ``usage`` of ``frs``, in the order Kueue tries them (the cohort's
    borrowed work first, then its own queue's), each with the reason it would be preempted: what
    topology-aware preemption (``queues.cycle.tas``) takes from until the preemptor is placed."""
    return [Target(c.workload, c.variant.reason) for group in candidates_by_kind(cq, wl, frs, usage) for c in group]
