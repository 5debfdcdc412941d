"""A workload as the scheduler sees it: its pod sets, priority and place in line, and where it was
admitted; the quota vocabulary (a flavor-resource, a usage) every part of the core shares.

ClusterQueues hold workloads (``queues.quotas``); the snapshot tracks them (``queues.model``).
"""

from __future__ import annotations

from collections.abc import Container, Mapping
from dataclasses import dataclass, field

from queues import quantity
from queues.podsets import jobs

FlavorResource = tuple[str, str]  # (flavor, resource)
Usage = dict[FlavorResource, int]


@dataclass(slots=True)
class Admission:
    """Where a workload was admitted: its ClusterQueue, flavors per pod set, and the quota it holds."""

    cluster_queue: str
    flavors: dict[str, dict[str, str]]  # pod set -> resource -> flavor
    usage: Usage
    borrowing: bool
    counts: dict[str, int] = field(default_factory=dict)  # pod set -> pods, where partially admitted
    placement: dict[str, dict[str, int]] = field(default_factory=dict)  # TAS pod set -> node -> pods


def usage_of(
    pod_sets: tuple[jobs.PodSet, ...], flavors: Mapping[str, Mapping[str, str]], covered: Container[str]
) -> Usage | None:
    """The quota ``pod_sets`` hold on the flavors chosen for their resources (pod set -> resource ->
    flavor): each pod set's requests, and its pods where the ClusterQueue covers ``pods``, as the
    flavor assigner counts them. None when a resource the ClusterQueue covers has no flavor (a
    resource it does not cover is left out, as it was admitted: IgnoreUndeclared)."""
    usage: Usage = {}
    for ps in pod_sets:
        chosen = flavors.get(ps.name, {})
        requests = dict(ps.total())
        if "pods" in covered:
            requests["pods"] = ps.count * quantity.MILLI
        for res, value in requests.items():
            flavor = chosen.get(res)
            if flavor is None:
                if res in covered:
                    return None
                continue
            if ps.by_flavor and res in ps.by_flavor.get(flavor, ()):
                value = ps.on(flavor, res)  # (a prioritized list, on a flavor serving some of it)
            if value:
                usage[(flavor, res)] = usage.get((flavor, res), 0) + value
    return usage


def placed_on(ps: jobs.PodSet, chosen: Mapping[str, str]) -> Mapping[str, int]:
    """What one pod of ``ps`` takes of a node where it is placed by topology (``placed_requests``),
    on the flavors ``chosen`` for its resources (resource -> flavor): a prioritized list's devices
    as charged there (``queues.dra.alternatives``: one H100 on a flavor of H100 nodes, not two)."""
    if not ps.by_flavor:
        return ps.placed_requests
    placed = dict(ps.node_requests)
    for r in ps.devices:
        placed[r] = placed.get(r, 0) + ps.devices_on(chosen.get(r, ""))[r]
    return placed


def shape_of(pod_sets: tuple[jobs.PodSet, ...]) -> tuple[object, ...]:
    """Everything about pod sets that decides where they fit, as one hashable value."""
    return tuple(
        (
            ps.name,
            ps.count,
            tuple(sorted(ps.requests.items())),
            ps.constraints,
            ps.tolerations,
            ps.min_count,
            ps.topology,
            ps.claims,
            ps.unaccounted,
            tuple(sorted((f, tuple(sorted(r.items()))) for f, r in ps.by_flavor.items())),
            tuple(sorted(ps.container_requests.items())) if ps.container_requests is not None else None,
        )
        for ps in pod_sets
    )


class SharedShapes:
    """One copy of each distinct set of pod sets, shared by every workload (or job) that has it.

    A controller holds 100,000 workloads, and most are copies of a few job templates; ``share``
    answers new pod sets with the first-seen equal ones and their shape, so each template's
    pod sets are held once. The table keeps the ``limit`` most recently used shapes: sharing
    saves memory and never changes a decision.
    """

    def __init__(self, limit: int = 10_000) -> None:
        self.limit = limit
        self._known: dict[tuple[object, ...], tuple[tuple[jobs.PodSet, ...], tuple[object, ...]]] = {}

    def share(self, pod_sets: tuple[jobs.PodSet, ...]) -> tuple[tuple[jobs.PodSet, ...], tuple[object, ...]]:
        """``(pod_sets, shape)``: the shared pod sets equal to ``pod_sets``, and their shape."""
        shape = shape_of(pod_sets)
        known = self._known.pop(shape, None) or (pod_sets, shape)
        self._known[shape] = known  # most recently used last
        if len(self._known) > self.limit:
            del self._known[next(iter(self._known))]
        return known

    def __len__(self) -> int:
        return len(self._known)


@dataclass(slots=True, eq=False)
class Workload:
    """A job as the queue sees it. ``seq`` is submission order, the final tie-break everywhere."""

    key: str
    seq: int
    namespace: str
    local_queue: str | None
    priority: int
    pod_sets: tuple[jobs.PodSet, ...]
    created: float
    queue_ts: float
    labels: Mapping[str, str] = field(default_factory=dict)
    # the class its priority came from (Kueue's ``spec.priorityClassRef.name``; metrics' priority_class)
    priority_class: str = ""
    cluster_queue: str | None = None
    admission: Admission | None = None
    admitted_at: float | None = None
    reason: str = "Pending"
    message: str = ""
    shape: tuple[object, ...] = ()
    # Two-phase admission: admission checks still to pass for the quota it holds (its job starts
    # when none are left), retries so far, when it may queue again, and whether it was deactivated.
    checks: tuple[str, ...] = ()
    retries: int = 0
    requeue_at: float | None = None
    active: bool = True
    requeue_reason: str = "WaitingForCapacity"  # what it waits for while it backs off (PodsReadyTimeout)
    # waitForPodsReady (``queues.podsready``): when its job started (quota held, checks passed) and
    # when all its pods were first Ready, in this admission
    started_at: float | None = None
    ready_at: float | None = None
    # seconds its job ran (admitted, checks passed) in the admissions that ended: Kueue's
    # ``accumulatedPastExecutionTimeSeconds`` (kept in PostgreSQL, ``workloads.executed_seconds``)
    past_run: float = 0.0
    # the workload whose preemption evicted it, until it is admitted again (``victims.in_chain``)
    evicted_by: Workload | None = None
    # its own priority while a spent GPU-hour budget runs it lower (``queues.cycle.budget_priority``)
    own_priority: int | None = None

    @property
    def running_pod_sets(self) -> tuple[jobs.PodSet, ...]:
        """The pod sets as admitted: fewer pods where the admission was partial."""
        return jobs.with_counts(self.pod_sets, self.admission.counts) if self.admission else self.pod_sets

    @property
    def started(self) -> bool:
        """Quota reserved and every admission check passed: the job runs."""
        return self.admission is not None and not self.checks

    def __post_init__(self) -> None:
        if not self.shape:
            self.shape = shape_of(self.pod_sets)

    def order_key(self) -> tuple[int, float, int]:
        """Queue order: 1. higher priority, 2. earlier queue-order timestamp, 3. submission order."""
        return (-self.priority, self.queue_ts, self.seq)
