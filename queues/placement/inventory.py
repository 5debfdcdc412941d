"""The node inventory: what each node can still take, as topology-aware placement sees it.

Placement (``queues.placement.topology``) decides node by node, so the scheduler keeps, for every node,
its allocatable capacity less what admitted TAS workloads were placed there (``held``) and less
what other pods use (``external``: pods Turnstile did not place, such as DaemonSets and the pods
of workloads admitted without a topology). Kueue's TAS cache keeps the same three terms.

The three are kept apart and ``free`` is derived from them, so they may arrive in any order: a
controller starting a term holds its admissions' placements before the Nodes informer has
listed a node, and the node, once put, is free of exactly what is held there. Until the nodes
are known (``pending`` says why) nothing is placed: placement waits rather than deciding on an
empty cluster.

The inventory lives as long as the scheduler (a new configuration keeps it); nodes come and go
with ``put``/``remove`` (the simulated cluster's scenario nodes and scale-ups in engine core, the
Nodes informer in the controller). Capacity a hold takes is given back with the same call and
``sign=-1`` when the workload is evicted or finishes, and a preemption's what-ifs use the same
pair, so a preemptor can see the nodes its victims would free.

A node's DRA devices are not in its ``allocatable``: what they offer of the mapped resources
(``queues.dra.node_capacity``: 4 ``whole-gpus``) is given with ``set_devices`` and added to the
node's capacity, so a pod set that claims devices is placed where they are.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from queues.placement.nodes import Free, NodeInfo

ALL_NODES = "*"  # in ``set_devices``: what devices published for no one node offer to every node


class Inventory:
    def __init__(self, pending: str | None = None) -> None:
        self.nodes: dict[str, NodeInfo] = {}
        self.free: Free = {}  # node -> resource -> free milli-units (allocatable - held - external)
        self.held: dict[str, dict[str, int]] = {}  # node -> resource -> held by TAS admissions
        self.external: dict[str, dict[str, int]] = {}  # node -> resource -> used by pods placed elsewhere
        self.version = 0  # moves whenever capacity is given back or a node added (failures may no longer hold)
        self.pending = pending  # why the nodes are not known yet (placement waits); None: known
        self.put_as: dict[str, NodeInfo] = {}  # each node as put, before what its DRA devices offer
        self.devices: dict[str, dict[str, int]] = {}  # node -> mapped resource -> what its devices offer

    def put(self, node: NodeInfo) -> None:
        """Add (or replace) a node; what is held on it and what other pods use there stay."""
        self.put_as[node.name] = node
        self.nodes[node.name] = self._equipped(node)
        self._refresh(node.name)
        self.version += 1

    def set_devices(self, offers: Mapping[str, Mapping[str, int]]) -> None:
        """What each node's DRA devices offer of the mapped resources now (the cluster's
        ResourceSlices or the mappings changed); a node not named offers none."""
        wanted = {node: dict(offer) for node, offer in offers.items() if offer}
        if wanted == self.devices:
            return
        self.devices = wanted
        for name, node in self.put_as.items():
            self.nodes[name] = self._equipped(node)
            self._refresh(name)
        self.version += 1

    def _equipped(self, node: NodeInfo) -> NodeInfo:
        """``node`` with what its DRA devices offer, and those published for every node (``*``)."""
        offer, everywhere = self.devices.get(node.name), self.devices.get(ALL_NODES)
        if not offer and not everywhere:
            return node
        allocatable = dict(node.allocatable)
        for extra in (offer or {}, everywhere or {}):
            for r, v in extra.items():
                allocatable[r] = allocatable.get(r, 0) + v
        return dataclasses.replace(node, allocatable=allocatable)

    def remove(self, name: str) -> None:
        self.put_as.pop(name, None)
        self.nodes.pop(name, None)
        self.free.pop(name, None)
        self.external.pop(name, None)

    def known(self, pending: str | None = None) -> None:
        """The nodes are listed (``pending`` None), or not yet, and why."""
        if self.pending != pending:
            self.pending = pending
            self.version += 1

    def hold(
        self, placement: Mapping[str, Mapping[str, int]], requests: Mapping[str, Mapping[str, int]], sign: int
    ) -> None:
        """Take (``sign=1``) or give back (``-1``) what ``placement`` (pod set -> node -> pods) uses,
        each pod of a pod set using ``requests[pod set]``."""
        for pod_set, nodes in placement.items():
            asked = requests.get(pod_set, {})
            for node, pods in nodes.items():
                held = self.held.setdefault(node, {})
                free = self.free.get(node)
                for r, v in asked.items():
                    held[r] = held.get(r, 0) + sign * v * pods
                    if free is not None:
                        free[r] = free.get(r, 0) - sign * v * pods
                if not any(held.values()):
                    del self.held[node]
        if sign < 0:
            self.version += 1

    def set_external(self, node: str, used: Mapping[str, int]) -> None:
        """What pods Turnstile did not place use on ``node`` now."""
        before = self.external.get(node, {})
        if dict(used) == before:
            return
        if used:
            self.external[node] = dict(used)
        else:
            self.external.pop(node, None)
        if node in self.nodes:
            self._refresh(node)
        if any(used.get(r, 0) < v for r, v in before.items()):
            self.version += 1

    def allocatable(self) -> Free:
        """Every node as if empty (what could ever fit)."""
        return {name: dict(node.allocatable) for name, node in self.nodes.items()}

    def _refresh(self, name: str) -> None:
        allocatable = self.nodes[name].allocatable
        held, external = self.held.get(name, {}), self.external.get(name, {})
        self.free[name] = {
            r: allocatable.get(r, 0) - held.get(r, 0) - external.get(r, 0)
            for r in set(allocatable) | set(held) | set(external)
        }
