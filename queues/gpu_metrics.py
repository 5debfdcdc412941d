"""dcgm-exporter's GPU utilisation series, as a Prometheus query returns them, joined to pods.

The controller asks a Prometheus-compatible API for each series' mean over a reclaim window
(``admission.controller.utilisation``); this turns the answers into one figure per pod:

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
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

ENGINE_ACTIVE = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"

PodKey = tuple[str, str]  # (namespace, pod)


@dataclass(slots=True)
class Reading:
    """Each pod's mean GPU utilisation over a window (a fraction), from one look."""

    by_pod: dict[PodKey, float] = field(default_factory=dict)
    series: int = 0  # series read
    unjoined: int = 0  # series naming no pod

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
        for sample in result:
            reading.series += 1
            labels = sample.get("metric") or {}
            value = _number(sample.get("value"))
            pod = pod_of({str(k): str(v) for k, v in labels.items()}) if isinstance(labels, Mapping) else None
            if pod is None or value is None:
                reading.unjoined += 1
                continue
            per_pod[name].setdefault(pod, []).append(min(1.0, max(0.0, value)))
    for pod in set(per_pod[ENGINE_ACTIVE]) | set(per_pod[GPU_UTIL]):
        values = per_pod[ENGINE_ACTIVE].get(pod) or per_pod[GPU_UTIL][pod]
        reading.by_pod[pod] = sum(values) / len(values)
    return reading


@dataclass(slots=True)
class Samples:
    """Each pod's utilisation points (time, fraction) from a range query, engine activity winning
    over utilisation where a pod has both, as in ``combine``."""

    by_pod: dict[PodKey, list[tuple[float, float]]] = field(default_factory=dict)

    def run_mean(self, pods: Iterable[PodKey], since: float, until: float) -> float | None:
        """The mean of ``pods``' points within ``[since, until]``; None when there is none."""
        values = [v for p in pods for t, v in self.by_pod.get(p, ()) if since <= t <= until]
        return sum(values) / len(values) if values else None


def combine_ranges(engine_active: Iterable[Mapping[str, Any]], gpu_util: Iterable[Mapping[str, Any]]) -> Samples:
    """One ``Samples`` from two range queries' results (``{metric: {labels}, values: [[time,
    "number"], ...]}``; ``gpu_util`` already a fraction)."""
    per_pod: dict[str, dict[PodKey, list[tuple[float, float]]]] = {ENGINE_ACTIVE: {}, GPU_UTIL: {}}
    for name, result in ((ENGINE_ACTIVE, engine_active), (GPU_UTIL, gpu_util)):
        for series in result:
            labels = series.get("metric") or {}
            pod = pod_of({str(k): str(v) for k, v in labels.items()}) if isinstance(labels, Mapping) else None
            points = series.get("values")
            if pod is None or not isinstance(points, list):
                continue
            into = per_pod[name].setdefault(pod, [])
            for point in points:
                value = _number(point)
                at = _number([None, point[0]]) if value is not None else None
                if value is not None and at is not None:
                    into.append((at, min(1.0, max(0.0, value))))
    samples = Samples()
    for pod in set(per_pod[ENGINE_ACTIVE]) | set(per_pod[GPU_UTIL]):
        samples.by_pod[pod] = per_pod[ENGINE_ACTIVE].get(pod) or per_pod[GPU_UTIL][pod]
    return samples


def _number(value: Any) -> float | None:
    """A sample's value (``[time, "0.12"]``), or None if it is not a finite number."""
    if not isinstance(value, list | tuple) or len(value) != 2:
        return None
    try:
        number = float(value[1])
    except (TypeError, ValueError):
        return None
    return number if number == number and number not in (float("inf"), float("-inf")) else None
