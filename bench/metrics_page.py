"""``/metrics``' queue families at scale (``python -m bench metrics``): what a scrape of the leader
costs with 1,000 ClusterQueues (in 20 Cohorts under one root), a LocalQueue each, and 100,000
workloads of which 50,000 are admitted.

Synthetic: the scheduling core admits the workloads in this process (not measured) and
``write_queues`` renders the page's queue part from it, as the leader's ``/metrics`` handler
does. Two figures: a scrape that reuses the LocalQueue count (``LocalQueueGauges``, at most every
10 s), and one that recounts it (a pass over every workload); each the median of five.
"""

from __future__ import annotations

import statistics
import time
from types import SimpleNamespace
from typing import Any

from admission.controller.monitoring.exposition import Exposition
from admission.controller.monitoring.local_queue_metrics import LocalQueueGauges
from admission.controller.monitoring.metrics import ResourceClock, write_queues
from queues.cycle.scheduler import Scheduler
from queues.kueue import codec
from queues.model import Config
from queues.podsets import jobs

QUEUES, WORKLOADS = 1_000, 100_000


def _objects() -> list[Any]:
    def parse(kind: str, name: str, spec: dict[str, Any], namespace: str | None = None) -> Any:
        meta = {"name": name, **({"namespace": namespace} if namespace else {})}
        return codec.parse({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": kind, "metadata": meta, "spec": spec})

    quota = [{"name": "nvidia.com/gpu", "nominalQuota": "50"}, {"name": "cpu", "nominalQuota": "500"}]
    groups = [{"coveredResources": ["nvidia.com/gpu", "cpu"], "flavors": [{"name": "a100", "resources": quota}]}]
    out = [parse("ResourceFlavor", "a100", {}), parse("Cohort", "org", {})]
    out += [parse("Cohort", f"team-{i}", {"parentName": "org"}) for i in range(20)]
    for i in range(QUEUES):
        out.append(
            parse(
                "ClusterQueue",
                f"cq-{i}",
                {"cohortName": f"team-{i % 20}", "namespaceSelector": {}, "resourceGroups": groups},
            )
        )
        out.append(parse("LocalQueue", f"lq-{i}", {"clusterQueue": f"cq-{i}"}, namespace="bench"))
    return out


def _job(i: int) -> dict[str, Any]:
    container = {"name": "c", "image": "x", "resources": {"requests": {"nvidia.com/gpu": "1", "cpu": "1"}}}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": f"job-{i}", "namespace": "bench", "uid": f"uid-{i}",
                     "labels": {"kueue.x-k8s.io/queue-name": f"lq-{i % QUEUES}"}},
        "spec": {"parallelism": 1, "completions": 1, "suspend": True,
                 "template": {"spec": {"containers": [container], "restartPolicy": "Never"}}},
    }  # fmt: skip


def main() -> None:
    print("\n[metrics]")
    sched = Scheduler(Config.of(_objects()))
    for i in range(WORKLOADS):
        sched.submit(sched.intake.workload_for(jobs.read_job(_job(i)), seq=i, now=0.0))
    while sched.schedule():
        pass
    admitted = sum(1 for w in sched.workloads.values() if w.admission is not None)
    controller: Any = SimpleNamespace(term=SimpleNamespace(scheduler=sched))
    local, clock = LocalQueueGauges(), ResourceClock()
    reused, recounted = [], []
    for _ in range(5):
        local.counted = None  # (the count is stale: this scrape recounts)
        for took in (recounted, reused):
            out = Exposition("leader")
            t0 = time.perf_counter()
            write_queues(out, controller, clock, local)
            page = out.text().encode()  # (the page as served, encoded)
            took.append(time.perf_counter() - t0)
    size = len(page) / 1e6
    print(
        f"  /metrics queue families, {QUEUES:,} ClusterQueues in 20 Cohorts, {WORKLOADS:,} workloads ({admitted:,} "
        f"admitted; {size:.1f} MB): a scrape, median {statistics.median(reused) * 1000:.0f} ms (target <= 100 ms); "
        f"the LocalQueue recount with it {statistics.median(recounted) * 1000:.0f} ms (every 10 s at most; in the "
        "controller it runs just after the scrape that found the count stale is answered)"
    )


if __name__ == "__main__":
    main()
