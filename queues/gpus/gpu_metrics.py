"""dcgm-exporter's GPU utilisation series, as a Prometheus query returns them, joined to pods.

The controller asks a Prometheus-compatible API for each series' mean over a reclaim window
(``admission.controller.features.utilisation``); this turns the answers into one figure per pod:

- ``DCGM_FI_PROF_GR_ENGINE_ACTIVE`` (a fraction; whole GPUs and MIG instances alike) where a pod
  has it, else ``DCGM_FI_DEV_GPU_UTIL`` / 100 (older GPUs, or a profile the exporter does not
  collect); a pod with several GPUs (or MIG instances) is their mean.
- The pod is named by ``exported_pod``/``exported_namespace`` where the series has them (the
  labels Prometheus renames ``pod``/``namespace`` to when it scrapes the exporter through a
  ServiceMonitor, whose own ``pod`` is the exporter's), else by ``pod``/``namespace`` as the
  exporter sets them. A series naming no pod (an idle GPU no container holds) cannot be joined:
  it is counted as ``unjoined`` and never makes anything idle.

Missing data is unknown, never idle: a pod without a series has no figure.

When a run ends, its whole interval is measured at once from a range query's answer (``Samples``:
each pod's points at the query's step, ``run_mean``): the mean of its pods' points between its
start and its end, however short the run was.

GPU memory (right-sizing, ``queues.gpus.rightsizing``): ``DCGM_FI_DEV_FB_USED`` and ``_FB_FREE`` (MiB)
per GPU, taken per pod as its busiest GPU's (``max by`` pod): the peak and the mean of what it
used, and that GPU's size (used + free). A pod without the series has no figure.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

ENGINE_ACTIVE = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"
FB_USED = "DCGM_FI_DEV_FB_USED"
FB_FREE = "DCGM_FI_DEV_FB_FREE"

PodKey = tuple[str, str]  # (namespace, pod)


@dataclass(frozen=True, slots=True)
class Memory:
    """GPU memory of a pod's (or a workload's) busiest GPU over a window, in MiB."""

    peak_mib: float
    mean_mib: float
    total_mib: float | None  # the GPU's size (used + free), where the exporter says it

    def merged(self, other: Memory) -> Memory:
        """Two figures of the same run (two pods, or two reads): the larger of each."""
        totals = [t for t in (self.total_mib, other.total_mib) if t]
        return Memory(
            max(self.peak_mib, other.peak_mib), max(self.mean_mib, other.mean_mib), max(totals) if totals else None
        )


def memory_of(by_pod: Mapping[PodKey, Memory], pods: Iterable[PodKey]) -> Memory | None:
    """The figure of a workload's pods (the busiest pod's); None if none has one."""
    out: Memory | None = None
    for pod in pods:
        figure = by_pod.get(pod)
        if figure is not None:
            out = figure if out is None else out.merged(figure)
    return out


@dataclass(slots=True)
class Reading:
    """Each pod's mean GPU utilisation over a window (a fraction), from one look."""

    by_pod: dict[PodKey, float] = field(default_factory=dict)
    series: int = 0  # series read
    unjoined: int = 0  # series naming no pod
    memory: dict[PodKey, Memory] = field(default_factory=dict)  # GPU memory over the same window

    def mean(self, pods: Iterable[PodKey]) -> float | None:
        """The mean over ``pods`` that have a figure; None if none has (unknown, never idle)."""
        values = [v for p in pods if (v := self.by_pod.get(p)) is not None]
        return sum(values) / len(values) if values else None


def pod_of(labels: Mapping[str, str]) -> PodKey | None:
    """The pod a series is about, or None (see the module docstring)."""
    pod = labels.get("exported_pod") or labels.get("pod")
    namespace = labels.get("exported_namespace") or labels.get("namespace")
    if not pod or not namespace:
        return None
    return (namespace, pod)


def combine(engine_active: Iterable[Mapping[str, Any]], gpu_util: Iterable[Mapping[str, Any]]) -> Reading:
    """One ``Reading`` from the results of the two instant queries (each Prometheus's
    ``data.result``: ``{metric: {labels}, value: [time, "number"]}``; ``gpu_util`` already a
    fraction). A pod's engine-activity series win over its utilisation series."""
    reading = Reading()
    per_pod: dict[str, dict[PodKey, list[float]]] = {ENGINE_ACTIVE: {}, GPU_UTIL: {}}
    for name, result in ((ENGINE_ACTIVE, engine_active), (GPU_UTIL, gpu_util)):
        for pod, value in _joined(result):
            reading.series += 1
            if pod is None or value is None:
                reading.unjoined += 1
                continue
            per_pod[name].setdefault(pod, []).append(min(1.0, max(0.0, value)))
    for pod in set(per_pod[ENGINE_ACTIVE]) | set(per_pod[GPU_UTIL]):
        values = per_pod[ENGINE_ACTIVE].get(pod) or per_pod[GPU_UTIL][pod]
        reading.by_pod[pod] = sum(values) / len(values)
    return reading


def memory(
    peak: Iterable[Mapping[str, Any]], mean: Iterable[Mapping[str, Any]], total: Iterable[Mapping[str, Any]]
) -> dict[PodKey, Memory]:
    """Each pod's ``Memory`` from three instant queries' results (its busiest GPU's peak, mean and
    size, MiB); a pod needs a peak and a mean, the size is optional."""
    values = [_by_pod(result) for result in (peak, mean, total)]
    return {
        pod: Memory(values[0][pod], values[1][pod], values[2].get(pod)) for pod in values[0].keys() & values[1].keys()
    }


def _by_pod(result: Iterable[Mapping[str, Any]]) -> dict[PodKey, float]:
    """An instant query's result as each pod's largest value (what names no pod is left out)."""
    out: dict[PodKey, float] = {}
    for pod, value in _joined(result):
        if pod is not None and value is not None and value >= 0:
            out[pod] = max(value, out.get(pod, value))
    return out


def _joined(result: Iterable[Mapping[str, Any]]) -> Iterator[tuple[PodKey | None, float | None]]:
    """An instant query's samples as (the pod it is about, its value); None where there is none."""
    for sample in result:
        labels = sample.get("metric") or {}
        pod = pod_of({str(k): str(v) for k, v in labels.items()}) if isinstance(labels, Mapping) else None
        yield pod, sample_value(sample.get("value"))


@dataclass(slots=True)
class Samples:
    """Each pod's utilisation points (time, fraction) from a range query, engine activity winning
    over utilisation where a pod has both, as in ``combine``; and its GPU memory points (time, MiB
    used by its busiest GPU) with that GPU's size."""

    by_pod: dict[PodKey, list[tuple[float, float]]] = field(default_factory=dict)
    memory: dict[PodKey, list[tuple[float, float]]] = field(default_factory=dict)
    totals: dict[PodKey, float] = field(default_factory=dict)

    def run_mean(self, pods: Iterable[PodKey], since: float, until: float) -> float | None:
        """The mean of ``pods``' points within ``[since, until]``; None when there is none."""
        values = [v for p in pods for t, v in self.by_pod.get(p, ()) if since <= t <= until]
        return sum(values) / len(values) if values else None

    def run_memory(self, pods: Iterable[PodKey], since: float, until: float) -> Memory | None:
        """``pods``' GPU memory within ``[since, until]``: the peak and mean of their points, the
        largest GPU size; None when there is no point."""
        pods = list(pods)
        values = [v for p in pods for t, v in self.memory.get(p, ()) if since <= t <= until]
        if not values:
            return None
        totals = [t for p in pods if (t := self.totals.get(p))]
        return Memory(max(values), sum(values) / len(values), max(totals) if totals else None)

    def add_memory(self, used: Iterable[Mapping[str, Any]], total: Iterable[Mapping[str, Any]]) -> None:
        """Two range queries' results: each pod's busiest GPU's memory used, and its size (MiB)."""
        for pod, points in _ranges(used).items():
            self.memory.setdefault(pod, []).extend(points)
        for pod, points in _ranges(total).items():
            self.totals[pod] = max([v for _, v in points] + [self.totals.get(pod, 0.0)])


def combine_ranges(engine_active: Iterable[Mapping[str, Any]], gpu_util: Iterable[Mapping[str, Any]]) -> Samples:
    """One ``Samples`` from two range queries' results (``{metric: {labels}, values: [[time,
    "number"], ...]}``; ``gpu_util`` already a fraction)."""
    active, util = _ranges(engine_active, 1.0), _ranges(gpu_util, 1.0)
    samples = Samples()
    for pod in set(active) | set(util):
        samples.by_pod[pod] = active.get(pod) or util.get(pod, [])
    return samples


def _ranges(result: Iterable[Mapping[str, Any]], cap: float | None = None) -> dict[PodKey, list[tuple[float, float]]]:
    """A range query's series as each pod's (time, value) points (values clipped to [0, cap])."""
    out: dict[PodKey, list[tuple[float, float]]] = {}
    for series in result:
        labels = series.get("metric") or {}
        pod = pod_of({str(k): str(v) for k, v in labels.items()}) if isinstance(labels, Mapping) else None
        points = series.get("values")
        if pod is None or not isinstance(points, list):
            continue
        into = out.setdefault(pod, [])
        try:  # (the common case, in one pass: [[time, "value"], ...] of finite numbers)
            parsed = [(float(t), float(v)) for t, v in points]
        except (TypeError, ValueError):
            parsed = [(a, v) for point in points if (v := sample_value(point)) is not None
                      and (a := sample_value([None, point[0]] if isinstance(point, list | tuple) and point else None))
                      is not None]  # fmt: skip
        top = math.inf if cap is None else cap
        into.extend((t, min(top, max(0.0, v))) for t, v in parsed if math.isfinite(v) and math.isfinite(t))
    return out


def sample_value(value: Any) -> float | None:
    """A sample's value (``[time, "0.12"]``), or None if it is not a finite number."""
    if not isinstance(value, list | tuple) or len(value) != 2:
        return None
    try:
        number = float(value[1])
    except (TypeError, ValueError):
        return None
    return number if number == number and number not in (float("inf"), float("-inf")) else None
