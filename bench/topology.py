"""Topology-aware placement: a mixed training load on 64 nodes x 8 GPUs in 8 racks, four ways.

1. **quota only** (today's Kueue without TAS): admission by quota; the simulated kube-scheduler
   binds each pod to the first node with room;
2. **Kueue TAS**: the flavor names a Topology; jobs annotated as a Kueue user would
   (``podset-preferred-topology: kubernetes.io/hostname`` on multi-pod jobs, 32-GPU jobs
   ``podset-required-topology: rack``), placed by Kueue's algorithm (``topologyPacking: Kueue``);
3. **Turnstile packing**: the same jobs with Turnstile's packing (``Compact``: ties go to the
   fullest rack);
4. **Turnstile, no annotations**: the 32-GPU jobs keep ``required: rack``, the rest ask nothing
   (Kueue would place them unconstrained; Turnstile places them compactly).

Jobs: 1, 2 and 4 GPUs in one pod; 8, 16 and 32 GPUs as pods of 4 GPUs (so an 8-GPU job can be
split over two nodes); arrivals and runtimes from a fixed seed, about 90 % of the GPUs asked for.
Printed per run: GPU utilisation, p50/p95 wait per job size, the share of 8-GPU jobs on one node
and of 32-GPU jobs within one rack, fragmentation (``queues.placement.locality``) and the wall time to
simulate. Then the cost of one placement on 1,000 nodes (p50/p99 over random occupancies).
"""

from __future__ import annotations

import random
import statistics
import time
from typing import Any

from queues.placement import topology
from queues.placement.nodes import NodeInfo, PodNeeds, node_object
from queues.podsets.topology_requests import PREFERRED, REQUIRED, Request
from queues.simulation import scenario, simulator

GPU = "nvidia.com/gpu"
RACK = "cloud.provider.com/topology-rack"
HOST = "kubernetes.io/hostname"
SIZES = (1, 2, 4, 8, 16, 32)
WEIGHTS = (30, 20, 15, 15, 12, 8)  # job counts by size: many small, few big
JOBS = 1500
RACKS, PER_RACK, PER_NODE = 8, 8, 8


def _jobs(annotate: str) -> list[dict[str, Any]]:
    """``annotate``: none | kueue (preferred hostname on multi-pod jobs) | big (32-GPU jobs only)."""
    rng = random.Random(7)
    capacity = RACKS * PER_RACK * PER_NODE
    mean_gpus = sum(s * w for s, w in zip(SIZES, WEIGHTS, strict=True)) / sum(WEIGHTS)
    mean_runtime = 1800.0
    gap = mean_gpus * mean_runtime / (0.9 * capacity)  # seconds between arrivals for ~90 % load
    out, t = [], 0.0
    for i in range(JOBS):
        t += rng.expovariate(1 / gap)
        size = rng.choices(SIZES, WEIGHTS)[0]
        per_pod = min(size, 4)
        pods = size // per_pod
        annotations: dict[str, str] = {}
        if annotate != "none" and size == 32:
            annotations[REQUIRED] = RACK
        elif annotate == "kueue" and pods > 1:
            annotations[PREFERRED] = HOST
        template: dict[str, Any] = {
            "spec": {"containers": [{"name": "c", "resources": {"limits": {GPU: str(per_pod)}}}]}
        }
        if annotations:
            template["metadata"] = {"annotations": annotations}
        out.append(
            {
                "at": round(t),
                "runtime": round(rng.uniform(0.3, 1.7) * mean_runtime),
                "object": {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "metadata": {
                        "name": f"j{i}-{size}",
                        "namespace": "ml",
                        "labels": {"kueue.x-k8s.io/queue-name": "q"},
                    },
                    "spec": {"parallelism": pods, "completions": pods, "template": template},
                },
            }
        )
    return out


def _doc(tas: bool, packing: str, annotate: str) -> dict[str, Any]:
    flavor_spec: dict[str, Any] = {"topologyName": "racks"} if tas else {}
    manifests: list[dict[str, Any]] = [
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Topology", "metadata": {"name": "racks"},
         "spec": {"levels": [{"nodeLabel": RACK}, {"nodeLabel": HOST}]}},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": "gpu"},
         "spec": flavor_spec},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": "cq"},
         "spec": {"namespaceSelector": {}, "queueingStrategy": "BestEffortFIFO", "resourceGroups": [
             {"coveredResources": [GPU], "flavors": [{"name": "gpu", "resources": [
                 {"name": GPU, "nominalQuota": RACKS * PER_RACK * PER_NODE}]}]}]}},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue", "metadata": {"name": "q", "namespace": "ml"},
         "spec": {"clusterQueue": "cq"}},
    ]  # fmt: skip
    return {
        "name": "topology-bench",
        "manifests": manifests,
        "nodes": [{"generate": {"racks": RACKS, "nodesPerRack": PER_RACK, "gpusPerNode": PER_NODE}}],
        "topologyPacking": packing,
        "jobs": _jobs(annotate),
    }


RUNS = {
    "quota only": (False, topology.COMPACT, "none"),
    "Kueue TAS": (True, topology.KUEUE, "kueue"),
    "Turnstile packing": (True, topology.COMPACT, "kueue"),
    "Turnstile, no annotations": (True, topology.COMPACT, "big"),
}


def run(name: str) -> dict[str, Any]:
    parsed = scenario.parse(_doc(*RUNS[name]))
    t0 = time.perf_counter()
    result = simulator.Simulation(parsed).run().to_json()
    wall = time.perf_counter() - t0
    waits: dict[int, list[float]] = {s: [] for s in SIZES}
    for key, wl in result["workloads"].items():
        if wl["admitted"] is not None:
            waits[int(key.rsplit("-", 1)[1])].append(wl["admitted"] - wl["submitted"])
    placement = result["summary"]["placement"]
    by_size = placement["bySize"]
    return {
        "wall": wall,
        "makespan": result["summary"]["makespan"],
        "utilization": placement["gpuUtilization"],
        "fragmentation": placement["fragmentation"],
        "eight_on_one_node": by_size.get("8", {}).get("onOneNode"),
        "thirtytwo_in_one_rack": by_size.get("32", {}).get("withinOne", {}).get(RACK),
        "waits": {s: _pct(w) for s, w in waits.items()},
    }


def _pct(values: list[float]) -> tuple[float, float]:
    if not values:
        return (float("nan"), float("nan"))
    ordered = sorted(values)
    return ordered[len(ordered) // 2], ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]


def placement_cost(nodes: int = 1000, calls: int = 2000) -> tuple[float, float]:
    """p50 and p99 of one ``topology.place`` on ``nodes`` nodes (8 GPUs, 8 per rack), random occupancy."""
    rng = random.Random(11)
    infos = [
        NodeInfo.of(node_object(f"r{i // 8}-n{i % 8}", {"labels": {RACK: f"r{i // 8}"}, "capacity": {GPU: "8"}}))
        for i in range(nodes)
    ]
    times = []
    for _ in range(calls):
        free = {n.name: {GPU: rng.choice((0, 0, 2, 4, 8)) * 1000} for n in infos}
        size = rng.choice(SIZES)
        per_pod = min(size, 4)
        request = Request("required", RACK) if size == 32 else Request("preferred", HOST)
        t0 = time.perf_counter()
        topology.place(request, [RACK, HOST], PodNeeds({GPU: per_pod * 1000}), size // per_pod, infos, free)
        times.append(time.perf_counter() - t0)
    times.sort()
    return statistics.median(times), times[int(0.99 * len(times))]


def main() -> None:
    print(f"\n== topology: {JOBS} jobs of {'/'.join(map(str, SIZES))} GPUs on {RACKS} racks x {PER_RACK} nodes x "
          f"{PER_NODE} GPUs ==")  # fmt: skip
    print(f"{'run':27} {'util':>6} {'frag':>6} {'8 on 1 node':>12} {'32 in 1 rack':>13} {'wall':>6}  "
          "wait p50/p95 (s) by size")  # fmt: skip
    for name in RUNS:
        r = run(name)
        waits = "  ".join(f"{s}:{p50:.0f}/{p95:.0f}" for s, (p50, p95) in r["waits"].items())
        eight = "-" if r["eight_on_one_node"] is None else f"{r['eight_on_one_node']:.0%}"
        big = "-" if r["thirtytwo_in_one_rack"] is None else f"{r['thirtytwo_in_one_rack']:.0%}"
        print(
            f"{name:27} {r['utilization']:6.1%} {r['fragmentation']:6.1%} {eight:>12} {big:>13} "
            f"{r['wall']:5.1f}s  {waits}"
        )
    p50, p99 = placement_cost()
    print(f"placement on 1,000 nodes: p50 {p50 * 1000:.2f} ms, p99 {p99 * 1000:.2f} ms per pod set")
