"""One deep queue: a single ClusterQueue with N pending jobs, simulated in engine core (issue 18's figure).

Every job is submitted at once to a ClusterQueue that runs 10 at a time; each finish frees capacity,
which used to put every set-aside workload back in line (quadratic in N). Printed: wall time to
simulate (the scenario built in memory, not read from YAML), and cycles.
"""

from __future__ import annotations

import sys
import time
from typing import Any

from queues.simulation import scenario, simulator


def generate(jobs: int) -> dict[str, Any]:
    """``jobs`` one-CPU jobs of 60 s (two shapes, two priorities) in one ClusterQueue of 10 CPUs."""
    cq = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": "deep"},
        "spec": {
            "namespaceSelector": {},
            "resourceGroups": [
                {
                    "coveredResources": ["cpu"],
                    "flavors": [{"name": "f", "resources": [{"name": "cpu", "nominalQuota": "10"}]}],
                }
            ],
        },
    }
    manifests = [
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": "f"}},
        cq,
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue", "metadata": {"name": "q", "namespace": "ns"},
         "spec": {"clusterQueue": "deep"}},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "WorkloadPriorityClass", "metadata": {"name": "high"},
         "value": 100},
    ]  # fmt: skip
    entries = []
    for i in range(jobs):
        labels = {"kueue.x-k8s.io/queue-name": "q", **({"kueue.x-k8s.io/priority-class": "high"} if i % 7 == 0 else {})}
        cpu = "2" if i % 3 == 0 else "1"
        pod = {"containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": cpu}}}]}
        meta = {"name": f"j{i}", "namespace": "ns", "labels": labels}
        job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta, "spec": {"template": {"spec": pod}}}
        entries.append({"at": 0, "runtime": 60, "object": job})
    return {"name": f"deep-{jobs}", "manifests": manifests, "jobs": entries}


def run(jobs: int) -> tuple[float, int]:
    parsed = scenario.parse(generate(jobs))
    started = time.perf_counter()
    result = simulator.Simulation(parsed).run()
    return time.perf_counter() - started, result.cycles


def main() -> None:
    sizes = [int(a) for a in sys.argv[2:] if a.isdigit()] or [10_000, 20_000, 100_000]
    for n in sizes:
        seconds, cycles = run(n)
        print(f"deep queue, {n:,} pending in one ClusterQueue: {seconds:.1f} s to simulate, {cycles:,} cycles")


if __name__ == "__main__":
    main()
