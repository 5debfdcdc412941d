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

import bisect
import importlib.metadata
import math
import platform
import sys
import time
from collections import Counter as Tally
from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from admission.controller import cohort_metrics
from admission.controller.exposition import Exposition, escape, number
from queues import quantity
from queues.fairsharing import Share, share
from queues.model import Admission, FlavorResource, Workload
from queues.status import local_queue_condition

if TYPE_CHECKING:
    from admission.controller.controller import Controller
    from queues.scheduler import Scheduler

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


def _version() -> str:
    try:
        return f"v{importlib.metadata.version('turnstile')}"
    except importlib.metadata.PackageNotFoundError:  # (run from a source tree that is not installed)
        return "unknown"


class QueueCounter:
    """A counter per ClusterQueue (``NAME_total{cluster_queue}``), written directly like the
    other per-queue families."""

    def __init__(self, name: str, help_text: str) -> None:
        self.name = name
        self.help_text = help_text
        self.values: dict[str, int] = {}

    def inc(self, cluster_queue: str) -> None:
        self.values[cluster_queue] = self.values.get(cluster_queue, 0) + 1

    def write(self, out: Exposition) -> None:
        if self.values:
            out.family(f"{self.name}_total", "counter", self.help_text)
            for cq, value in sorted(self.values.items()):
                out.sample(f"{self.name}_total", f'cluster_queue="{escape(cq)}"', value)


class WaitTimes:
    """``kueue_admission_wait_time_seconds{cluster_queue}``: a histogram per ClusterQueue."""

    NAME = "kueue_admission_wait_time_seconds"

    def __init__(self, buckets: tuple[float, ...] = WAIT_BUCKETS) -> None:
        self.bounds = [b for b in buckets if b != float("inf")]
        self.les = [number(b) for b in self.bounds] + ["+Inf"]
        self.queues: dict[str, tuple[list[int], list[float]]] = {}  # cq -> (counts per bucket, [sum])

    def observe(self, cluster_queue: str, seconds: float) -> None:
        counts, total = self.queues.setdefault(cluster_queue, ([0] * (len(self.bounds) + 1), [0.0]))
        counts[bisect.bisect_left(self.bounds, seconds)] += 1
        total[0] += seconds

    def write(self, out: Exposition) -> None:
        out.family(self.NAME, "histogram", "From queueing (or the last eviction) to admission")
        for cq, (counts, total) in sorted(self.queues.items()):
            label = f'cluster_queue="{escape(cq)}"'
            cumulative = 0
            for le, n in zip(self.les, counts, strict=True):
                cumulative += n
                out.lines.append(f'{self.NAME}_bucket{{{label},le="{le}"}} {float(cumulative)!r}')
            out.sample(f"{self.NAME}_count", label, cumulative)
            out.sample(f"{self.NAME}_sum", label, total[0])


LOCAL_QUEUE_SECONDS = 10.0  # the LocalQueue gauges are counted at most this often (a pass over every workload)


class LocalQueueGauges:
    """The LocalQueue families, counted at most every ``LOCAL_QUEUE_SECONDS`` per scheduler: one
    pass over 100,000 workloads costs ~50 ms, and ``/metrics`` must stay under 100 ms; a scrape
    in between shows the last count (Prometheus scrapes every 15-60 s)."""

    def __init__(self) -> None:
        self.counted: tuple[Scheduler, float, list[tuple[str, str, str, Exposition]]] | None = None

    def families(self, sched: Scheduler) -> list[tuple[str, str, str, Exposition]]:
        now = time.monotonic()
        if self.counted is None or self.counted[0] is not sched or now - self.counted[1] >= LOCAL_QUEUE_SECONDS:
            self.counted = (sched, now, _local_queues(sched))
        return self.counted[2]


def write_queues(
    out: Exposition, controller: Controller, clock: ResourceClock, local: LocalQueueGauges | None = None
) -> None:
    """The ledger clock, and the leader's queue gauges (a standby has none), as Kueue names them."""
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
    pending, active, reserving, status = (Exposition() for _ in range(4))
    nominal, borrowing, lending, usage, reservation = (Exposition() for _ in range(5))
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
    shares = Exposition()
    if sched.fair_sharing is not None:  # Kueue's: ceil(weighted share); MaxInt64 for a zero weight that borrows
        for name, cq in sorted(sched.snapshot.queues.items()):
            shares.sample("kueue_cluster_queue_weighted_share", f'cluster_queue="{escape(name)}"', _rounded(share(cq)))
        for name, cohort_node in sorted(sched.snapshot.cohorts.items()):
            shares.sample("kueue_cohort_weighted_share", f'cohort="{escape(name)}"', _rounded(share(cohort_node)))
    lq_families = (local or LocalQueueGauges()).families(sched)
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


def _local_queues(sched: Scheduler) -> list[tuple[str, str, str, Exposition]]:
    """Kueue's LocalQueue gauges (``name``, ``namespace``): pending (active, inadmissible), reserving
    quota, admitted, quota reserved and used per flavor-resource, and the ``Active`` status that the
    LocalQueue object shows (``queues.status``); every LocalQueue of the configuration, at 0 where
    nothing is."""
    pending, reserving, admitted, status = Exposition(), Exposition(), Exposition(), Exposition()
    reservation, usage = Exposition(), Exposition()
    # (namespace, LocalQueue) -> [waiting, reserving, started]: one pass over the workloads, with
    # plain lists (/metrics must stay cheap at 100,000 workloads); and which LocalQueue holds each
    # ClusterQueue's quota (MIXED: several, or some of it awaits admission checks)
    counts: dict[tuple[str, str | None], list[int]] = {}
    holder: dict[str, tuple[str, str | None]] = {}
    where = sched.pending.where
    for key, wl in sched.workloads.items():
        lq_key = (wl.namespace, wl.local_queue)
        c = counts.get(lq_key)
        if c is None:
            c = counts[lq_key] = [0, 0, 0]
        if wl.admission is not None:
            c[1] += 1
            cq_name = wl.admission.cluster_queue
            if wl.checks:  # (``Workload.started``, inlined)
                holder[cq_name] = MIXED
            else:
                c[2] += 1
                if holder.setdefault(cq_name, lq_key) != lq_key:
                    holder[cq_name] = MIXED
        elif key in where:
            c[0] += 1
    held = _local_queue_quota(sched, holder)
    aside: Tally[tuple[str, str | None]] = Tally()
    for state in sched.pending.queues.values():
        for wl in state.inadmissible.values():
            aside[(wl.namespace, wl.local_queue)] += 1
    none = [0, 0, 0]
    for key, lq_obj in sorted(sched.config.local_queues.items()):
        namespace, _, name = key.partition("/")
        lq = (namespace, name)
        labels = f'name="{escape(name)}",namespace="{escape(namespace)}"'
        waiting, holding, running = counts.get(lq, none)
        pending.sample("kueue_local_queue_pending_workloads", f'{labels},status="active"',
                       max(0, waiting - aside[lq]))  # fmt: skip
        pending.sample("kueue_local_queue_pending_workloads", f'{labels},status="inadmissible"', aside[lq])
        reserving.sample("kueue_local_queue_reserving_active_workloads", labels, holding)
        admitted.sample("kueue_local_queue_admitted_active_workloads", labels, running)
        for (flavor, resource), (reserved, used) in sorted(held.get(lq, {}).items()):
            lq_fr = f'{labels},flavor="{escape(flavor)}",resource="{escape(resource)}"'
            reservation.sample("kueue_local_queue_resource_reservation", lq_fr, reserved / quantity.MILLI)
            usage.sample("kueue_local_queue_resource_usage", lq_fr, used / quantity.MILLI)
        active = local_queue_condition(sched, lq_obj)["status"]
        for value in ("True", "False", "Unknown"):
            status.sample("kueue_local_queue_status", f'{labels},active="{value}"', 1.0 if value == active else 0.0)
    return [
        ("kueue_local_queue_pending_workloads", "gauge", "Workloads waiting, by LocalQueue and status", pending),
        ("kueue_local_queue_reserving_active_workloads", "gauge", "Workloads reserving quota", reserving),
        ("kueue_local_queue_admitted_active_workloads", "gauge", "Admitted workloads (their jobs started)", admitted),
        ("kueue_local_queue_resource_reservation", "gauge", "Quota reserved, per flavor and resource", reservation),
        ("kueue_local_queue_resource_usage", "gauge", "Quota used by admitted workloads", usage),
        ("kueue_local_queue_status", "gauge", "1 for the LocalQueue's Active condition status", status),
    ]


MIXED = ("", None)  # (a ClusterQueue whose quota is not all one LocalQueue's started work)


def _local_queue_quota(
    sched: Scheduler, holder: dict[str, tuple[str, str | None]]
) -> dict[tuple[str, str | None], dict[FlavorResource, list[int]]]:
    """Quota reserved and used per LocalQueue and flavor-resource (``[reserved, used]``): a
    ClusterQueue whose admitted workloads are all one LocalQueue's and started gives it its usage
    as it stands (``ClusterQueue.usage``, kept by the core); the others sum their workloads."""
    held: dict[tuple[str, str | None], dict[FlavorResource, list[int]]] = {}
    for cq_name, lq_key in holder.items():
        cq = sched.snapshot.queues.get(cq_name)
        if cq is None:  # (quota of a ClusterQueue that is gone is charged nowhere)
            continue
        if lq_key != MIXED:
            quota = held.setdefault(lq_key, {})
            for fr, milli in cq.usage.items():
                if not milli:
                    continue
                q = quota.setdefault(fr, [0, 0])
                q[0] += milli
                q[1] += milli
            continue
        for wl in cq.workloads.values():
            quota = held.setdefault((wl.namespace, wl.local_queue), {})
            assert wl.admission is not None
            for fr, milli in wl.admission.usage.items():
                q = quota.setdefault(fr, [0, 0])
                q[0] += milli
                q[1] += 0 if wl.checks else milli
    return held


def _rounded(s: Share) -> float:
    """Kueue's ``roundedWeightedShare``: the weighted share rounded up; MaxInt64 when infinite."""
    return float(2**63 - 1) if math.isinf(s.value) else float(math.ceil(s.value))


class Metrics:
    """One replica's metrics; the controller reports its decisions here."""

    def __init__(self, controller: Controller) -> None:
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
        self.admitted = QueueCounter("kueue_admitted_workloads", "Workloads admitted (their jobs started)")
        # admitted at once, or once their admission checks passed
        self.reserved = QueueCounter("kueue_quota_reserved_workloads", "Workloads that reserved quota")
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
        self.waits = WaitTimes()
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
        # idle reclaim (``admission.controller.reclaim``): what it did, and whether it can see
        self.gpu_idle = Counter(
            "turnstile_gpu_idle_workloads", "Workloads found idling on their GPUs, by what was done",
            ["cluster_queue", "action"], registry=r,
        )  # fmt: skip
        read_errors = Gauge(
            "turnstile_gpu_utilization_read_failures", "Looks at which GPU utilisation could not be read", registry=r
        )
        read_errors.set_function(lambda: float(controller.reclaimer.failures))
        readable = Gauge(
            "turnstile_gpu_utilization_readable",
            "1 while the last look read GPU utilisation (0: nothing is reclaimed)", registry=r,
        )  # fmt: skip
        readable.set_function(lambda: 0.0 if controller.reclaimer.problem else 1.0)
        self.clock = ResourceClock()
        self.local_queues = LocalQueueGauges()
        self.controller = controller

    def render(self) -> bytes:
        """The whole ``/metrics`` page: prometheus_client's metrics, then the per-queue families."""
        out = Exposition()
        self.admitted.write(out)
        self.reserved.write(out)
        self.waits.write(out)
        write_queues(out, self.controller, self.clock, self.local_queues)
        self._kube_answers(out)
        return generate_latest(self.registry) + out.text().encode()

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
        self.attempts.labels(result).inc()
        self.attempt_seconds.labels(result).observe(seconds)

    def reserved_workload(self, wl: Workload, at: float) -> None:
        """Quota reserved: it counts as used (GPU-seconds) from now, whether or not the job started."""
        assert wl.admission is not None
        self.reserved.inc(wl.admission.cluster_queue)
        self.clock.start(wl, at)

    def admitted_workload(self, wl: Workload, at: float) -> None:
        """Admitted: the job starts (at its reservation, or once its admission checks passed)."""
        assert wl.admission is not None
        self.admitted.inc(wl.admission.cluster_queue)
        self.waits.observe(wl.admission.cluster_queue, max(0.0, at - wl.queue_ts))

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
