"""The scheduler's decisions: admit a workload where its flavors fit, or evict one (and why).

``Admit``, ``Evict`` and ``Resize`` (an elastic job's admission resized in place) are what the core
hands its callers (the controller commits them, engine core enacts them); the eviction reasons
are scenario.md's ``Evicted.reason`` values. ``Told`` is what it says besides deciding (a waiting
workload's reason, an admission check's state), which the caller takes with
``Scheduler.take_told`` to store.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from queues.cycle import provisioning
from queues.cycle.assignment import Assignment
from queues.model import Admission, Workload
from queues.podsets import jobs

PREEMPTED = "Preempted"
CLUSTER_QUEUE_STOPPED = "ClusterQueueStopped"
NODE_FAILURES = "NodeFailures"  # a node its pods were placed on is gone (Kueue's WorkloadEvictedDueToNodeFailures)
# a running job's pods no longer match its admission (its parallelism was changed): Kueue's stop reason
NO_MATCHING_WORKLOAD = "NoMatchingWorkload"
ADMISSION_CHECK = provisioning.ADMISSION_CHECK
# spec.active set to false (kueuectl stop workload, turnstile stop workload): Kueue's WorkloadDeactivated
DEACTIVATED = "Deactivated"
DEACTIVATED_MESSAGE = "The workload is deactivated"


@dataclass(frozen=True, slots=True)
class Admit:
    workload: Workload
    assignment: Assignment
    admission: Admission  # as decided; the workload may be evicted again later in the same call


@dataclass(frozen=True, slots=True)
class Evict:
    workload: Workload
    reason: str  # Preempted | ClusterQueueStopped | AdmissionCheck
    detail: str  # InClusterQueue | InCohortReclamation | InCohortReclaimWhileBorrowing | Retry | Rejected | ...
    by: str | None = None
    released: Admission | None = None  # the admission the eviction ended
    message: str = ""  # why, for a person (GPUIdle: the utilisation measured)
    ready_at: float | None = None  # when all its pods were Ready in the admission it ended (metrics)

    @property
    def cluster_queue(self) -> str:
        return self.released.cluster_queue if self.released else ""


@dataclass(frozen=True, slots=True)
class Resize:
    """An elastic ``workload``'s admission changed size while its job runs (``queues.cycle.elastic``):
    ``released`` before, ``admission`` now, in the same ClusterQueue and flavors."""

    workload: Workload
    released: Admission
    admission: Admission
    before: tuple[tuple[jobs.PodSet, ...], tuple[object, ...]] = ((), ())  # its pod sets and shape before

    @property
    def counts(self) -> dict[str, int]:
        """Pods per pod set now."""
        return {ps.name: ps.count for ps in self.workload.pod_sets}


Decision = Admit | Evict | Resize


@dataclass(slots=True)
class Told:
    """What the scheduler said since its caller last took it (``Scheduler.take_told``)."""

    said: set[str] = field(default_factory=set)  # workloads whose reason or message changed
    # workloads whose admission-check state changed -> whether their job may start now
    checked: dict[str, bool] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.said or self.checked)
