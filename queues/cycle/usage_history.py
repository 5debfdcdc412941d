"""Admission fair sharing: each LocalQueue's decayed usage, and the order it gives a ClusterQueue.

Kueue's admission fair sharing (KEP-4136; its ``admissionFairSharing`` configuration, a scenario's
top-level ``admissionFairSharing:`` block, the controller's ``TURNSTILE_ADMISSION_FAIR_SHARING``)
orders the workloads of a ClusterQueue with ``spec.admissionScope.admissionMode:
UsageBasedAdmissionFairSharing`` by how much their LocalQueue has used lately:

- a LocalQueue's *consumed* resources decay towards what it has admitted now with a half-life
  ``usageHalfLifeTime``: after ``elapsed`` seconds, ``consumed = consumed x (1 - a) + admitted x a``
  with ``a = 1 - 0.5 ^ (elapsed / halfLife)`` (Kueue's ``CalculateDecayedConsumed``);
- each admission adds an *entry penalty*, its requests x ``a`` of one ``usageSamplingInterval``
  (Kueue's ``CalculateEntryPenalty``), so a queue that just got a workload in does not get the
  next one too before its usage shows it;
- a workload's LocalQueue usage is the sum over resources of ``resourceWeights[r]`` (default 1) x
  consumed[r] (in whole units: cores, GPUs, bytes), divided by the LocalQueue's
  ``spec.fairSharing.weight`` (default 1; a zero weight sorts last);
- the ClusterQueue's order is lowest usage first, then priority, then queue-order time, so its
  head is the first workload of its least-used LocalQueue.

Where Turnstile differs: Kueue samples each LocalQueue's usage every ``usageSamplingInterval``
and keeps the result in memory and the LocalQueue's status; Turnstile updates it exactly whenever
what the LocalQueue has admitted changes (the same curve where usage is constant between samples)
and the controller keeps it in PostgreSQL, so a restart or a fail-over loses no history. A
half-life of 0 keeps no history (Kueue resets it), so the order is priority and FIFO again.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from queues import errors, quantity
from queues.errors import FieldError
from queues.model import Config, Workload
from queues.quantity import duration
from queues.quotas import weight_of

USAGE_BASED = "UsageBasedAdmissionFairSharing"  # (``queues.kueue.validation`` checks the field)
DEFAULT_SAMPLING = 300.0  # Kueue's default usageSamplingInterval: 5m
_FIELDS = ("usageHalfLifeTime", "usageSamplingInterval", "resourceWeights")


@dataclass(frozen=True, slots=True)
class AdmissionFairSharing:
    """Kueue's ``admissionFairSharing`` configuration (times in seconds)."""

    half_life: float
    sampling_interval: float = DEFAULT_SAMPLING
    resource_weights: Mapping[str, float] = field(default_factory=dict)

    def alpha(self, elapsed: float) -> float:
        """How far the decayed usage moves towards the current one in ``elapsed`` seconds."""
        if self.half_life <= 0:
            return 0.0
        return 1.0 - math.pow(0.5, elapsed / self.half_life)


def parse(raw: Any, path: str = "admissionFairSharing") -> AdmissionFairSharing | None:
    """An ``admissionFairSharing`` block; None when absent. ``errors.Invalid`` names each field."""
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        raise errors.Invalid(
            [FieldError(path, "must be a mapping: {usageHalfLifeTime: 10m, usageSamplingInterval: 1m}")]
        )
    problems = [
        FieldError(f"{path}.{k}", f"unknown field (known: {', '.join(_FIELDS)})") for k in raw if k not in _FIELDS
    ]
    half_life = 0.0
    if "usageHalfLifeTime" not in raw:
        problems.append(FieldError(f"{path}.usageHalfLifeTime", "required, e.g. 168h (Kueue requires it too)"))
    elif raw["usageHalfLifeTime"] not in (0, "0", "0s"):  # 0: no history, as in Kueue
        half_life = duration(raw["usageHalfLifeTime"], f"{path}.usageHalfLifeTime", problems)
    sampling = DEFAULT_SAMPLING
    if "usageSamplingInterval" in raw:
        sampling = duration(raw["usageSamplingInterval"], f"{path}.usageSamplingInterval", problems)
    weights: dict[str, float] = {}
    raw_weights = raw.get("resourceWeights", {})
    if not isinstance(raw_weights, Mapping):
        problems.append(FieldError(f"{path}.resourceWeights", "must map resource names to numbers, e.g. {cpu: 2}"))
    else:
        for name, value in raw_weights.items():
            if isinstance(value, bool) or not isinstance(value, int | float) or value < 0 or math.isinf(value):
                problems.append(FieldError(f"{path}.resourceWeights.{name}", f"must be a number >= 0, not {value!r}"))
            else:
                weights[str(name)] = float(value)
    if problems:
        raise errors.Invalid(problems)
    return AdmissionFairSharing(half_life, sampling, weights)


def enabled_for(scope: Mapping[str, Any] | None) -> bool:
    return scope is not None and scope.get("admissionMode") == USAGE_BASED


Usage = dict[str, float]  # resource -> amount in whole units (GPUs, cores, bytes)


@dataclass(slots=True)
class LocalQueueUsage:
    """One LocalQueue's history: decayed ``consumed`` as of ``updated``, and what it holds now."""

    consumed: Usage = field(default_factory=dict)
    updated: float = 0.0
    admitted: Usage = field(default_factory=dict)


class UsageHistory:
    """Every LocalQueue's decayed usage (keys ``namespace/name``), advanced as admissions change."""

    def __init__(self, config: AdmissionFairSharing, *, by_flavor: bool = False) -> None:
        self.config = config
        self.by_flavor = by_flavor  # keys "flavor/resource" (usage-aware fair sharing), else resource names
        self.queues: dict[str, LocalQueueUsage] = {}
        self.changed: set[str] = set()  # LocalQueues whose history moved; the controller stores and drains it

    def restore(self, key: str, consumed: Mapping[str, float], updated: float) -> None:
        """Take over a stored history (its admitted usage is re-added as admissions are restored)."""
        entry = self.queues.setdefault(key, LocalQueueUsage())
        entry.consumed, entry.updated = dict(consumed), updated

    def hold(self, admitted: Mapping[str, Mapping[tuple[str, str], int]], now: float) -> None:
        """What each LocalQueue holds now, from the admitted workloads (after a restore or a new
        configuration). A LocalQueue whose holding changes this way is not advanced first: after a
        restart its stored history is as of when it was stored, and the workloads it holds now
        have run since, as far as anyone knows."""
        for key in set(self.queues) | set(admitted):
            now_held: Usage = {}
            for fr, milli in admitted.get(key, {}).items():
                now_held[self._key(fr)] = now_held.get(self._key(fr), 0.0) + milli / quantity.MILLI
            entry = self.queues.get(key)
            if entry is None:
                if now_held:
                    self.queues[key] = LocalQueueUsage(updated=now, admitted=now_held)
            elif not _same(entry.admitted, now_held):
                entry.admitted = now_held

    def _key(self, fr: tuple[str, str]) -> str:
        return f"{fr[0]}/{fr[1]}" if self.by_flavor else fr[1]

    def _advance(self, key: str, now: float) -> LocalQueueUsage:
        entry = self.queues.get(key)
        if entry is None:
            entry = self.queues[key] = LocalQueueUsage(updated=now)
        if now > entry.updated:
            entry.consumed = decayed(entry.consumed, entry.admitted, self.config.alpha(now - entry.updated))
            entry.updated = now
        return entry

    def admit(self, key: str, requests: Mapping[tuple[str, str], int], now: float) -> None:
        """A workload of ``key`` was admitted with ``requests`` ((flavor, resource) -> milli-units)."""
        entry = self._advance(key, now)
        penalty = self.config.alpha(self.config.sampling_interval)
        for fr, milli in requests.items():
            amount, resource = milli / quantity.MILLI, self._key(fr)
            entry.admitted[resource] = entry.admitted.get(resource, 0.0) + amount
            if penalty:
                entry.consumed[resource] = entry.consumed.get(resource, 0.0) + amount * penalty
        self.changed.add(key)

    def release(self, key: str, requests: Mapping[tuple[str, str], int], now: float) -> None:
        """A workload of ``key`` gave its quota back (finished, evicted)."""
        entry = self._advance(key, now)
        for fr, milli in requests.items():
            resource = self._key(fr)
            left = entry.admitted.get(resource, 0.0) - milli / quantity.MILLI
            if left > 1e-9:
                entry.admitted[resource] = left
            else:
                entry.admitted.pop(resource, None)
        self.changed.add(key)

    def consumed(self, key: str, now: float) -> Usage:
        """``key``'s decayed usage at ``now`` (without changing the history)."""
        entry = self.queues.get(key)
        if entry is None:
            return {}
        return decayed(entry.consumed, entry.admitted, self.config.alpha(max(0.0, now - entry.updated)))

    def weighted(self, key: str, weight: float, now: float) -> float:
        """Kueue's LocalQueue usage: resource-weighted consumed usage over the LocalQueue's weight."""
        weights = self.config.resource_weights
        total = sum(weights.get(r, 1.0) * v for r, v in sorted(self.consumed(key, now).items()))
        if weight <= 0:
            return math.inf
        return total / weight


def decayed(consumed: Mapping[str, float], admitted: Mapping[str, float], alpha: float) -> Usage:
    out = {r: v * (1 - alpha) for r, v in consumed.items()}
    for r, v in admitted.items():
        out[r] = out.get(r, 0.0) + v * alpha
    return {r: v for r, v in out.items() if v > 1e-12}


def _same(a: Mapping[str, float], b: Mapping[str, float]) -> bool:
    return a.keys() == b.keys() and all(abs(a[k] - b[k]) < 1e-9 for k in a)


class UsageOrdering:
    """Orders by usage history: admission fair sharing's LocalQueue usage (``usage``), and
    usage-aware fair sharing's ClusterQueue usage (``queue_usage``, ``fairSharing.usageHalfLifeTime``;
    docs/fair-sharing.md). Its own state is the two histories (either may be off, None); the
    configuration and the clock are the scheduler's, given with each call."""

    def __init__(self, usage: UsageHistory | None, queue_usage: UsageHistory | None) -> None:
        self.usage = usage
        self.queue_usage = queue_usage

    def fair_queues(self, config: Config) -> set[str]:
        """The ClusterQueues whose LocalQueues take turns by usage (admission fair sharing)."""
        if self.usage is None:
            return set()
        return {n for n, cq in config.cluster_queues.items() if enabled_for(cq.spec.admission_scope)}

    def lane_usage(self, config: Config, lane: str, now: float) -> float:
        """A LocalQueue's usage as admission fair sharing orders by."""
        if self.usage is None:
            return 0.0
        lq = config.local_queues.get(lane)
        return self.usage.weighted(lane, weight_of(lq.spec.fair_sharing) if lq else 1.0, now)

    def queue_history(self, cq: Any, now: float) -> dict[tuple[str, str], int]:
        """Usage-aware fair sharing: a ClusterQueue's decayed usage, (flavor, resource) -> milli-units."""
        if self.queue_usage is None:
            return {}
        out: dict[tuple[str, str], int] = {}
        for key, amount in self.queue_usage.consumed(cq.name, now).items():
            flavor, resource = key.split("/", 1)
            out[(flavor, resource)] = round(amount * quantity.MILLI)
        return out

    def record(
        self, wl: Workload, cluster_queue: str, usage: Mapping[tuple[str, str], int], sign: int, now: float
    ) -> None:
        """``wl`` took (1) or gave back (-1) ``usage`` in ``cluster_queue``: the histories move."""
        if self.usage is not None and wl.local_queue is not None:
            lq = f"{wl.namespace}/{wl.local_queue}"
            (self.usage.admit if sign > 0 else self.usage.release)(lq, usage, now)
        if self.queue_usage is not None:
            (self.queue_usage.admit if sign > 0 else self.queue_usage.release)(cluster_queue, usage, now)

    def hold(self, workloads: Iterable[Workload], now: float) -> None:
        """After a restore or a new configuration: what each LocalQueue and ClusterQueue holds now."""
        by_lq: dict[str, dict[tuple[str, str], int]] = {}
        by_cq: dict[str, dict[tuple[str, str], int]] = {}
        for wl in workloads:
            if wl.admission is None:
                continue
            held = [by_cq.setdefault(wl.admission.cluster_queue, {})]
            if wl.local_queue is not None:
                held.append(by_lq.setdefault(f"{wl.namespace}/{wl.local_queue}", {}))
            for into in held:
                for fr, v in wl.admission.usage.items():
                    into[fr] = into.get(fr, 0) + v
        if self.usage is not None:
            self.usage.hold(by_lq, now)
        if self.queue_usage is not None:
            self.queue_usage.hold(by_cq, now)
