"""Fair-sharing preemption, case by case from Kueue's own table (``TestFairPreemptions`` in
``pkg/scheduler/preemption/preemption_fair_test.go``): ClusterQueues a, b and c, 3 CPUs of nominal
quota each, in one cohort (with a fourth, ``preemptible``, that has none), Kueue's default strategies
(LessThanOrEqualToFinalShare, then LessThanInitialShare). Each case says which admitted workloads the
incoming one preempts and why. Kueue lists the admitted workloads with one admission time; its
candidate order then falls back on list order, so here the earlier a workload is listed the more
recently it counts as admitted (Turnstile's order: most recently admitted first)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from queues import quantity
from queues.cycle.scheduler import Evict, Scheduler
from queues.kueue import fair_sharing_config
from queues.model import Admission, Config
from queues.podsets import jobs
from tests.queues.builders import CQ, flavor, local_queue

POLICY = {
    "withinClusterQueue": "LowerPriority",
    "reclaimWithinCohort": "Any",
    "borrowWithinCohort": {"policy": "LowerPriority", "maxPriorityThreshold": -3},
}


@dataclass
class Case:
    admitted: list[tuple[str, str, float, int]]  # name, ClusterQueue, CPUs, priority
    incoming: tuple[str, float]  # ClusterQueue, CPUs (priority 0)
    preempted: dict[str, str] = field(default_factory=dict)  # name -> reason


def unit(*names: str) -> list[tuple[str, str, float, int]]:
    return [(n, n[0], 1, 0) for n in names]


CASES = {
    "reclaim nominal from the queue using the most": Case(
        unit("a1", "a2", "a3", "b1", "b2", "b3", "b4", "b5", "c1"), ("c", 1), {"b1": "InCohortReclamation"}
    ),
    "reclaim from a queue using less when the most-using one's latest is not enough": Case(
        [("a1", "a", 3, 0), ("a2", "a", 1, 0), ("b1", "b", 2, 0), ("b2", "b", 3, 0)],
        ("c", 3),
        {"a1": "InCohortReclamation"},
    ),
    "reclaim borrowable quota from the queue using the most": Case(
        unit("a1", "a2", "a3", "b1", "b2", "b3", "b4", "b5", "c1"), ("a", 1), {"b1": "InCohortFairSharing"}
    ),
    "preempt one from each queue borrowing": Case(
        [
            *[("a1", "a", 0.5, 0), ("a2", "a", 0.5, 0), ("a3", "a", 3, 0)],
            *[("b1", "b", 0.5, 0), ("b2", "b", 0.5, 0), ("b3", "b", 3, 0)],
        ],
        ("c", 2),
        {"a1": "InCohortReclamation", "b1": "InCohortReclamation"},
    ),
    "nothing to take when everyone is under nominal": Case(
        unit("a1", "a2", "a3", "b1", "b2", "b3", "c1", "c2", "c3"), ("c", 1)
    ),
    "nothing to take when it would switch the imbalance": Case(
        unit("a1", "a2", "a3", "b1", "b2", "b3", "b4", "b5"), ("a", 2)
    ),
    "lower priority in the same queue": Case(
        [("a1-low", "a", 1, -1), ("a2-low", "a", 1, -1), *unit("a3", "a4", "b1", "b2", "b3", "b4", "b5")],
        ("a", 2),
        {"a1-low": "InClusterQueue", "a2-low": "InClusterQueue"},
    ),
    "the same queue and the queue using the most": Case(
        [("a-low", "a", 1, -1), *unit("a2", "a3", "b1", "b2", "b3", "b4", "b5", "b6")],
        ("a", 2),
        {"a-low": "InClusterQueue", "b1": "InCohortFairSharing"},
    ),
    "a huge workload when there is no other way and the target ends lower": Case(
        [("b1", "b", 9, 0)], ("a", 2), {"b1": "InCohortReclamation"}
    ),
    "not a huge workload for a huge incoming one": Case([("a1", "a", 2, 0), ("b1", "b", 7, 0)], ("a", 5)),
    "not two smaller workloads for a huge incoming one": Case(
        [("b1", "b", 2, 0), ("b2", "b", 2, 0), ("b3", "b", 3, 0)], ("a", 6)
    ),
    "from its own queue and others, even over nominal": Case(
        [("a1-low", "a", 2, -1), ("a2-low", "a", 1, -1), ("b1", "b", 3, 0), ("b2", "b", 3, 0)],
        ("a", 4),
        {"a1-low": "InClusterQueue", "b1": "InCohortFairSharing"},
    ),
    "prefer what does not leave the target with the biggest share": Case(
        [("b1", "b", 2, 0), ("b2", "b", 1, 0), ("b3", "b", 2, 0), ("c1", "c", 1, 0)],
        ("a", 3.5),
        {"b2": "InCohortFairSharing"},
    ),
}


def build(case: Case) -> Scheduler:
    objects: list[Any] = [flavor("default")]
    for name in ("a", "b", "c"):
        objects.append(CQ(name).cohort("all").group(("default", {"cpu": 3})).preemption(**POLICY).build())
        objects.append(local_queue("ns", name, name))
    objects.append(CQ("preemptible").cohort("all").group(("default", {"cpu": 0})).build())
    s = Scheduler(Config.of(objects), fair_sharing=fair_sharing_config.FairSharing())
    restored = []
    for seq, (name, cq, cpus, priority) in enumerate(case.admitted, start=1):
        wl = s.intake.workload_for(jobs.read_job(_job(name, cq, cpus)), seq=seq, now=0.0)
        wl.priority = priority
        milli = round(cpus * quantity.MILLI)
        wl.admission = Admission(cq, {"main": {"cpu": "default"}}, {("default", "cpu"): milli}, borrowing=False)
        wl.admitted_at = 100.0 - seq  # (listed earlier: admitted more recently; see the module docstring)
        restored.append(wl)
    assert s.restore(restored) == []
    return s


def _job(name: str, queue: str, cpus: float) -> dict[str, Any]:
    requests = {"cpu": str(cpus)}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": "ns", "labels": {jobs.QUEUE_LABEL: queue}},
        "spec": {"template": {"spec": {"containers": [{"name": "c", "resources": {"requests": requests}}]}}},
    }


@pytest.mark.parametrize("name", list(CASES))
def test_kueue_fair_preemption_case(name: str) -> None:
    case = CASES[name]
    s = build(case)
    cq, cpus = case.incoming
    wl = s.intake.workload_for(jobs.read_job(_job("incoming", cq, cpus)), seq=1000, now=1.0)
    s.submit(wl)
    decisions = s.schedule()
    evicted = {d.workload.key.rsplit("/", 1)[-1]: d.detail for d in decisions if isinstance(d, Evict)}
    assert evicted == case.preempted
    assert (wl.admission is not None) == bool(case.preempted), wl.message
