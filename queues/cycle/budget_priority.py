"""Running at a GPU-hour budget's lower priority: ``whenExhausted: LowerPriority``.

A budget that holds work back (the default) makes a team wait even when GPUs sit free. The
policy choice instead lets the team's new work run, at the budget's ``priority``: it queues
behind everyone else's work of a higher priority and is the first a higher-priority workload may
preempt (the ClusterQueues' own ``preemption`` rules decide), so a spent budget costs the others
nothing. Running work is never touched by a budget: a workload is lowered when it queues while
the budget is spent, keeps the priority it was admitted with, and every workload the budget
lowered gets its own priority back when the budget's next period begins (waiting ones are
queued again in their own place).

``lowered`` (the scheduler's ``budget_priority``, built by ``queues.simulation.reclaim_model`` in engine
core and by the controller's ``BudgetKeeper``) says, for a workload, the lowest priority a spent
budget that covers it asks for, or None.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from queues.efficiency import Budget
from queues.model import Workload

Lowered = Callable[[Workload], int | None]


def lowest(spent: Iterable[Budget], wl: Workload) -> int | None:
    """The lowest priority the spent budgets covering ``wl`` run new work at, or None (engine
    core's model and the controller's budget keeper both ask this)."""
    asked = [b.lower_priority for b in spent if b.lower_priority is not None and b.covers(wl.cluster_queue, wl.labels)]
    return min(asked) if asked else None


def own(wl: Workload) -> int:
    """The workload's own priority (what its job's priority class gives)."""
    return wl.own_priority if wl.own_priority is not None else wl.priority


def wanted(wl: Workload, lowered: Lowered | None) -> int:
    low = lowered(wl) if lowered is not None else None
    return own(wl) if low is None else min(own(wl), low)


def apply(wl: Workload, lowered: Lowered | None) -> bool:
    """Give ``wl`` the priority its budgets ask for now; True if it changed."""
    priority = wanted(wl, lowered)
    if priority == wl.priority:
        return False
    if wl.own_priority is None:
        wl.own_priority = wl.priority
    wl.priority = priority
    if priority == wl.own_priority:
        wl.own_priority = None
    return True


def restore(wl: Workload) -> bool:
    """Give a lowered workload its own priority back; True if it changed."""
    if wl.own_priority is None:
        return False
    wl.priority, wl.own_priority = wl.own_priority, None
    return True
