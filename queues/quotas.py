"""The quota tree: ClusterQueues and Cohorts as Kueue's hierarchical resource nodes.

Quota follows Kueue's hierarchical cohorts (``pkg/cache``'s resource nodes). Each node (a
ClusterQueue or a Cohort) has a ``subtree_quota`` per flavor-resource and a ``usage``. A
node lends its parent everything above its *guaranteed* quota (``subtree - lendingLimit``,
or nothing is guaranteed without a lending limit), and its usage counts against the parent
only beyond that guaranteed part. ``available`` is what a node can still take: its unused
guaranteed quota plus what its parent can give, capped by its borrowing limit. Each node also
has its fair-sharing ``weight`` (``spec.fairSharing.weight``, default 1; ``queues.cycle.fairsharing``).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from queues.model import ClusterQueue

FlavorResource = tuple[str, str]  # (flavor, resource)
Usage = dict[FlavorResource, int]


@dataclass(frozen=True, slots=True)
class Quota:
    nominal: int
    borrowing_limit: int | None = None
    lending_limit: int | None = None


class Node:
    """A ClusterQueue or Cohort in the quota tree."""

    def __init__(self, name: str, quotas: Mapping[FlavorResource, Quota]) -> None:
        self.name = name
        self.parent: CohortNode | None = None
        self.quotas: dict[FlavorResource, Quota] = dict(quotas)
        self.subtree_quota: dict[FlavorResource, int] = {fr: q.nominal for fr, q in quotas.items()}
        self.usage: dict[FlavorResource, int] = {}
        self.weight = 1.0  # fair sharing (``spec.fairSharing.weight``)

    def guaranteed(self, fr: FlavorResource) -> int:
        """Quota this node keeps for itself and never lends to its parent."""
        quota = self.quotas.get(fr)
        if quota is None or quota.lending_limit is None:
            return 0
        return max(0, self.subtree_quota.get(fr, 0) - quota.lending_limit)

    def local_available(self, fr: FlavorResource) -> int:
        """Guaranteed quota not in use: available here, invisible to the parent (Kueue's ``LocalAvailable``)."""
        return max(0, self.guaranteed(fr) - self.usage.get(fr, 0))

    def available(self, fr: FlavorResource) -> int:
        """How much of ``fr`` a new workload here could use now (Kueue's ``available``)."""
        usage = self.usage.get(fr, 0)
        if self.parent is None:
            return self.subtree_quota.get(fr, 0) - usage
        guaranteed = self.guaranteed(fr)
        local = self.local_available(fr)
        from_parent = self.parent.available(fr)
        quota = self.quotas.get(fr)
        if quota is not None and quota.borrowing_limit is not None:
            stored_in_parent = self.subtree_quota.get(fr, 0) - guaranteed
            used_in_parent = max(0, usage - guaranteed)
            from_parent = min(from_parent, stored_in_parent - used_in_parent + quota.borrowing_limit)
        return local + from_parent

    def potential_available(self, fr: FlavorResource) -> int:
        """How much of ``fr`` this node could use if nothing else ran (the most it can ever get)."""
        if self.parent is None:
            return self.subtree_quota.get(fr, 0)
        total = self.guaranteed(fr) + self.parent.potential_available(fr)
        quota = self.quotas.get(fr)
        if quota is not None and quota.borrowing_limit is not None:
            total = min(total, self.subtree_quota.get(fr, 0) + quota.borrowing_limit)
        return total

    def borrowing(self, fr: FlavorResource, extra: int = 0) -> bool:
        """Whether usage (plus ``extra``) exceeds this node's own quota."""
        return self.usage.get(fr, 0) + extra > self.subtree_quota.get(fr, 0)

    def borrow_height(self, fr: FlavorResource, value: int, *, empty: bool = False) -> tuple[int, bool]:
        """Kueue's ``FindHeightOfLowestSubtreeThatFits``: how far up the cohort tree ``value`` more of
        ``fr`` must borrow (0: within this node's own quota; else the height of the lowest cohort
        subtree that holds it, or of the whole tree), and whether that subtree is smaller than the
        whole tree (then reclaiming within it is possible). ``empty``: as if nothing here were used
        (after preempting, the least it could borrow)."""
        usage = 0 if empty else self.usage.get(fr, 0)
        if usage + value <= self.subtree_quota.get(fr, 0) or self.parent is None:
            return 0, self.parent is not None
        remaining = value - (self.guaranteed(fr) if empty else self.local_available(fr))
        node: CohortNode | None = self.parent
        while node is not None:
            if not node.borrowing(fr, remaining):
                return node.height(), node.parent is not None
            remaining -= node.local_available(fr)
            node = node.parent
        root = self.root()
        return (root.height() if isinstance(root, CohortNode) else 0), False

    def add_usage(self, usage: Mapping[FlavorResource, int], sign: int) -> None:
        """Charge (sign=1) or release (sign=-1) usage here and, as lent, up the tree."""
        node: Node | None = self
        delta = {fr: v * sign for fr, v in usage.items()}
        while node is not None and delta:
            parent_delta: dict[FlavorResource, int] = {}
            for fr, d in delta.items():
                before = node.usage.get(fr, 0)
                after = before + d
                node.usage[fr] = after
                if node.parent is not None:
                    g = node.guaranteed(fr)
                    pd = max(0, after - g) - max(0, before - g)
                    if pd:
                        parent_delta[fr] = pd
            node = node.parent
            delta = parent_delta

    def root(self) -> Node:
        node: Node = self
        while node.parent is not None:
            node = node.parent
        return node


class CohortNode(Node):
    def __init__(self, name: str, quotas: Mapping[FlavorResource, Quota]) -> None:
        super().__init__(name, quotas)
        self.child_cohorts: list[CohortNode] = []
        self.child_queues: list[ClusterQueue] = []
        self.lendable: dict[str, int] | None = None  # fair sharing's, per resource (``queues.cycle.fairsharing``)

    def height(self) -> int:
        """The distance to the furthest leaf (a ClusterQueue child counts 1)."""
        tallest = min(len(self.child_queues) + len(self.child_cohorts), 1)
        for child in self.child_cohorts:
            tallest = max(tallest, child.height() + 1)
        return tallest

    def subtree_queues(self) -> Iterator[ClusterQueue]:
        yield from self.child_queues
        for child in self.child_cohorts:
            yield from child.subtree_queues()

    def accumulate(self) -> None:
        """Compute subtree quotas bottom-up (children lend all but their guaranteed part)."""
        self.subtree_quota = {fr: q.nominal for fr, q in self.quotas.items()}
        for cohort in self.child_cohorts:
            cohort.accumulate()
        children: list[Node] = [*self.child_cohorts, *self.child_queues]
        for child in children:
            for fr, q in child.subtree_quota.items():
                self.subtree_quota[fr] = self.subtree_quota.get(fr, 0) + q - child.guaranteed(fr)
