"""Kueue's per-workload counters and histograms on ``/metrics``: what happened to each workload
the leader committed, counted per ClusterQueue, per LocalQueue and per Cohort.

Why a module of its own: the queue gauges (``admission.controller.monitoring.metrics``) are read from the
core at scrape time, while these are counted as decisions are committed, each from the moments
a workload passes (queued, quota reserved, admitted, all its pods Ready, evicted, finished), with
Kueue's names, labels and meanings (pkg/metrics/metrics.go):

- counters: ``kueue_{quota_reserved,admitted,finished}_workloads_total`` and their ``local_queue_``
  twins, ``kueue_local_queue_evicted_workloads_total{reason}``,
  ``kueue_evicted_workloads_once_total{cluster_queue,reason,underlying_cause}`` (a workload's first
  eviction for a reason; Kueue keeps that memory in the Workload's ``schedulingStats``, this
  replica in memory: after a restart a workload's next eviction counts once more), and
  ``kueue_cohort_subtree_admitted_workloads_total{cohort}`` (each admission, in every Cohort above
  its ClusterQueue);
- waits: queued (or requeued) to quota reserved, to admitted and to every pod Ready; quota
  reserved to admitted (``admission_checks_wait_time``); admitted to Ready; Ready to evicted;
  per ClusterQueue, most of them per LocalQueue too;
- ``kueue_execution_time_seconds``: first admission to completion, across evictions (what the job
  ran; ``workloads.executed_seconds`` keeps the past admissions' part across restarts);
- ``kueue_workload_creation_latency_seconds{job_kind}``: a job's creation to its Workload object's
  (``admission.controller.objects.workload_projection``), and
  ``kueue_pod_scheduling_gate_removal_seconds{name,cluster_queue,is_group}``: a plain pod's
  admission to its gate's removal (``admission.controller.enactor``).

Like every Prometheus counter they restart at zero with the process (``rate()`` handles that).
The waits use Turnstile's buckets (1 s to a day), not Kueue's exponential ones.
"""

from __future__ import annotations

from collections.abc import Iterable

from admission.controller.monitoring import exposition
from admission.controller.monitoring.exposition import Exposition
from queues import podsready
from queues.model import Workload

WAIT_BUCKETS = (1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200, 21600, 86400, float("inf"))
# (Kueue's: 0.01 s doubling eleven times; its gate removal histogram uses Prometheus' defaults)
LATENCY_BUCKETS = (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, float("inf"))
GATE_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, float("inf"))
# (Kueue's labels on the per-workload families: the queue, and the class the priority came from)
CQ, LQ = ("cluster_queue", "priority_class"), ("name", "namespace", "priority_class")


def underlying_cause(detail: str) -> str:
    """Kueue's ``underlying_cause`` label of an eviction: empty unless the eviction ended its
    workload's retries (``RequeuingLimitExceeded``)."""
    return detail if detail == podsready.LIMIT_EXCEEDED else ""


def _local_queue_twin(name: str) -> str:
    return name.replace("kueue_", "kueue_local_queue_", 1)


class _CountedTwins:
    """One of Kueue's counters per ClusterQueue and its ``local_queue_`` twin."""

    def __init__(self, name: str, help_text: str) -> None:
        self.cq = exposition.Counter(name, help_text, CQ)
        self.lq = exposition.Counter(_local_queue_twin(name), help_text, LQ)

    def inc(self, wl: Workload, cluster_queue: str) -> None:
        self.cq.inc(cluster_queue, wl.priority_class)
        if wl.local_queue is not None:
            self.lq.inc(wl.local_queue, wl.namespace, wl.priority_class)

    def write(self, out: Exposition) -> None:
        self.cq.write(out)
        self.lq.write(out)


class _Twins:
    """One of Kueue's histograms per ClusterQueue and its ``local_queue_`` twin."""

    def __init__(self, name: str, help_text: str, buckets: tuple[float, ...] = WAIT_BUCKETS) -> None:
        self.cq = exposition.Histograms(name, help_text, CQ, buckets)
        self.lq = exposition.Histograms(_local_queue_twin(name), help_text, LQ, buckets)

    def observe(self, seconds: float, wl: Workload, cluster_queue: str) -> None:
        seconds = max(0.0, seconds)
        self.cq.observe(seconds, cluster_queue, wl.priority_class)
        if wl.local_queue is not None:
            self.lq.observe(seconds, wl.local_queue, wl.namespace, wl.priority_class)

    def write(self, out: Exposition) -> None:
        self.cq.write(out)
        self.lq.write(out)


class WorkloadMetrics:
    """The counters and histograms; the reporter tells it each committed moment."""

    def __init__(self) -> None:
        counter = exposition.Counter
        self.admitted = _CountedTwins("kueue_admitted_workloads", "Workloads admitted (their jobs started)")
        self.reserved = _CountedTwins("kueue_quota_reserved_workloads", "Workloads that reserved quota")
        self.finished = _CountedTwins("kueue_finished_workloads", "Admitted workloads whose job finished")
        self.lq_evicted = counter(
            "kueue_local_queue_evicted_workloads",
            "Workloads evicted",
            ("name", "namespace", "reason", "underlying_cause", "priority_class"),
        )
        self.evicted_once = counter(
            "kueue_evicted_workloads_once",
            "Workloads evicted, each counted once per reason",
            ("cluster_queue", "reason", "underlying_cause", "priority_class"),
        )
        self.cohort_admitted = counter(
            "kueue_cohort_subtree_admitted_workloads",
            "Workloads admitted under the Cohort",
            ("cohort", "priority_class"),
        )
        self.evicted_for: dict[str, set[tuple[str, str]]] = {}  # workload key -> (reason, cause) counted once
        self.admission_waits = _Twins("kueue_admission_wait_time_seconds", "From queueing (or requeueing) to admission")
        self.reserved_waits = _Twins(
            "kueue_quota_reserved_wait_time_seconds", "From queueing (or requeueing) to quota reserved"
        )
        self.checks_waits = _Twins("kueue_admission_checks_wait_time_seconds", "From quota reserved to admission")
        self.ready_waits = _Twins("kueue_ready_wait_time_seconds", "From queueing (or requeueing) to every pod Ready")
        self.admitted_ready_waits = _Twins(
            "kueue_admitted_until_ready_wait_time_seconds", "From admission to every pod Ready"
        )
        self.execution = _Twins(
            "kueue_execution_time_seconds", "What a finished workload's job ran, first admission to completion"
        )
        self.ready_to_evicted = exposition.Histograms(
            "kueue_pods_ready_to_evicted_time_seconds",
            "From every pod Ready to eviction",
            ("cluster_queue", "reason", "underlying_cause"),
            WAIT_BUCKETS,
        )
        self.creation = exposition.Histograms(
            "kueue_workload_creation_latency_seconds",
            "From a job's creation to its Workload object's",
            ("job_kind",),
            LATENCY_BUCKETS,
        )
        self.gate_removal = exposition.Histograms(
            "kueue_pod_scheduling_gate_removal_seconds",
            "From a pod's admission to the removal of its scheduling gate",
            ("name", "cluster_queue", "is_group"),
            GATE_BUCKETS,
        )

    def write(self, out: Exposition) -> None:
        for twins in (self.admitted, self.reserved, self.finished, self.admission_waits, self.reserved_waits,
                      self.checks_waits, self.ready_waits, self.admitted_ready_waits, self.execution):  # fmt: skip
            twins.write(out)
        for counter in (self.lq_evicted, self.evicted_once, self.cohort_admitted):
            counter.write(out)
        for histogram in (self.ready_to_evicted, self.creation, self.gate_removal):
            histogram.write(out)

    # ----- the moments -----------------------------------------------------------------------------

    def reserved_workload(self, wl: Workload, at: float) -> None:
        assert wl.admission is not None
        cq = wl.admission.cluster_queue
        self.reserved.inc(wl, cq)
        self.reserved_waits.observe(at - wl.queue_ts, wl, cq)

    def admitted_workload(self, wl: Workload, at: float, cohorts: Iterable[str] = ()) -> None:
        """Admitted (its job starts): ``cohorts``, every Cohort above its ClusterQueue."""
        assert wl.admission is not None
        cq = wl.admission.cluster_queue
        self.admitted.inc(wl, cq)
        self.admission_waits.observe(at - wl.queue_ts, wl, cq)
        reserved = wl.admitted_at if wl.admitted_at is not None else at
        self.checks_waits.observe(at - reserved, wl, cq)
        for cohort in cohorts:
            self.cohort_admitted.inc(cohort, wl.priority_class)

    def ready_workload(self, wl: Workload, at: float) -> None:
        """Every pod of an admitted workload Ready, the first time in this admission."""
        if wl.admission is None:
            return
        cq = wl.admission.cluster_queue
        self.ready_waits.observe(at - wl.queue_ts, wl, cq)
        self.admitted_ready_waits.observe(at - (wl.started_at if wl.started_at is not None else at), wl, cq)

    def evicted_workload(
        self, wl: Workload, cluster_queue: str, reason: str, detail: str, at: float, ready_at: float | None
    ) -> None:
        cause = underlying_cause(detail)
        if wl.local_queue is not None:
            self.lq_evicted.inc(wl.local_queue, wl.namespace, reason, cause, wl.priority_class)
        seen = self.evicted_for.setdefault(wl.key, set())
        if (reason, cause) not in seen:
            seen.add((reason, cause))
            self.evicted_once.inc(cluster_queue, reason, cause, wl.priority_class)
        if ready_at is not None:
            self.ready_to_evicted.observe(max(0.0, at - ready_at), cluster_queue, reason, cause)

    def finished_workload(self, wl: Workload, at: float) -> None:
        """An admitted workload's job finished (Kueue counts the ones that held quota)."""
        self.evicted_for.pop(wl.key, None)
        if wl.admission is None:
            return
        cq = wl.admission.cluster_queue
        self.finished.inc(wl, cq)
        ran = wl.past_run + (max(0.0, at - wl.started_at) if wl.started_at is not None else 0.0)
        self.execution.observe(ran, wl, cq)

    def forget(self, key: str) -> None:
        """A workload that is gone without finishing (its job deleted)."""
        self.evicted_for.pop(key, None)

    def object_created(self, job_kind: str, seconds: float) -> None:
        self.creation.observe(max(0.0, seconds), job_kind)

    def gate_removed(self, gate: str, cluster_queue: str, is_group: bool, seconds: float) -> None:
        self.gate_removal.observe(max(0.0, seconds), gate, cluster_queue, "true" if is_group else "false")
