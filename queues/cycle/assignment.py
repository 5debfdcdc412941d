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

    @property
    def message(self) -> str:
        return "; ".join(dict.fromkeys(self.messages)) or "does not fit"

    def freeze(self) -> Assignment:
        """Fix the message (cached failures are reported many times)."""
        self.messages = [self.message]
        return self


# (cq, workload, fr, total request) -> whether preempting others could make room (RECLAIM, PREEMPT;
# else NO_CANDIDATES), and how far up the cohort tree the workload would then borrow.
PreemptionOracle = Callable[[ClusterQueue, Workload, FlavorResource, int], tuple[Mode, int]]
