"""Partial admission (Kueue's KEP-420): the most pods a workload may start with, when not all fit.

A pod set with a ``min_count`` (a batch Job's ``kueue.x-k8s.io/job-min-parallelism``) may be
admitted with fewer pods, down to that minimum. When a workload fits neither as it is nor by
preempting, Kueue searches, by bisection over how many pods to give up, for the smallest
reduction that fits (or fits by preempting), shrinking pod sets from the last one towards the
first and moving on only when one is at its minimum (``PodSetReducer``, ordered). The search
assumes that fewer pods never fit worse, which holds for quota.

Kueue then "gives back" pods a multi-pod-set reduction cut needlessly; with at most one pod set
per workload that may shrink (every kind Turnstile reads partially: a batch Job) there is
nothing to give back, so that step is not here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

from queues.podsets import jobs

T = TypeVar("T")


def reducible(pod_sets: Sequence[jobs.PodSet]) -> bool:
    """Whether any pod set may run with fewer pods than it asks for."""
    return any(ps.min_count is not None and ps.min_count < ps.count for ps in pod_sets)


def smallest(pod_sets: Sequence[jobs.PodSet]) -> dict[str, int]:
    """The counts of the smallest admission: every pod set that may shrink at its minimum."""
    return {ps.name: ps.min_count for ps in pod_sets if ps.min_count is not None and ps.min_count < ps.count}


def counts_for(pod_sets: Sequence[jobs.PodSet], give_up: int) -> dict[str, int]:
    """The counts after giving up ``give_up`` pods, taken from the last pod set first."""
    out: dict[str, int] = {}
    left = give_up
    for ps in reversed(pod_sets):
        spare = ps.count - (ps.min_count if ps.min_count is not None else ps.count)
        cut = min(spare, left)
        if cut:
            out[ps.name] = ps.count - cut
        left -= cut
    return out


def search(pod_sets: Sequence[jobs.PodSet], fits: Callable[[dict[str, int]], T | None]) -> T | None:
    """``fits``' answer for the fewest pods given up that it accepts (None from ``fits``: does not
    fit), or None when not even every pod set at its minimum fits."""
    spare = sum(ps.count - ps.min_count for ps in pod_sets if ps.min_count is not None and ps.min_count < ps.count)
    if spare <= 0:
        return None
    best: T | None = None
    lo, hi = 1, spare  # giving up 0 pods is the full workload, which the caller tried
    while lo <= hi:
        mid = (lo + hi) // 2
        found = fits(counts_for(pod_sets, mid))
        if found is not None:
            best, hi = found, mid - 1
        else:
            lo = mid + 1
    return best
