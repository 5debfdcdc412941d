"""What a flavor assignment proposes: the mode it fits in, the flavors and usage, the reasons.

``queues.cycle.flavors`` makes an ``Assignment``; topology-aware placement
(``queues.cycle.tas``) completes it; preemption (``queues.cycle.preemption``) reads what it needs;
the scheduler commits or explains it. Kept apart from the assigner so that those modules share
the vocabulary without importing one another.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from enum import IntEnum

from queues.cycle.victims import Target
from queues.model import ClusterQueue, FlavorResource, Usage, Workload


class Mode(IntEnum):
    """How well a workload fits a flavor; ordered, so ``max`` picks the best (Kueue's preemptionMode)."""

    NO_FIT = 0
    NO_CANDIDATES = 1  # would fit by preempting, but nothing may be preempted (its head holds the quota)
    PREEMPT = 2  # by priority, possibly in its own ClusterQueue
    RECLAIM = 3  # only other ClusterQueues' borrowed work
    FIT = 4

    @property
    def preempts(self) -> bool:
        return self in (Mode.PREEMPT, Mode.RECLAIM)


NO_MATCHING_FLAVOR = "NoMatchingFlavor"
EXCEEDS_MAX_QUOTA = "ExceedsMaxQuota"
WAITING_FOR_QUOTA = "WaitingForQuota"
TOPOLOGY_PLACEMENT_FAILED = "TopologyPlacementFailed"  # fits by quota; no nodes hold it (Kueue >= v0.15)


@dataclass(slots=True)
class Assignment:
    """A proposed admission of one workload into one ClusterQueue."""

    mode: Mode
    flavors: dict[str, dict[str, str]] = field(default_factory=dict)
    usage: Usage = field(default_factory=dict)
    borrowing: bool = False
    borrow_level: int = 0  # how far up the cohort tree it borrows (0: not at all); orders a cycle
    needs_preemption: set[FlavorResource] = field(default_factory=set)
    reason: str = WAITING_FOR_QUOTA
    messages: list[str] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)  # pod set -> pods, where fewer than asked (partial)
    placement: dict[str, dict[str, int]] = field(default_factory=dict)  # TAS pod set -> node -> pods
    # quota fits but no domain holds it: whom to preempt to free the nodes (``queues.cycle.tas``)
    topology_victims: list[Target] = field(default_factory=list)
    # every resource group took its first compatible flavor, fitting without borrowing, and no
    # node placement was involved: the flavor assigner would choose the same again for as long as
    # ``usage`` still fits that way (``still_fits``), whatever else the quota tree took meanwhile
    settled: bool = False

    @property
    def message(self) -> str:
        return "; ".join(dict.fromkeys(self.messages)) or "does not fit"

    def freeze(self) -> Assignment:
        """Fix the message (cached failures are reported many times)."""
        self.messages = [self.message]
        return self

    def still_fits(self, cq: ClusterQueue) -> bool:
        """Whether a ``settled`` assignment is still what the flavor assigner would make for ``cq``
        as the snapshot is now: every flavor-resource it uses fits what is available without
        borrowing (the first compatible flavor at (FIT, 0) is always the one chosen)."""
        return self.settled and all(
            value <= cq.available(fr) and cq.borrow_height(fr, value)[0] == 0 for fr, value in self.usage.items()
        )


# (cq, workload, fr, total request) -> whether preempting others could make room (RECLAIM, PREEMPT;
# else NO_CANDIDATES), and how far up the cohort tree the workload would then borrow.
PreemptionOracle = Callable[[ClusterQueue, Workload, FlavorResource, int], tuple[Mode, int]]
