"""Engine core's model of idle-GPU reclaim and GPU-hour budgets (``queues.efficiency``).

The simulator tells it when a workload's run starts and stops; it answers when to look next
(``next_check``: every ``CHECK_SECONDS`` while a reclaimable workload runs, the first look exactly
when one has run its grace and a whole window; ``next_period``: when an exhausted budget's period
ends), which running workloads idle below their ClusterQueue's threshold (``idle``), and whether a
budget holds a workload back (``gate``, given to the scheduler). What it did is in ``summary``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from fractions import Fraction

from queues.cycle import budget_priority
from queues.cycle.decisions import Decision
from queues.cycle.scheduler import Scheduler
from queues.efficiency import Budget, ReclaimPolicy, Trace
from queues.gpus.gpu_units import cards
from queues.gpus.rightsizing import MemoryLedger
from queues.model import Workload

CHECK_SECONDS = 60.0  # how often a reclaim controller looks (a Prometheus scrape's pace)
WARN_AT = 0.8  # a budget this far used is said
REQUEUE_LIMIT = 5  # a workload requeued for idling this many times is deactivated the next time
BACKOFF_SECONDS, BACKOFF_MAX = 60.0, 3600.0  # a requeued workload waits 60 s, 120 s, ... at most 1 h

# A run's mean GPU utilisation over its policy's window: (workload, policy, run start) -> a
# fraction, or None when unknown (missing data is never idle)
Measure = Callable[[str, ReclaimPolicy, float], float | None]


@dataclass(slots=True)
class _Run:
    start: float
    gpus: float
    cluster_queue: str
    labels: Mapping[str, str]
    trace: Trace | None
    runtime: float
    acted: bool = False  # (warned, or about to be evicted, in this run)


class EfficiencyModel:
    def __init__(
        self,
        traces: Mapping[str, Trace],
        policies: tuple[ReclaimPolicy, ...],
        budgets: tuple[Budget, ...],
        fractions: Mapping[str, Fraction] | None = None,
    ) -> None:
        self.fractions = fractions  # resources' parts of a card beyond the table (a DRA mapping's whole-gpus)
        self.traces = dict(traces)  # (a Deployment's replicas are added as they are made)
        self.policies = {p.cluster_queue: p for p in policies}
        self.budgets = budgets
        self.runs: dict[str, _Run] = {}
        self.used = [0.0] * len(budgets)  # GPU-seconds in the current period
        self.period = [0] * len(budgets)
        self.used_in: dict[tuple[int, int], float] = {}  # (budget, period) -> GPU-seconds used in it
        self.exhausted: set[int] = set()
        self.warned_budgets: set[tuple[int, int]] = set()
        self.last = 0.0
        self.counts = {"warned": 0, "requeued": 0, "deactivated": 0}
        self.backoff_scale = 1.0  # seconds of a requeue's backoff per scenario second (engine cluster: its time scale)
        self.warnings: list[tuple[float, str, str]] = []  # (t, workload, message): the warn action's
        self.reclaimed: dict[str, int] = {}  # workload -> times requeued for idling (they do not contend)
        self.freed_gpu_seconds = 0.0  # GPU-seconds reclaimed workloads would still have held
        self.memory: MemoryLedger | None = None  # right-sizing's ledger, when GPU memory is modelled

    @property
    def active(self) -> bool:
        return bool(self.policies or self.budgets)

    def summary_at(self, at: float) -> dict[str, object]:
        """``summary``'s counts and budgets, and right-sizing's verdicts where memory is modelled."""
        out = self.summary(at=at)
        if self.memory is not None:
            out["rightsize"] = self.memory.summary(at)
        return out

    def started(self, wl: Workload, now: float, runtime: float) -> None:
        """``wl``'s pods run from ``now`` for ``runtime`` seconds unless stopped."""
        if wl.admission is None:
            return
        # whole cards: a MIG slice or a time-sliced replica counts as its part of one (``queues.gpus.gpu_units``)
        gpus = cards(((r, v) for (_, r), v in wl.admission.usage.items()), self.fractions)
        trace = self.traces.get(wl.key)
        self.runs[wl.key] = _Run(now, gpus, wl.admission.cluster_queue, wl.labels, trace, runtime)
        if self.memory is not None:
            self.memory.started(wl.key, now, wl.admission.cluster_queue, wl.admission.usage)

    def stopped(self, key: str, now: float | None = None) -> None:
        """``key``'s pods stopped at ``now`` (``reclaimed`` keeps it: a replica made to replace it
        inherits it)."""
        self.runs.pop(key, None)
        if self.memory is not None and now is not None:
            self.memory.stopped(key, now)

    # ----- budgets -------------------------------------------------------------------------

    def advance(self, now: float) -> bool:
        """Count GPU-seconds up to ``now``; True when a budget became exhausted or was renewed."""
        changed = False
        for i, budget in enumerate(self.budgets):
            gpus = sum(r.gpus for r in self.runs.values() if budget.covers(r.cluster_queue, r.labels))
            period = int(now // budget.period)
            if period != self.period[i]:  # (what ran since the new period began is its own)
                self.period[i], self.used[i] = period, gpus * max(0.0, now - max(self.last, period * budget.period))
                changed |= i in self.exhausted
                self.exhausted.discard(i)
            else:
                self.used[i] += gpus * (now - self.last)
            self.used_in[(i, period)] = self.used[i]
            if i not in self.exhausted and self.used[i] >= budget.gpu_hours * 3600:
                self.exhausted.add(i)
                changed = True
            if self.used[i] >= WARN_AT * budget.gpu_hours * 3600:
                self.warned_budgets.add((i, period))
        self.last = now
        return changed

    def next_period(self) -> float | None:
        ends = [(self.period[i] + 1) * self.budgets[i].period for i in self.exhausted]
        return min(ends) if ends else None

    def gate(self) -> Callable[[Workload], str | None]:
        """Holds back new work of spent budgets that wait (``whenExhausted: Wait``)."""

        def held(wl: Workload) -> str | None:
            for i in sorted(self.exhausted):
                budget = self.budgets[i]
                if budget.lower_priority is None and budget.covers(wl.cluster_queue, wl.labels):
                    end = (self.period[i] + 1) * budget.period
                    return budget.exhausted_message(self.used[i] / 3600, f"t={end:g}")
            return None

        return held

    def lowered(self) -> Callable[[Workload], int | None]:
        """The priority spent budgets that lower it ask of a workload (``queues.cycle.budget_priority``)."""

        def low(wl: Workload) -> int | None:
            return budget_priority.lowest((self.budgets[i] for i in self.exhausted), wl)

        return low

    # ----- idle reclaim ----------------------------------------------------------------------

    def next_check(self, now: float) -> float | None:
        first = None
        for r in self.runs.values():
            policy = self.policies.get(r.cluster_queue)
            if policy is None or r.trace is None or r.acted or not r.runtime:
                continue  # (a serving workload, which runs until stopped, is looked at as others change)
            eligible = r.start + max(policy.grace, policy.window)
            first = eligible if first is None else min(first, eligible)
        if first is None:
            return None
        tick = math.floor(now / CHECK_SECONDS + 1) * CHECK_SECONDS
        return max(first, tick) if first > now else tick

    def traced(self, now: float) -> Measure:
        """Engine core's measurement: the mean of a run's scenario trace over the window."""

        def measure(key: str, policy: ReclaimPolicy, start: float) -> float | None:
            run = self.runs.get(key)
            if run is None or run.trace is None:
                return None
            ran = now - start
            return run.trace.mean(ran - policy.window, ran)

        return measure

    def idle(
        self, now: float, contended: Callable[[str], bool], measure: Measure | None = None
    ) -> list[tuple[str, ReclaimPolicy, float]]:
        """Running workloads idle below their policy's threshold over its window (and, with
        ``onlyWhenContended``, whose quota someone waits for: then one per ClusterQueue a look,
        so a single waiting job does not empty a queue of idle work), in key order; each acted
        on once. ``measure``: a run's mean utilisation over the window, None when unknown (the
        scenario's trace by default; DCGM's in the controller)."""
        measure = measure or self.traced(now)
        out = []
        taken: set[str] = set()  # ClusterQueues that reclaimed for contention in this look
        for key in sorted(self.runs):
            r = self.runs[key]
            policy = self.policies.get(r.cluster_queue)
            if policy is None or r.acted or now < r.start + max(policy.grace, policy.window):
                continue
            ran = now - r.start
            measured = measure(key, policy, r.start)
            if measured is None or measured >= policy.threshold:
                continue
            if policy.only_when_contended and (r.cluster_queue in taken or not contended(r.cluster_queue)):
                continue
            if policy.only_when_contended and policy.action != "warn":
                taken.add(r.cluster_queue)
            r.acted = True
            if policy.action != "warn":
                self.freed_gpu_seconds += r.gpus * max(0.0, r.runtime - ran)
            out.append((key, policy, measured))
        return out

    def reclaim(self, now: float, sched: Scheduler, measure: Measure | None = None) -> list[Decision]:
        """Act on the running workloads idle at ``now``: warn (said in the summary), or evict with
        reason ``GPUIdle`` and requeue or deactivate them (the decisions, for the caller to enact)."""
        if not self.policies:
            return []
        out: list[Decision] = []
        for key, policy, measured in self.idle(now, lambda cq: _contended(sched, cq, self.reclaimed), measure):
            message = policy.message(measured)
            if policy.action == "warn":
                self.counts["warned"] += 1
                self.warnings.append((now, key, message))
                continue
            times = self.reclaimed.get(key, 0) + 1
            deactivate = policy.action == "deactivate" or times > REQUEUE_LIMIT
            if deactivate and policy.action == "requeue":
                message += f"; requeued {REQUEUE_LIMIT} times for idling, the limit"
            self.counts["deactivated" if deactivate else "requeued"] += 1
            backoff = min(BACKOFF_MAX, BACKOFF_SECONDS * 2 ** (times - 1)) * self.backoff_scale
            evict = sched.retries.reclaim_idle(key, message, deactivate=deactivate, backoff=backoff)
            if evict is not None:
                self.reclaimed[key] = times
                out.append(evict)
        return out

    def summary(self, at: float | None = None) -> dict[str, object]:
        """Counts and budgets; a budget's use is of the period ``at`` is in (the run's end: the
        clock may have run on past it to an instant that changed nothing), else the latest."""
        out: dict[str, object] = {}
        if self.policies:
            out["reclaim"] = {
                **self.counts,
                "gpuHoursFreed": round(self.freed_gpu_seconds / 3600, 2),
                "warnings": [{"t": t, "workload": key, "message": m} for t, key, m in self.warnings],
            }
        if self.budgets:
            out["budgets"] = [
                {
                    "budget": b.name,
                    "gpuHours": b.gpu_hours,
                    "usedThisPeriod": round(self._used_at(i, at) / 3600, 2),
                    "exhausted": self._used_at(i, at) >= b.gpu_hours * 3600,
                    "warnedPeriods": sum(1 for j, _ in self.warned_budgets if j == i),
                }
                for i, b in enumerate(self.budgets)
            ]
        return out

    def _used_at(self, i: int, at: float | None) -> float:
        if at is None:
            return self.used[i]
        return self.used_in.get((i, int(at // self.budgets[i].period)), 0.0)


def _contended(sched: Scheduler, cluster_queue: str, reclaimed: Mapping[str, int]) -> bool:
    """Whether a workload waits in ``cluster_queue``'s quota tree (one requeued for idling does
    not count: idle work never displaces idle work)."""
    queues = sched.snapshot.queues
    cq = queues.get(cluster_queue)
    tree = cq.tree_key if cq is not None else None
    return any(
        key not in reclaimed and (q := queues.get(name)) is not None and q.tree_key == tree
        for key, name in sched.pending.where.items()
    )
