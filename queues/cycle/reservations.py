"""What a scheduling cycle keeps from whom: a blocked head's hold on quota, a victim's settling.

**Holds** are Kueue's ``reserveCapacityForUnreclaimablePreempt``: a head that needs preemption but
may preempt nothing (its policy forbids every candidate) keeps the quota it would use for the rest
of the cycle, so borrowers from other ClusterQueues cannot take it and be preempted a moment later
(unless its queue can always reclaim). A BestEffortFIFO head holds in the one cycle it is tried;
Kueue retries a StrictFIFO head every cycle, so such a queue (a *holder*) holds in every cycle its
cohort tree has.

**Settling**: a workload preempted at t preempts nobody before t + ``settle_seconds`` (the caller's
clock; 1 s by default, scaled like backoffs by the cluster engine); it may still be admitted where
it fits. Kueue's rules allow preemption chains that come back to where they began (a reclaims the
quota b borrows; c outranks a in a's queue and borrows; d reclaims from c; b outranks d and
borrows; a reclaims again...). In Kueue each link waits for the victim's pods to stop, so such a
chain turns every few seconds for ever; in one Turnstile instant it would spin without end. A
settling victim waits aside as a head that cannot be admitted does, and its queue is looked at
again when it has settled (``next_settled`` tells the caller when). Settling slows a loop
down to one link a second; what ends it is ``victims.in_chain``: a workload never preempts
the workloads whose admissions evicted it, down the chain, until it is admitted again.
"""

from __future__ import annotations

from collections.abc import Mapping

from queues.cycle import preemption
from queues.cycle.assignment import Assignment, Mode
from queues.cycle.queueing import PendingQueues
from queues.model import ClusterQueue, Snapshot, Workload

SETTLE_SECONDS = 1.0

Reserved = list[tuple[ClusterQueue, dict[tuple[str, str], int]]]  # (queue, what it holds) this cycle


class Reservations:
    """Holds and settling; see the module docstring. Its own state: the StrictFIFO queues whose
    blocked head holds its quota (``holders``) and the victims still settling (``preempted_at``);
    the holds of one cycle are that cycle's (``Reserved``), undone when it ends."""

    def __init__(self, pending: PendingQueues, settle_seconds: float = SETTLE_SECONDS) -> None:
        self.pending = pending
        self.settle_seconds = settle_seconds
        self.holders: set[str] = set()  # StrictFIFO queues whose blocked head holds its quota
        self.preempted_at: dict[str, float] = {}  # victims still settling -> when they were preempted

    # ----- holds ---------------------------------------------------------------------------

    def wake_holders(self, snapshot: Snapshot) -> None:
        """Put StrictFIFO queues whose blocked head holds its quota back in the cycle whenever
        another queue of their cohort tree has a head to try, so the hold applies to it."""
        if not self.holders:
            return
        trees = {q.tree_key for name in self.pending.active if (q := snapshot.queues.get(name)) is not None}
        for name in self.holders:
            q = snapshot.queues.get(name)
            if q is not None and q.tree_key in trees:
                self.pending.active.add(name)

    @staticmethod
    def hold(cq: ClusterQueue, assignment: Assignment, reserved: Reserved, touched: set[str]) -> None:
        """A head that needs preemption but may preempt nothing holds what it would use."""
        if assignment.mode != Mode.NO_CANDIDATES or preemption.can_always_reclaim(cq):
            return
        hold = preemption.to_reserve(cq, assignment)
        if hold:
            cq.add_usage(hold, 1)
            reserved.append((cq, hold))
            touched.add(cq.tree_key)

    @staticmethod
    def unhold(cq: ClusterQueue, reserved: Reserved) -> None:
        """Undo ``cq``'s holds of this cycle."""
        for held in [r for r in reserved if r[0] is cq]:
            cq.add_usage(held[1], -1)
            reserved.remove(held)

    @staticmethod
    def release(reserved: Reserved) -> None:
        """The cycle ended: every hold it made is undone."""
        for cq, hold in reserved:
            cq.add_usage(hold, -1)

    # ----- settling ------------------------------------------------------------------------

    def preempted(self, key: str, now: float) -> None:
        """``key`` was preempted at ``now``: it preempts nobody until it has settled."""
        self.preempted_at[key] = now

    def settling(self, key: str) -> bool:
        return key in self.preempted_at

    def settle(self, wl: Workload, cq: ClusterQueue, generation: int) -> bool:
        """``wl`` would preempt but is still settling: it waits aside (BestEffortFIFO; True) or
        blocks its queue (StrictFIFO, at its tree's ``generation``) until ``wake_settled``."""
        if cq.strict_fifo:
            self.pending.block(cq.name, generation)
            return False
        self.pending.set_aside(cq.name, wl)
        return True

    def wake_settled(self, now: float) -> None:
        """Victims that have settled: their queues get another look."""
        for key, at in list(self.preempted_at.items()):
            if at + self.settle_seconds <= now:
                del self.preempted_at[key]
                if (cq := self.pending.where.get(key)) is not None:
                    self.pending.requeue(cq)

    def next_settled(self, workloads: Mapping[str, Workload]) -> float | None:
        """When the next victim still waiting settles (the caller schedules again then)."""
        waiting = [t for k, t in self.preempted_at.items() if (w := workloads.get(k)) and w.admission is None]
        return min(waiting) + self.settle_seconds if waiting else None
