"""Invariants of the scheduling core on random scenarios (hypothesis).

``make test`` runs the same examples every time (derandomized), so a red CI run always reproduces
on a developer's machine; ``make hunt`` draws fresh random examples, many more of them, to find
new failures (``TURNSTILE_HUNT_EXAMPLES`` per test). A failure found by a hunt becomes an
``@example`` or a table test here.
"""

import os
from typing import Any

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from queues.cycle import flavors
from queues.cycle.assignment import Mode
from queues.model import Workload
from queues.simulation import scenario, simulator

GPU = "nvidia.com/gpu"
POLICIES_WITHIN = ["Never", "LowerPriority", "LowerOrNewerEqualPriority"]
POLICIES_RECLAIM = ["Never", "LowerPriority", "Any"]


@st.composite
def scenarios(draw: Any, strategy: str | None = None) -> dict[str, Any]:
    n_flavors = draw(st.integers(1, 2))
    flavor_names = [f"f{i}" for i in range(n_flavors)]
    manifests: list[dict[str, Any]] = [
        {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ResourceFlavor", "metadata": {"name": f}}
        for f in flavor_names
    ]
    n_cqs = draw(st.integers(1, 4))
    for i in range(n_cqs):
        in_cohort = draw(st.booleans())
        resources = []
        for f in flavor_names:
            quota: dict[str, Any] = {"name": GPU, "nominalQuota": str(draw(st.integers(0, 8)))}
            if in_cohort and draw(st.booleans()):
                quota["borrowingLimit"] = str(draw(st.integers(0, 8)))
            if in_cohort and draw(st.booleans()):
                quota["lendingLimit"] = str(draw(st.integers(0, int(quota["nominalQuota"]))))
            resources.append({"name": f, "resources": [quota]})
        preemption: dict[str, Any] = {
            "withinClusterQueue": draw(st.sampled_from(POLICIES_WITHIN)),
            "reclaimWithinCohort": draw(st.sampled_from(POLICIES_RECLAIM)),
        }
        if preemption["reclaimWithinCohort"] != "Never" and draw(st.booleans()):
            preemption["borrowWithinCohort"] = {
                "policy": "LowerPriority",
                "maxPriorityThreshold": draw(st.integers(0, 3)),
            }
        spec: dict[str, Any] = {
            "namespaceSelector": {},
            "queueingStrategy": strategy or draw(st.sampled_from(["StrictFIFO", "BestEffortFIFO"])),
            "preemption": preemption,
            "flavorFungibility": {
                "whenCanBorrow": draw(st.sampled_from(["Borrow", "TryNextFlavor"])),
                "whenCanPreempt": draw(st.sampled_from(["Preempt", "TryNextFlavor"])),
            },
            "resourceGroups": [{"coveredResources": [GPU], "flavors": resources}],
        }
        if in_cohort:
            spec["cohort"] = "shared"
        manifests.append(
            {
                "apiVersion": "kueue.x-k8s.io/v1beta1",
                "kind": "ClusterQueue",
                "metadata": {"name": f"cq{i}"},
                "spec": spec,
            }
        )
        manifests.append(
            {
                "apiVersion": "kueue.x-k8s.io/v1beta1",
                "kind": "LocalQueue",
                "metadata": {"name": "q", "namespace": f"ns{i}"},
                "spec": {"clusterQueue": f"cq{i}"},
            }
        )
    for p in range(4):
        manifests.append(
            {
                "apiVersion": "kueue.x-k8s.io/v1beta1",
                "kind": "WorkloadPriorityClass",
                "metadata": {"name": f"p{p}"},
                "value": p,
            }
        )
    jobs = []
    for j in range(draw(st.integers(1, 14))):
        jobs.append(
            {
                "at": draw(st.integers(0, 40)) * 5,
                "runtime": draw(st.integers(1, 30)) * 5,
                "object": {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "metadata": {
                        "name": f"j{j}",
                        "namespace": f"ns{draw(st.integers(0, n_cqs - 1))}",
                        "labels": {
                            "kueue.x-k8s.io/queue-name": "q",
                            "kueue.x-k8s.io/priority-class": f"p{draw(st.integers(0, 3))}",
                        },
                    },
                    "spec": {
                        "parallelism": draw(st.integers(1, 3)),
                        "template": {
                            "spec": {
                                "containers": [
                                    {"name": "c", "resources": {"limits": {GPU: str(draw(st.integers(1, 4)))}}}
                                ]
                            }
                        },
                    },
                },
            }
        )
    return {"name": "random", "manifests": manifests, "jobs": jobs}


def check_quota(sim: simulator.Simulation) -> None:
    """Usage within nominal + borrowing limit per queue, and within the cohort's lendable total."""
    queues = sim.sched.snapshot.queues
    frs = {fr for cq in queues.values() for fr in cq.quotas}
    for fr in frs:
        cohort_used = cohort_capacity = 0
        for cq in queues.values():
            used = sum(
                w.admission.usage.get(fr, 0)
                for w in sim.sched.workloads.values()
                if w.admission is not None and w.admission.cluster_queue == cq.name
            )
            quota = cq.quotas.get(fr)
            nominal = quota.nominal if quota else 0
            if cq.parent is None:
                assert used <= nominal, (cq.name, fr, used, nominal)
                continue
            if quota and quota.borrowing_limit is not None:
                assert used <= nominal + quota.borrowing_limit, (cq.name, fr, used)
            guaranteed = nominal - quota.lending_limit if quota and quota.lending_limit is not None else 0
            cohort_used += max(0, used - guaranteed)
            cohort_capacity += nominal - guaranteed
        assert cohort_used <= cohort_capacity, (fr, cohort_used, cohort_capacity)


def check_queue_integrity(sim: simulator.Simulation) -> None:
    """Every pending workload that has a ClusterQueue is still in that queue (heap or set aside)."""
    pending = sim.sched.pending
    for wl in sim.sched.workloads.values():
        cq = pending.where.get(wl.key)
        if wl.admission is None and cq is not None:
            assert wl in pending.waiting(cq), (sim.now, wl.key, cq)


def check_step(sim: simulator.Simulation) -> None:
    check_quota(sim)
    check_queue_integrity(sim)


def check_preemptions(result: dict[str, Any], doc: dict[str, Any]) -> None:
    specs = {m["metadata"]["name"]: m["spec"] for m in doc["manifests"] if m["kind"] == "ClusterQueue"}
    workloads = result["workloads"]
    for e in result["events"]:
        if e["type"] != "Evicted":
            continue
        victim, preemptor = workloads[e["workload"]], workloads[e["by"]]
        policy = specs[preemptor["clusterQueue"]]["preemption"]
        if e["detail"] == "InClusterQueue":
            assert victim["clusterQueue"] == preemptor["clusterQueue"]
            assert policy["withinClusterQueue"] != "Never"
            if policy["withinClusterQueue"] == "LowerPriority":
                assert victim["priority"] < preemptor["priority"]
            else:
                assert victim["priority"] <= preemptor["priority"]
        else:
            assert victim["clusterQueue"] != preemptor["clusterQueue"]
            assert policy["reclaimWithinCohort"] != "Never"
            if policy["reclaimWithinCohort"] == "LowerPriority" or e["detail"] == "InCohortReclaimWhileBorrowing":
                assert victim["priority"] < preemptor["priority"]


def check_work_conserving(sim: simulator.Simulation) -> None:
    """No pending workload (in a queue it may use) fits without preempting anyone."""
    sched = sim.sched
    for wl in list(sched.workloads.values()):
        cq_name = sched.pending.where.get(wl.key)
        if wl.admission is not None or cq_name is None:
            continue
        cq = sched.snapshot.queues[cq_name]
        probe = Workload(
            key=wl.key,
            seq=wl.seq,
            namespace=wl.namespace,
            local_queue=wl.local_queue,
            priority=wl.priority,
            pod_sets=wl.pod_sets,
            created=wl.created,
            queue_ts=wl.queue_ts,
        )
        fit = flavors.assign(sched.snapshot, cq, probe, None)
        assert fit.mode != Mode.FIT, (sim.now, wl.key, fit.flavors)


# No "explain" phase: it traces every line of a failing run, which took a CI run past its time limit.
HUNT = int(os.environ.get("TURNSTILE_HUNT_EXAMPLES", "0"))
SETTINGS = settings(
    max_examples=HUNT or 150,
    derandomize=not HUNT,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink],
)


@SETTINGS
@given(scenarios())
def test_never_over_quota_and_no_forbidden_preemption(doc: dict[str, Any]) -> None:
    sim = simulator.Simulation(scenario.parse(doc))
    result = sim.run(on_step=check_step).to_json()
    check_preemptions(result, doc)
    assert sim.sched.cap_hits == 0


@SETTINGS
@given(scenarios(strategy="BestEffortFIFO"))
def test_best_effort_fifo_is_work_conserving(doc: dict[str, Any]) -> None:
    sim = simulator.Simulation(scenario.parse(doc))
    sim.run(on_step=check_work_conserving)
    assert sim.sched.cap_hits == 0


@settings(SETTINGS, max_examples=HUNT or 40)
@given(scenarios())
def test_same_input_same_output(doc: dict[str, Any]) -> None:
    one = simulator.Simulation(scenario.parse(doc)).run().to_json()
    two = simulator.Simulation(scenario.parse(doc)).run().to_json()
    assert one == two


@SETTINGS
@given(scenarios())
def test_only_workloads_that_can_never_fit_are_left_pending(doc: dict[str, Any]) -> None:
    """When everything else has finished, a workload still waiting can never fit, or (StrictFIFO) waits
    behind a head that can never fit, and says so."""
    result = simulator.Simulation(scenario.parse(doc)).run().to_json()
    for key, wl in result["workloads"].items():
        assert wl["state"] in ("Pending", "Finished"), (key, wl)
        if wl["state"] != "Pending":
            continue
        if wl["reason"] == "ExceedsMaxQuota":
            assert "the most this ClusterQueue can ever use is" in wl["message"]
            continue
        assert wl["reason"] == "WaitingForQuota", (key, wl)
        assert wl["message"].startswith(f"StrictFIFO ClusterQueue {wl['clusterQueue']}: waiting behind "), (key, wl)
        head = wl["message"].split("waiting behind ")[1].split(",")[0]
        assert result["workloads"][head]["reason"] == "ExceedsMaxQuota", (key, head)
