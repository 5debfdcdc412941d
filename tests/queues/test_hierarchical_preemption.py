"""Kueue's hierarchical preemption (issue 18, divergence 1), case by case from Kueue's own table
(``pkg/scheduler/preemption/preemption_hierarchical_test.go``): the cohort trees, quotas,
priorities and policies are Kueue's, with GPUs for its CPUs; each case says which admitted
workloads the incoming one preempts, and why (the ``Preempted`` condition's reason).

The rule the cases pin down: walking up from the preemptor's ClusterQueue, once its request fits
the nominal quota of its own queue or of a cohort on the way, the preemptor has the *hierarchical
advantage* over whatever is borrowed in the rest of the tree and reclaims it whatever the
priorities (subject to ``reclaimWithinCohort``); otherwise other queues' work is taken by priority
under ``borrowWithinCohort``. Queues and cohorts within their nominal quota are never touched.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from queues import quantity
from queues.cycle.scheduler import Evict, Scheduler
from queues.kueue import codec
from queues.model import Admission, Config
from queues.podsets import jobs
from tests.queues.builders import CQ, GPU, flavor, local_queue

ANY = {"withinClusterQueue": "LowerPriority", "reclaimWithinCohort": "Any"}
BORROW_BELOW_0 = {**ANY, "borrowWithinCohort": {"policy": "LowerPriority", "maxPriorityThreshold": 0}}


def cohort(name: str, gpus: int = 0, parent: str | None = None) -> Any:
    spec: dict[str, Any] = {"resourceGroups": []}
    if gpus:
        spec["resourceGroups"] = [
            {
                "coveredResources": [GPU],
                "flavors": [{"name": "f", "resources": [{"name": GPU, "nominalQuota": str(gpus)}]}],
            }
        ]
    if parent:
        spec["parentName"] = parent
    return codec.parse(
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Cohort", "metadata": {"name": name}, "spec": spec}
    )


@dataclass
class Case:
    cohorts: list[tuple[str, int, str | None]]  # name, GPUs of its own, parent
    queues: list[
        tuple[str, str, int | tuple[int, int], dict[str, Any]]
    ]  # name, cohort, GPUs (, lending limit), preemption
    admitted: list[tuple[str, str, int, int]]  # name, ClusterQueue, GPUs, priority (admitted in this order)
    incoming: tuple[str, int, int]  # ClusterQueue, GPUs, priority
    preempted: dict[str, str] = field(default_factory=dict)  # name -> reason


CASES = {
    #        R
    #      /   \
    #   C(2)  q-borrowing(0)
    #    |
    #    q(0)
    "preempt with hierarchical advantage": Case(
        [("r", 0, None), ("c", 2, "r")],
        [("q", "c", 0, ANY), ("q-borrowing", "r", 0, ANY)],
        [("admitted2", "q-borrowing", 2, 0)],
        ("q", 2, 0),
        {"admitted2": "InCohortReclamation"},
    ),
    #        R
    #      /   |   \
    #   C(2) q_borrowing(0) q_nominal(2)
    #    |
    #    q(0)
    "avoid queues within nominal quota": Case(
        [("r", 0, None), ("c", 2, "r")],
        [("q-nominal", "r", 2, ANY), ("q", "c", 0, ANY), ("q-borrowing", "r", 0, ANY)],
        [("admitted1", "q-nominal", 2, -10), ("admitted2", "q-borrowing", 2, 0)],
        ("q", 2, 0),
        {"admitted2": "InCohortReclamation"},
    ),
    "preempt multiple with hierarchical advantage, whatever their priority": Case(
        [("r", 0, None), ("c", 2, "r")],
        [("q", "c", 0, ANY), ("q-borrowing", "r", 0, ANY)],
        [("admitted1", "q-borrowing", 1, 1), ("admitted2", "q-borrowing", 1, 2)],
        ("q", 2, 0),
        {"admitted1": "InCohortReclamation", "admitted2": "InCohortReclamation"},
    ),
    #        R(0)
    #         |
    #        C(3)
    #       /    \
    #    q(0)   q_same_cohort(0)
    "preempt in cohort and own CQ": Case(
        [("r", 0, None), ("c", 3, "r")],
        [("q", "c", 0, BORROW_BELOW_0), ("q-same-cohort", "c", 0, ANY)],
        [
            ("admitted-not-preemptible", "q-same-cohort", 1, 1),
            ("admitted-preemptible", "q-same-cohort", 1, 0),
            ("admitted-own-queue", "q", 1, -1),
        ],
        ("q", 2, 1),
        {"admitted-own-queue": "InClusterQueue", "admitted-preemptible": "InCohortReclaimWhileBorrowing"},
    ),
    "prefer to preempt the hierarchical candidate over its own queue's": Case(
        [("r", 0, None), ("c", 2, "r")],
        [("q", "c", 0, ANY), ("q-borrowing", "r", 0, ANY)],
        [("admitted-same-queue", "q", 1, -2), ("admitted-borrowing", "q-borrowing", 1, 1)],
        ("q", 1, 0),
        {"admitted-borrowing": "InCohortReclamation"},
    ),
    #          R(0)
    #        /      \
    #     C(2)     q_nominal(2)
    #    /    \
    #  q(0)  q_same_cohort(0)
    "forced to preempt a priority candidate": Case(
        [("r", 0, None), ("c", 2, "r")],
        [("q", "c", 0, BORROW_BELOW_0), ("q-nominal", "r", 2, ANY), ("q-same-cohort", "c", 0, ANY)],
        [("admitted-nominal", "q-nominal", 2, -10), ("admitted-same-cohort", "q-same-cohort", 2, -1)],
        ("q", 2, 0),
        {"admitted-same-cohort": "InCohortReclaimWhileBorrowing"},
    ),
    #          R(0)
    #        /      \
    #     C(2)     q_borrowing(0)
    #    /    \
    #  q(4)  q_same_cohort(0)
    "the request fits its own queue's nominal quota": Case(
        [("r", 0, None), ("c", 2, "r")],
        [("q", "c", 4, ANY), ("q-borrowing", "r", 0, ANY), ("q-same-cohort", "c", 0, ANY)],
        [("admitted-borrowing", "q-borrowing", 3, 10), ("admitted-same-cohort", "q-same-cohort", 3, 10)],
        ("q", 4, 0),
        {"admitted-borrowing": "InCohortReclamation", "admitted-same-cohort": "InCohortReclamation"},
    ),
    #          R(1)
    #        /      \
    #     C(4)     q_borrowing(0)
    #    /    \
    #  q(0)  q_same_cohort(0)
    "preempt hierarchical candidates and inside the queue": Case(
        [("r", 1, None), ("c", 4, "r")],
        [
            ("q", "c", 0, {**BORROW_BELOW_0, "reclaimWithinCohort": "LowerPriority"}),
            ("q-borrowing", "r", 0, ANY),
            ("q-same-cohort", "c", 0, ANY),
        ],
        [
            ("admitted-borrowing", "q-borrowing", 2, -1),
            ("admitted-same-queue-preemptible", "q", 1, -1),
            ("admitted-borrowing-not-preemptible", "q-borrowing", 2, 1),
        ],
        ("q", 3, 0),
        {"admitted-borrowing": "InCohortReclamation", "admitted-same-queue-preemptible": "InClusterQueue"},
    ),
    #          R(0)
    #       /    |     \
    #    C(3) q_borrowing(0) q_nominal(2)
    #     |
    #    q(0)
    "reclaim from the lowest priority, never from a queue within its nominal quota": Case(
        [("r", 0, None), ("c", 3, "r")],
        [("q", "c", 0, ANY), ("q-borrowing", "r", 0, ANY), ("q-nominal", "r", 2, ANY)],
        [
            ("admitted-borrowing-prio-8", "q-borrowing", 1, 8),
            ("admitted-borrowing-prio-9", "q-borrowing", 1, 9),
            ("admitted-borrowing-prio-10", "q-borrowing", 1, 9),
            ("admitted-nominal", "q-nominal", 2, -2),
        ],
        ("q", 1, 0),
        {"admitted-borrowing-prio-8": "InCohortReclamation"},
    ),
    #          R(0)
    #        /      \
    #     C(2)     q-borrowing(0)
    #      |
    #  q(3, lendingLimit 2)
    "respect lending limits on the way up": Case(
        [("r", 0, None), ("c", 2, "r")],
        [("q", "c", (3, 2), ANY), ("q-borrowing", "r", 0, ANY)],
        [("admitted-borrowing", "q-borrowing", 4, 0)],
        ("q", 5, -2),
        {"admitted-borrowing": "InCohortReclamation"},
    ),
    #              R
    #          /       \
    #       C(2)      C-other(2)
    #      /    \          |
    #   q(0)  q-same(0)  q-other(0)
    "nothing to take where every subtree that borrows is out of reach": Case(
        [("r", 0, None), ("c", 2, "r"), ("c-other", 2, "r")],
        [("q-other", "c-other", 0, ANY), ("q", "c", 0, ANY), ("q-same-cohort", "c", 0, ANY)],
        [
            ("admitted-other-1", "q-other", 1, -10),
            ("admitted-other-2", "q-other", 1, -10),
            ("admitted-same-cohort", "q-same-cohort", 2, 0),
        ],
        ("q", 2, 0),
        {},
    ),
    # The flat case: a cohort's own quota belongs to no ClusterQueue under it, so a queue with no
    # nominal quota of its own has no claim on what a sibling borrowed from the cohort; without
    # borrowWithinCohort it waits (Kueue's flavor assigner gives NoFit: the lowest subtree that
    # holds the request is the whole tree).
    "no advantage over a sibling in a flat cohort": Case(
        [("c", 2, None)],
        [("q", "c", 0, ANY), ("sibling", "c", 0, ANY)],
        [("borrowed", "sibling", 2, 0)],
        ("q", 2, 0),
        {},
    ),
}


def build(case: Case) -> Scheduler:
    objects: list[Any] = [flavor("f")]
    objects += [cohort(name, gpus, parent) for name, gpus, parent in case.cohorts]
    for name, parent, gpus, preemption in case.queues:
        quota: Any = (gpus[0], {"lendingLimit": str(gpus[1])}) if isinstance(gpus, tuple) else gpus
        objects.append(CQ(name).cohort(parent).group(("f", {"gpu": quota})).preemption(**preemption).build())
        objects.append(local_queue("ns", name, name))
    s = Scheduler(Config.of(objects))
    restored = []
    for seq, (name, cq, gpus, priority) in enumerate(case.admitted, start=1):
        wl = s.intake.workload_for(jobs.read_job(_job(name, cq, gpus)), seq=seq, now=float(seq))
        wl.priority = priority
        usage = {("f", GPU): gpus * quantity.MILLI}
        wl.admission = Admission(cq, {"main": {GPU: "f"}}, usage, borrowing=False)
        wl.admitted_at = float(seq)
        restored.append(wl)
    assert s.restore(restored) == []
    return s


def _job(name: str, queue: str, gpus: int) -> dict[str, Any]:
    requests = {GPU: str(gpus)}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": "ns", "labels": {jobs.QUEUE_LABEL: queue}},
        "spec": {"template": {"spec": {"containers": [{"name": "c", "resources": {"requests": requests}}]}}},
    }


@pytest.mark.parametrize("name", list(CASES))
def test_kueue_hierarchical_preemption_case(name: str) -> None:
    case = CASES[name]
    s = build(case)
    cq, gpus, priority = case.incoming
    wl = s.intake.workload_for(jobs.read_job(_job("in", cq, gpus)), seq=100, now=100.0)
    wl.priority = priority
    s.submit(wl)
    decisions = s.schedule()
    evicted = {d.workload.key.rsplit("/", 1)[-1]: d.detail for d in decisions if isinstance(d, Evict)}
    assert evicted == case.preempted
    assert (wl.admission is not None) == bool(case.preempted), wl.message
    if not case.preempted:
        assert wl.reason == "WaitingForQuota"
