"""A victim's settling (``queues.reservations``): a preemption chain that comes back to where it
began ends, instead of spinning within one instant. (Holds are tested with Kueue's divergences.)"""

from __future__ import annotations

from typing import Any

from queues import scenario, simulator

GPU = "nvidia.com/gpu"


def _cq(name: str, nominal: int, **quota: str) -> dict[str, Any]:
    flavors = [{"name": "f", "resources": [{"name": GPU, "nominalQuota": str(nominal), **quota}]}]
    preemption = {
        "withinClusterQueue": "LowerPriority",
        "reclaimWithinCohort": "Any",
        "borrowWithinCohort": {"policy": "LowerPriority", "maxPriorityThreshold": 0},
    }
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": name},
        "spec": {
            "namespaceSelector": {},
            "cohortName": "shared",
            "preemption": preemption,
            "resourceGroups": [{"coveredResources": [GPU], "flavors": flavors}],
        },
    }


def _job(name: str, ns: str, priority: int, gpus: int, at: int) -> dict[str, Any]:
    labels = {"kueue.x-k8s.io/queue-name": "q", "kueue.x-k8s.io/priority-class": f"p{priority}"}
    container = {"name": "c", "resources": {"limits": {GPU: str(gpus)}}}
    return {
        "at": at,
        "runtime": 100,
        "object": {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": name, "namespace": ns, "labels": labels},
            "spec": {"parallelism": 1, "template": {"spec": {"containers": [container]}}},
        },
    }


def _chain() -> dict[str, Any]:
    """12 GPUs in a cohort: queue a has 8, queue b 4 (and may borrow 7). b's ``big`` (8, priority 3)
    borrows 4 from a. Then ``small`` (a, 8, priority 0) reclaims them; ``wide`` (a, 9, priority 2)
    outranks small and borrows 1 from b; ``mid`` (b, 4, priority 2) reclaims that; ``big`` outranks
    mid and borrows from a again; small reclaims... each step allowed by Kueue's rules."""
    manifests: list[dict[str, Any]] = [
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": "f"}},
        _cq("a", 8),
        _cq("b", 4, borrowingLimit="7"),
    ]
    for ns in ("a", "b"):
        manifests.append(
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "LocalQueue",
                "metadata": {"name": "q", "namespace": ns},
                "spec": {"clusterQueue": ns},
            }
        )
    for p in range(4):
        manifests.append(
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "WorkloadPriorityClass",
                "metadata": {"name": f"p{p}"},
                "value": p,
            }
        )
    jobs = [
        _job("big", "b", 3, 8, 0),
        _job("small", "a", 0, 8, 10),
        _job("wide", "a", 2, 9, 10),
        _job("mid", "b", 2, 4, 10),
    ]
    return {"name": "chain", "manifests": manifests, "jobs": jobs}


def test_a_preemption_chain_that_comes_back_to_its_start_ends() -> None:
    sim = simulator.Simulation(scenario.parse(_chain()))
    seen: dict[float, dict[str, str]] = {}

    def look(s: simulator.Simulation) -> None:
        seen[s.now] = {k: w.message for k, w in s.sched.workloads.items() if w.admission is None}
        if s.now == 10:
            assert s.sched.next_settled() == 11.0  # the caller is told when to look again

    result = sim.run(on_step=look).to_json()
    assert sim.sched.cap_hits == 0
    evicted = [(e["t"], e["workload"], e["by"]) for e in result["events"] if e["type"] == "Evicted"]
    # each link once: big by small, small by wide, wide by mid; then big, a victim a moment ago,
    # preempts nobody in that instant, and small fits again where wide was
    assert evicted == [(10, "b/big", "a/small"), (10, "a/small", "a/wide"), (10, "a/wide", "b/mid")]
    assert seen[10]["b/big"] == "preempted a moment ago: it preempts others once its pods stopped"
    assert all(w["state"] == "Finished" for w in result["workloads"].values()), result["workloads"]
    assert sim.sched.next_settled() is None
