"""Topology-aware scheduling of one assignment: each TAS pod set placed on nodes, or none.

Flavor assignment (``queues.cycle.flavors``) chooses flavors by quota; when everything fits, the pod
sets that run on a TAS flavor (a ResourceFlavor with ``spec.topologyName``) are placed here (when
nodes are known: a scenario's ``nodes``, the controller's Nodes informer), one
after another on the same scratch copy of the node inventory, so a gang is placed whole or the
workload waits (all pods or none). A pod set is placed by topology when it asks to (its
``podset-*-topology`` annotations) or, asking nothing, when every flavor of its ClusterQueue is a
TAS flavor (Kueue's implicit default; ``Snapshot.packing`` says how, ``queues.placement.topology``).

The placement goes with the admission (``Admission.placement``) and holds node capacity in the
inventory while the workload is admitted (``Snapshot.add_workload``). A preemption's victims
give theirs back in the what-if, so the preemptor is placed on the nodes they free; if it still
cannot be placed, nobody is preempted for it (``queues.cycle.flavors.fits_after``). When its quota fits but no
domain holds it, lower-priority TAS work of its own ClusterQueue is preempted for it where that
frees the right nodes (``_victims``): borrowed work in the cohort first, then its own queue's,
as Kueue's TAS preemption does.
"""

from __future__ import annotations

from queues.cycle import victims
from queues.cycle.assignment import TOPOLOGY_PLACEMENT_FAILED, Assignment, Mode
from queues.cycle.victims import Target
from queues.model import ClusterQueue, Flavor, Snapshot, Workload
from queues.placement import topology
from queues.placement.nodes import Free, NodeInfo, PodNeeds, with_pod_slot
from queues.podsets import jobs
from queues.podsets.jobs import PodSet
from queues.selectors import NodeConstraints
from queues.workloads import placed_on


def uses_topology(snapshot: Snapshot, cq: ClusterQueue) -> bool:
    """Whether placement may decide ``cq``'s admissions: it has a TAS flavor, and nodes are known
    (without a node inventory admission is by quota alone)."""
    if snapshot.inventory is None:
        return False
    return any((f := snapshot.flavors.get(name)) and f.topology for g in cq.groups for name in g.flavors)


def flavor_mismatch(cq: ClusterQueue, ps: PodSet, flavor: Flavor) -> str | None:
    """Why ``flavor`` cannot serve pod set ``ps`` by topology, or None (Kueue's
    ``checkPodSetAndFlavorMatchForTAS``): a pod set that asks for a topology needs a TAS flavor
    whose Topology has the levels it names (in a ClusterQueue of TAS flavors only, every pod set
    is placed by topology and any of them will do); a pod set that asks for none is kept off TAS
    flavors, which are for the pod sets that do. A mismatched flavor is skipped, and the next one
    tried; when none is left the workload waits as ``NoMatchingFlavor``."""
    if ps.topology is None:
        if flavor.topology and not cq.tas_only:
            return f"flavor {flavor.name} supports only topology-aware scheduling; the pod set asks for no topology"
        return None
    if not flavor.topology:
        return f"flavor {flavor.name} has no topologyName; the pod set asks for a topology"
    if flavor.levels:  # (() while the Topology is not known: placement says what is missing)
        missing = [lv for lv in (ps.topology.level, ps.topology.slice_level) if lv and lv not in flavor.levels]
        if missing:
            return (
                f"flavor {flavor.name} does not contain the requested level {missing[0]}"
                f" (Topology {flavor.topology}: {', '.join(flavor.levels)})"
            )
    return None


def place(snapshot: Snapshot, cq: ClusterQueue, wl: Workload, assignment: Assignment, *, preempt: bool) -> None:
    """Place ``assignment``'s TAS pod sets (it fits by quota): fill ``assignment.placement``; or,
    when no domain holds a pod set, make it ``PREEMPT`` with ``topology_victims`` (``preempt``:
    lower-priority TAS work of its own queue whose nodes would hold it) or ``NO_FIT`` with why."""
    if snapshot.inventory is None:
        return  # (no node is known: quota alone decides)
    placed, message = _placement(snapshot, cq, wl, assignment)
    if placed is not None:
        assignment.placement = placed
        return
    victims = _victims(snapshot, cq, wl, assignment) if preempt and snapshot.inventory.pending is None else []
    assignment.mode = Mode.PREEMPT if victims else Mode.NO_FIT
    if not victims:
        assignment.reason = TOPOLOGY_PLACEMENT_FAILED
    assignment.topology_victims = victims
    assignment.messages = [message]


def _placement(
    snapshot: Snapshot, cq: ClusterQueue, wl: Workload, assignment: Assignment
) -> tuple[dict[str, dict[str, int]] | None, str]:
    """Each TAS pod set's nodes, placed one after another on a scratch copy of the inventory; or
    None and why not."""
    inventory = snapshot.inventory
    if inventory is not None and inventory.pending is not None and _needs_placement(snapshot, cq, wl, assignment):
        return None, f"waiting for the node inventory: {inventory.pending}"
    free: Free = {name: dict(f) for name, f in inventory.free.items()} if inventory is not None else {}
    nodes: list[NodeInfo] = list(inventory.nodes.values()) if inventory is not None else []
    out: dict[str, dict[str, int]] = {}
    for ps in jobs.with_counts(wl.pod_sets, assignment.counts):
        flavor = _tas_flavor(snapshot, assignment.flavors.get(ps.name, {}))
        if flavor is None or (ps.topology is None and not cq.tas_only):
            continue
        pod = PodNeeds(
            with_pod_slot({r: v for r, v in placed_on(ps, assignment.flavors.get(ps.name, {})).items() if v}),
            {**dict(ps.constraints.node_selector), **flavor.node_labels},
            (*ps.tolerations, *flavor.tolerations),
        )
        eligible = [n for n in nodes if _affinity_allows(ps.constraints, n)]
        placed = topology.place(ps.topology, flavor.levels, pod, ps.count, eligible, free, snapshot.packing)
        if not placed.ok:
            return None, f"pod set {ps.name}: {placed.message} (Topology {flavor.topology})"
        out[ps.name] = placed.nodes
        for node, pods in placed.nodes.items():
            for r, v in pod.requests.items():
                free[node][r] = free[node].get(r, 0) - v * pods
    return out, ""


def _needs_placement(snapshot: Snapshot, cq: ClusterQueue, wl: Workload, assignment: Assignment) -> bool:
    return any(
        _tas_flavor(snapshot, assignment.flavors.get(ps.name, {})) is not None
        and (ps.topology is not None or cq.tas_only)
        for ps in wl.pod_sets
    )


def _victims(snapshot: Snapshot, cq: ClusterQueue, wl: Workload, assignment: Assignment) -> list[Target]:
    """The fewest placed workloads ``wl`` may preempt (Kueue's candidates in Kueue's order: the
    cohort's borrowed work, then its own queue's lower priorities) whose nodes, once free, hold
    ``wl``: taken in order until it is placed, then every one it is still placed without is given
    back, newest taken first. [] if even all of them would not do."""
    found = [
        t
        for t in victims.candidates(cq, wl, set(assignment.usage), assignment.usage)
        if t.workload.admission is not None and t.workload.admission.placement
    ]
    taken: list[Target] = []
    try:
        for cand in found:
            snapshot.remove_workload(cand.workload)
            taken.append(cand)
            if _placement(snapshot, cq, wl, assignment)[0] is not None:
                break
        else:
            return []
        for cand in reversed(taken[:-1]):
            snapshot.add_workload(cand.workload)
            if _placement(snapshot, cq, wl, assignment)[0] is None:
                snapshot.remove_workload(cand.workload)
            else:
                taken.remove(cand)
        return list(taken)
    finally:
        for cand in taken:
            snapshot.add_workload(cand.workload)


def _tas_flavor(snapshot: Snapshot, chosen: dict[str, str]) -> Flavor | None:
    for name in chosen.values():
        flavor = snapshot.flavors.get(name)
        if flavor is not None and flavor.topology:
            return flavor
    return None


def _affinity_allows(constraints: NodeConstraints, node: NodeInfo) -> bool:
    """The pod set's required node affinity on this node's labels (its nodeSelector is in the pod)."""
    if not constraints.affinity_terms:
        return True
    keys = frozenset(r.key for term in constraints.affinity_terms for r in term)
    return NodeConstraints((), constraints.affinity_terms).matches_flavor(node.labels, keys)
