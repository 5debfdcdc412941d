"""The node inventory: what each node can still take, as topology-aware placement sees it.

Placement (``queues.topology``) decides node by node, so the scheduler keeps, for every node,
its allocatable capacity less what admitted TAS workloads were placed there (``hold``) and less
what other pods use (``external``: pods Turnstile did not place, such as DaemonSets and the pods
of workloads admitted without a topology). Kueue's TAS cache keeps the same three terms.

The inventory lives as long as the scheduler (a new configuration keeps it); nodes come and go
with ``put``/``remove`` (the simulated cluster's scenario nodes and scale-ups in engine core).
Capacity a hold takes is given back with the same call and ``sign=-1`` when the workload is
evicted or finishes, and a preemption's what-ifs use the same pair, so a preemptor can see the
nodes its victims would free.
"""

from __future__ import annotations

from collections.abc import Mapping

from queues.nodes import Free, NodeInfo


class Inventory:
    def __init__(self) -> None:
        self.nodes: dict[str, NodeInfo] = {}
        self.free: Free = {}  # node -> resource -> free milli-units
        self.external: dict[str, dict[str, int]] = {}  # node -> resource -> used by pods placed elsewhere
        self.version = 0  # moves whenever capacity is given back or a node added (failures may no longer hold)

    def put(self, node: NodeInfo) -> None:
        """Add (or replace) a node; what is held on it stays held."""
        old = self.nodes.get(node.name)
        used: dict[str, int] = {}
        if old is not None:
            free = self.free[node.name]
            used = {r: old.allocatable.get(r, 0) - free.get(r, 0) for r in set(old.allocatable) | set(free)}
        resources = set(node.allocatable) | set(used)
        self.nodes[node.name] = node
        self.free[node.name] = {r: node.allocatable.get(r, 0) - used.get(r, 0) for r in resources}
        self.version += 1

    def remove(self, name: str) -> None:
        self.nodes.pop(name, None)
        self.free.pop(name, None)
        self.external.pop(name, None)

    def hold(
        self, placement: Mapping[str, Mapping[str, int]], requests: Mapping[str, Mapping[str, int]], sign: int
    ) -> None:
        """Take (``sign=1``) or give back (``-1``) what ``placement`` (pod set -> node -> pods) uses,
        each pod of a pod set using ``requests[pod set]``."""
        for pod_set, nodes in placement.items():
            asked = requests.get(pod_set, {})
            for node, pods in nodes.items():
                free = self.free.get(node)
                if free is None:
                    continue  # (the node is gone: nothing to take or give back)
                for r, v in asked.items():
                    free[r] = free.get(r, 0) - sign * v * pods
        if sign < 0:
            self.version += 1

    def set_external(self, node: str, used: Mapping[str, int]) -> None:
        """What pods Turnstile did not place use on ``node`` now."""
        free = self.free.get(node)
        if free is None:
            return
        before = self.external.get(node, {})
        for r in set(before) | set(used):
            free[r] = free.get(r, 0) + before.get(r, 0) - used.get(r, 0)
        if used:
            self.external[node] = dict(used)
        else:
            self.external.pop(node, None)
        if any(used.get(r, 0) < v for r, v in before.items()):
            self.version += 1

    def allocatable(self) -> Free:
        """Every node as if empty (what could ever fit)."""
        return {name: dict(node.allocatable) for name, node in self.nodes.items()}
