"""Pending workloads per ClusterQueue, in Kueue's order, with inadmissible ones set aside.

Each ClusterQueue has a heap of pending workloads ordered by ``Workload.order_key``
(priority, queue-order timestamp, submission order). A head that cannot be admitted is set
aside (BestEffortFIFO) or blocks its queue (StrictFIFO) until something in its quota tree
frees capacity or the configuration changes: each tree has a *generation* that such events
bump, and bumping it puts the set-aside workloads back. Nothing is re-scanned otherwise, so
a quiet cycle costs nothing however long the queues are.

With admission fair sharing (``queues.cycle.usage_history``), a ClusterQueue keeps one heap per
LocalQueue (a *lane*), and its head is the first of the lane whose LocalQueue has used least
lately (then the usual order): the lanes are few, so choosing among them is cheap however long
each is.

Set-aside workloads are kept by *class* (the scheduler's: same ClusterQueue, pod sets and
priority, so the same flavor assignment), each class in queue order. Putting them back puts back
only each class's first: if it still cannot be admitted, neither can the rest, which stay aside
untouched; when it leaves the line (admitted, gone), the next of its class takes its place. So
a release costs the number of classes, not the number of waiting workloads, and the order in
which workloads are tried is the same (each class is in order, and the heap merges them).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field

from queues.model import Workload
from queues.work import Work

Entry = tuple[tuple[int, float, int], Workload]
NO_LANE = ""  # the one heap of a ClusterQueue without admission fair sharing


@dataclass(slots=True)
class QueueState:
    lanes: dict[str, list[Entry]] = field(default_factory=dict)  # heaps by LocalQueue key (or NO_LANE)
    inadmissible: dict[str, Workload] = field(default_factory=dict)
    blocked_at: int | None = None  # StrictFIFO: the tree generation at which the head failed
    # set-aside workloads by class, each a heap in queue order (entries of workloads that left are
    # dropped lazily); a class's first may be back in line (in ``heap``, not ``inadmissible``)
    classes: dict[Hashable, list[Entry]] = field(default_factory=dict)
    class_of: dict[str, Hashable] = field(default_factory=dict)  # workload key -> its class, while in one


class PendingQueues:
    """Which workloads wait in which ClusterQueue, and which queues have a head worth trying."""

    def __init__(self) -> None:
        self.queues: dict[str, QueueState] = {}
        self.where: dict[str, str] = {}  # workload key -> cluster queue it waits in
        self.active: set[str] = set()
        # admission fair sharing: the ClusterQueues that use it, and a LocalQueue's usage by key
        self.fair_queues: set[str] = set()
        self.lane_usage: Callable[[str], float] = lambda lane: 0.0
        self.work = Work()  # (the scheduler's counters: requeues counted here)

    def _lane(self, cq: str, wl: Workload) -> str:
        return f"{wl.namespace}/{wl.local_queue}" if cq in self.fair_queues else NO_LANE

    def _push_entry(self, state: QueueState, cq: str, wl: Workload) -> list[Entry]:
        lane = state.lanes.setdefault(self._lane(cq, wl), [])
        heapq.heappush(lane, (wl.order_key(), wl))
        return lane

    def _state(self, cq: str) -> QueueState:
        state = self.queues.get(cq)
        if state is None:
            state = self.queues[cq] = QueueState()
        return state

    def push(self, cq: str, wl: Workload) -> None:
        state = self._state(cq)
        self._leave_class(cq, state, wl)
        state.inadmissible.pop(wl.key, None)
        self.where[wl.key] = cq
        lane = self._push_entry(state, cq, wl)
        self.active.add(cq)
        if state.blocked_at is not None and lane[0][1] is wl:
            state.blocked_at = None  # a new head deserves a try

    def remove(self, wl: Workload) -> None:
        """Forget ``wl`` (admitted, cancelled or moved); heap entries are dropped lazily."""
        cq = self.where.pop(wl.key, None)
        if cq is not None:
            state = self.queues[cq]
            self._leave_class(cq, state, wl)
            state.inadmissible.pop(wl.key, None)
            lane = state.lanes.get(self._lane(cq, wl))
            if lane and lane[0][1] is wl:
                state.blocked_at = None
                self.active.add(cq)

    def _valid(self, cq: str, entry: Entry) -> bool:
        key, wl = entry
        return self.where.get(wl.key) == cq and key == wl.order_key() and wl.admission is None

    def head(self, cq: str) -> Workload | None:
        state = self.queues.get(cq)
        if state is None:
            return None
        best: tuple[float, tuple[int, float, int]] | None = None
        head: Workload | None = None
        emptied: list[str] = []
        for name, heap in state.lanes.items():
            while heap:
                entry = heap[0]
                if (
                    self._valid(cq, entry)
                    and entry[1].key not in state.inadmissible
                    and self._lane(cq, entry[1]) == name
                ):
                    break
                heapq.heappop(heap)
            if not heap:
                emptied.append(name)
                continue
            key = (self.lane_usage(name) if name else 0.0, heap[0][0])
            if best is None or key < best:
                best, head = key, heap[0][1]
        for name in emptied:
            del state.lanes[name]
        return head

    def set_aside(self, cq: str, wl: Workload, cls: Hashable = None) -> None:
        """BestEffortFIFO: ``wl`` waits aside so the next workload gets its turn. ``cls``: its class
        (None: a class of its own)."""
        # Only mark it: ``head`` drops its heap entry lazily. (Popping here would be wrong when an
        # eviction earlier in the same cycle pushed a victim above it: the victim would be lost.)
        state = self.queues[cq]
        state.inadmissible[wl.key] = wl
        key = cls if cls is not None else ("own", wl.key)
        if state.class_of.get(wl.key) != key:
            self._leave_class(cq, state, wl)
            state.class_of[wl.key] = key
            heapq.heappush(state.classes.setdefault(key, []), (wl.order_key(), wl))

    def _front(self, state: QueueState, key: Hashable) -> Workload | None:
        """The first of class ``key`` (dropping entries of workloads that left it)."""
        members = state.classes.get(key)
        while members:
            order, wl = members[0]
            if state.class_of.get(wl.key) == key and wl.order_key() == order:
                return wl
            heapq.heappop(members)
        state.classes.pop(key, None)
        return None

    def _leave_class(self, cq: str, state: QueueState, wl: Workload) -> None:
        """``wl`` is no longer aside (pushed again, admitted, gone): if it was its class's first and
        in line, the next of its class takes its place in line."""
        key = state.class_of.get(wl.key)
        if key is None:
            return
        was_first_in_line = self._front(state, key) is wl and wl.key not in state.inadmissible
        del state.class_of[wl.key]
        nxt = self._front(state, key)
        if was_first_in_line and nxt is not None and state.inadmissible.pop(nxt.key, None) is not None:
            self._push_entry(state, cq, nxt)

    def block(self, cq: str, generation: int) -> None:
        """StrictFIFO: the head failed; the queue waits for its tree's generation to move."""
        self.queues[cq].blocked_at = generation
        self.active.discard(cq)

    def requeue(self, cq: str) -> None:
        """Capacity or configuration changed: every set-aside class gets another look (its first;
        each one put back in line counts as a requeue in ``work``)."""
        state = self.queues.get(cq)
        if state is None:
            return
        state.blocked_at = None
        if not state.inadmissible:  # (every class's first is in line already)
            if state.lanes:  # (a queue with nobody waiting is not looked at)
                self.active.add(cq)
            return
        for key in list(state.classes):
            first = self._front(state, key)
            if first is not None and state.inadmissible.pop(first.key, None) is not None:
                self._push_entry(state, cq, first)
                self.work.requeues += 1
        self.active.add(cq)

    def waiting(self, cq: str) -> list[Workload]:
        """All workloads waiting in ``cq``, in queue order (for positions and reports)."""
        state = self.queues.get(cq)
        if state is None:
            return []
        seen: dict[str, Workload] = {}
        for lane in state.lanes.values():
            for _, wl in lane:
                if self.where.get(wl.key) == cq and wl.admission is None:
                    seen[wl.key] = wl
        for wl in state.inadmissible.values():
            seen[wl.key] = wl
        usage: dict[str, float] = {}  # per lane, once (a LocalQueue's usage is the same for all its workloads)

        def key(w: Workload) -> tuple[float, tuple[int, float, int]]:
            lane = self._lane(cq, w)
            if lane and lane not in usage:
                usage[lane] = self.lane_usage(lane)
            return (usage.get(lane, 0.0), w.order_key())

        return sorted(seen.values(), key=key)
