"""GPU efficiency policies: idle reclaim and GPU-hour budgets, as a scenario states them.

- ``utilization`` on a job entry: the fraction of its GPUs busy while it runs, a constant or steps
  ``[{at, value}]`` (``at``: seconds since the job started running; each value holds until the
  next). ``Trace.mean`` is its time-weighted mean over a span of the run.
- ``reclaim``: per ClusterQueue, ``{clusterQueue, threshold: 0.3, window: 30m, grace: 10m,
  action: warn|requeue|deactivate, onlyWhenContended: true}``. A running workload whose mean
  utilisation over the last ``window`` is below ``threshold`` (and that has run ``grace`` and a
  whole window) is warned about, requeued (evicted with reason ``GPUIdle``, back in its queue
  after a backoff of 60 s, doubling each time, at most 1 h; deactivated instead after 5 requeues)
  or deactivated (evicted, never admitted again); with ``onlyWhenContended``, only while another
  workload waits in its quota tree (one requeued for idling does not count: idle work never
  displaces idle work). Missing data is never idle: a job without ``utilization``
  is never reclaimed.
- ``budgets``: ``{clusterQueue | label: {team: alg-2}, gpuHours: 500, period: 720h}``: the GPU-hours
  its workloads ran in the current period (periods start at 0 and every ``period`` after). At
  80 % it is said; exhausted, new workloads it covers wait with reason ``BudgetExhausted`` until
  the next period; running work is never stopped by a budget.

Engine core models them (``queues.simulation.reclaim_model``); the controller reclaims with the same model,
from a ClusterQueue's ``POLICY_ANNOTATION`` and DCGM readings (``admission.controller.features.reclaim``),
and enforces budgets kept in PostgreSQL with the same gate (``admission.controller.features.budgets``).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from queues import quantity
from queues.errors import FieldError
from queues.quantity import duration

GPU_IDLE = "GPUIdle"  # the eviction's reason (scenario.md's additions)
BUDGET_EXHAUSTED = "BudgetExhausted"  # a workload's pending reason
ACTIONS = ("warn", "requeue", "deactivate")
_RECLAIM_FIELDS = {"clusterQueue", "threshold", "window", "grace", "action", "onlyWhenContended", "maxKeep"}
# A ClusterQueue's idle-reclaim policy in the controller: its annotation, a JSON object of a
# ``reclaim`` entry's fields but ``clusterQueue`` (``{"threshold": 0.3, "window": "30m", "action": "requeue"}``)
POLICY_ANNOTATION = "turnstile.dev/idle-reclaim"
_BUDGET_FIELDS = {"clusterQueue", "label", "gpuHours", "period", "whenExhausted", "priority"}
WAIT, LOWER_PRIORITY = "Wait", "LowerPriority"  # a budget's ``whenExhausted``
MONTH = 720 * 3600.0


@dataclass(frozen=True, slots=True)
class Trace:
    """A job's GPU utilisation over its run: (seconds since it started running, value) steps."""

    steps: tuple[tuple[float, float], ...]

    def mean(self, start: float, end: float) -> float:
        """Time-weighted mean over [start, end] (seconds since the run started)."""
        if end <= start:
            return self.at(start)
        total = 0.0
        for i, (at, value) in enumerate(self.steps):
            until = self.steps[i + 1][0] if i + 1 < len(self.steps) else float("inf")
            lo, hi = max(start, at), min(end, until)
            if hi > lo:
                total += value * (hi - lo)
        return total / (end - start)

    def peak(self, start: float, end: float) -> float:
        """The largest value taken within [start, end] (seconds since the run started)."""
        return max([self.at(start)] + [value for at, value in self.steps if start < at <= end])

    def at(self, t: float) -> float:
        value = self.steps[0][1]
        for at, v in self.steps:
            if at <= t:
                value = v
        return value


@dataclass(frozen=True, slots=True)
class ReclaimPolicy:
    cluster_queue: str
    threshold: float = 0.3
    window: float = 1800.0
    grace: float = 600.0
    action: str = "warn"
    only_when_contended: bool = True
    max_keep: float = 86400.0  # a job's turnstile.dev/keep-until holds at most this long after its run started

    def scaled(self, scale: float) -> ReclaimPolicy:
        """Its durations in wall seconds when a scenario second lasts ``scale`` of them."""
        return dataclasses.replace(
            self, window=self.window * scale, grace=self.grace * scale, max_keep=self.max_keep * scale
        )

    def message(self, measured: float) -> str:
        """``GPU utilisation 8 % < 30 % over 30m``."""
        return f"GPU utilisation {measured * 100:.0f} % < {self.threshold * 100:.0f} % over {_span(self.window)}"


@dataclass(frozen=True, slots=True)
class Budget:
    name: str  # how reports name it: ``clusterQueue team-a`` or ``label team=alg-2``
    gpu_hours: float
    period: float
    cluster_queue: str | None = None
    labels: tuple[tuple[str, str], ...] = ()
    # exhausted: None holds new work back (``Wait``); a number runs it at that priority instead
    # (``LowerPriority``), where work of a higher priority may preempt it (``queues.cycle.budget_priority``)
    lower_priority: int | None = None

    def exhausted_message(self, used_hours: float, until: str) -> str:
        """Why a workload it covers waits (reason ``BudgetExhausted``), or what happens to it."""
        used = _hours(used_hours)
        if self.lower_priority is not None:
            return (
                f"GPU-hour budget ({self.name}) exhausted: {used} of {self.gpu_hours:g} GPU-hours used this "
                f"period; new work runs at priority {self.lower_priority} until the period ends ({until})"
            )
        return (
            f"GPU-hour budget ({self.name}) exhausted: {used} of {self.gpu_hours:g} "
            f"GPU-hours used this period; new work waits until the period ends ({until})"
        )

    def warning_message(self, used_hours: float, until: str) -> str:
        """What is said when it is 80 % used."""
        return (
            f"GPU-hour budget ({self.name}) {used_hours / self.gpu_hours:.0%} used: {_hours(used_hours)} of "
            f"{self.gpu_hours:g} GPU-hours this period; new work will wait once it is spent (the period "
            f"ends {until})"
        )

    def covers(self, cluster_queue: str | None, labels: Mapping[str, str]) -> bool:
        if self.cluster_queue is not None:
            return cluster_queue == self.cluster_queue
        return all(labels.get(k) == v for k, v in self.labels)


def _hours(value: float) -> str:
    """GPU-hours as people read them: whole above 10, two significant digits below."""
    return f"{value:.0f}" if value >= 10 else f"{value:.2g}"


def _span(seconds: float) -> str:
    for unit, size in (("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds / size:.0f}{unit}"
    return f"{seconds:g}s"


def _fraction(value: Any, path: str, problems: list[FieldError]) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
        problems.append(FieldError(path, f"must be a fraction from 0 to 1 (0.3 is 30 %), not {value!r}"))
        return 0.0
    return float(value)


def utilization(raw: Any, path: str, problems: list[FieldError]) -> Trace | None:
    """A job entry's ``utilization``: a fraction, or a list of ``{at, value}`` steps from ``at: 0``."""
    return _trace(raw, path, problems, _fraction, "the utilisation from the job's start")


def gpu_memory(raw: Any, path: str, problems: list[FieldError]) -> Trace | None:
    """A job entry's ``gpuMemoryUsed`` (peak GPU memory per GPU): a quantity (``9Gi``), or a list of
    ``{at, value}`` steps from ``at: 0``; the trace is in MiB (as dcgm-exporter reports it)."""
    return _trace(raw, path, problems, _mib, "the GPU memory from the job's start")


def _mib(value: Any, path: str, problems: list[FieldError]) -> float:
    try:
        milli = quantity.parse_milli(value)
    except quantity.QuantityError as exc:
        problems.append(FieldError(path, f"{exc} (GPU memory per GPU, e.g. 9Gi)"))
        return 0.0
    if milli < 0:
        problems.append(FieldError(path, f"must be a quantity of memory >= 0 (e.g. 9Gi), not {value!r}"))
        return 0.0
    return milli / 1000 / 2**20


def _trace(
    raw: Any, path: str, problems: list[FieldError], value_of: Callable[[Any, str, list[FieldError]], float], first: str
) -> Trace | None:
    """A constant, or a list of ``{at, value}`` steps from ``at: 0``, each value read by ``value_of``."""
    if raw is None:
        return None
    if not isinstance(raw, list):
        return Trace(((0.0, value_of(raw, path, problems)),))
    steps: list[tuple[float, float]] = []
    for i, step in enumerate(raw):
        where = f"{path}[{i}]"
        if not isinstance(step, Mapping) or set(step) != {"at", "value"}:
            problems.append(FieldError(where, "must be {at: seconds since the job started, value}"))
            continue
        at = step["at"]
        if isinstance(at, bool) or not isinstance(at, int | float) or at < 0 or (steps and at <= steps[-1][0]):
            problems.append(FieldError(f"{where}.at", f"must be a number of seconds >= 0, increasing, not {at!r}"))
            continue
        steps.append((float(at), value_of(step["value"], f"{where}.value", problems)))
    if not steps or steps[0][0] != 0:
        problems.append(FieldError(path, f"needs a first step at 0 ({first})"))
        return None
    return Trace(tuple(steps))


def _entries(
    raw: Any, section: str, shape: str, known: set[str], problems: list[FieldError]
) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """The mappings of a top-level list (``reclaim``, ``budgets``) with their paths; what is no
    list, no mapping or an unknown field is a problem."""
    if raw is None:
        return
    if not isinstance(raw, list):
        problems.append(FieldError(section, f"must be a list of {shape}"))
        return
    for i, item in enumerate(raw):
        path = f"{section}[{i}]"
        if not isinstance(item, Mapping):
            problems.append(FieldError(path, "must be a mapping"))
            continue
        for key in sorted(set(item) - known):
            problems.append(FieldError(f"{path}.{key}", f"unknown field (known: {', '.join(sorted(known))})"))
        yield path, item


def reclaim(raw: Any, problems: list[FieldError]) -> tuple[ReclaimPolicy, ...]:
    out: dict[str, ReclaimPolicy] = {}
    shape = "{clusterQueue, threshold, window, grace, action}"
    for path, item in _entries(raw, "reclaim", shape, _RECLAIM_FIELDS, problems):
        cq = item.get("clusterQueue")
        if not isinstance(cq, str) or not cq:
            problems.append(FieldError(f"{path}.clusterQueue", "required: the ClusterQueue it applies to"))
            continue
        if cq in out:
            problems.append(FieldError(f"{path}.clusterQueue", f"ClusterQueue {cq} already has a reclaim policy"))
        out[cq] = _policy(cq, item, path, problems)
    return tuple(out.values())


def _policy(cq: str, item: Mapping[str, Any], path: str, problems: list[FieldError]) -> ReclaimPolicy:
    """One policy's fields (a scenario's ``reclaim`` entry, a ClusterQueue's annotation)."""
    action = item.get("action", "warn")
    if action not in ACTIONS:
        problems.append(FieldError(f"{path}.action", f"must be one of {', '.join(ACTIONS)}, not {action!r}"))
    contended = item.get("onlyWhenContended", True)
    if not isinstance(contended, bool):
        problems.append(FieldError(f"{path}.onlyWhenContended", f"must be true or false, not {contended!r}"))
    return ReclaimPolicy(
        cq,
        _fraction(item.get("threshold", 0.3), f"{path}.threshold", problems),
        duration(item.get("window", "30m"), f"{path}.window", problems),
        _grace(item.get("grace", "10m"), f"{path}.grace", problems),
        str(action),
        bool(contended),
        duration(item.get("maxKeep", "24h"), f"{path}.maxKeep", problems),
    )


def annotation_policy(cq: str, text: str) -> tuple[ReclaimPolicy | None, list[FieldError]]:
    """A ClusterQueue's ``POLICY_ANNOTATION`` (a JSON object, as annotations hold structured
    values) as a policy, or the problems with it (paths from
    ``metadata.annotations[turnstile.dev/idle-reclaim]``)."""
    path = f"metadata.annotations[{POLICY_ANNOTATION}]"
    shape = '{"threshold": 0.3, "window": "30m", "grace": "10m", "action": "requeue", "onlyWhenContended": true}'
    problems: list[FieldError] = []
    try:
        item = json.loads(text)
    except ValueError as exc:
        return None, [FieldError(path, f"not JSON ({exc}); write e.g. {shape}")]
    if not isinstance(item, Mapping):
        return None, [FieldError(path, f"must be a JSON object such as {shape}")]
    known = _RECLAIM_FIELDS - {"clusterQueue"}
    for key in sorted(set(item) - known):
        problems.append(FieldError(f"{path}.{key}", f"unknown field (known: {', '.join(sorted(known))})"))
    policy = _policy(cq, item, path, problems)
    return (None if problems else policy), problems


def annotated_policies(cluster_queues: Iterable[Any]) -> tuple[ReclaimPolicy, ...]:
    """The policies ClusterQueues carry in ``POLICY_ANNOTATION`` (a malformed one is refused when
    applied; one that slipped in is skipped, never half-read)."""
    out = []
    for cq in cluster_queues:
        text = cq.metadata.annotations.get(POLICY_ANNOTATION)
        if text:
            policy, _ = annotation_policy(cq.name, text)
            if policy is not None:
                out.append(policy)
    return tuple(out)


def _grace(value: Any, path: str, problems: list[FieldError]) -> float:
    if value == 0 or value == "0s":
        return 0.0
    return duration(value, path, problems)


def budgets(raw: Any, problems: list[FieldError]) -> tuple[Budget, ...]:
    out = []
    shape = "{clusterQueue | label, gpuHours, period}"
    for path, item in _entries(raw, "budgets", shape, _BUDGET_FIELDS, problems):
        cq, label = item.get("clusterQueue"), item.get("label")
        if (cq is None) == (label is None):
            problems.append(FieldError(path, "needs exactly one of clusterQueue and label"))
            continue
        hours = item.get("gpuHours")
        if isinstance(hours, bool) or not isinstance(hours, int | float) or hours < 0:
            problems.append(FieldError(f"{path}.gpuHours", f"must be a number of GPU-hours >= 0, not {hours!r}"))
            continue
        period = duration(item.get("period", "720h"), f"{path}.period", problems)
        lower = _when_exhausted(item, path, problems)
        if label is not None:
            if not isinstance(label, Mapping) or not label or not all(isinstance(v, str) for v in label.values()):
                problems.append(FieldError(f"{path}.label", "must map label keys to values, such as {team: alg-2}"))
                continue
            pairs = tuple(sorted((str(k), str(v)) for k, v in label.items()))
            name = "label " + ",".join(f"{k}={v}" for k, v in pairs)
            out.append(Budget(name, float(hours), period, labels=pairs, lower_priority=lower))
        elif not isinstance(cq, str) or not cq:
            problems.append(FieldError(f"{path}.clusterQueue", "must name a ClusterQueue"))
        else:
            out.append(Budget(f"clusterQueue {cq}", float(hours), period, cluster_queue=cq, lower_priority=lower))
    return tuple(out)


def _when_exhausted(item: Mapping[str, Any], path: str, problems: list[FieldError]) -> int | None:
    """``whenExhausted: Wait`` (the default) or ``LowerPriority`` with the ``priority`` to run at."""
    when, priority = item.get("whenExhausted", WAIT), item.get("priority")
    if when not in (WAIT, LOWER_PRIORITY):
        problems.append(FieldError(f"{path}.whenExhausted", f"must be {WAIT} or {LOWER_PRIORITY}, not {when!r}"))
        return None
    if when == WAIT:
        if priority is not None:
            problems.append(FieldError(f"{path}.priority", f"only with whenExhausted: {LOWER_PRIORITY}"))
        return None
    if isinstance(priority, bool) or not isinstance(priority, int):
        problems.append(
            FieldError(
                f"{path}.priority", f"the priority new work runs at once it is spent, a whole number, not {priority!r}"
            )
        )
        return None
    return priority
