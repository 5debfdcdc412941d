"""Fair sharing: Kueue's Dominant Resource Share (DRS) and the order it gives a cycle.

With fair sharing on (Kueue's ``fairSharing`` configuration; a scenario's top-level
``fairSharing:`` block, the controller's ``TURNSTILE_FAIR_SHARING``), ClusterQueues and Cohorts
that share a cohort tree are compared by how much of what the tree lends they borrow, divided by
their ``spec.fairSharing.weight`` (default 1), as Kueue's ``pkg/cache/scheduler/fair_sharing.go``:

- a node's *share* is, over the resources it borrows (usage beyond its nominal subtree quota,
  summed over flavors), the largest ratio borrowed x 1000 / lendable, where lendable is what its
  parent could give it with nothing in use (``potential_available``, summed over flavors); a node
  that borrows nothing has share 0, the root has no share, and a zero weight that borrows has an
  infinite share;
- a cycle's heads are taken by tournament (Kueue's ``fairSharingIterator``): in each cohort, a
  child (ClusterQueue or sub-cohort) that would not borrow for what its head asks wins first
  (``FairSharingPrioritizeNonBorrowing``), then the one whose share *with its head admitted* is
  lowest, then the higher priority, then the earlier queue-order time; after each decision the
  shares are computed again, so one cycle spreads what is free over the queues that borrow least;
- preemption uses Kueue's fair-sharing strategies (``queues.cycle.fair_preemption``).

Within one ClusterQueue, order stays priority then FIFO; a ClusterQueue without a cohort is not
compared with anything.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from queues.model import Config, Snapshot
from queues.quotas import CohortNode, FlavorResource, Node, Usage


@dataclass(frozen=True, slots=True)
class Share:
    """A node's Dominant Resource Share (Kueue's ``DRS``)."""

    weight: float = 1.0
    ratio: float = 0.0  # unweighted: borrowed x 1000 / lendable, of the dominant resource
    resource: str = ""
    borrowing: bool = False
    borrowed: frozenset[FlavorResource] = frozenset()  # the flavor-resources it borrows

    def borrowing_on(self, usage: Usage) -> bool:
        """Whether it borrows any flavor-resource ``usage`` asks for (Kueue's ``IsBorrowingOn``)."""
        return any(usage.get(fr, 0) > 0 for fr in self.borrowed)

    @property
    def value(self) -> float:
        """The weighted share (Kueue's ``PreciseWeightedShare``): what is compared and reported."""
        if self.weight == 0 and self.borrowing:
            return math.inf
        return 0.0 if self.ratio == 0 else self.ratio / self.weight

    @property
    def zero(self) -> bool:
        return self.ratio == 0


def compare(a: Share, b: Share) -> int:
    """-1, 0, 1 as ``a``'s share is lower, equal or higher (Kueue's ``CompareDRS``)."""
    a_inf, b_inf = a.weight == 0 and a.borrowing, b.weight == 0 and b.borrowing
    if a_inf and b_inf:
        x, y = a.ratio, b.ratio
    elif a_inf or b_inf:
        return 1 if a_inf else -1
    else:
        x, y = a.value, b.value
    return (x > y) - (x < y)


def shares_with(config: Config, held: Mapping[str, Mapping[FlavorResource, int]]) -> dict[str, Share]:
    """Each ClusterQueue's Dominant Resource Share with ``held`` admitted (ClusterQueue ->
    flavor-resource -> milli-units): what ``describe clusterqueue`` and the dashboard show."""
    tree = Snapshot(config)
    for name, usage in held.items():
        if name in tree.queues:
            tree.queues[name].add_usage(usage, 1)
    return {name: share(cq) for name, cq in tree.queues.items()}


def share(node: Node, usage: Mapping[FlavorResource, int] | None = None) -> Share:
    """``node``'s Dominant Resource Share as its usage is now (or were it ``usage``)."""
    if node.parent is None:
        return Share(node.weight)
    used = node.usage if usage is None else usage
    borrowed: dict[str, int] = {}
    frs: list[FlavorResource] = []
    for fr, quota in node.subtree_quota.items():
        over = used.get(fr, 0) - quota
        if over > 0:
            borrowed[fr[1]] = borrowed.get(fr[1], 0) + over
            frs.append(fr)
    if not borrowed:
        return Share(node.weight)
    lendable = _lendable(node.parent)
    ratio, dominant = 0.0, ""
    for resource in sorted(borrowed):
        total = lendable.get(resource, 0)
        if total > 0 and (r := borrowed[resource] * 1000.0 / total) > ratio:
            ratio, dominant = r, resource
    return Share(node.weight, ratio, dominant, True, frozenset(frs))


def _lendable(parent: CohortNode) -> dict[str, int]:
    """What ``parent`` could lend a child with nothing in use, per resource (Kueue's
    ``calculateLendable``). It depends on quotas only, so the node keeps it (a new configuration
    makes new nodes)."""
    if parent.lendable is None:
        lendable: dict[str, int] = {}
        for fr in parent.root().subtree_quota:
            lendable[fr[1]] = lendable.get(fr[1], 0) + parent.potential_available(fr)
        parent.lendable = lendable
    return parent.lendable


def share_with(node: Node, leaf: Node, usage: Usage) -> Share:
    """``node``'s share were ``usage`` added to ``leaf`` (a ClusterQueue at or under ``node``)."""
    leaf.add_usage(usage, 1)
    try:
        return share(node)
    finally:
        leaf.add_usage(usage, -1)


E = TypeVar("E")


def fair_order(
    entries: Sequence[E],
    queue_of: Any,  # entry -> its ClusterQueue
    usage_of: Any,  # entry -> the usage it would add
    rank_of: Any,  # entry -> its tie-break (higher priority first, then earlier), lowest wins
    history: Callable[[Node], Mapping[FlavorResource, int]] | None = None,
) -> Iterator[E]:
    """Entries one at a time, each chosen by tournament from those left (Kueue's fair-sharing
    iterator): trees in name order; within a tree, what the caller did with each pick (admitted,
    preempted) counts for the next. ``history`` (usage-aware, Turnstile's): a ClusterQueue's decayed
    usage; each queue then counts as using the more of it and of what it uses now."""
    by_tree: dict[str, list[E]] = {}
    for e in entries:
        by_tree.setdefault(queue_of(e).tree_key, []).append(e)
    for tree in sorted(by_tree):
        left = by_tree[tree]
        if queue_of(left[0]).parent is None:  # a ClusterQueue without a cohort: nothing to compare
            yield from left
            continue
        tournament: _Tournament[E] = _Tournament(left, queue_of, usage_of, rank_of, history)
        while tournament.alive:
            pick = tournament.pick()
            before = tournament.usage()
            yield pick
            tournament.refresh(before)


class _Tournament(Generic[E]):
    """The shares of each entry's nodes with its head admitted, kept between picks: after a pick only
    the entries under a node whose usage changed (an admission, a preemption) are computed again,
    so a cohort of many ClusterQueues costs what changed, not all of them, per pick."""

    def __init__(
        self,
        entries: list[E],
        queue_of: Any,
        usage_of: Any,
        rank_of: Any,
        history: Callable[[Node], Mapping[FlavorResource, int]] | None = None,
    ) -> None:
        self.entries, self.usage_of, self.rank_of, self.history = entries, usage_of, rank_of, history
        self.queues = [queue_of(e) for e in entries]
        self.paths: list[list[Node]] = []
        for cq in self.queues:
            path: list[Node] = [cq]
            while path[-1].parent is not None:
                path.append(path[-1].parent)
            self.paths.append(path)
        root = self.paths[0][-1]
        assert isinstance(root, CohortNode)
        self.root = root
        self.tree_queues = list(root.subtree_queues())
        self.alive = set(range(len(entries)))
        self.by_queue = {id(q): i for i, q in enumerate(self.queues)}
        self.at: dict[tuple[int, int], Share] = {}  # (id of a cohort, entry) -> its child's share there
        self.effective: dict[int, dict[FlavorResource, int]] = {}  # usage-aware: id(node) -> what it counts as
        self._effective(self.root)
        for i in self.alive:
            self._compute(i)

    def _effective(self, node: Node) -> dict[FlavorResource, int]:
        """Usage-aware: what ``node`` counts as using, the more of its decayed usage and its usage
        now, per flavor-resource (a cohort: its children's, summed)."""
        if self.history is None:
            return {}
        if isinstance(node, CohortNode):
            out: dict[FlavorResource, int] = {}
            for child in (*node.child_cohorts, *node.child_queues):
                for fr, v in self._effective(child).items():
                    out[fr] = out.get(fr, 0) + v
        else:
            past = self.history(node)
            out = {fr: max(node.usage.get(fr, 0), past.get(fr, 0)) for fr in {*node.usage, *past}}
        self.effective[id(node)] = out
        return out

    def _compute(self, i: int) -> None:
        cq, usage = self.queues[i], self.usage_of(self.entries[i])
        if self.history is not None:
            s = share(cq, _plus(self.effective[id(cq)], usage))
            for node in self.paths[i][1:]:
                self.at[(id(node), i)] = s
                s = share(node, _plus(self.effective[id(node)], usage))
            return
        cq.add_usage(usage, 1)
        try:
            s = share(cq)
            for node in self.paths[i][1:]:
                self.at[(id(node), i)] = s
                s = share(node)
        finally:
            cq.add_usage(usage, -1)

    def usage(self) -> list[dict[FlavorResource, int]]:
        return [dict(q.usage) for q in self.tree_queues]

    def refresh(self, before: list[dict[FlavorResource, int]]) -> None:
        changed: set[int] = set()
        for q, was in zip(self.tree_queues, before, strict=True):
            if q.usage != was:
                node: Node | None = q
                while node is not None:
                    changed.add(id(node))
                    node = node.parent
        if changed:
            self._effective(self.root)
            for i in self.alive:
                if any(id(n) in changed for n in self.paths[i][:-1]):
                    self._compute(i)

    def pick(self) -> E:
        best = self._round(self.root)
        assert best is not None
        self.alive.discard(best)
        return self.entries[best]

    def _round(self, cohort: CohortNode) -> int | None:
        """The entry ``cohort`` sends up (None: none of its subtree has one left)."""
        found = [i for child in cohort.child_cohorts if (i := self._round(child)) is not None]
        found += [i for q in cohort.child_queues if (i := self.by_queue.get(id(q))) is not None and i in self.alive]
        if not found:
            return None
        best = found[0]
        for i in found[1:]:
            a = (self.at[(id(cohort), i)], self.usage_of(self.entries[i]))
            b = (self.at[(id(cohort), best)], self.usage_of(self.entries[best]))
            if before(*a, *b) or (
                not before(*b, *a) and self.rank_of(self.entries[i]) < self.rank_of(self.entries[best])
            ):
                best = i
        return best


def _plus(a: Mapping[FlavorResource, int], b: Mapping[FlavorResource, int]) -> dict[FlavorResource, int]:
    out = dict(a)
    for fr, v in b.items():
        out[fr] = out.get(fr, 0) + v
    return out


def before(a: Share, a_usage: Usage, b: Share, b_usage: Usage) -> bool:
    """Kueue's ``entryComparer.less`` before priority: a child that borrows nothing its head asks
    for first (``FairSharingPrioritizeNonBorrowing``, on by default), then the lower share."""
    a_borrows, b_borrows = a.borrowing_on(a_usage), b.borrowing_on(b_usage)
    if a_borrows != b_borrows:
        return not a_borrows
    return compare(a, b) < 0
