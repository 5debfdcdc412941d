"""waitForPodsReady: a workload whose pods do not all become Ready in time gives its quota back.

Quota says a gang fits; nodes may not (fragmented, cordoned, a taint, an image that never
pulls). Without a guard such a workload holds its quota forever while its pods stay Pending,
and the queue behind it deadlocks. Kueue's ``waitForPodsReady`` (on by default in its v1beta2
configuration) evicts it with reason ``PodsReadyTimeout`` and requeues it after an exponential
backoff; past ``backoffLimitCount`` requeues it is deactivated. This module is that policy:
its configuration (Kueue's field names and defaults), the deadline of one admitted workload,
and the backoff; ``Scheduler.pods_ready_timeout`` applies the decision.

- ``timeout`` (default 30m): from when the workload started (admitted, checks passed) until
  every pod is Ready (a pod that finished counts as Ready, as Kueue's);
- ``recoveryTimeout`` (default: ``timeout``): from when a workload that was Ready lost a pod
  until it is Ready again;
- ``requeuingStrategy``: ``backoffBaseSeconds`` (60) x 2^(n-1), at most ``backoffMaxSeconds``
  (3600), before the n-th requeue; ``backoffLimitCount`` (unlimited) requeues, then the workload
  is deactivated; ``timestamp``: ``Eviction`` (the requeued workload queues by its eviction time,
  as every evicted workload here) or ``Creation`` (by its creation time).
- A simulation (``turnstile simulate``) ends once nothing but these evictions and requeues has
  happened for ``horizon`` seconds: such a loop never ends by itself.
- ``blockAdmission`` (default false): while an admitted workload's pods are not all Ready, no
  other workload is admitted (Kueue's sequential admission, for clusters where two gangs starting
  at once could deadlock each other on nodes); the waiting heads say which workload they wait
  for. Unlike Kueue, a workload that was Ready and lost a pod does not block (its recovery
  timeout still applies). Kueue's jitter on the backoff is left out (decisions are
  reproducible).
- A job annotated ``kueue.x-k8s.io/pods-ready-timeout: "10m"`` (KEP-4803, alpha: a per-workload
  ``timeout``, for jobs whose pods take longer, or shorter, to start than the cluster's others) has
  that timeout instead of the configured one, while the policy is enabled; the recovery timeout
  stays the configuration's. A value that is not a duration above zero makes the job invalid,
  refused at creation naming the annotation (``queues.podsets.jobs.read_job``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from queues import errors
from queues.errors import FieldError
from queues.quantity import duration

REASON = "PodsReadyTimeout"  # the eviction's reason (Kueue's WorkloadEvictedByPodsReadyTimeout)
LIMIT_EXCEEDED = "RequeuingLimitExceeded"  # the detail of the eviction that deactivates it
# an admitted workload whose started pods the kube-scheduler cannot place (``admission.controller.features.pod_waits``)
PODS_UNSCHEDULABLE = "PodsUnschedulable"

_FIELDS = {"enable", "timeout", "recoveryTimeout", "blockAdmission", "requeuingStrategy"}
_STRATEGY_FIELDS = {"timestamp", "backoffLimitCount", "backoffBaseSeconds", "backoffMaxSeconds"}


@dataclass(frozen=True, slots=True)
class WaitForPodsReady:
    enable: bool = True
    timeout: float = 1800.0
    recovery_timeout: float = 1800.0
    requeue_by_creation: bool = False  # requeuingStrategy.timestamp: Creation
    backoff_limit_count: int | None = None
    backoff_base_seconds: float = 60.0
    backoff_max_seconds: float = 3600.0
    block_admission: bool = False  # admit nothing while an admitted workload is not Ready yet
    time_scale: float = 1.0  # wall seconds per second (engine cluster): a job's own timeout is scaled too
    longest_own_timeout: float = 0.0  # the longest job's own timeout (a scenario's jobs): for ``horizon``

    def backoff(self, requeues: int) -> float:
        """Seconds before the ``requeues``-th requeue (1, 2, ...)."""
        doublings = min(max(0, requeues - 1), 62)  # (past that, the maximum anyway)
        return min(self.backoff_base_seconds * float(2**doublings), self.backoff_max_seconds)

    @property
    def horizon(self) -> float:
        """How long a simulation goes on when nothing but this policy's evictions and requeues
        happens: a gang no node can ever take is evicted and requeued forever (as in Kueue without
        ``backoffLimitCount``); after twice its longest round nothing new can come of it."""
        return 2 * (max(self.timeout, self.longest_own_timeout) + self.backoff_max_seconds)

    def timeout_of(self, annotations: Mapping[str, str]) -> float:
        """The timeout of a job with these annotations: its own (``TIMEOUT_ANNOTATION``), else the policy's."""
        own = own_timeout(annotations)
        return self.timeout if own is None else own * self.time_scale

    def deadline(
        self, started: float, ready: bool, lost_at: float | None, annotations: Mapping[str, str] | None = None
    ) -> float | None:
        """When an admitted workload is evicted unless Ready by then: ``started`` + timeout (its job's
        own, where its ``annotations`` say one) if it was never Ready in this admission, ``lost_at``
        (when a Ready workload lost a pod) + the recovery timeout; None when it is Ready now."""
        if ready or not self.enable:
            return None
        if lost_at is not None:
            return lost_at + self.recovery_timeout
        return started + (self.timeout if annotations is None else self.timeout_of(annotations))


TIMEOUT_ANNOTATION = "kueue.x-k8s.io/pods-ready-timeout"  # (KEP-4803, alpha) a job's own timeout


def own_timeout(annotations: Mapping[str, str], problems: list[FieldError] | None = None) -> float | None:
    """A job's own timeout in seconds (``TIMEOUT_ANNOTATION``), None without one; a value that is not
    a duration above zero is a problem in ``problems`` (None then, as when not given)."""
    raw = annotations.get(TIMEOUT_ANNOTATION)
    if raw is None:
        return None
    found: list[FieldError] = []
    seconds = duration(raw, f"metadata.annotations[{TIMEOUT_ANNOTATION}]", found)
    if problems is not None:
        problems.extend(found)
    return None if found else seconds


DISABLED = WaitForPodsReady(enable=False)


def _whole(value: Any, path: str, problems: list[FieldError], *, least: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        problems.append(FieldError(path, f"must be a whole number >= {least}, not {value!r}"))
        return least
    return value


def parse(raw: Any, path: str = "waitForPodsReady") -> WaitForPodsReady:
    """Kueue's ``waitForPodsReady`` block (None: the defaults, enabled), or ``errors.Invalid``."""
    if raw is None:
        return WaitForPodsReady()
    problems: list[FieldError] = []
    if not isinstance(raw, Mapping):
        raise errors.Invalid([FieldError(path, "must be a mapping (enable, timeout, recoveryTimeout, ...)")])
    for key in raw:
        if key not in _FIELDS:
            problems.append(FieldError(f"{path}.{key}", f"unknown field; one of {', '.join(sorted(_FIELDS))}"))
    enable = raw.get("enable", True)
    if not isinstance(enable, bool):
        problems.append(FieldError(f"{path}.enable", f"must be true or false, not {enable!r}"))
        enable = True
    block = raw.get("blockAdmission", False)
    if not isinstance(block, bool):
        problems.append(FieldError(f"{path}.blockAdmission", f"must be true or false, not {block!r}"))
        block = False
    timeout = duration(raw["timeout"], f"{path}.timeout", problems) if "timeout" in raw else 1800.0
    recovery = (
        duration(raw["recoveryTimeout"], f"{path}.recoveryTimeout", problems) if "recoveryTimeout" in raw else timeout
    )
    strategy = raw.get("requeuingStrategy") or {}
    where = f"{path}.requeuingStrategy"
    if not isinstance(strategy, Mapping):
        problems.append(FieldError(where, "must be a mapping (backoffLimitCount, backoffBaseSeconds, ...)"))
        strategy = {}
    for key in strategy:
        if key not in _STRATEGY_FIELDS:
            problems.append(
                FieldError(f"{where}.{key}", f"unknown field; one of {', '.join(sorted(_STRATEGY_FIELDS))}")
            )
    timestamp = strategy.get("timestamp", "Eviction")
    if timestamp not in ("Eviction", "Creation"):
        problems.append(FieldError(f"{where}.timestamp", f"must be Eviction or Creation, not {timestamp!r}"))
    limit = strategy.get("backoffLimitCount")
    if limit is not None:
        limit = _whole(limit, f"{where}.backoffLimitCount", problems, least=0)
    base = _whole(strategy.get("backoffBaseSeconds", 60), f"{where}.backoffBaseSeconds", problems, least=1)
    most = _whole(strategy.get("backoffMaxSeconds", 3600), f"{where}.backoffMaxSeconds", problems, least=1)
    if problems:
        raise errors.Invalid(problems)
    return WaitForPodsReady(
        enable, timeout, recovery, timestamp == "Creation", limit, float(base), float(most), enable and block
    )
