"""How well a run placed GPU jobs: locality per job size, GPU utilisation, fragmentation.

Read from the report's own events (every ``Admitted`` event carries ``placement`` when the
scenario lists nodes), so both engines' reports are summarised the same way:

- ``bySize``: for each job size in GPUs, how many admissions, and the share whose pods were all
  on one node (``onOneNode``) and all within one domain of each topology label (``withinOne``:
  labels every node has, with more than one value and fewer values than nodes, such as a rack);
- ``gpuUtilization``: GPU-seconds on nodes over (the nodes' GPUs x the makespan);
- ``fragmentation``: while some GPU job waits, the mean share of all GPUs that are free on nodes
  already partly used (free capacity scattered where a whole-node job cannot use it).

Only pods bound at admission count (a pod without room waits and is not in ``placement``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from queues import quantity
from queues.nodes import HOSTNAME

GPU = "nvidia.com/gpu"


class _Track(Protocol):  # (``recorder.Track``; a protocol so this module needs no recorder import)
    @property
    def workload(self) -> Any: ...


def summarize(
    events: Sequence[Mapping[str, Any]], tracks: Sequence[_Track], nodes: Sequence[Mapping[str, Any]], makespan: float
) -> dict[str, Any]:
    capacity = {
        str(n["name"]): quantity.parse_milli(str((n.get("capacity") or {}).get(GPU, "0"))) // 1000 for n in nodes
    }
    labels = {str(n["name"]): dict(n.get("labels") or {}) for n in nodes}
    domains = _domain_labels(labels)
    per_pod: dict[str, dict[str, int]] = {}  # workload -> pod set -> GPUs per pod
    for track in tracks:
        wl = track.workload
        if wl is not None:
            per_pod[wl.key] = {ps.name: ps.requests.get(GPU, 0) // 1000 for ps in wl.pod_sets}
    by_size: dict[int, dict[str, Any]] = {}
    running: dict[str, dict[str, int]] = {}  # workload -> node -> GPUs
    in_use = {name: 0 for name in capacity}
    waiting: set[str] = set()
    total = sum(capacity.values())
    gpu_seconds = stranded_seconds = waiting_seconds = 0.0
    last = 0.0
    for e in events:
        t = float(e["t"])
        if t > last:
            busy = sum(in_use.values())
            gpu_seconds += busy * (t - last)
            if waiting and total:
                stranded = sum(capacity[n] - in_use[n] for n in capacity if 0 < in_use[n] < capacity[n])
                stranded_seconds += stranded / total * (t - last)
                waiting_seconds += t - last
            last = t
        key = str(e["workload"])
        gpus_per = per_pod.get(key, {})
        if e["type"] == "Submitted" and any(gpus_per.values()):
            waiting.add(key)
        elif e["type"] == "Admitted":
            waiting.discard(key)
            on: dict[str, int] = {}
            for ps, placed in (e.get("placement") or {}).items():
                for node, pods in placed.items():
                    on[node] = on.get(node, 0) + pods * gpus_per.get(ps, 0)
            on = {n: g for n, g in on.items() if g}
            running[key] = on
            for node, g in on.items():
                in_use[node] = in_use.get(node, 0) + g
            gpus = sum(on.values())
            if gpus:
                _count(by_size.setdefault(gpus, {"jobs": 0, "onOneNode": 0, "withinOne": {}}), on, labels, domains)
        elif e["type"] in ("Evicted", "Finished", "Cancelled"):
            for node, g in running.pop(key, {}).items():
                in_use[node] = in_use.get(node, 0) - g
            if e["type"] == "Evicted" and any(gpus_per.values()):
                waiting.add(key)
            else:
                waiting.discard(key)
    return {
        "gpuUtilization": round(gpu_seconds / (total * makespan), 4) if total and makespan else None,
        "fragmentation": round(stranded_seconds / waiting_seconds, 4) if waiting_seconds else 0.0,
        "bySize": {str(size): _shares(row) for size, row in sorted(by_size.items())},
    }


def _domain_labels(labels: Mapping[str, Mapping[str, str]]) -> list[str]:
    """Labels every node has, grouping them into more than one domain but fewer than the nodes."""
    if not labels:
        return []
    common = set.intersection(*(set(v) for v in labels.values())) - {HOSTNAME}
    out = []
    for key in sorted(common):
        values = {v[key] for v in labels.values()}
        if 1 < len(values) < len(labels):
            out.append(key)
    return out


def _count(
    row: dict[str, Any], on: Mapping[str, int], labels: Mapping[str, Mapping[str, str]], domains: list[str]
) -> None:
    row["jobs"] += 1
    row["onOneNode"] += int(len(on) == 1)
    for key in domains:
        values = {labels.get(node, {}).get(key) for node in on}
        row["withinOne"][key] = row["withinOne"].get(key, 0) + int(len(values) == 1)


def _shares(row: Mapping[str, Any]) -> dict[str, Any]:
    jobs = row["jobs"]
    return {
        "jobs": jobs,
        "onOneNode": round(row["onOneNode"] / jobs, 4),
        "withinOne": {k: round(v / jobs, 4) for k, v in sorted(row["withinOne"].items())},
    }
