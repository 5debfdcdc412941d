"""Kueue's scheduler performance configs as scenario generators, run through engine core.

``baseline`` is kubernetes-sigs/kueue ``test/performance/scheduler/configs/baseline``: 5 cohorts
x 6 ClusterQueues (nominal 20 CPU, borrowingLimit 100, reclaimWithinCohort Any,
withinClusterQueue LowerPriority), and per queue 350 small (1 CPU, 200 ms, priority 50, one
every 100 ms), 100 medium (5 CPU, 500 ms, priority 100, every 500 ms) and 50 large (20 CPU,
1 s, priority 200, every 1.2 s) workloads: 15,000 in all. Its fluid lower bound on makespan is
66 s (each cohort: 7,920 CPU-seconds of work on 120 CPUs).

``large_scale`` follows the issue's description of Kueue's large-scale config (1,000
ClusterQueues, 50,000 workloads): 10 cohorts x 100 queues, per queue 35 small / 10 medium / 5
large, with the large-scale timings of Kueue's file (small 50 ms every 20 ms, medium 100 ms
every 50 ms, large 200 ms every 200 ms). Kueue's current file has grown to 2,000 queues.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from queues.simulation import scenario, simulator


@dataclass(frozen=True)
class WorkloadSet:
    cls: str
    count: int
    interval: float
    runtime: float
    priority: int
    cpu: int


BASELINE = (
    WorkloadSet("small", 350, 0.1, 0.2, 50, 1),
    WorkloadSet("medium", 100, 0.5, 0.5, 100, 5),
    WorkloadSet("large", 50, 1.2, 1.0, 200, 20),
)
LARGE_SCALE = (
    WorkloadSet("small", 35, 0.02, 0.05, 50, 1),
    WorkloadSet("medium", 10, 0.05, 0.1, 100, 5),
    WorkloadSet("large", 5, 0.2, 0.2, 200, 20),
)
KUEUE_FIGURES = {
    "baseline": {"makespan": 351.0, "small": 215.0, "medium": 77.0, "large": 16.5},
    "large_scale": {"makespan": 1179.0},
}


def generate(name: str, cohorts: int, queues: int, sets: tuple[WorkloadSet, ...]) -> dict[str, Any]:
    manifests: list[dict[str, Any]] = [
        {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ResourceFlavor", "metadata": {"name": "default"}}
    ]
    for s in sets:
        manifests.append(
            {
                "apiVersion": "kueue.x-k8s.io/v1beta1",
                "kind": "WorkloadPriorityClass",
                "metadata": {"name": s.cls},
                "value": s.priority,
            }
        )
    jobs: list[dict[str, Any]] = []
    for c in range(cohorts):
        for q in range(queues):
            cq = f"cohort-{c}-cq-{q}"
            manifests.append(
                {
                    "apiVersion": "kueue.x-k8s.io/v1beta1",
                    "kind": "ClusterQueue",
                    "metadata": {"name": cq},
                    "spec": {
                        "cohort": f"cohort-{c}",
                        "namespaceSelector": {},
                        "preemption": {"reclaimWithinCohort": "Any", "withinClusterQueue": "LowerPriority"},
                        "resourceGroups": [
                            {
                                "coveredResources": ["cpu"],
                                "flavors": [
                                    {
                                        "name": "default",
                                        "resources": [{"name": "cpu", "nominalQuota": "20", "borrowingLimit": "100"}],
                                    }
                                ],
                            }
                        ],
                    },
                }
            )
            manifests.append(
                {
                    "apiVersion": "kueue.x-k8s.io/v1beta1",
                    "kind": "LocalQueue",
                    "metadata": {"name": "lq", "namespace": cq},
                    "spec": {"clusterQueue": cq},
                }
            )
            for s in sets:
                for i in range(s.count):
                    jobs.append(
                        {
                            "at": round(i * s.interval, 6),
                            "runtime": s.runtime,
                            "object": {
                                "apiVersion": "batch/v1",
                                "kind": "Job",
                                "metadata": {
                                    "name": f"{s.cls}-{i}",
                                    "namespace": cq,
                                    "labels": {
                                        "kueue.x-k8s.io/queue-name": "lq",
                                        "kueue.x-k8s.io/priority-class": s.cls,
                                    },
                                },
                                "spec": {
                                    "template": {
                                        "spec": {
                                            "restartPolicy": "Never",
                                            "containers": [
                                                {
                                                    "name": "c",
                                                    "image": "x",
                                                    "resources": {"requests": {"cpu": str(s.cpu)}},
                                                }
                                            ],
                                        }
                                    }
                                },
                            },
                        }
                    )
    return {"name": name, "manifests": manifests, "jobs": jobs}


def fluid_bound(queues: int, sets: tuple[WorkloadSet, ...]) -> float:
    work = queues * sum(s.count * s.cpu * s.runtime for s in sets)
    arrivals = max((s.count - 1) * s.interval for s in sets)
    return max(work / (queues * 20), arrivals)


def figures(result: simulator.Result, queues: int, sets: tuple[WorkloadSet, ...]) -> dict[str, Any]:
    """Makespan against the fluid bound, average time to admission per class, preemptions."""
    waits: dict[str, list[float]] = {}
    finished = 0
    for t in result.tracks:
        if t.first_admitted is not None and t.submitted is not None:
            waits.setdefault(t.entry.job.name.split("-")[0], []).append(t.first_admitted - t.submitted)
        finished += t.state == "Finished"
    return {
        "workloads": len(result.tracks),
        "finished": finished,
        "makespan": float(result.summary()["makespan"]),
        "bound": fluid_bound(queues, sets),
        "avg_wait": {cls: sum(v) / len(v) for cls, v in waits.items()},
        "cycles": result.cycles,
        "preemptions": sum(1 for e in result.events if e["type"] == "Evicted"),
        "admissions": sum(1 for e in result.events if e["type"] == "Admitted"),
        "work": result.work.to_json() if result.work is not None else {},
    }


def run(name: str, cohorts: int, queues: int, sets: tuple[WorkloadSet, ...]) -> dict[str, Any]:
    doc = generate(name, cohorts, queues, sets)
    t0 = time.perf_counter()
    parsed = scenario.parse(doc)
    t1 = time.perf_counter()
    result = simulator.Simulation(parsed).run()
    t2 = time.perf_counter()
    return {**figures(result, queues, sets), "parse_s": t1 - t0, "simulate_s": t2 - t1}


def main() -> None:
    for name, cohorts, queues, sets in (("baseline", 5, 6, BASELINE), ("large_scale", 10, 100, LARGE_SCALE)):
        r = run(name, cohorts, queues, sets)
        kueue = KUEUE_FIGURES[name]
        print(f"\n[{name}] {cohorts} cohorts x {queues} CQs, {r['workloads']} workloads, {r['finished']} finished")
        theirs = f"   Kueue (its CI, wall clock): {kueue['makespan']:.0f} s"
        if name == "baseline":
            theirs += f" ({kueue['makespan'] / r['bound']:.1f}x)"
        print(
            f"  makespan            {r['makespan']:8.1f} s   fluid bound {r['bound']:.1f} s "
            f"({r['makespan'] / r['bound']:.2f}x){theirs}"
        )
        for cls, avg in sorted(r["avg_wait"].items()):
            theirs = kueue.get(cls)
            print(f"  avg time to admission {cls:7s} {avg:7.2f} s" + (f"   Kueue: {theirs} s" if theirs else ""))
        print(
            f"  wall: simulate {r['simulate_s']:.2f} s (+ parse {r['parse_s']:.2f} s), "
            f"{r['cycles']} cycles, {r['preemptions']} preemptions"
        )
        per = {k: v / max(1, r["admissions"]) for k, v in r["work"].items()}
        print(
            f"  work (summary.work, the same on every machine): {r['work']} for {r['admissions']} admissions; "
            "per admission " + ", ".join(f"{k} {v:.2f}" for k, v in per.items())
        )
        if name == "baseline":
            whole = whole_process(name, cohorts, queues, sets)
            print(f"  the whole `turnstile simulate {name}.yaml -o json` process: {whole:.1f} s (target <= 10 s)")


def whole_process(name: str, cohorts: int, queues: int, sets: tuple[WorkloadSet, ...]) -> float:
    """Wall time of the command a user runs: reading the YAML file, simulating, writing JSON."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / f"{name}.yaml"
        path.write_text(yaml.safe_dump(generate(name, cohorts, queues, sets), sort_keys=False))
        cmd = [sys.executable, "-m", "admission.cli.main", "simulate", str(path), "-o", "json"]
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        return time.perf_counter() - t0
