"""Placement by topology, the controller's side: when to watch nodes, and what nodes ask of steps.

The pieces are elsewhere: the node inventory (``admission.controller.features.inventory``: Nodes and Pods
informers), the ungater (``admission.controller.features.pinning``) and the decisions
(``queues.cycle.tas``, ``queues.cycle.retries``). This joins them to a replica's life:

- the informers start once the configuration needs them (a ResourceFlavor names a Topology, or
  a ClusterQueue reclaims idle GPUs, whose pods the inventory indexes); a term gets an inventory
  of its own when a flavor names a Topology, at its start or as soon as one does;
- a deleted node is *lost* (the next step evicts what was placed there, ``NodeFailures``);
- a cordoned node makes the admitted workloads whose pods there were not all bound yet
  *unusable* there (they would wait for ever; the next step places them again); what runs there
  stays;
- a new term asks the ungater to look at every placed pod a restart left gated.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from admission.controller.capability import Capability, StepContext
from admission.controller.features.inventory import NodeInventory
from admission.controller.features.pinning import Pinner
from admission.controller.term import Term
from admission.controller.watch.changes import Changes
from admission.kube.client import Kube
from queues.cycle.decisions import Decision
from queues.model import Config
from queues.placement.inventory import Inventory


class Placement(Capability):
    def __init__(
        self,
        kube: Kube,
        changes: Changes,
        *,
        current_term: Callable[[], Term | None],
        pods_always: bool = False,
        ungated: Callable[[str, str, bool, float], None] = lambda gate, cluster_queue, group, seconds: None,
    ) -> None:
        self.changes = changes
        self.current_term = current_term
        self.inventory = NodeInventory(
            kube,
            current=self._current_inventory,
            lost=self._lost,
            placed=lambda key: self.pinner.request(key),
            cordoned=self._cordoned,
            pods_always=pods_always,
        )
        self.pinner = Pinner(kube, self.inventory, current_term=current_term, ungated=ungated)

    def start(self) -> None:
        self.pinner.start()

    async def stop(self) -> None:
        await self.pinner.stop()
        await self.inventory.stop()

    def for_term(self, config: Config) -> Inventory | None:
        """A new term's inventory (None: nothing is placed by topology); the informers start if needed."""
        if self.inventory.needed(config):
            self.inventory.start()
        return self.inventory.fresh() if self.inventory.wanted(config) else None

    def term_began(self, term: Term) -> None:
        for key in self.inventory.by_workload:  # placed pods a restart left gated
            self.pinner.request(key)

    def configured(self, config: Config | None) -> None:
        """A configuration was loaded: watch nodes if it needs them; place by topology from now on
        if a flavor names a Topology and the term does not yet."""
        if self.inventory.needed(config):
            self.inventory.start()
        term = self.current_term()
        if self.inventory.wanted(config) and term is not None and term.scheduler.inventory is None:
            term.scheduler.use_inventory(self.inventory.fresh())
            self.changes.wake.set()

    def decide(self, step: StepContext) -> Sequence[Decision]:
        """What was placed on a deleted node is evicted (``NodeFailures``) and placed again; what
        was placed on a cordoned one, whose pods there had not started, is placed again."""
        sched, out = step.term.scheduler, []
        lost, self.changes.nodes_lost = self.changes.nodes_lost, {}
        for node in lost:
            out.extend(sched.retries.node_lost(node))
        unusable, self.changes.nodes_unusable = self.changes.nodes_unusable, {}
        for node, keys in unusable.items():
            out.extend(sched.retries.node_unusable(node, keys))
        return out

    def _current_inventory(self) -> Inventory | None:
        term = self.current_term()
        return term.scheduler.inventory if term is not None else None

    def _lost(self, node: str) -> None:
        self.changes.nodes_lost[node] = None
        self.changes.wake.set()

    def _cordoned(self, node: str) -> None:
        """Admitted workloads placed on ``node`` whose pods there have not all been bound yet
        would wait for it for ever: the next step places them again."""
        term = self.current_term()
        if term is None:
            return
        stuck = set()
        for key, held in term.committed.items():
            placed = sum(n.get(node, 0) for n in held.admission.placement.values()) if held.admission else 0
            if placed and self.inventory.bound_on(key, node) < placed:
                stuck.add(key)
        if stuck:
            self.changes.nodes_unusable.setdefault(node, set()).update(stuck)
            self.changes.wake.set()
