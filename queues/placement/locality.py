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

from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Protocol

from queues import quantity
from queues.placement.nodes import HOSTNAME

GPU = "nvidia.com/gpu"


class _Track(Protocol):  # (``recorder.Track``; a protocol so this module needs no recorder import)
    @property
    def workload(self) -> Any: ...


class Replay:
    """The nodes' GPUs in use over a run, replayed from its events: ``steps`` yields, for each
    span between events, its start and end, the GPUs in use per node and whether a GPU job
    waited; ``admitted`` collects each admission's GPUs per node."""

    def __init__(
        self, events: Sequence[Mapping[str, Any]], tracks: Sequence[_Track], nodes: Sequence[Mapping[str, Any]]
    ):
        self.events = events
        self.capacity = {
            str(n["name"]): quantity.parse_milli(str((n.get("capacity") or {}).get(GPU, "0"))) // 1000 for n in nodes
        }
        self.per_pod: dict[str, dict[str, int]] = {}  # workload -> pod set -> GPUs per pod
        for track in tracks:
            wl = track.workload
            if wl is not None:
                self.per_pod[wl.key] = {ps.name: ps.requests.get(GPU, 0) // 1000 for ps in wl.pod_sets}
        self.admitted: list[dict[str, int]] = []

    def steps(self) -> Iterator[tuple[float, float, Mapping[str, int], bool]]:
        running: dict[str, dict[str, int]] = {}  # workload -> node -> GPUs
        in_use = {name: 0 for name in self.capacity}
        waiting: set[str] = set()
        last = 0.0
        for e in self.events:
            t = float(e["t"])
            if t > last:
                yield last, t, in_use, bool(waiting)
                last = t
            key = str(e["workload"])
            gpus_per = self.per_pod.get(key, {})
            if e["type"] == "Submitted" and any(gpus_per.values()):
                waiting.add(key)
            elif e["type"] == "Admitted":
                waiting.discard(key)
                on: dict[str, int] = {}
                for ps, placed in (e.get("placement") or {}).items():
                    for node, pods in placed.items():
                        on[node] = on.get(node, 0) + pods * gpus_per.get(ps, 0)
                running[key] = on = {n: g for n, g in on.items() if g}
                for node, g in on.items():
                    in_use[node] = in_use.get(node, 0) + g
                if on:
                    self.admitted.append(on)
            elif e["type"] in ("Evicted", "Finished", "Cancelled"):
                for node, g in running.pop(key, {}).items():
                    in_use[node] = in_use.get(node, 0) - g
                if e["type"] == "Evicted" and any(gpus_per.values()):
                    waiting.add(key)
                else:
                    waiting.discard(key)


def summarize(
    events: Sequence[Mapping[str, Any]], tracks: Sequence[_Track], nodes: Sequence[Mapping[str, Any]], makespan: float
) -> dict[str, Any]:
    replay = Replay(events, tracks, nodes)
    capacity = replay.capacity
    total = sum(capacity.values())
    gpu_seconds = stranded_seconds = waiting_seconds = 0.0
    for start, end, in_use, waiting in replay.steps():
        gpu_seconds += sum(in_use.values()) * (end - start)
        if waiting and total:
            stranded = sum(capacity[n] - in_use[n] for n in capacity if 0 < in_use[n] < capacity[n])
            stranded_seconds += stranded / total * (end - start)
            waiting_seconds += end - start
    labels = {str(n["name"]): dict(n.get("labels") or {}) for n in nodes}
    domains = _domain_labels(labels)
    by_size: dict[int, dict[str, Any]] = {}
    for on in replay.admitted:
        _count(by_size.setdefault(sum(on.values()), {"jobs": 0, "onOneNode": 0, "withinOne": {}}), on, labels, domains)
    return {
        "gpuUtilization": round(gpu_seconds / (total * makespan), 4) if total and makespan else None,
        "fragmentation": round(stranded_seconds / waiting_seconds, 4) if waiting_seconds else 0.0,
        "bySize": {str(size): _shares(row) for size, row in sorted(by_size.items())},
    }


def occupancy(
    events: Sequence[Mapping[str, Any]],
    tracks: Sequence[_Track],
    nodes: Sequence[Mapping[str, Any]],
    makespan: float,
    columns: int = 200,
) -> tuple[list[str], list[list[float]]]:
    """Node occupancy over time for ``--plot``: the node names (in topology order) and, for each,
    the share of its GPUs in use in each of ``columns`` equal spans of the run."""
    replay = Replay(events, tracks, nodes)
    names = [str(n["name"]) for n in sorted(nodes, key=lambda n: (sorted((n.get("labels") or {}).items()), n["name"]))]
    grid = [[0.0] * columns for _ in names]
    width = makespan / columns if makespan > 0 else 1.0
    row = {name: i for i, name in enumerate(names)}
    for start, end, in_use, _ in replay.steps():
        first, last = int(start // width), min(columns - 1, int(end // width))
        for col in range(first, last + 1):
            overlap = min(end, (col + 1) * width) - max(start, col * width)
            if overlap <= 0:
                continue
            for node, gpus in in_use.items():
                cap = replay.capacity.get(node, 0)
                if gpus and cap and node in row:
                    grid[row[node]][col] += gpus / cap * overlap / width
    return names, grid


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
