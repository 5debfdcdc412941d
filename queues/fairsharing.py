"""Fair sharing: Kueue's Dominant Resource Share (DRS) and the order it gives a cycle.

With fair sharing on (Kueue's ``fairSharing`` configuration; a scenario's top-level
``fairSharing:`` block, the controller's ``TURNSTILE_FAIR_SHARING``), ClusterQueues and Cohorts
that share a cohort tree are compared by how much of what the tree lends they borrow, divided by
their ``spec.fairSharing.weight`` (default 1), as Kueue's ``pkg/cache/scheduler/fair_sharing.go``:

- a node's *share* is, over the resources it borrows (usage beyond its nominal subtree quota,
  summed over flavors), the largest ratio borrowed x 1000 / lendable, where lendable is what its
  parent could give it with nothing in use (``potential_available``, summed over flavors); a node
  that borrows nothing has share 0, the root has no share, and a zero weight that borrows has an
  infinite share;
- a cycle's heads are taken by tournament (Kueue's ``fairSharingIterator``): in each cohort, a
  child (ClusterQueue or sub-cohort) that would not borrow for what its head asks wins first
  (``FairSharingPrioritizeNonBorrowing``), then the one whose share *with its head admitted* is
  lowest, then the higher priority, then the earlier queue-order time; after each decision the
  shares are computed again, so one cycle spreads what is free over the queues that borrow least;
- preemption uses Kueue's fair-sharing strategies (``queues.fair_preemption``).

Within one ClusterQueue, order stays priority then FIFO; a ClusterQueue without a cohort is not
compared with anything.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from queues import errors
from queues.errors import FieldError
from queues.quotas import CohortNode, FlavorResource, Node, Usage

LESS_THAN_OR_EQUAL_TO_FINAL_SHARE = "LessThanOrEqualToFinalShare"
LESS_THAN_INITIAL_SHARE = "LessThanInitialShare"
DEFAULT_STRATEGIES = (LESS_THAN_OR_EQUAL_TO_FINAL_SHARE, LESS_THAN_INITIAL_SHARE)
# what Kueue's validation allows: one strategy, or the final-share one followed by the initial-share one
_ALLOWED = {(LESS_THAN_OR_EQUAL_TO_FINAL_SHARE,), (LESS_THAN_INITIAL_SHARE,), DEFAULT_STRATEGIES}


@dataclass(frozen=True, slots=True)
class FairSharing:
    """Kueue's ``fairSharing`` configuration."""

    enable: bool = True
    preemption_strategies: tuple[str, ...] = DEFAULT_STRATEGIES


def parse(raw: Any, path: str = "fairSharing") -> FairSharing | None:
    """A ``fairSharing`` block (``{enable, preemptionStrategies}``; the block's presence enables it
    unless ``enable: false``); None when absent or disabled. ``errors.Invalid`` names each field."""
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        raise errors.Invalid([FieldError(path, "must be a mapping: {enable: true, preemptionStrategies: [...]}")])
    problems = [
        FieldError(f"{path}.{k}", "unknown field (known: enable, preemptionStrategies)")
        for k in raw
        if k not in ("enable", "preemptionStrategies")
    ]
    enable = raw.get("enable", True)
    if not isinstance(enable, bool):
        problems.append(FieldError(f"{path}.enable", "must be true or false"))
    strategies = raw.get("preemptionStrategies", list(DEFAULT_STRATEGIES))
    if not isinstance(strategies, list) or tuple(strategies) not in _ALLOWED:
        problems.append(
            FieldError(
                f"{path}.preemptionStrategies",
                f"must be [{LESS_THAN_OR_EQUAL_TO_FINAL_SHARE}], [{LESS_THAN_INITIAL_SHARE}] or "
                f"[{LESS_THAN_OR_EQUAL_TO_FINAL_SHARE}, {LESS_THAN_INITIAL_SHARE}] (Kueue's choices), "
                f"not {strategies!r}",
            )
        )
    if problems:
        raise errors.Invalid(problems)
    return FairSharing(True, tuple(strategies)) if enable else None


@dataclass(frozen=True, slots=True)
class Share:
    """A node's Dominant Resource Share (Kueue's ``DRS``)."""

    weight: float = 1.0
    ratio: float = 0.0  # unweighted: borrowed x 1000 / lendable, of the dominant resource
    resource: str = ""
    borrowing: bool = False
    borrowed: frozenset[FlavorResource] = frozenset()  # the flavor-resources it borrows

    def borrowing_on(self, usage: Usage) -> bool:
        """Whether it borrows any flavor-resource ``usage`` asks for (Kueue's ``IsBorrowingOn``)."""
        return any(usage.get(fr, 0) > 0 for fr in self.borrowed)

    @property
    def value(self) -> float:
        """The weighted share (Kueue's ``PreciseWeightedShare``): what is compared and reported."""
        if self.weight == 0 and self.borrowing:
            return math.inf
        return 0.0 if self.ratio == 0 else self.ratio / self.weight

    @property
    def zero(self) -> bool:
        return self.ratio == 0


def compare(a: Share, b: Share) -> int:
    """-1, 0, 1 as ``a``'s share is lower, equal or higher (Kueue's ``CompareDRS``)."""
    a_inf, b_inf = a.weight == 0 and a.borrowing, b.weight == 0 and b.borrowing
    if a_inf and b_inf:
        x, y = a.ratio, b.ratio
    elif a_inf or b_inf:
        return 1 if a_inf else -1
    else:
        x, y = a.value, b.value
    return (x > y) - (x < y)


def share(node: Node) -> Share:
    """``node``'s Dominant Resource Share as its usage is now."""
    if node.parent is None:
        return Share(node.weight)
    borrowed: dict[str, int] = {}
    frs: list[FlavorResource] = []
    for fr, quota in node.subtree_quota.items():
        over = node.usage.get(fr, 0) - quota
        if over > 0:
            borrowed[fr[1]] = borrowed.get(fr[1], 0) + over
            frs.append(fr)
    if not borrowed:
        return Share(node.weight)
    lendable: dict[str, int] = {}
    for fr in node.root().subtree_quota:
        lendable[fr[1]] = lendable.get(fr[1], 0) + node.parent.potential_available(fr)
    ratio, dominant = 0.0, ""
    for resource in sorted(borrowed):
        total = lendable.get(resource, 0)
        if total > 0 and (r := borrowed[resource] * 1000.0 / total) > ratio:
            ratio, dominant = r, resource
    return Share(node.weight, ratio, dominant, True, frozenset(frs))


def share_with(node: Node, leaf: Node, usage: Usage) -> Share:
    """``node``'s share were ``usage`` added to ``leaf`` (a ClusterQueue at or under ``node``)."""
    leaf.add_usage(usage, 1)
    try:
        return share(node)
    finally:
        leaf.add_usage(usage, -1)


E = TypeVar("E")


def fair_order(
    entries: Sequence[E],
    queue_of: Any,  # entry -> its ClusterQueue
    usage_of: Any,  # entry -> the usage it would add
    rank_of: Any,  # entry -> its tie-break (higher priority first, then earlier), lowest wins
) -> Iterator[E]:
    """Entries one at a time, each chosen by tournament from those left (Kueue's fair-sharing
    iterator): trees in name order; within a tree the shares are computed afresh for each pick, so
    decisions taken on earlier entries count."""
    by_tree: dict[str, list[E]] = {}
    for e in entries:
        by_tree.setdefault(queue_of(e).tree_key, []).append(e)
    for tree in sorted(by_tree):
        left = by_tree[tree]
        while left:
            pick = left[0] if queue_of(left[0]).parent is None else _tournament(left, queue_of, usage_of, rank_of)
            left.remove(pick)
            yield pick


def _tournament(entries: list[E], queue_of: Any, usage_of: Any, rank_of: Any) -> E:
    at: dict[tuple[int, int], Share] = {}  # (id of a cohort, index of an entry) -> share of its child there
    by_queue: dict[int, int] = {}
    for i, e in enumerate(entries):
        cq = queue_of(e)
        by_queue[id(cq)] = i
        usage = usage_of(e)
        cq.add_usage(usage, 1)
        try:
            s = share(cq)
            node = cq.parent
            while node is not None:
                at[(id(node), i)] = s
                s = share(node)
                node = node.parent
        finally:
            cq.add_usage(usage, -1)
    root = queue_of(entries[0]).root()
    assert isinstance(root, CohortNode)
    best = _round(root, entries, at, by_queue, usage_of, rank_of)
    assert best is not None
    return entries[best]


def _round(
    cohort: CohortNode,
    entries: list[E],
    at: dict[tuple[int, int], Share],
    by_queue: dict[int, int],
    usage_of: Any,
    rank_of: Any,
) -> int | None:
    """The index of the entry ``cohort`` sends up (None: none of its subtree has one)."""
    found = [
        i
        for child in cohort.child_cohorts
        if (i := _round(child, entries, at, by_queue, usage_of, rank_of)) is not None
    ]
    found += [by_queue[id(q)] for q in cohort.child_queues if id(q) in by_queue]
    if not found:
        return None
    best = found[0]
    for i in found[1:]:
        a, b = (at[(id(cohort), i)], usage_of(entries[i])), (at[(id(cohort), best)], usage_of(entries[best]))
        if before(*a, *b) or (not before(*b, *a) and rank_of(entries[i]) < rank_of(entries[best])):
            best = i
    return best


def before(a: Share, a_usage: Usage, b: Share, b_usage: Usage) -> bool:
    """Kueue's ``entryComparer.less`` before priority: a child that borrows nothing its head asks
    for first (``FairSharingPrioritizeNonBorrowing``, on by default), then the lower share."""
    a_borrows, b_borrows = a.borrowing_on(a_usage), b.borrowing_on(b_usage)
    if a_borrows != b_borrows:
        return not a_borrows
    return compare(a, b) < 0
