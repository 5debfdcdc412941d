"""The quota tree: ClusterQueues and Cohorts as Kueue's hierarchical resource nodes.

Quota follows Kueue's hierarchical cohorts (``pkg/cache``'s resource nodes). Each node (a
ClusterQueue or a Cohort) has a ``subtree_quota`` per flavor-resource and a ``usage``. A
node lends its parent everything above its *guaranteed* quota (``subtree - lendingLimit``,
or nothing is guaranteed without a lending limit), and its usage counts against the parent
only beyond that guaranteed part. ``available`` is what a node can still take: its unused
guaranteed quota plus what its parent can give, capped by its borrowing limit. Each node also
has its fair-sharing ``weight`` (``spec.fairSharing.weight``, default 1; ``queues.cycle.fairsharing``).

A ClusterQueue is the tree's leaf: it lives here with its resource groups and flavors, so that a
Cohort can name the ClusterQueues under it without the tree depending on the snapshot above it.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from queues import selectors
from queues.kueue import api
from queues.workloads import FlavorResource, Usage, Workload

__all__ = ["FlavorResource", "Usage"]  # (the quota vocabulary, re-exported)


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


def weight_of(fair_sharing: api.FairSharing | None) -> float:
    """A ``spec.fairSharing.weight`` as a number (default 1)."""
    if fair_sharing is None or fair_sharing.weight is None:
        return 1.0
    return fair_sharing.weight / 1000.0


@dataclass(frozen=True, slots=True)
class ResourceGroup:
    resources: tuple[str, ...]
    flavors: tuple[str, ...]
    label_keys: frozenset[str]


@dataclass(frozen=True, slots=True)
class Flavor:
    name: str
    node_labels: Mapping[str, str]
    taints: tuple[selectors.Taint, ...]
    tolerations: tuple[selectors.Toleration, ...]
    topology: str | None = None  # spec.topologyName: a TAS flavor (``queues.placement.topology``)
    levels: tuple[str, ...] = ()  # that Topology's levels; () while it does not exist

    @classmethod
    def from_api(cls, rf: api.ResourceFlavor, topologies: Mapping[str, api.Topology] | None = None) -> Flavor:
        topology = rf.spec.topology_name or None
        found = (topologies or {}).get(topology) if topology else None
        return cls(
            name=rf.name,
            node_labels=dict(rf.spec.node_labels),
            taints=tuple(selectors.Taint(t.key, t.value, t.effect) for t in rf.spec.node_taints),
            tolerations=tuple(selectors.Toleration(t.key, t.operator, t.value, t.effect) for t in rf.spec.tolerations),
            topology=topology,
            levels=found.levels if found is not None else (),
        )


class ClusterQueue(Node):
    """One ClusterQueue: quotas, policies and the workloads it has admitted."""

    def __init__(self, obj: api.ClusterQueue, flavors: Mapping[str, Flavor]) -> None:
        spec = obj.spec
        quotas: dict[FlavorResource, Quota] = {}
        groups: list[ResourceGroup] = []
        for rg in spec.resource_groups:
            label_keys = frozenset(k for f in rg.flavors if f.name in flavors for k in flavors[f.name].node_labels)
            groups.append(ResourceGroup(tuple(rg.covered_resources), tuple(f.name for f in rg.flavors), label_keys))
            for fq in rg.flavors:
                for rq in fq.resources:
                    quotas[(fq.name, rq.name)] = Quota(rq.nominal_quota, rq.borrowing_limit, rq.lending_limit)
        super().__init__(obj.name, quotas)
        self.spec = spec
        self.weight = weight_of(spec.fair_sharing)
        self.cohort_name = spec.cohort_ref
        self.groups = tuple(groups)
        self.group_of: dict[str, ResourceGroup] = {r: g for g in groups for r in g.resources}
        self.namespace_selector = (
            None
            if spec.namespace_selector is None
            else selectors.LabelSelector.from_dict(spec.namespace_selector.model_dump(by_alias=True))
        )
        self.workloads: dict[str, Workload] = {}
        self.tree_key = f"cq/{obj.name}"  # the quota tree it shares; set by Snapshot once linked
        self.inactive_reason: str | None = None
        self.inactive_message = ""
        missing = sorted({f for g in groups for f in g.flavors if f not in flavors})
        self.tas_only = all(flavors[f].topology for g in groups for f in g.flavors if f in flavors) and bool(groups)
        if missing:
            self.inactive_reason = "FlavorNotFound"
            self.inactive_message = f"ResourceFlavor {', '.join(missing)} does not exist; create it or fix the name"
        elif spec.stop_policy != "None":
            self.inactive_reason = "Stopped"
            self.inactive_message = (
                f"stopped by the admin (stopPolicy {spec.stop_policy}); `turnstile resume clusterqueue {obj.name}`"
            )

    @property
    def strict_fifo(self) -> bool:
        return self.spec.queueing_strategy == "StrictFIFO"

    def admits_namespace(self, labels: Mapping[str, str]) -> bool:
        return self.namespace_selector is not None and self.namespace_selector.matches(labels)

    def nominal(self, fr: FlavorResource) -> int:
        q = self.quotas.get(fr)
        return q.nominal if q else 0
