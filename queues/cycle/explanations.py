"""Why a workload waits, and what admitting it would take: what ``describe`` and reports show.

Both read the scheduler's state and search (functions: the scheduler's ``explain`` and
``preemption_plan`` call them): the reason and message a
user can act on, with the workloads ahead of it, and the preemption plan the cycle itself would
make now.
"""

from __future__ import annotations

from queues.cycle import preemption, victims
from queues.cycle.assignment import WAITING_FOR_QUOTA, Assignment
from queues.cycle.intake import WAITING_FOR_TURN
from queues.cycle.nomination import Nominator
from queues.cycle.queueing import PendingQueues
from queues.model import Snapshot, Workload


def preemption_plan(nominator: Nominator, wl: Workload | None) -> tuple[Assignment | None, list[victims.Target]]:
    """What admitting pending ``wl`` now would take, by the cycle's own search: its flavor
    assignment and, when that needs preemption, the workloads it would evict (for ``describe``)."""
    snapshot = nominator.snapshot
    cq = snapshot.queues.get(wl.cluster_queue) if wl is not None and wl.cluster_queue else None
    if wl is None or wl.admission is not None or cq is None:
        return None, []
    assignment = nominator.assign(wl, cq)
    if assignment.mode.preempts:
        return assignment, preemption.for_assignment(snapshot, cq, wl, assignment)
    return assignment, []


def explain(pending: PendingQueues, snapshot: Snapshot, wl: Workload) -> tuple[str, str]:
    """Why ``wl`` waits, in words a user can act on, with what stands ahead of it."""
    if wl.admission is not None:
        return wl.reason, wl.message
    cq_name = pending.where.get(wl.key)
    if cq_name is None:
        return wl.reason, wl.message
    ahead = [w for w in pending.waiting(cq_name) if w.order_key() < wl.order_key()]
    cq = snapshot.queues.get(cq_name)
    if ahead and cq is not None and cq.strict_fifo:
        head = ahead[0]
        return WAITING_FOR_QUOTA, (
            f"StrictFIFO ClusterQueue {cq_name}: waiting behind {head.key}, which cannot be admitted yet"
            f" ({head.reason}: {head.message}); {len(ahead)} workload(s) ahead"
        )
    if wl.message and wl.message != WAITING_FOR_TURN:
        suffix = f" ({len(ahead)} workload{'s' if len(ahead) != 1 else ''} ahead)" if ahead else ""
        return wl.reason, wl.message + suffix
    return (
        WAITING_FOR_QUOTA,
        f"{WAITING_FOR_TURN}; {len(ahead)} workload(s) ahead in ClusterQueue {cq_name}",
    )
