"""Pending workloads per ClusterQueue, in Kueue's order, with inadmissible ones set aside.

Each ClusterQueue has a heap of pending workloads ordered by ``Workload.order_key``
(priority, queue-order timestamp, submission order). A head that cannot be admitted is set
aside (BestEffortFIFO) or blocks its queue (StrictFIFO) until something in its quota tree
frees capacity or the configuration changes: each tree has a *generation* that such events
bump, and bumping it puts the set-aside workloads back. Nothing is re-scanned otherwise, so
a quiet cycle costs nothing however long the queues are.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

from queues.model import Workload

Entry = tuple[tuple[int, float, int], Workload]


@dataclass(slots=True)
class QueueState:
    heap: list[Entry] = field(default_factory=list)
    inadmissible: dict[str, Workload] = field(default_factory=dict)
    blocked_at: int | None = None  # StrictFIFO: the tree generation at which the head failed


class PendingQueues:
    """Which workloads wait in which ClusterQueue, and which queues have a head worth trying."""

    def __init__(self) -> None:
        self.queues: dict[str, QueueState] = {}
        self.where: dict[str, str] = {}  # workload key -> cluster queue it waits in
        self.active: set[str] = set()

    def _state(self, cq: str) -> QueueState:
        state = self.queues.get(cq)
        if state is None:
            state = self.queues[cq] = QueueState()
        return state

    def push(self, cq: str, wl: Workload) -> None:
        state = self._state(cq)
        state.inadmissible.pop(wl.key, None)
        self.where[wl.key] = cq
        heapq.heappush(state.heap, (wl.order_key(), wl))
        self.active.add(cq)
        if state.blocked_at is not None and state.heap[0][1] is wl:
            state.blocked_at = None  # a new head deserves a try

    def remove(self, wl: Workload) -> None:
        """Forget ``wl`` (admitted, cancelled or moved); heap entries are dropped lazily."""
        cq = self.where.pop(wl.key, None)
        if cq is not None:
            state = self.queues[cq]
            state.inadmissible.pop(wl.key, None)
            if state.heap and state.heap[0][1] is wl:
                state.blocked_at = None
                self.active.add(cq)

    def _valid(self, cq: str, entry: Entry) -> bool:
        key, wl = entry
        return self.where.get(wl.key) == cq and key == wl.order_key() and wl.admission is None

    def head(self, cq: str) -> Workload | None:
        state = self.queues.get(cq)
        if state is None:
            return None
        heap = state.heap
        while heap:
            entry = heap[0]
            if self._valid(cq, entry) and entry[1].key not in state.inadmissible:
                return entry[1]
            heapq.heappop(heap)
        return None

    def set_aside(self, cq: str, wl: Workload) -> None:
        """BestEffortFIFO: ``wl`` waits aside so the next workload gets its turn."""
        # Only mark it: ``head`` drops its heap entry lazily. (Popping here would be wrong when an
        # eviction earlier in the same cycle pushed a victim above it: the victim would be lost.)
        self.queues[cq].inadmissible[wl.key] = wl

    def block(self, cq: str, generation: int) -> None:
        """StrictFIFO: the head failed; the queue waits for its tree's generation to move."""
        self.queues[cq].blocked_at = generation
        self.active.discard(cq)

    def requeue(self, cq: str) -> None:
        """Capacity or configuration changed: every set-aside workload gets another look."""
        state = self.queues.get(cq)
        if state is None:
            return
        state.blocked_at = None
        if state.inadmissible:
            for wl in state.inadmissible.values():
                state.heap.append((wl.order_key(), wl))
            state.inadmissible.clear()
            heapq.heapify(state.heap)
        self.active.add(cq)

    def waiting(self, cq: str) -> list[Workload]:
        """All workloads waiting in ``cq``, in queue order (for positions and reports)."""
        state = self.queues.get(cq)
        if state is None:
            return []
        seen: dict[str, Workload] = {}
        for _, wl in state.heap:
            if self.where.get(wl.key) == cq and wl.admission is None:
                seen[wl.key] = wl
        for wl in state.inadmissible.values():
            seen[wl.key] = wl
        return sorted(seen.values(), key=Workload.order_key)
