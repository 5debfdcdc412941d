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
freed in every tree that places by topology (the scheduler's ``_nodes_freed``).

A head that preempts gets its victims here too (``victims``): Kueue's by quota
(``queues.cycle.preemption``), or, where its quota fits but no topology domain holds it, those whose
nodes would (``queues.cycle.tas``); either way nobody is preempted unless the head is then placed.
"""

from __future__ import annotations

from collections.abc import Callable

from queues.cycle import flavors, preemption, victims
from queues.cycle.assignment import Assignment, Mode
from queues.cycle.queueing import PendingQueues
from queues.cycle.victims import Target
from queues.efficiency import BUDGET_EXHAUSTED
from queues.model import ClusterQueue, Snapshot, Workload
from queues.podsets import partial
from queues.work import Work

BudgetGate = Callable[[Workload], "str | None"]  # why a GPU-hour budget holds a workload back, or None


class Nominator:
    """Flavor assignment of a head and the failures it remembers; see the module docstring.

    Its own state: the failures remembered by class (``failures``), each cohort tree's generation
    (``generation``: moved by ``freed``, whenever the tree frees capacity), and the budget gate. The
    snapshot it assigns against is the scheduler's, handed over again on each ``reset`` (a new
    configuration: nothing remembered holds any more)."""

    def __init__(self, snapshot: Snapshot, pending: PendingQueues, work: Work) -> None:
        self.snapshot = snapshot
        self.pending = pending  # (which ClusterQueues order by LocalQueue: part of a failure's class)
        self.work = work
        self.failures: dict[tuple[object, ...], tuple[int, Assignment]] = {}
        self.generation: dict[str, int] = {}  # cohort tree -> how many times it freed capacity
        self.gate: BudgetGate | None = None  # a GPU-hour budget holding new work back

    def reset(self, snapshot: Snapshot) -> None:
        """A new snapshot (a new configuration): every remembered failure and generation is dropped."""
        self.snapshot = snapshot
        self.failures.clear()
        self.generation.clear()

    def freed(self, tree: str) -> None:
        """Cohort tree ``tree`` freed capacity: what failed there is tried again."""
        self.generation[tree] = self.generation.get(tree, 0) + 1

    def generation_of(self, tree: str) -> int:
        return self.generation.get(tree, 0)

    def _oracle(self, cq: ClusterQueue, wl: Workload, fr: tuple[str, str], value: int) -> tuple[Mode, int]:
        return preemption.simulate(self.snapshot, cq, wl, fr, value)

    def class_key(self, wl: Workload, cq: ClusterQueue) -> tuple[object, ...]:
        """What makes two workloads fail alike in ``cq`` (the module docstring)."""
        ts = wl.queue_ts if cq.spec.preemption.within_cluster_queue == "LowerOrNewerEqualPriority" else None
        lane = wl.local_queue if cq.name in self.pending.fair_queues else None  # (each LocalQueue in its order)
        # (may not preempt its chain: a class of its own while that changes anything)
        chain = wl.key if wl.evicted_by is not None and victims.chain_holds_quota(wl) else None
        return (cq.name, wl.shape, wl.priority, ts, wl.namespace if lane else None, lane, chain)

    def known_failure(self, wl: Workload, cq: ClusterQueue) -> Assignment | None:
        """The failed assignment of an identical workload since the tree last freed capacity."""
        cached = self.failures.get(self.class_key(wl, cq))
        if cached is not None and cached[0] == self.generation.get(cq.tree_key, 0):
            return cached[1]
        return None

    def forget(self, wl: Workload, cq: ClusterQueue) -> None:
        """What was remembered for ``wl``'s class no longer holds (found under a hold, or it fits now)."""
        self.failures.pop(self.class_key(wl, cq), None)

    def nominate(self, wl: Workload, cq: ClusterQueue) -> Assignment:
        """Flavor assignment for ``wl``, reusing a recent failure of an identical workload; none
        while a GPU-hour budget covering it is exhausted (``gate``; not remembered)."""
        self.work.nominations += 1
        if (held := self.held_by_budget(wl)) is not None:
            return held
        known = self.known_failure(wl, cq)
        if known is not None:
            return known
        assignment = self.assign(wl, cq)
        if assignment.mode != Mode.FIT:
            self.failures[self.class_key(wl, cq)] = (self.generation.get(cq.tree_key, 0), assignment.freeze())
        return assignment

    def held_by_budget(self, wl: Workload) -> Assignment | None:
        if self.gate is not None and (held := self.gate(wl)) is not None:
            return Assignment(Mode.NO_FIT, reason=BUDGET_EXHAUSTED, messages=[held])
        return None

    def assign(self, wl: Workload, cq: ClusterQueue) -> Assignment:
        """The flavor assignment of ``wl`` as it is; when it neither fits nor finds workloads to
        preempt, the largest partial admission that does (Kueue's order, ``queues.podsets.partial``);
        none while a budget holds it."""
        if (held := self.held_by_budget(wl)) is not None:
            return held
        self.work.assignments += 1
        full = flavors.assign(self.snapshot, cq, wl, self._oracle)
        if full.mode == Mode.FIT or not partial.reducible(wl.pod_sets):
            return full
        if full.mode.preempts and self.victims(wl, cq, full):
            return full  # (Kueue: the whole workload by preemption before a part of it)

        def fits(counts: dict[str, int]) -> Assignment | None:
            self.work.assignments += 1
            tried = flavors.assign(self.snapshot, cq, wl, self._oracle, counts)
            if tried.mode == Mode.FIT or (tried.mode.preempts and self.victims(wl, cq, tried)):
                return tried
            return None

        return partial.search(wl.pod_sets, fits) or full

    def victims(self, wl: Workload, cq: ClusterQueue, assignment: Assignment) -> list[Target] | None:
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
