"""``/metrics``: Kueue's metric names and labels (``spec/cli.md``), so existing dashboards work,
and Turnstile's own (``turnstile_``): the GPU-second ledger, leadership, step timings.

Queue gauges are read at scrape time from the leader's scheduling core (standbys export none, as
Kueue's non-leaders): pending per ClusterQueue (``active`` waiting their turn, ``inadmissible``
set aside until capacity frees), admitted workloads, nominal quota, borrowing limit and usage per
flavor-resource, and each ClusterQueue's status. Counters and histograms are counted by the
leader as it commits decisions; like every Prometheus counter they restart at zero with the
process (``rate()`` handles that).

``turnstile_resource_seconds_total{cluster_queue,flavor,resource,namespace}`` integrates held
quota over time: each label set is a line ``base + rate * (t - since)``, bent whenever a
workload starts or stops holding quota, so a scrape costs one multiplication per label set.
"""

from __future__ import annotations

import time
from collections import Counter as Tally
from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from queues import quantity
from queues.model import Admission, Workload

if TYPE_CHECKING:
    from admission.controller.controller import Controller

Labels = tuple[str, str, str, str]  # cluster_queue, flavor, resource, namespace
WAIT_BUCKETS = (1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200, 21600, 86400, float("inf"))
STEP_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, float("inf"))


class ResourceClock:
    """Resource-seconds held, per (cluster_queue, flavor, resource, namespace)."""

    def __init__(self) -> None:
        self.lines: dict[Labels, tuple[float, float, float]] = {}  # base, rate (units), since
        self.holding: dict[str, tuple[str, Admission]] = {}  # workload key -> (namespace, admission)

    def _bend(self, labels: Labels, delta_rate: float, at: float) -> None:
        base, rate, since = self.lines.get(labels, (0.0, 0.0, at))
        self.lines[labels] = (base + rate * max(0.0, at - since), rate + delta_rate, at)

    def _each(self, namespace: str, admission: Admission) -> Iterator[tuple[Labels, float]]:
        for (flavor, resource), milli in admission.usage.items():
            yield (admission.cluster_queue, flavor, resource, namespace), milli / quantity.MILLI

    def start(self, wl: Workload, at: float) -> None:
        if wl.admission is None or wl.key in self.holding:
            return
        self.holding[wl.key] = (wl.namespace, wl.admission)
        for labels, units in self._each(wl.namespace, wl.admission):
            self._bend(labels, units, at)

    def stop(self, key: str, at: float) -> None:
        held = self.holding.pop(key, None)
        if held is not None:
            for labels, units in self._each(*held):
                self._bend(labels, -units, at)

    def stop_all(self, at: float) -> None:
        for key in list(self.holding):
            self.stop(key, at)

    def values(self, at: float) -> dict[Labels, float]:
        return {labels: base + rate * max(0.0, at - since) for labels, (base, rate, since) in self.lines.items()}


class _QueueCollector(Collector):
    def __init__(self, controller: Controller, clock: ResourceClock) -> None:
        self.controller = controller
        self.clock = clock

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        seconds = CounterMetricFamily(
            "turnstile_resource_seconds",
            "Resource-seconds of quota held by admitted workloads (GPU-seconds for GPUs)",
            labels=["cluster_queue", "flavor", "resource", "namespace"],
        )
        for labels, value in sorted(self.clock.values(time.time()).items()):
            seconds.add_metric(list(labels), value)
        yield seconds
        term = self.controller.term
        if term is None:
            return
        sched = term.scheduler
        pending = GaugeMetricFamily(
            "kueue_pending_workloads",
            "Workloads waiting, by ClusterQueue and status",
            labels=["cluster_queue", "status"],
        )
        active = GaugeMetricFamily(
            "kueue_admitted_active_workloads", "Admitted workloads holding quota", labels=["cluster_queue"]
        )
        quota_labels = ["cohort", "cluster_queue", "flavor", "resource"]
        nominal = GaugeMetricFamily("kueue_cluster_queue_nominal_quota", "Nominal quota", labels=quota_labels)
        borrowing = GaugeMetricFamily("kueue_cluster_queue_borrowing_limit", "Borrowing limit", labels=quota_labels)
        usage = GaugeMetricFamily("kueue_cluster_queue_resource_usage", "Quota in use", labels=quota_labels)
        status = GaugeMetricFamily(
            "kueue_cluster_queue_status", "1 for the ClusterQueue's status", labels=["cluster_queue", "status"]
        )
        waiting = Tally(sched.pending.where.values())
        for name, cq in sorted(sched.snapshot.queues.items()):
            state = sched.pending.queues.get(name)
            aside = len(state.inadmissible) if state is not None else 0
            pending.add_metric([name, "active"], max(0, waiting.get(name, 0) - aside))
            pending.add_metric([name, "inadmissible"], aside)
            active.add_metric([name], len(cq.workloads))
            cohort = cq.cohort_name or ""
            for (flavor, resource), q in sorted(cq.quotas.items()):
                fr = [cohort, name, flavor, resource]
                nominal.add_metric(fr, q.nominal / quantity.MILLI)
                usage.add_metric(fr, cq.usage.get((flavor, resource), 0) / quantity.MILLI)
                if q.borrowing_limit is not None:
                    borrowing.add_metric(fr, q.borrowing_limit / quantity.MILLI)
            now = (
                "terminating"
                if name in sched.config.terminating
                else "active"
                if cq.inactive_reason is None
                else "pending"
            )
            for s in ("pending", "active", "terminating"):
                status.add_metric([name, s], 1.0 if s == now else 0.0)
        yield from (pending, active, nominal, borrowing, usage, status)


class Metrics:
    """One replica's metrics; the controller reports its decisions here."""

    def __init__(self, controller: Controller) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.admitted = Counter(
            "kueue_admitted_workloads", "Workloads admitted", ["cluster_queue"], registry=r
        )  # exported as kueue_admitted_workloads_total
        self.evicted = Counter("kueue_evicted_workloads", "Workloads evicted", ["cluster_queue", "reason"], registry=r)
        self.preempted = Counter(
            "kueue_preempted_workloads", "Workloads preempted", ["preempting_cluster_queue", "reason"], registry=r
        )
        self.attempts = Counter("kueue_admission_attempts", "Scheduling attempts", ["result"], registry=r)
        self.attempt_seconds = Histogram(
            "kueue_admission_attempt_duration_seconds",
            "Time of a scheduling attempt",
            ["result"],
            buckets=STEP_BUCKETS,
            registry=r,
        )
        self.wait = Histogram(
            "kueue_admission_wait_time_seconds",
            "From queueing (or the last eviction) to admission",
            ["cluster_queue"],
            buckets=WAIT_BUCKETS,
            registry=r,
        )
        self.step_seconds = Histogram(
            "turnstile_step_duration_seconds", "One scheduling step: observe, decide, commit", buckets=STEP_BUCKETS,
            registry=r,
        )  # fmt: skip
        leader = Gauge("turnstile_leader", "1 while this replica holds the scheduler lease", registry=r)
        leader.set_function(lambda: 1.0 if controller.term is not None else 0.0)
        steps = Gauge("turnstile_scheduling_steps", "Scheduling steps run by this replica", registry=r)
        steps.set_function(lambda: float(controller.steps))
        self.clock = ResourceClock()
        r.register(_QueueCollector(controller, self.clock))

    def attempt(self, admitted: int, seconds: float) -> None:
        result = "success" if admitted else "inadmissible"
        self.attempts.labels(result).inc()
        self.attempt_seconds.labels(result).observe(seconds)

    def admitted_workload(self, wl: Workload, at: float) -> None:
        assert wl.admission is not None
        self.admitted.labels(wl.admission.cluster_queue).inc()
        self.wait.labels(wl.admission.cluster_queue).observe(max(0.0, at - wl.queue_ts))
        self.clock.start(wl, at)

    def evicted_workload(
        self, key: str, cluster_queue: str, reason: str, detail: str, by: str | None, at: float
    ) -> None:
        """``reason`` as Kueue's evicted reason (Preempted, ClusterQueueStopped); a preemption also
        counts for the preempting ClusterQueue ``by`` with Kueue's preemption reason (``detail``:
        InClusterQueue, InCohortReclamation, ...)."""
        self.evicted.labels(cluster_queue, reason).inc()
        if by is not None:
            self.preempted.labels(by, detail).inc()
        self.clock.stop(key, at)
