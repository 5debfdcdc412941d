"""Nomination: a head's flavor assignment, with the failures of identical workloads remembered.

A head is assigned flavors against the snapshot (``queues.cycle.flavors``), with Kueue's preemption
oracle deciding the modes, and, when it neither fits nor finds workloads to preempt, the largest
partial admission that does (``queues.podsets.partial``). A failure is remembered by *class* (same
ClusterQueue, pod sets, priority and, with admission fair sharing, LocalQueue; a workload
evicted by preemption is a class of its own only while a workload on its chain holds quota, the
only time the chain rule can make it decide differently: the same assignment) until its cohort
tree frees capacity (its generation moves), so a long queue of identical workloads costs one
assignment, not one each. (A class per evicted workload, whatever its chain, made the baseline
2.6x slower: thousands of re-queued victims each paid their own assignments.) The message of a remembered failure is
the one computed then: its "N more needed" may be stale after later admissions in the tree
(which only make it fail more). Node capacity freed anywhere (``queues.placement.inventory``) counts as
freed in every tree that places by topology (``_nodes_freed``).

A head that preempts gets its victims here too (``_victims``): Kueue's by quota
(``queues.cycle.preemption``), or, where its quota fits but no topology domain holds it, those whose
nodes would (``queues.cycle.tas``); either way nobody is preempted unless the head is then placed.
"""

from __future__ import annotations

from collections.abc import Callable

from queues.cycle import flavors, preemption, tas, victims
from queues.cycle.assignment import Assignment, Mode
from queues.cycle.queueing import PendingQueues
from queues.cycle.victims import Target
from queues.efficiency import BUDGET_EXHAUSTED
from queues.model import ClusterQueue, Snapshot, Workload
from queues.podsets import partial
from queues.work import Work


class Nomination:
    """Flavor assignment of a head, remembered failures (a ``Scheduler`` base)."""

    snapshot: Snapshot
    pending: PendingQueues
    _generation: dict[str, int]
    _nofit_cache: dict[tuple[object, ...], tuple[int, Assignment]]
    work: Work
    budget_gate: Callable[[Workload], str | None] | None  # (``queues.simulation.reclaim_model``'s gate)

    def _bump(self, cq: ClusterQueue) -> None: ...  # (``Scheduler``)

    def _oracle(self, cq: ClusterQueue, wl: Workload, fr: tuple[str, str], value: int) -> tuple[Mode, int]:
        return preemption.simulate(self.snapshot, cq, wl, fr, value)

    def _class_key(self, wl: Workload, cq: ClusterQueue) -> tuple[object, ...]:
        ts = wl.queue_ts if cq.spec.preemption.within_cluster_queue == "LowerOrNewerEqualPriority" else None
        lane = wl.local_queue if cq.name in self.pending.fair_queues else None  # (each LocalQueue in its order)
        # (may not preempt its chain: a class of its own while that changes anything)
        chain = wl.key if wl.evicted_by is not None and victims.chain_holds_quota(wl) else None
        return (cq.name, wl.shape, wl.priority, ts, wl.namespace if lane else None, lane, chain)

    def _known_failure(self, wl: Workload, cq: ClusterQueue) -> Assignment | None:
        """The failed assignment of an identical workload since the tree last freed capacity."""
        cached = self._nofit_cache.get(self._class_key(wl, cq))
        if cached is not None and cached[0] == self._generation.get(cq.tree_key, 0):
            return cached[1]
        return None

    def _nominate(self, wl: Workload, cq: ClusterQueue) -> Assignment:
        """Flavor assignment for ``wl``, reusing a recent failure of an identical workload; none
        while a GPU-hour budget covering it is exhausted (``budget_gate``; not remembered)."""
        self.work.nominations += 1
        if (held := self._held_by_budget(wl)) is not None:
            return held
        known = self._known_failure(wl, cq)
        if known is not None:
            return known
        assignment = self._assign(wl, cq)
        if assignment.mode != Mode.FIT:
            self._nofit_cache[self._class_key(wl, cq)] = (self._generation.get(cq.tree_key, 0), assignment.freeze())
        return assignment

    def _held_by_budget(self, wl: Workload) -> Assignment | None:
        if self.budget_gate is not None and (held := self.budget_gate(wl)) is not None:
            return Assignment(Mode.NO_FIT, reason=BUDGET_EXHAUSTED, messages=[held])
        return None

    def _assign(self, wl: Workload, cq: ClusterQueue) -> Assignment:
        """The flavor assignment of ``wl`` as it is; when it neither fits nor finds workloads to
        preempt, the largest partial admission that does (Kueue's order, ``queues.podsets.partial``);
        none while a budget holds it."""
        if (held := self._held_by_budget(wl)) is not None:
            return held
        self.work.assignments += 1
        full = flavors.assign(self.snapshot, cq, wl, self._oracle)
        if full.mode == Mode.FIT or not partial.reducible(wl.pod_sets):
            return full
        if full.mode.preempts and self._victims(wl, cq, full):
            return full  # (Kueue: the whole workload by preemption before a part of it)

        def fits(counts: dict[str, int]) -> Assignment | None:
            self.work.assignments += 1
            tried = flavors.assign(self.snapshot, cq, wl, self._oracle, counts)
            if tried.mode == Mode.FIT or (tried.mode.preempts and self._victims(wl, cq, tried)):
                return tried
            return None

        return partial.search(wl.pod_sets, fits) or full

    def _victims(self, wl: Workload, cq: ClusterQueue, assignment: Assignment) -> list[Target] | None:
        """Whom to preempt for ``wl``: None when it does not preempt; [] when nobody may be
        preempted, or preempting them would not place it on nodes (the message says so)."""
        if not assignment.mode.preempts:
            return None
        if assignment.topology_victims:  # (its quota fits; these free the nodes it is placed on)
            return list(assignment.topology_victims)
        victims = preemption.for_assignment(self.snapshot, cq, wl, assignment)
        if victims and not flavors.fits_after(self.snapshot, cq, wl, assignment, [t.workload for t in victims]):
            assignment.messages = [
                f"preempting {len(victims)} workload(s) would free the quota it needs, "
                "but not nodes its topology can place it on"
            ]
            return []
        return victims

    def _nodes_freed(self) -> None:
        """Node capacity was given back (or nodes added): every queue that places by topology gets
        another look, whichever quota tree freed it."""
        trees: set[str] = set()
        for cq in self.snapshot.queues.values():
            if cq.tree_key not in trees and tas.uses_topology(self.snapshot, cq):
                trees.add(cq.tree_key)
                self._bump(cq)

    def look_again(self) -> None:
        """Something outside the quota trees changed (a GPU-hour budget renewed or exhausted):
        every queue gets another look."""
        for cq in self.snapshot.queues.values():
            self._bump(cq)
