"""What a simulation reports: each workload's track, each queue's wait and utilisation, the events.

Both engines fill the same ``Recorder`` (engine core as it decides, engine cluster by replaying
what the controller committed, ``admission.sim.replay``), so their reports have one shape
and are compared field by field; ``Result.to_json`` is scenario.md's output.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from queues.cycle import fairsharing, scheduler
from queues.model import Admission, ClusterQueue, Config, Snapshot, Workload
from queues.placement import locality
from queues.simulation.scenario import JobEntry, Scenario
from queues.work import Work


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
class ShareMeter:
    """Fair sharing: each ClusterQueue's weighted share (``queues.cycle.fairsharing``) at every instant of
    the run, its time-weighted mean and its maximum. Only trees whose usage changed are looked at
    again. An infinite share (a zero weight that borrows) is reported as null."""

    tree: Snapshot | None = None
    dirty: set[str] = field(default_factory=set)  # tree keys whose usage changed since the last sample
    now: dict[str, float] = field(default_factory=dict)  # ClusterQueue -> its share since ``since``
    since: float = 0.0
    integral: dict[str, float] = field(default_factory=dict)
    peak: dict[str, float] = field(default_factory=dict)
    series: list[tuple[float, dict[str, float]]] = field(default_factory=list)  # (t, changed shares)

    def sample(self, t: float) -> None:
        dt = t - self.since
        if dt > 0:
            for name, value in self.now.items():
                self.integral[name] = self.integral.get(name, 0.0) + value * dt
        self.since = max(self.since, t)
        if self.tree is None or not self.dirty:
            return
        changed: dict[str, float] = {}
        for name, cq in self.tree.queues.items():
            if cq.tree_key in self.dirty:
                value = fairsharing.share(cq).value
                if self.now.get(name) != value:
                    changed[name] = self.now[name] = value
                    self.peak[name] = max(self.peak.get(name, 0.0), value)
        self.dirty.clear()
        if changed:
            self.series.append((t, changed))

    def summary(self, name: str, makespan: float) -> dict[str, float | None]:
        def shown(v: float) -> float | None:
            return None if v == float("inf") else round(v, 3)

        mean = self.integral.get(name, 0.0) / makespan if makespan > 0 else 0.0
        return {
            "weightedShare": shown(self.now.get(name, 0.0)),
            "weightedShareMean": shown(mean),
            "weightedShareMax": shown(self.peak.get(name, 0.0)),
        }


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
    shares: ShareMeter | None = None  # fair sharing: each ClusterQueue's weighted share over time
    nodes: list[Mapping[str, Any]] = field(default_factory=list)  # the scenario's nodes (placement figures)
    efficiency: dict[str, object] = field(default_factory=dict)  # idle reclaim and budgets (engine core)
    work: Work | None = None  # what the scheduling core did (engine core: ``queues.work``)

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
            if self.shares is not None:
                per_cq[name].update(self.shares.summary(name, self.makespan))
        out: dict[str, Any] = {"makespan": num(self.makespan), "clusterQueues": per_cq}
        if self.nodes and any("placement" in e for e in self.events):  # (engine core records placements)
            out["placement"] = locality.summarize(self.events, self.tracks, self.nodes, self.makespan)
        out.update(self.efficiency)
        if self.work is not None:
            out["work"] = self.work.to_json()
        return out


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

    def __init__(self, scenario: Scenario, *, follow_shares: bool = False) -> None:
        """``follow_shares``: meter weighted shares even without fair sharing (to compare, ``bench``)."""
        self.scenario = scenario
        self.tracks = [Track(entry) for entry in scenario.jobs if entry.replicas is None]
        self.by_key: dict[str, Track] = {t.entry.job.key: t for t in self.tracks}
        self.events: list[dict[str, Any]] = []
        self.meters: dict[str, QueueMeter] = {}
        self.preempted: dict[str, int] = {}
        self.series: list[tuple[float, int, int]] = []
        self.now = 0.0
        self.pending = 0  # submitted workloads pending now (``sample``)
        self.tree: Snapshot | None = None  # the quota tree with what is admitted now (``configure``)
        self.shares = ShareMeter() if scenario.fair_sharing is not None or follow_shares else None

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
        cq = self.tree.queues.get(admission.cluster_queue) if self.tree is not None else None
        if cq is not None:
            cq.add_usage(admission.usage, sign)
            if self.shares is not None:
                self.shares.dirty.add(cq.tree_key)

    def configure(self, config: Config) -> None:
        """The configuration from now on: the ClusterQueues' nominal quotas (for utilization) and,
        with fair sharing, the quota tree whose shares are followed (usage as admitted now)."""
        tree = Snapshot(config)
        for track in self.tracks:
            if track.admission is not None and track.admission.cluster_queue in tree.queues:
                tree.queues[track.admission.cluster_queue].add_usage(track.admission.usage, 1)
        if self.shares is not None:
            self.shares.tree = tree
            self.shares.dirty.update(q.tree_key for q in tree.queues.values())
        self.tree = tree
        self._nominal(tree.queues)

    def _nominal(self, queues: Mapping[str, ClusterQueue]) -> None:
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

    def resized(self, key: str, admission: Admission, counts: Mapping[str, int]) -> None:
        """An elastic job's admission changed size while it runs (``queues.cycle.elastic``): a
        ``Resized`` event with its pods per pod set now; its usage is charged from now on."""
        track = self.by_key[key]
        if track.admission is not None:
            self._charge(track.admission, -1)
        track.admission = admission
        self._charge(admission, 1)
        self._emit("Resized", key, clusterQueue=admission.cluster_queue, counts=dict(sorted(counts.items())))

    def placed(self, key: str, placement: Mapping[str, Mapping[str, int]]) -> None:
        """Where the admission just recorded put its pods (scenario nodes only): pod set -> node -> pods."""
        if not self.scenario.nodes:
            return
        for event in reversed(self.events):
            if event["workload"] == key and event["type"] == "Admitted":
                event["placement"] = {ps: dict(nodes) for ps, nodes in sorted(placement.items())}
                return

    def evicted(self, key: str, reason: str, detail: str | None, by: str | None, message: str = "") -> None:
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
        if message:
            fields["message"] = message
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
        if self.shares is not None:
            self.shares.sample(self.now)

    def result(
        self, *, cycles: int, explain: Callable[[Workload], tuple[str, str]], work: Work | None = None
    ) -> Result:
        makespan = max((float(e["t"]) for e in self.events), default=0.0)
        for meter in self.meters.values():
            meter.advance(makespan)
        if self.shares is not None:
            self.shares.sample(makespan)
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
            shares=self.shares,
            work=work,
            nodes=list(self.scenario.nodes),
        )
