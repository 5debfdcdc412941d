"""What a simulation reports: each workload's track, each queue's wait and utilisation, the events.

Both engines fill the same ``Recorder`` (engine core as it decides, engine cluster by replaying
what the controller committed, ``admission.sim.engine.replay``), so their reports have one shape
and are compared field by field; ``Result.to_json`` is scenario.md's output.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from queues import scheduler
from queues.model import Admission, ClusterQueue, Workload
from queues.scenario import JobEntry, Scenario


def num(t: float) -> int | float:
    """Times and figures as JSON numbers: integral values without a fraction."""
    return int(t) if float(t).is_integer() else round(t, 3)


@dataclass(slots=True)
class Track:
    """What happened to one workload over the run."""

    entry: JobEntry
    workload: Workload | None = None
    state: str = "Pending"
    submitted: float | None = None
    first_admitted: float | None = None
    admitted: float | None = None
    finished: float | None = None
    evictions: int = 0
    epoch: int = 0  # bumped on every admission/eviction, so stale finish events are ignored
    admission: Admission | None = None  # while admitted


@dataclass(slots=True)
class QueueMeter:
    """Integrals over time of a ClusterQueue's usage and nominal quota, per resource."""

    last: float = 0.0
    usage: dict[str, int] = field(default_factory=dict)
    nominal: dict[str, int] = field(default_factory=dict)
    used_seconds: dict[str, float] = field(default_factory=dict)
    nominal_seconds: dict[str, float] = field(default_factory=dict)

    def advance(self, t: float) -> None:
        dt = t - self.last
        if dt > 0:
            for res, v in self.usage.items():
                self.used_seconds[res] = self.used_seconds.get(res, 0.0) + v * dt
            for res, v in self.nominal.items():
                self.nominal_seconds[res] = self.nominal_seconds.get(res, 0.0) + v * dt
        self.last = t


@dataclass(slots=True)
class Result:
    scenario: str
    events: list[dict[str, Any]]
    tracks: list[Track]
    meters: dict[str, QueueMeter]
    makespan: float
    preempted: dict[str, int]
    series: list[tuple[float, int, int]]  # (t, pending workloads, GPUs in use)
    cycles: int
    explain: Callable[[Workload], tuple[str, str]]
    # jobs the API server refused at creation (engine cluster): workload key -> its message
    refused: dict[str, str] = field(default_factory=dict)

    def to_json(self, engine: str = "core") -> dict[str, Any]:
        out = {
            "scenario": self.scenario,
            "engine": engine,
            "events": self.events,
            "workloads": {t.entry.job.key: _workload_json(t, self.explain) for t in self.tracks},
            "summary": self.summary(),
        }
        if self.refused:  # an optional field: only engine cluster, only when it happened
            out["refused"] = [{"workload": k, "message": m} for k, m in sorted(self.refused.items())]
        return out

    def summary(self) -> dict[str, Any]:
        per_cq: dict[str, dict[str, Any]] = {}
        by_queue: dict[str, list[Track]] = {name: [] for name in self.meters}
        for t in self.tracks:
            if t.workload is not None and t.workload.cluster_queue:
                by_queue.setdefault(t.workload.cluster_queue, []).append(t)
        for name in sorted(by_queue):
            mine = by_queue[name]
            waits = sorted(
                t.first_admitted - t.submitted for t in mine if t.first_admitted is not None and t.submitted is not None
            )
            meter = self.meters.get(name, QueueMeter())
            util = {
                res: round(meter.used_seconds.get(res, 0.0) / denom, 4)
                for res, denom in sorted(meter.nominal_seconds.items())
                if denom > 0
            }
            per_cq[name] = {
                "admitted": sum(1 for t in mine if t.first_admitted is not None),
                "finished": sum(1 for t in mine if t.state == "Finished"),
                "pending": sum(1 for t in mine if t.state == "Pending"),
                "preempted": self.preempted.get(name, 0),
                "wait": _wait_stats(waits),
                "utilization": util,
            }
        return {"makespan": num(self.makespan), "clusterQueues": per_cq}


def _percentile(sorted_values: list[float], p: float) -> float:
    """Nearest-rank percentile."""
    rank = max(1, -(-int(p * len(sorted_values) * 1000) // 1000))
    return sorted_values[min(rank, len(sorted_values)) - 1]


def _wait_stats(waits: list[float]) -> dict[str, int | float | None]:
    if not waits:
        return {"mean": None, "p50": None, "p90": None, "max": None}
    return {
        "mean": num(round(sum(waits) / len(waits), 3)),
        "p50": num(_percentile(waits, 0.5)),
        "p90": num(_percentile(waits, 0.9)),
        "max": num(waits[-1]),
    }


def _workload_json(t: Track, explain: Callable[[Workload], tuple[str, str]]) -> dict[str, Any]:
    wl = t.workload
    out: dict[str, Any] = {
        "state": t.state,
        "clusterQueue": wl.cluster_queue if wl else None,
        "priority": wl.priority if wl else 0,
        "submitted": None if t.submitted is None else num(t.submitted),
        "admitted": None if t.admitted is None or t.state == "Pending" else num(t.admitted),
        "finished": None if t.finished is None else num(t.finished),
        "evictions": t.evictions,
    }
    if t.state == "Pending" and wl is not None:
        out["reason"], out["message"] = explain(wl)
    return out


class Recorder:
    """What happened, as both engines report it: tracks, events, meters, preemptions, a time series.

    Engine core calls it as its scheduler decides; engine cluster replays the decisions the
    controller committed. Either way the same code turns them into ``Result``.
    """

    def __init__(self, scenario: Scenario) -> None:
        self.scenario = scenario
        self.tracks = [Track(entry) for entry in scenario.jobs if entry.replicas is None]
        self.by_key: dict[str, Track] = {t.entry.job.key: t for t in self.tracks}
        self.events: list[dict[str, Any]] = []
        self.meters: dict[str, QueueMeter] = {}
        self.preempted: dict[str, int] = {}
        self.series: list[tuple[float, int, int]] = []
        self.now = 0.0
        self.pending = 0  # submitted workloads pending now (``sample``)

    def add(self, entry: JobEntry) -> None:
        """A workload the timeline did not list: a Deployment's replica, made as it ran."""
        track = Track(entry)
        self.tracks.append(track)
        self.by_key[entry.job.key] = track

    def _meter(self, cq: str) -> QueueMeter:
        meter = self.meters.get(cq)
        if meter is None:
            meter = self.meters[cq] = QueueMeter(last=self.now)
        return meter

    def _emit(self, kind: str, key: str, **fields: Any) -> None:
        self.events.append({"t": num(self.now), "type": kind, "workload": key, **fields})

    def _charge(self, admission: Admission, sign: int) -> None:
        meter = self._meter(admission.cluster_queue)
        meter.advance(self.now)
        for (_flavor, res), v in admission.usage.items():
            meter.usage[res] = meter.usage.get(res, 0) + sign * v

    def nominal(self, queues: Mapping[str, ClusterQueue]) -> None:
        """The ClusterQueues' nominal quotas from now on (for utilization)."""
        for meter in self.meters.values():
            meter.advance(self.now)
            meter.nominal = {}
        for name, cq in queues.items():
            meter = self._meter(name)
            meter.advance(self.now)
            totals: dict[str, int] = {}
            for (_flavor, res), quota in cq.quotas.items():
                totals[res] = totals.get(res, 0) + quota.nominal
            meter.nominal = totals

    def _state(self, track: Track, state: str) -> None:
        """Move ``track`` to ``state``, keeping the count of submitted workloads that are pending."""
        before = track.state == "Pending" and track.submitted is not None
        track.state = state
        self.pending += int(state == "Pending" and track.submitted is not None) - int(before)

    def submitted(self, wl: Workload) -> None:
        track = self.by_key[wl.key]
        track.workload = wl
        was = track.state == "Pending" and track.submitted is not None
        track.submitted = self.now
        self.pending += int(track.state == "Pending") - int(was)
        self._emit("Submitted", wl.key)

    def admitted(self, key: str, admission: Admission) -> Track:
        track = self.by_key[key]
        self._state(track, "Admitted")
        track.admitted = self.now
        if track.first_admitted is None:
            track.first_admitted = self.now
        track.epoch += 1
        track.admission = admission
        if track.workload is not None:
            track.workload.cluster_queue = admission.cluster_queue
        self._charge(admission, 1)
        self._emit(
            "Admitted",
            key,
            clusterQueue=admission.cluster_queue,
            flavors={ps: dict(sorted(f.items())) for ps, f in admission.flavors.items()},
            borrowing=admission.borrowing,
            **({"counts": dict(sorted(admission.counts.items()))} if admission.counts else {}),
        )
        return track

    def evicted(self, key: str, reason: str, detail: str | None, by: str | None) -> None:
        track = self.by_key[key]
        if track.admission is not None:
            self._charge(track.admission, -1)
            if reason == scheduler.PREEMPTED:
                cq = track.admission.cluster_queue
                self.preempted[cq] = self.preempted.get(cq, 0) + 1
        track.admission = None
        self._state(track, "Pending")
        track.evictions += 1
        track.epoch += 1
        fields: dict[str, Any] = {"reason": reason, "detail": detail}
        if by is not None:
            fields["by"] = by
        self._emit("Evicted", key, **fields)

    def _end(self, key: str, state: str) -> None:
        track = self.by_key[key]
        if track.admission is not None:
            self._charge(track.admission, -1)
            track.admission = None
        self._state(track, state)
        track.epoch += 1
        if state == "Finished":
            track.finished = self.now
        self._emit(state, key)

    def finished(self, key: str) -> None:
        self._end(key, "Finished")

    def cancelled(self, key: str) -> None:
        self._end(key, "Cancelled")

    def sample(self) -> None:
        pending = self.pending  # (kept as tracks change state: a scan per instant is quadratic)
        gpus = sum(v // 1000 for m in self.meters.values() for res, v in m.usage.items() if "gpu" in res)
        self.series.append((self.now, pending, gpus))

    def result(self, *, cycles: int, explain: Callable[[Workload], tuple[str, str]]) -> Result:
        makespan = max((float(e["t"]) for e in self.events), default=0.0)
        for meter in self.meters.values():
            meter.advance(makespan)
        return Result(
            scenario=self.scenario.name,
            events=self.events,
            tracks=self.tracks,
            meters=self.meters,
            makespan=makespan,
            preempted=self.preempted,
            series=self.series,
            cycles=cycles,
            explain=explain,
        )
