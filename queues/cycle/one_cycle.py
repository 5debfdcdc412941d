"""One scheduling cycle: its heads, the cohort trees it changed, the quota its blocked heads hold,
and what it decided; Kueue's ``schedule()`` once.

1. take the head of every ClusterQueue that has one worth trying (a head identical to one that
   could not fit since its tree last freed capacity is set aside at once: ``Nominator``);
2. nominate: assign flavors to each head against the snapshot;
3. order the entries: 1. how far up the cohort tree they borrow, 2. higher priority, 3. earlier
   queue-order timestamp, 4. submission order; with fair sharing on, by Kueue's tournament of
   Dominant Resource Shares instead (``queues.cycle.fairsharing``);
4. walk them: admit what fits (re-checking when an earlier entry changed the same quota tree),
   issue preemptions for what fits only by preempting (once per quota tree and cycle), and set
   aside what cannot fit, with its reason.

A ``Cycle`` lives for one cycle: what it touched and held is its own state, not the scheduler's,
and ``run`` returns what it decided. It acts through the scheduler it is given (``Deciding``: the
few operations that change a workload's state, and the collaborators that hold the rest).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from queues.cycle import fairsharing, flavors
from queues.cycle.assignment import WAITING_FOR_QUOTA, Assignment, Mode
from queues.cycle.decisions import PREEMPTED, Admit, Decision, Evict
from queues.cycle.nomination import Nominator
from queues.cycle.queueing import PendingQueues
from queues.cycle.reservations import Reservations, Reserved
from queues.cycle.usage_history import UsageOrdering
from queues.kueue.fair_sharing_config import FairSharing
from queues.model import ClusterQueue, Snapshot, Workload
from queues.work import Work

Entry = tuple[Workload, ClusterQueue, Assignment]


class Deciding(Protocol):
    """What a cycle needs of its scheduler (``queues.cycle.scheduler.Scheduler`` is one)."""

    pending: PendingQueues
    snapshot: Snapshot
    nominator: Nominator
    reservations: Reservations
    ordering: UsageOrdering
    fair_sharing: FairSharing | None
    work: Work
    now: float

    def admit(self, wl: Workload, cq: ClusterQueue, assignment: Assignment) -> Admit: ...

    def evict(self, wl: Workload, reason: str, detail: str, by: str | None, *, message: str = "") -> Evict: ...

    def say(self, wl: Workload, reason: str, message: str) -> None: ...

    def set_aside(self, wl: Workload, cq: ClusterQueue, assignment: Assignment) -> bool: ...


class Cycle:
    """One cycle (module docstring): ``run`` once, then drop it."""

    def __init__(self, scheduler: Deciding) -> None:
        self.s = scheduler
        self.touched: set[str] = set()  # cohort trees an admission, preemption or hold changed
        self.reserved: Reserved = []  # what blocked heads hold, undone when the cycle ends
        self.decisions: list[Decision] = []
        self.changed = False  # something was admitted, evicted or set aside

    def run(self) -> tuple[bool, list[Decision]]:
        """Whether the cycle changed anything, and what it decided, in order."""
        s = self.s
        s.reservations.wake_holders(s.snapshot)
        heads = self._heads()
        entries = [(wl, cq, s.nominator.nominate(wl, cq)) for wl, cq in heads]
        for wl, cq, assignment in self._ordered(entries):
            self._walk(wl, cq, assignment)
        s.reservations.release(self.reserved)
        return self.changed, self.decisions

    def _heads(self) -> list[tuple[Workload, ClusterQueue]]:
        """Step 1: each queue's head worth a nomination."""
        s = self.s
        heads: list[tuple[Workload, ClusterQueue]] = []
        for name in sorted(s.pending.active):
            cq = s.snapshot.queues.get(name)
            first = True
            while True:
                wl = s.pending.head(name)
                if cq is None or wl is None:
                    s.pending.active.discard(name)
                    break
                # A head identical to one that could not fit since the last release fails the same
                # way: set it aside now instead of spending a whole cycle on it (BestEffortFIFO).
                known = None if cq.strict_fifo else s.nominator.known_failure(wl, cq)
                if known is None or known.mode not in (Mode.NO_FIT, Mode.NO_CANDIDATES):
                    if not first:
                        # Kueue would try this head a cycle later, when the one set aside holds
                        # nothing any more (it went to the inadmissible list): drop its hold.
                        s.reservations.unhold(cq, self.reserved)
                    heads.append((wl, cq))
                    break
                if first:  # the queue's head this cycle: it holds what it would use, as in step 4
                    s.reservations.hold(cq, known, self.reserved, self.touched)
                first = False
                self.changed = s.set_aside(wl, cq, known) or self.changed
        return heads

    def _ordered(self, entries: list[Entry]) -> Iterable[Entry]:
        """Step 3: by borrowing level, priority, FIFO; with fair sharing, by tournament of shares."""
        s = self.s
        entries.sort(key=lambda e: (e[2].borrow_level, -e[0].priority, e[0].queue_ts, e[0].seq))
        if s.fair_sharing is None:
            return entries
        history = s.ordering.queue_history
        return fairsharing.fair_order(
            entries,
            lambda e: e[1],
            lambda e: e[2].usage,
            lambda e: (-e[0].priority, e[0].queue_ts, e[0].seq),
            (lambda cq: history(cq, s.now)) if s.ordering.queue_usage is not None else None,
        )

    def _walk(self, wl: Workload, cq: ClusterQueue, assignment: Assignment) -> None:
        """Step 4 for one entry: admit, preempt, or set aside."""
        s, touched = self.s, self.touched
        tree = cq.tree_key
        if tree in touched and not (assignment.still_fits(cq) and s.nominator.held_by_budget(wl) is None):
            assignment = s.nominator.assign(wl, cq)
            if assignment.mode == Mode.FIT:  # (a failure found for it in step 2 no longer holds)
                s.nominator.forget(wl, cq)
            holders = sorted({r[0].name for r in self.reserved if r[0].tree_key == tree and r[0] is not cq})
            if assignment.mode != Mode.FIT and holders:
                # a blocked head holds this capacity for the cycle (Kueue: skipped, tried again)
                s.say(
                    wl,
                    WAITING_FOR_QUOTA,
                    f"the quota it needs is held by the head of ClusterQueue {', '.join(holders)}, which waits for it",
                )
                # its failure was found under the hold, which is gone next cycle: not remembered
                s.nominator.forget(wl, cq)
                return
        s.reservations.hold(cq, assignment, self.reserved, touched)
        if assignment.mode == Mode.FIT:
            self.decisions.append(s.admit(wl, cq, assignment))
            touched.add(tree)
            self.changed = True
        elif assignment.mode.preempts and tree in touched:
            return  # another entry changed this tree this cycle; retry next cycle
        elif assignment.mode.preempts and s.reservations.settling(wl.key):
            s.say(wl, assignment.reason, "preempted a moment ago: it preempts others once its pods stopped")
            settled = s.reservations.settle(wl, cq, s.nominator.generation_of(tree))
            self.changed = settled or self.changed
        elif (victims := s.nominator.victims(wl, cq, assignment)) is not None and not victims:
            self.changed = s.set_aside(wl, cq, assignment) or self.changed
        elif victims:
            for t in victims:
                self.decisions.append(s.evict(t.workload, PREEMPTED, t.reason, wl.key))
                s.reservations.preempted(t.workload.key, s.now)
                t.workload.evicted_by = wl
            # The victims released their quota at once; the preemptor takes it in the same
            # step, so nothing requeued by the release (or the victims themselves) takes it first.
            s.work.assignments += 1
            assignment = flavors.assign(s.snapshot, cq, wl, None, assignment.counts)
            if assignment.mode == Mode.FIT:
                self.decisions.append(s.admit(wl, cq, assignment))
            touched.add(tree)
            self.changed = True
        else:
            self.changed = s.set_aside(wl, cq, assignment) or self.changed
