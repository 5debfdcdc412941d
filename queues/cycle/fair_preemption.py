"""Preemption under fair sharing: Kueue's fair-sharing strategies (``fairPreemptions``).

With fair sharing on, a workload that does not fit takes quota back from the ClusterQueues of its
cohort tree that borrow the most (by Dominant Resource Share, ``queues.cycle.fairsharing``), not by
priority across queues:

1. Candidates: its own ClusterQueue's workloads allowed by ``withinClusterQueue``, and workloads of
   other ClusterQueues of the tree that borrow a needed flavor-resource, allowed by
   ``reclaimWithinCohort`` (``Any``, or lower priority); in Kueue's candidate order.
2. With the preemptor's usage counted in its queue, target ClusterQueues are visited from the root
   down, always into the child with the highest share (its own queue only for priority preemption,
   ``InClusterQueue``). A preemptor whose queue stays within its nominal quota takes back what the
   target borrowed whatever the shares (``InCohortReclamation``; Kueue's
   ``FairSharingPreemptWithinNominal``, on by default). Otherwise the shares compared are those of the two children of
   the lowest common cohort on the way to the preemptor and to the target (the *almost-LCAs*):
   - ``LessThanOrEqualToFinalShare``: preempt when the preemptor's share, with it admitted, is at
     most the target's share once the candidate is gone;
   - ``LessThanInitialShare``: preempt when it is below the target's share now (tried second, on
     the candidates the first left, one per queue);
   each such eviction is ``InCohortFairSharing``, and shares are recomputed after each.
3. As soon as the preemptor fits (borrowing allowed), every victim it can do without is given
   back, newest first.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator

from queues.cycle import victims
from queues.cycle.fairsharing import Share, compare, share
from queues.cycle.victims import IN_CLUSTER_QUEUE, IN_COHORT_FAIR_SHARING, IN_COHORT_RECLAMATION, Target
from queues.kueue import fair_sharing_config
from queues.model import ClusterQueue, CohortNode, FlavorResource, Node, Snapshot, Usage, Workload

Strategy = Callable[[Share, Share, Share], bool]  # (preemptor's new share, target's old, target's new)


def _final(preemptor_new: Share, _target_old: Share, target_new: Share) -> bool:
    return compare(preemptor_new, target_new) <= 0


def _initial(preemptor_new: Share, target_old: Share, _target_new: Share) -> bool:
    return compare(preemptor_new, target_old) < 0


STRATEGIES: dict[str, Strategy] = {
    fair_sharing_config.LESS_THAN_OR_EQUAL_TO_FINAL_SHARE: _final,
    fair_sharing_config.LESS_THAN_INITIAL_SHARE: _initial,
}


def _candidates(snapshot: Snapshot, cq: ClusterQueue, wl: Workload, frs: Collection[FlavorResource]) -> list[Workload]:
    """Kueue's ``findCandidates``: the own queue's by ``withinClusterQueue``; other queues' of the
    tree that borrow a needed flavor-resource, by ``reclaimWithinCohort``."""
    out: list[Workload] = []
    if cq.spec.preemption.within_cluster_queue != "Never":
        allowed = [c for c in cq.workloads.values() if victims.uses(c, frs)]
        allowed = [c for c in allowed if victims.priority_allows(cq, wl, c, True)]
        out += [c for c in allowed if c.priority < wl.priority]
        out += victims.spare_replicas(cq, wl, [c for c in allowed if c.priority == wl.priority])
    if cq.parent is not None and cq.spec.preemption.reclaim_within_cohort != "Never":
        for other in snapshot.queues_in_tree(cq):
            if other is cq or not victims.over_nominal(other, frs):
                continue
            out += [
                c
                for c in other.workloads.values()
                if victims.uses(c, frs) and victims.priority_allows(cq, wl, c, False)
            ]
    return sorted(out, key=victims.order_key(cq.name))


class _Ordering:
    """Kueue's ``TargetClusterQueueOrdering``: which ClusterQueue to take a candidate from next."""

    def __init__(self, preemptor: ClusterQueue, candidates: list[Workload], snapshot: Snapshot) -> None:
        self.preemptor = preemptor
        self.ancestors: set[int] = set()
        node = preemptor.parent
        while node is not None:
            self.ancestors.add(id(node))
            node = node.parent
        self.left: dict[str, list[Workload]] = {}
        for c in candidates:
            assert c.admission is not None
            self.left.setdefault(c.admission.cluster_queue, []).append(c)
        self.queues = snapshot.queues
        self.pruned: set[int] = set()

    def targets(self) -> Iterator[ClusterQueue]:
        """The next target queue, as long as any may give something (the same one may come again)."""
        if self.preemptor.parent is None:
            while self.left.get(self.preemptor.name):
                yield self.preemptor
            return
        root = self.preemptor.root()
        assert isinstance(root, CohortNode)
        while id(root) not in self.pruned:
            target = self._next(root)
            if target is not None:
                yield target

    def pop(self, cq: ClusterQueue) -> Workload:
        return self.left[cq.name].pop(0)

    def has(self, cq: ClusterQueue) -> bool:
        return bool(self.left.get(cq.name))

    def drop(self, cq: ClusterQueue) -> None:
        self.pruned.add(id(cq))

    def _next(self, cohort: CohortNode) -> ClusterQueue | None:
        best_q: tuple[ClusterQueue, Share] | None = None
        for q in cohort.child_queues:
            if id(q) in self.pruned:
                continue
            s = share(q)
            if (s.zero and q is not self.preemptor) or not self.has(q):
                self.pruned.add(id(q))
            elif best_q is None or compare(s, best_q[1]) >= 0:
                best_q = (q, s)
        best_c: tuple[CohortNode, Share] | None = None
        for c in cohort.child_cohorts:
            if id(c) in self.pruned:
                continue
            s = share(c)
            if s.zero and id(c) not in self.ancestors:
                self.pruned.add(id(c))
            elif best_c is None or compare(s, best_c[1]) >= 0:
                best_c = (c, s)
        if best_q is None and best_c is None:
            self.pruned.add(id(cohort))
            return None
        if best_c is not None and (best_q is None or compare(best_c[1], best_q[1]) >= 0):
            return self._next(best_c[0])  # (a tie goes to the cohort: the most unfair node is within)
        assert best_q is not None
        return best_q[0]


def _almost_lcas(preemptor: ClusterQueue, target: ClusterQueue) -> tuple[Node, Node]:
    """The children of the lowest cohort common to both, on the way to each."""
    path: list[Node] = []
    node: Node | None = preemptor
    while node is not None:
        path.append(node)
        node = node.parent
    on_path = {id(n): i for i, n in enumerate(path)}
    below: Node = target
    while below.parent is not None and id(below.parent) not in on_path:
        below = below.parent
    assert below.parent is not None
    return path[on_path[id(below.parent)] - 1], below


def targets(
    snapshot: Snapshot,
    cq: ClusterQueue,
    wl: Workload,
    usage: Usage,
    frs: Collection[FlavorResource],
    strategies: tuple[str, ...],
) -> list[Target]:
    """The workloads to evict so that ``wl`` (needing ``usage``) fits in ``cq``; [] if impossible."""
    candidates = _candidates(snapshot, cq, wl, frs)
    if not candidates:
        return []
    removed: list[Target] = []
    cq.add_usage(usage, 1)  # the preemptor counts in the shares while targets are chosen
    try:
        found, retry = _first(snapshot, cq, usage, frs, candidates, STRATEGIES[strategies[0]], removed)
        if not found and len(strategies) > 1:
            found = _second(snapshot, cq, usage, retry, removed)
    finally:
        cq.add_usage(usage, -1)
    if not found:
        for t in removed:
            snapshot.add_workload(t.workload)
        return []
    return victims.fill_back(snapshot, cq, usage, removed, True)


def _fits(cq: ClusterQueue, usage: Usage) -> bool:
    cq.add_usage(usage, -1)
    try:
        return victims.fits(cq, usage, True)
    finally:
        cq.add_usage(usage, 1)


def _take(snapshot: Snapshot, victim: Workload, reason: str, removed: list[Target]) -> None:
    snapshot.remove_workload(victim)
    removed.append(Target(victim, reason))


def _first(
    snapshot: Snapshot,
    cq: ClusterQueue,
    usage: Usage,
    frs: Collection[FlavorResource],
    candidates: list[Workload],
    strategy: Strategy,
    removed: list[Target],
) -> tuple[bool, list[Workload]]:
    """The first strategy; returns whether the preemptor fits, and the candidates it passed over."""
    ordering = _Ordering(cq, candidates, snapshot)
    retry: list[Workload] = []
    # Within its nominal quota (with the preemptor counted), a queue takes back what others borrowed
    # whatever the shares (Kueue's FairSharingPreemptWithinNominal, on by default).
    within_nominal = all(cq.usage.get(fr, 0) <= cq.nominal(fr) for fr in frs)
    for target in ordering.targets():
        if target is cq or within_nominal:
            _take(snapshot, ordering.pop(target), IN_CLUSTER_QUEUE if target is cq else IN_COHORT_RECLAMATION, removed)
            if _fits(cq, usage):
                return True, []
            continue
        mine, theirs = _almost_lcas(cq, target)
        preemptor_new, target_old = share(mine), share(theirs)
        while ordering.has(target):
            victim = ordering.pop(target)
            assert victim.admission is not None
            target.add_usage(victim.admission.usage, -1)
            target_new = share(theirs)
            target.add_usage(victim.admission.usage, 1)
            if strategy(preemptor_new, target_old, target_new):
                _take(snapshot, victim, IN_COHORT_FAIR_SHARING, removed)
                if _fits(cq, usage):
                    return True, []
                break  # the shares changed: the next target may be another queue
            retry.append(victim)
    return False, retry


def _second(snapshot: Snapshot, cq: ClusterQueue, usage: Usage, retry: list[Workload], removed: list[Target]) -> bool:
    """``LessThanInitialShare`` on what the first strategy passed over: at most one per queue."""
    ordering = _Ordering(cq, retry, snapshot)
    for target in ordering.targets():
        mine, theirs = _almost_lcas(cq, target)
        if _initial(share(mine), share(theirs), Share()):
            _take(snapshot, ordering.pop(target), IN_COHORT_FAIR_SHARING, removed)
            if _fits(cq, usage):
                return True
        ordering.drop(target)
    return False
