"""Cost of a scheduling cycle when nothing changed, with 100,000 workloads pending."""

from __future__ import annotations

import time

from queues.cycle.scheduler import Scheduler
from queues.kueue import api, codec
from queues.kueue.fair_sharing_config import FairSharing
from queues.model import Config
from queues.podsets import jobs


def build(pending: int = 100_000, queues: int = 100, fair_sharing: FairSharing | None = None) -> Scheduler:
    objs: list[api.KueueObject] = [
        codec.parse({"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ResourceFlavor", "metadata": {"name": "a100"}})
    ]
    for q in range(queues):
        objs.append(
            codec.parse(
                {
                    "apiVersion": "kueue.x-k8s.io/v1beta1",
                    "kind": "ClusterQueue",
                    "metadata": {"name": f"cq-{q}"},
                    "spec": {
                        "namespaceSelector": {},
                        "cohort": f"c-{q % 10}",
                        "resourceGroups": [
                            {
                                "coveredResources": ["nvidia.com/gpu"],
                                "flavors": [
                                    {"name": "a100", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": "8"}]}
                                ],
                            }
                        ],
                    },
                }
            )
        )
        objs.append(
            codec.parse(
                {
                    "apiVersion": "kueue.x-k8s.io/v1beta1",
                    "kind": "LocalQueue",
                    "metadata": {"name": "q", "namespace": f"ns-{q}"},
                    "spec": {"clusterQueue": f"cq-{q}"},
                }
            )
        )
    sched = Scheduler(Config.of(objs), fair_sharing=fair_sharing)
    for i in range(pending):
        q = i % queues
        job = jobs.read_job(
            {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "metadata": {"name": f"j{i}", "namespace": f"ns-{q}", "labels": {"kueue.x-k8s.io/queue-name": "q"}},
                "spec": {
                    "template": {
                        "spec": {
                            "containers": [{"name": "c", "resources": {"requests": {"nvidia.com/gpu": str(1 + i % 8)}}}]
                        }
                    }
                },
            }
        )
        sched.submit(sched.intake.workload_for(job, seq=i, now=float(i)))
    return sched


def main() -> None:
    for fair in (None, FairSharing()):
        t0 = time.perf_counter()
        sched = build(fair_sharing=fair)
        t1 = time.perf_counter()
        sched.schedule()  # admits what fits, sets the rest aside
        t2 = time.perf_counter()
        admitted = sum(1 for w in sched.workloads.values() if w.admission is not None)
        n = 1000
        start = time.perf_counter()
        for _ in range(n):
            sched.schedule()
        per_cycle = (time.perf_counter() - start) / n
        mode = "fair sharing" if fair else "quota only"
        print(f"\n[idle cycle, {mode}] {len(sched.workloads) - admitted} pending, {admitted} admitted in 100 CQs")
        print(f"  build {t1 - t0:.2f} s, first scheduling pass {t2 - t1:.2f} s ({sched.cycles} cycles)")
        print(f"  a cycle with nothing changed: {per_cycle * 1e6:.1f} us (target <= 5 ms)")
