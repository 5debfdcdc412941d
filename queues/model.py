"""The scheduler's view of the world: the configuration it reads and the snapshot it decides on.

ClusterQueues are nodes of the quota tree (``queues.quotas``, Kueue's hierarchical cohorts); the
workloads they hold are ``queues.workloads``. Both are re-exported here: the rest of the core
reads the world through this module.

``Snapshot`` holds every node and the admitted workloads, and changes in place: adding or
removing a workload updates usage up the tree in O(depth). What-if changes during
preemption return nothing to undo: callers remove and re-add the same workloads.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from queues.kueue import api
from queues.kueue.admission_checks import inactive_reason
from queues.placement import nodes
from queues.placement.inventory import Inventory
from queues.placement.topology import COMPACT
from queues.quotas import ClusterQueue, CohortNode, Flavor, Node, Quota, ResourceGroup, weight_of
from queues.workloads import Admission, FlavorResource, SharedShapes, Usage, Workload, placed_on, shape_of

if TYPE_CHECKING:
    from queues.kueue.fair_sharing_config import FairSharing

# the quota tree and the workloads it holds, re-exported: the model is what the cycle reads
__all__ = [
    "Admission",
    "ClusterQueue",
    "CohortNode",
    "Flavor",
    "FlavorResource",
    "Node",
    "Quota",
    "ResourceGroup",
    "SharedShapes",
    "Usage",
    "Workload",
    "shape_of",
]


class Snapshot:
    """Every ClusterQueue and Cohort with current usage; the scheduler decides against it."""

    def __init__(
        self,
        config: Config,
        fair_sharing: FairSharing | None = None,
        inventory: Inventory | None = None,
        packing: str = COMPACT,
        *,
        ignore_undeclared: bool = False,
    ) -> None:
        self.fair_sharing = fair_sharing  # Kueue's fairSharing configuration; None: off
        # Kueue's quotaCheckStrategy IgnoreUndeclared: a resource the ClusterQueue does not cover is
        # left out of the quota check instead of keeping the workload out (``queues.cycle.flavors``)
        self.ignore_undeclared = ignore_undeclared
        # the nodes, for TAS flavors (``queues.placement.inventory``); None: no node is known
        self.inventory = inventory
        self.packing = packing  # how TAS pod sets are packed (``queues.placement.topology``)
        self.flavors: dict[str, Flavor] = {
            name: Flavor.from_api(rf, config.topologies) for name, rf in config.flavors.items()
        }
        self.queues: dict[str, ClusterQueue] = {}
        self.cohorts: dict[str, CohortNode] = {}
        for name, obj in config.cohorts.items():
            self.cohorts[name] = CohortNode(name, _cohort_quotas(obj))
            self.cohorts[name].weight = weight_of(obj.spec.fair_sharing)
        for name, cq_obj in sorted(config.cluster_queues.items()):
            cq = ClusterQueue(cq_obj, self.flavors)
            if name in config.terminating:
                cq.inactive_reason = "Terminating"
                cq.inactive_message = "the ClusterQueue is being deleted; it waits for its admitted workloads to finish"
            if cq.inactive_reason is None and (checks := inactive_reason(config, cq_obj)) is not None:
                cq.inactive_reason, cq.inactive_message = checks
            if cq.inactive_reason is None and inventory is not None and (missing := self._missing_topologies(cq)):
                cq.inactive_reason = "TopologyNotFound"
                cq.inactive_message = (
                    f"ResourceFlavor {missing}, which does not exist; create it or fix spec.topologyName"
                )
            self.queues[name] = cq
            if cq.cohort_name:
                self._cohort(cq.cohort_name).child_queues.append(cq)
                cq.parent = self.cohorts[cq.cohort_name]
        for name, obj in sorted(config.cohorts.items()):
            parent = obj.spec.parent_ref
            if parent and not self._would_loop(name, parent, config):
                node = self.cohorts[name]
                node.parent = self._cohort(parent)
                node.parent.child_cohorts.append(node)
        for node in self.cohorts.values():
            if node.parent is None:
                node.accumulate()
        for cq in self.queues.values():
            root = cq.root()
            cq.tree_key = f"cohort/{root.name}" if isinstance(root, CohortNode) else f"cq/{root.name}"

    def _missing_topologies(self, cq: ClusterQueue) -> str:
        """``a100 names Topology racks; ...`` for ``cq``'s TAS flavors whose Topology does not exist
        (only where nodes are known: without them, admission is by quota alone)."""
        return "; ".join(
            sorted(
                f"{f.name} names Topology {f.topology}"
                for g in cq.groups
                for name in g.flavors
                if (f := self.flavors.get(name)) is not None and f.topology and not f.levels
            )
        )

    def _cohort(self, name: str) -> CohortNode:
        if name not in self.cohorts:
            self.cohorts[name] = CohortNode(name, {})
        return self.cohorts[name]

    @staticmethod
    def _would_loop(name: str, parent: str, config: Config) -> bool:
        seen = {name}
        current: str | None = parent
        while current is not None:
            if current in seen:
                return True
            seen.add(current)
            obj = config.cohorts.get(current)
            current = obj.spec.parent_ref if obj is not None else None
        return False

    def add_workload(self, wl: Workload) -> None:
        assert wl.admission is not None
        cq = self.queues.get(wl.admission.cluster_queue)
        if cq is None:
            return
        cq.workloads[wl.key] = wl
        cq.add_usage(wl.admission.usage, 1)
        if wl.admission.placement and self.inventory is not None:
            self.inventory.hold(wl.admission.placement, pod_requests(wl), 1)

    def remove_workload(self, wl: Workload) -> None:
        assert wl.admission is not None
        cq = self.queues.get(wl.admission.cluster_queue)
        if cq is None or cq.workloads.pop(wl.key, None) is None:
            return
        cq.add_usage(wl.admission.usage, -1)
        if wl.admission.placement and self.inventory is not None:
            self.inventory.hold(wl.admission.placement, pod_requests(wl), -1)

    def queues_in_tree(self, cq: ClusterQueue) -> Iterable[ClusterQueue]:
        root = cq.root()
        if isinstance(root, CohortNode):
            return root.subtree_queues()
        return (cq,)


def pod_requests(wl: Workload) -> dict[str, Mapping[str, int]]:
    """Each pod set's requests of one pod (what placement holds on a node per pod, its pod slot and
    its DRA devices too)."""
    chosen = wl.admission.flavors if wl.admission is not None else {}
    return {ps.name: nodes.with_pod_slot(placed_on(ps, chosen.get(ps.name, {}))) for ps in wl.pod_sets}


def _cohort_quotas(obj: api.Cohort) -> dict[FlavorResource, Quota]:
    out: dict[FlavorResource, Quota] = {}
    for rg in obj.spec.resource_groups:
        for fq in rg.flavors:
            for rq in fq.resources:
                out[(fq.name, rq.name)] = Quota(rq.nominal_quota, rq.borrowing_limit, rq.lending_limit)
    return out


@dataclass(slots=True)
class Config:
    """The admin's configuration: every Kueue object by kind and name."""

    flavors: dict[str, api.ResourceFlavor] = field(default_factory=dict)
    cluster_queues: dict[str, api.ClusterQueue] = field(default_factory=dict)
    local_queues: dict[str, api.LocalQueue] = field(default_factory=dict)  # "ns/name"
    cohorts: dict[str, api.Cohort] = field(default_factory=dict)
    priority_classes: dict[str, api.WorkloadPriorityClass] = field(default_factory=dict)
    admission_checks: dict[str, api.AdmissionCheck] = field(default_factory=dict)
    provisioning_configs: dict[str, api.ProvisioningRequestConfig] = field(default_factory=dict)
    topologies: dict[str, api.Topology] = field(default_factory=dict)
    terminating: set[str] = field(default_factory=set)

    def table(self, kind: str) -> dict[str, api.KueueObject]:
        tables: dict[str, dict[str, api.KueueObject]] = {
            "ResourceFlavor": self.flavors,  # type: ignore[dict-item]
            "ClusterQueue": self.cluster_queues,  # type: ignore[dict-item]
            "LocalQueue": self.local_queues,  # type: ignore[dict-item]
            "Cohort": self.cohorts,  # type: ignore[dict-item]
            "WorkloadPriorityClass": self.priority_classes,  # type: ignore[dict-item]
            "AdmissionCheck": self.admission_checks,  # type: ignore[dict-item]
            "ProvisioningRequestConfig": self.provisioning_configs,  # type: ignore[dict-item]
            "Topology": self.topologies,  # type: ignore[dict-item]
        }
        return tables[kind]

    def put(self, obj: api.KueueObject) -> None:
        self.table(obj.kind)[obj.key] = obj
        if obj.kind == "ClusterQueue":
            self.terminating.discard(obj.key)

    @classmethod
    def of(cls, objects: Iterable[api.KueueObject]) -> Config:
        config = cls()
        for obj in objects:
            config.put(obj)
        return config
