"""A victim's settling (``queues.cycle.reservations``) and the chain rule (``victims.in_chain``): a
preemption chain that comes back to where it began ends, instead of spinning within one instant
or one link a second for ever. (Holds are tested with Kueue's divergences.)"""

from __future__ import annotations

from typing import Any

from queues.simulation import scenario, simulator

GPU = "nvidia.com/gpu"


def _cq(name: str, nominal: int, threshold: int = 0, **quota: str) -> dict[str, Any]:
    flavors = [{"name": "f", "resources": [{"name": GPU, "nominalQuota": str(nominal), **quota}]}]
    preemption = {
        "withinClusterQueue": "LowerPriority",
        "reclaimWithinCohort": "Any",
        "borrowWithinCohort": {"policy": "LowerPriority", "maxPriorityThreshold": threshold},
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


def _job(name: str, ns: str, priority: int, gpus: int, at: int, runtime: int = 100) -> dict[str, Any]:
    labels = {"kueue.x-k8s.io/queue-name": "q", "kueue.x-k8s.io/priority-class": f"p{priority}"}
    container = {"name": "c", "resources": {"limits": {GPU: str(gpus)}}}
    return {
        "at": at,
        "runtime": runtime,
        "object": {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": name, "namespace": ns, "labels": labels},
            "spec": {"parallelism": 1, "template": {"spec": {"containers": [container]}}},
        },
    }


def _scenario(queues: list[dict[str, Any]], jobs: list[dict[str, Any]]) -> dict[str, Any]:
    manifests: list[dict[str, Any]] = [
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": "f"}},
        *queues,
    ]
    for cq in queues:
        ns = cq["metadata"]["name"]
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
    return {"name": "chain", "manifests": manifests, "jobs": jobs}


def _chain() -> dict[str, Any]:
    """12 GPUs in a cohort: queue a has 8, queue b 4 (and may borrow 7). b's ``big`` (8, priority 3)
    borrows 4 from a. Then ``small`` (a, 8, priority 0) reclaims them; ``wide`` (a, 9, priority 2)
    outranks small and borrows 1 from b; ``mid`` (b, 4, priority 2) reclaims that; ``big`` outranks
    mid and borrows from a again; small reclaims... each step allowed by Kueue's rules."""
    jobs = [
        _job("big", "b", 3, 8, 0),
        _job("small", "a", 0, 8, 10),
        _job("wide", "a", 2, 9, 10),
        _job("mid", "b", 2, 4, 10),
    ]
    return _scenario([_cq("a", 8), _cq("b", 4, borrowingLimit="7")], jobs)


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
    # each link once: big by small, small by wide, wide by mid; then big may not preempt mid, which
    # is on the chain that evicted it, and small fits again where wide was
    assert evicted == [(10, "b/big", "a/small"), (10, "a/small", "a/wide"), (10, "a/wide", "b/mid")]
    assert seen[10]["b/big"].endswith("it preempts nobody on the chain that evicted it (from a/small)")
    assert all(w["state"] == "Finished" for w in result["workloads"].values()), result["workloads"]
    assert sim.sched.next_settled() is None


def test_a_loop_a_settling_victim_would_turn_every_second_ends() -> None:
    """Found by the property tests (it ran for ever, one link a second): ``low`` reclaims the 6
    GPUs ``top`` borrows from queue a; ``high`` outranks low in a and borrows 2 from b; top reclaims
    them while borrowing (priority 3 over 2); low reclaims again... The chain rule stops it after
    the second link: top may not preempt high, which evicted low, which evicted top."""
    queues = [_cq("a", 6, lendingLimit="6"), _cq("b", 6, threshold=2)]
    jobs = [_job("top", "b", 3, 8, 0, runtime=135), _job("low", "a", 0, 6, 10, 65), _job("high", "a", 2, 8, 10, 90)]
    sim = simulator.Simulation(scenario.parse(_scenario(queues, jobs)))
    result = sim.run().to_json()
    evicted = [(e["t"], e["workload"], e["by"]) for e in result["events"] if e["type"] == "Evicted"]
    assert evicted == [(10, "b/top", "a/low"), (10, "a/low", "a/high")]
    assert all(w["state"] == "Finished" for w in result["workloads"].values()), result["workloads"]
