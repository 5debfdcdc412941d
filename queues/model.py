"""The scheduler's view of the world: ClusterQueues, workloads, and a snapshot.

ClusterQueues are nodes of the quota tree (``queues.quotas``, Kueue's hierarchical cohorts).

``Snapshot`` holds every node and the admitted workloads, and changes in place: adding or
removing a workload updates usage up the tree in O(depth). What-if changes during
preemption return nothing to undo: callers remove and re-add the same workloads.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from queues import selectors
from queues.cycle import provisioning
from queues.kueue import api
from queues.placement import nodes
from queues.placement.inventory import Inventory
from queues.placement.topology import COMPACT
from queues.podsets import jobs
from queues.quotas import CohortNode, FlavorResource, Node, Quota, Usage

if TYPE_CHECKING:
    from queues.cycle.fairsharing import FairSharing

__all__ = ["CohortNode", "FlavorResource", "Node", "Quota", "Usage"]  # (the quota tree, re-exported)


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


@dataclass(slots=True)
class Admission:
    """Where a workload was admitted: its ClusterQueue, flavors per pod set, and the quota it holds."""

    cluster_queue: str
    flavors: dict[str, dict[str, str]]  # pod set -> resource -> flavor
    usage: Usage
    borrowing: bool
    counts: dict[str, int] = field(default_factory=dict)  # pod set -> pods, where partially admitted
    placement: dict[str, dict[str, int]] = field(default_factory=dict)  # TAS pod set -> node -> pods


def shape_of(pod_sets: tuple[jobs.PodSet, ...]) -> tuple[object, ...]:
    """Everything about pod sets that decides where they fit, as one hashable value."""
    return tuple(
        (
            ps.name,
            ps.count,
            tuple(sorted(ps.requests.items())),
            ps.constraints,
            ps.tolerations,
            ps.min_count,
            ps.topology,
        )
        for ps in pod_sets
    )


class SharedShapes:
    """One copy of each distinct set of pod sets, shared by every workload (or job) that has it.

    A controller holds 100,000 workloads, and most are copies of a few job templates; ``share``
    answers new pod sets with the first-seen equal ones and their shape, so each template's
    pod sets are held once. The table keeps the ``limit`` most recently used shapes: sharing
    saves memory and never changes a decision.
    """

    def __init__(self, limit: int = 10_000) -> None:
        self.limit = limit
        self._known: dict[tuple[object, ...], tuple[tuple[jobs.PodSet, ...], tuple[object, ...]]] = {}

    def share(self, pod_sets: tuple[jobs.PodSet, ...]) -> tuple[tuple[jobs.PodSet, ...], tuple[object, ...]]:
        """``(pod_sets, shape)``: the shared pod sets equal to ``pod_sets``, and their shape."""
        shape = shape_of(pod_sets)
        known = self._known.pop(shape, None) or (pod_sets, shape)
        self._known[shape] = known  # most recently used last
        if len(self._known) > self.limit:
            del self._known[next(iter(self._known))]
        return known

    def __len__(self) -> int:
        return len(self._known)


@dataclass(slots=True, eq=False)
class Workload:
    """A job as the queue sees it. ``seq`` is submission order, the final tie-break everywhere."""

    key: str
    seq: int
    namespace: str
    local_queue: str | None
    priority: int
    pod_sets: tuple[jobs.PodSet, ...]
    created: float
    queue_ts: float
    labels: Mapping[str, str] = field(default_factory=dict)
    # the class its priority came from (Kueue's ``spec.priorityClassRef.name``; metrics' priority_class)
    priority_class: str = ""
    cluster_queue: str | None = None
    admission: Admission | None = None
    admitted_at: float | None = None
    reason: str = "Pending"
    message: str = ""
    shape: tuple[object, ...] = ()
    # Two-phase admission: admission checks still to pass for the quota it holds (its job starts
    # when none are left), retries so far, when it may queue again, and whether it was deactivated.
    checks: tuple[str, ...] = ()
    retries: int = 0
    requeue_at: float | None = None
    active: bool = True
    requeue_reason: str = "WaitingForCapacity"  # what it waits for while it backs off (PodsReadyTimeout)
    # waitForPodsReady (``queues.cycle.podsready``): when its job started (quota held, checks passed) and
    # when all its pods were first Ready, in this admission
    started_at: float | None = None
    ready_at: float | None = None
    # seconds its job ran (admitted, checks passed) in the admissions that ended: Kueue's
    # ``accumulatedPastExecutionTimeSeconds`` (kept in PostgreSQL, ``workloads.executed_seconds``)
    past_run: float = 0.0
    # the workload whose preemption evicted it, until it is admitted again (``preemption.in_chain``)
    evicted_by: Workload | None = None
    # its own priority while a spent GPU-hour budget runs it lower (``queues.cycle.budget_priority``)
    own_priority: int | None = None

    @property
    def running_pod_sets(self) -> tuple[jobs.PodSet, ...]:
        """The pod sets as admitted: fewer pods where the admission was partial."""
        return jobs.with_counts(self.pod_sets, self.admission.counts) if self.admission else self.pod_sets

    @property
    def started(self) -> bool:
        """Quota reserved and every admission check passed: the job runs."""
        return self.admission is not None and not self.checks

    def __post_init__(self) -> None:
        if not self.shape:
            self.shape = shape_of(self.pod_sets)

    def order_key(self) -> tuple[int, float, int]:
        """Queue order: 1. higher priority, 2. earlier queue-order timestamp, 3. submission order."""
        return (-self.priority, self.queue_ts, self.seq)


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


class Snapshot:
    """Every ClusterQueue and Cohort with current usage; the scheduler decides against it."""

    def __init__(
        self,
        config: Config,
        fair_sharing: FairSharing | None = None,
        inventory: Inventory | None = None,
        packing: str = COMPACT,
    ) -> None:
        self.fair_sharing = fair_sharing  # Kueue's fairSharing configuration; None: off
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
            if cq.inactive_reason is None and (checks := provisioning.inactive_reason(config, cq_obj)) is not None:
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
    """Each pod set's requests of one pod (what placement holds on a node per pod, its pod slot too)."""
    return {ps.name: nodes.with_pod_slot(ps.requests) for ps in wl.pod_sets}


def weight_of(fair_sharing: api.FairSharing | None) -> float:
    """A ``spec.fairSharing.weight`` as a number (default 1)."""
    if fair_sharing is None or fair_sharing.weight is None:
        return 1.0
    return fair_sharing.weight / 1000.0


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
