"""``/metrics``: Kueue's metric names and labels (``spec/cli.md``), so existing dashboards work,
and Turnstile's own (``turnstile_``): the GPU-second ledger, leadership, step timings.

Queue gauges are read at scrape time from the leader's scheduling core (standbys export none, as
Kueue's non-leaders): pending per ClusterQueue (``active`` waiting their turn, ``inadmissible``
set aside until capacity frees), admitted workloads, nominal quota, borrowing limit and usage per
flavor-resource, and each ClusterQueue's status; the Cohort tree (``cohort_metrics``) and the
LocalQueues (``local_queue_metrics``) likewise. Counters and histograms, per ClusterQueue and per
LocalQueue (admitted, quota reserved, evicted, finished; the waits to quota and to admission),
are counted by the leader as it commits decisions; like every Prometheus counter they restart at
zero with the process (``rate()`` handles that).

``turnstile_resource_seconds_total{cluster_queue,flavor,resource,namespace}`` integrates held
quota over time: each label set is a line ``base + rate * (t - since)``, bent whenever a
workload starts or stops holding quota, so a scrape costs one multiplication per label set.
"""

from __future__ import annotations

import importlib.metadata
import math
import platform
import sys
import time
from collections import Counter as Tally
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from admission.controller.monitoring import cohort_metrics
from admission.controller.monitoring.exposition import Exposition, escape
from admission.controller.monitoring.local_queue_metrics import LocalQueueGauges
from admission.controller.monitoring.workload_metrics import WorkloadMetrics, underlying_cause
from queues import quantity
from queues.cycle.fairsharing import Share, share
from queues.model import Admission, FlavorResource, Workload

if TYPE_CHECKING:
    from admission.controller.term import Term


class _Counting(Protocol):
    @property
    def count(self) -> int: ...


class _Healthy(Protocol):
    @property
    def ok(self) -> bool: ...


class _Reading(Protocol):
    @property
    def failures(self) -> int: ...

    @property
    def problem(self) -> str | None: ...


class _Finishing(Protocol):
    @property
    def finished(self) -> Mapping[tuple[str, str, str], int]: ...


class _Answering(Protocol):
    @property
    def answers(self) -> Mapping[tuple[str, int], int]: ...


class _Features(Protocol):
    @property
    def reclaimer(self) -> _Reading: ...  # idle reclaim's utilisation reader

    @property
    def projection(self) -> _Finishing: ...  # the Workload objects


class Replica(Protocol):
    """What the metrics read of their replica, at each scrape (``admission.controller.controller.
    Controller`` is one): declared here so that monitoring depends on nothing above it."""

    @property
    def term(self) -> Term | None: ...  # the leader's term; None on a follower

    @property
    def steps(self) -> _Counting: ...

    @property
    def database(self) -> _Healthy: ...

    @property
    def features(self) -> _Features: ...

    @property
    def kube(self) -> _Answering: ...


Labels = tuple[str, str, str, str]  # cluster_queue, flavor, resource, namespace
ROLE_LABEL = "replica_role"  # Kueue's, on every kueue_ family but build_info
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


def _version() -> str:
    try:
        return f"v{importlib.metadata.version('turnstile')}"
    except importlib.metadata.PackageNotFoundError:  # (run from a source tree that is not installed)
        return "unknown"


def write_queues(
    out: Exposition,
    controller: Replica,
    clock: ResourceClock,
    local: LocalQueueGauges | None = None,
    finished: Mapping[tuple[str, str, str], int] | None = None,
) -> None:
    """The ledger clock, and the leader's queue gauges (a standby has none), as Kueue names them;
    ``finished``: the finished Workload objects per (ClusterQueue, namespace, LocalQueue)."""
    out.family(
        "turnstile_resource_seconds_total",
        "counter",
        "Resource-seconds of quota held by admitted workloads (GPU-seconds for GPUs)",
    )
    for (queue, flavor, resource, ns), value in sorted(clock.values(time.time()).items()):
        labels = (
            f'cluster_queue="{escape(queue)}",flavor="{escape(flavor)}",'
            f'resource="{escape(resource)}",namespace="{escape(ns)}"'
        )
        out.sample("turnstile_resource_seconds_total", labels, value)
    term = controller.term
    if term is None:
        return
    sched = term.scheduler
    waiting = Tally(sched.pending.where.values())
    pending, active, reserving, status = (Exposition(out.role) for _ in range(4))
    nominal, borrowing, lending, usage, reservation = (Exposition(out.role) for _ in range(5))
    running: dict[str, int] = {}  # admitted workloads per ClusterQueue
    for name, cq in sorted(sched.snapshot.queues.items()):
        q_label = f'cluster_queue="{escape(name)}"'
        state = sched.pending.queues.get(name)
        aside = len(state.inadmissible) if state is not None else 0
        pending.sample("kueue_pending_workloads", f'{q_label},status="active"', max(0, waiting.get(name, 0) - aside))
        pending.sample("kueue_pending_workloads", f'{q_label},status="inadmissible"', aside)
        # Kueue's two counts: reserving quota (admission checks may still run), and admitted (started)
        started = [w for w in cq.workloads.values() if not w.checks]  # (``Workload.started``: all hold quota)
        running[name] = len(started)
        reserving.sample("kueue_reserving_active_workloads", q_label, len(cq.workloads))
        active.sample("kueue_admitted_active_workloads", q_label, len(started))
        in_use: dict[FlavorResource, int] = {}  # (what started work holds)
        if len(started) == len(cq.workloads):
            in_use = cq.usage  # (all of it started: the reservation the core keeps, not a sum of 50,000)
        else:
            for w in started:
                for fr_key, v in (w.admission.usage if w.admission is not None else {}).items():
                    in_use[fr_key] = in_use.get(fr_key, 0) + v
        cohort = escape(cq.cohort_name or "")
        for (flavor, resource), q in sorted(cq.quotas.items()):
            fr = f'cohort="{cohort}",{q_label},flavor="{escape(flavor)}",resource="{escape(resource)}"'
            nominal.sample("kueue_cluster_queue_nominal_quota", fr, q.nominal / quantity.MILLI)
            held = cq.usage.get((flavor, resource), 0)
            reservation.sample("kueue_cluster_queue_resource_reservation", fr, held / quantity.MILLI)
            usage.sample("kueue_cluster_queue_resource_usage", fr, in_use.get((flavor, resource), 0) / quantity.MILLI)
            # (Kueue: +Inf where the limit is unset)
            limit = math.inf if q.borrowing_limit is None else q.borrowing_limit / quantity.MILLI
            borrowing.sample("kueue_cluster_queue_borrowing_limit", fr, limit)
            limit = math.inf if q.lending_limit is None else q.lending_limit / quantity.MILLI
            lending.sample("kueue_cluster_queue_lending_limit", fr, limit)
        now = "active" if cq.inactive_reason is None else "pending"
        if name in sched.config.terminating:
            now = "terminating"
        for st in ("pending", "active", "terminating"):
            status.sample("kueue_cluster_queue_status", f'{q_label},status="{st}"', 1.0 if st == now else 0.0)
    shares = Exposition(out.role)
    if sched.fair_sharing is not None:  # Kueue's: ceil(weighted share); MaxInt64 for a zero weight that borrows
        for name, cq in sorted(sched.snapshot.queues.items()):
            shares.sample("kueue_cluster_queue_weighted_share", f'cluster_queue="{escape(name)}"', _rounded(share(cq)))
        for name, cohort_node in sorted(sched.snapshot.cohorts.items()):
            shares.sample("kueue_cohort_weighted_share", f'cohort="{escape(name)}"', _rounded(share(cohort_node)))
    lq_families = (local or LocalQueueGauges()).families(sched, out.role)
    for family, kind, help_text, part in (
        ("kueue_pending_workloads", "gauge", "Workloads waiting, by ClusterQueue and status", pending),
        ("kueue_reserving_active_workloads", "gauge", "Workloads reserving quota", reserving),
        ("kueue_admitted_active_workloads", "gauge", "Admitted workloads (their jobs started)", active),
        ("kueue_cluster_queue_nominal_quota", "gauge", "Nominal quota", nominal),
        ("kueue_cluster_queue_borrowing_limit", "gauge", "Borrowing limit (+Inf: unset)", borrowing),
        ("kueue_cluster_queue_lending_limit", "gauge", "Lending limit (+Inf: unset)", lending),
        ("kueue_cluster_queue_resource_reservation", "gauge", "Quota reserved", reservation),
        ("kueue_cluster_queue_resource_usage", "gauge", "Quota used by admitted workloads", usage),
        ("kueue_cluster_queue_status", "gauge", "1 for the ClusterQueue's status", status),
        *lq_families,
    ):
        out.family(family, kind, help_text)
        out.lines.extend(part.lines)
    cohort_metrics.write_hierarchy(out, sched, running)
    _finished_objects(out, finished or {})
    if shares.lines:
        for family, help_text in (
            (
                "kueue_cluster_queue_weighted_share",
                "Borrowed over lendable (per mille) of the dominant resource, / weight",
            ),
            ("kueue_cohort_weighted_share", "A Cohort's weighted share in its parent"),
        ):
            out.family(family, "gauge", help_text)
            out.lines.extend(line for line in shares.lines if line.startswith(family + "{"))


def _finished_objects(out: Exposition, finished: Mapping[tuple[str, str, str], int]) -> None:
    """Kueue's gauges of the finished Workload objects there are (they stay while their job does,
    ``admission.store.workload_objects.RETENTION`` at most), per ClusterQueue and per LocalQueue."""
    by_cq: Tally[str] = Tally()
    for (cq, _, _), n in finished.items():
        by_cq[cq] += n
    out.family("kueue_finished_workloads", "gauge", "Finished Workload objects, per ClusterQueue")
    for cq, n in sorted(by_cq.items()):
        out.sample("kueue_finished_workloads", f'cluster_queue="{escape(cq)}"', n)
    by_lq: Tally[tuple[str, str]] = Tally()
    for (_, ns, lq), n in finished.items():
        if lq:
            by_lq[(ns, lq)] += n
    out.family("kueue_local_queue_finished_workloads", "gauge", "Finished Workload objects, per LocalQueue")
    for (ns, lq), n in sorted(by_lq.items()):
        out.sample("kueue_local_queue_finished_workloads", f'name="{escape(lq)}",namespace="{escape(ns)}"', n)


def _rounded(s: Share) -> float:
    """Kueue's ``roundedWeightedShare``: the weighted share rounded up; MaxInt64 when infinite."""
    return float(2**63 - 1) if math.isinf(s.value) else float(math.ceil(s.value))


class Metrics:
    """One replica's metrics; the controller reports its decisions here."""

    def __init__(self, controller: Replica) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        build = Gauge(
            "kueue_build_info",
            "Build information: 1, labeled by version (Turnstile's), commit, build date, runtime, compiler, platform",
            ["git_version", "git_commit", "build_date", "go_version", "compiler", "platform"],
            registry=r,
        )  # (Kueue's label names; go_version carries the Python version)
        build.labels(_version(), "", "", f"python{platform.python_version()}", platform.python_implementation().lower(),
                     f"{sys.platform}/{platform.machine()}").set(1)  # fmt: skip
        self.workloads = WorkloadMetrics()  # Kueue's per-workload counters and waits
        role = ROLE_LABEL
        self.evicted = Counter(
            "kueue_evicted_workloads",
            "Workloads evicted",
            ["cluster_queue", "reason", "underlying_cause", "priority_class", role],
            registry=r,
        )
        self.preempted = Counter(
            "kueue_preempted_workloads", "Workloads preempted", ["preempting_cluster_queue", "reason", role], registry=r
        )
        self.attempts = Counter("kueue_admission_attempts", "Scheduling attempts", ["result", role], registry=r)
        self.attempt_seconds = Histogram(
            "kueue_admission_attempt_duration_seconds",
            "Time of a scheduling attempt",
            ["result", role],
            buckets=STEP_BUCKETS,
            registry=r,
        )
        self.step_seconds = Histogram(
            "turnstile_step_duration_seconds", "One scheduling step: observe, decide, commit", buckets=STEP_BUCKETS,
            registry=r,
        )  # fmt: skip
        leader = Gauge("turnstile_leader", "1 while this replica holds the scheduler lease", registry=r)
        leader.set_function(lambda: 1.0 if controller.term is not None else 0.0)
        steps = Gauge("turnstile_scheduling_steps", "Scheduling steps run by this replica", registry=r)
        steps.set_function(lambda: float(controller.steps.count))
        database_up = Gauge(
            "turnstile_database_up", "1 while PostgreSQL answered this replica's last round trip", registry=r
        )
        database_up.set_function(lambda: 1.0 if controller.database.ok else 0.0)
        # idle reclaim (``admission.controller.features.reclaim``): what it did, and whether it can see
        self.gpu_idle = Counter(
            "turnstile_gpu_idle_workloads", "Workloads found idling on their GPUs, by what was done",
            ["cluster_queue", "action"], registry=r,
        )  # fmt: skip
        read_errors = Gauge(
            "turnstile_gpu_utilization_read_failures", "Looks at which GPU utilisation could not be read", registry=r
        )
        read_errors.set_function(lambda: float(controller.features.reclaimer.failures))
        readable = Gauge(
            "turnstile_gpu_utilization_readable",
            "1 while the last look read GPU utilisation (0: nothing is reclaimed)", registry=r,
        )  # fmt: skip
        readable.set_function(lambda: 0.0 if controller.features.reclaimer.problem else 1.0)
        self.clock = ResourceClock()
        self.local_queues = LocalQueueGauges()
        self.controller = controller

    def render(self) -> bytes:
        """The whole ``/metrics`` page: prometheus_client's metrics, then the per-queue families."""
        out = Exposition(self.role())
        self.workloads.write(out)
        write_queues(out, self.controller, self.clock, self.local_queues, self.controller.features.projection.finished)
        self._kube_answers(out)
        return generate_latest(self.registry) + out.text().encode()

    def role(self) -> str:
        """Kueue's ``replica_role``: ``leader`` while this replica holds the scheduler lease, else
        ``follower`` (Turnstile always elects a leader: never Kueue's ``standalone``)."""
        return "leader" if self.controller.term is not None else "follower"

    def _kube_answers(self, out: Exposition) -> None:
        """``turnstile_kube_responses_total{method,code}``: what the API server answered this
        replica's calls (``code="0"``: no answer); a 4xx is a bug or a misconfiguration."""
        answers = self.controller.kube.answers
        if answers:
            out.family("turnstile_kube_responses_total", "counter", "API server answers to this replica's calls")
            for (method, code), n in sorted(answers.items()):
                out.sample("turnstile_kube_responses_total", f'method="{method}",code="{code}"', n)

    def attempt(self, admitted: int, seconds: float) -> None:
        result = "success" if admitted else "inadmissible"
        role = self.role()
        self.attempts.labels(result, role).inc()
        self.attempt_seconds.labels(result, role).observe(seconds)

    def reserved_workload(self, wl: Workload, at: float) -> None:
        """Quota reserved: it counts as used (GPU-seconds) from now, whether or not the job started."""
        self.workloads.reserved_workload(wl, at)
        self.clock.start(wl, at)

    def evicted_workload(
        self, wl: Workload, cluster_queue: str, reason: str, detail: str, by: str | None, at: float,
        ready_at: float | None = None,
    ) -> None:  # fmt: skip
        """``reason`` as Kueue's evicted reason (Preempted, ClusterQueueStopped); a preemption also
        counts for the preempting ClusterQueue ``by`` with Kueue's preemption reason (``detail``:
        InClusterQueue, InCohortReclamation, ...); ``ready_at``: when its pods were all Ready."""
        cause = underlying_cause(detail)
        self.evicted.labels(cluster_queue, reason, cause, wl.priority_class, self.role()).inc()
        self.workloads.evicted_workload(wl, cluster_queue, reason, detail, at, ready_at)
        if by is not None:
            self.preempted.labels(by, detail, self.role()).inc()
        self.clock.stop(wl.key, at)
