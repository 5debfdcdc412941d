"""Topology-aware placement (``queues.placement.topology``, ``queues.cycle.tas``): Kueue's TAS algorithm on its
own KEP examples, then admission by topology in engine core."""

from __future__ import annotations

from typing import Any

import pytest

from admission.store.workloads import pod_sets_from_json, pod_sets_json
from queues import errors
from queues.cycle.scheduler import Admit, Scheduler
from queues.model import Config
from queues.placement import topology
from queues.placement.inventory import Inventory
from queues.placement.nodes import NodeInfo, PodNeeds, node_object
from queues.podsets import jobs
from queues.podsets.topology_requests import PREFERRED, REQUIRED, SLICE_REQUIRED, SLICE_SIZE, Request, request_of
from queues.simulation import scenario, simulator

GPU = "nvidia.com/gpu"
RACK = "cloud.provider.com/topology-rack"
HOST = "kubernetes.io/hostname"
LEVELS = [RACK, HOST]


def _nodes(free_gpus: dict[str, list[int]]) -> tuple[list[NodeInfo], dict[str, dict[str, int]]]:
    """Nodes of 8 GPUs by rack, each with the given free GPUs."""
    nodes, free = [], {}
    for rack, frees in free_gpus.items():
        for i, gpus in enumerate(frees):
            name = f"{rack}-n{i}"
            nodes.append(NodeInfo.of(node_object(name, {"labels": {RACK: rack}, "capacity": {GPU: "8"}})))
            free[name] = {GPU: gpus * 1000}
    return nodes, free


ONE = PodNeeds({GPU: 1000})


def test_best_fit_takes_the_freest_nodes_and_the_tightest_last_one() -> None:
    """Kueue's KEP: a rack whose nodes hold 3, 3, 2 and 1 pods; 7 pods: BestFit takes 3, 3 and the 1."""
    nodes, free = _nodes({"r0": [3, 3, 2, 1]})
    placed = topology.place(Request("required", RACK), LEVELS, ONE, 7, nodes, free)
    assert placed.nodes == {"r0-n0": 3, "r0-n1": 3, "r0-n3": 1}


def test_unconstrained_takes_the_least_free_nodes_first() -> None:
    """The same rack, LeastFreeCapacity: 1, 2, 3 and one of the last 3."""
    nodes, free = _nodes({"r0": [3, 3, 2, 1]})
    placed = topology.place(Request("unconstrained"), LEVELS, ONE, 7, nodes, free)
    assert placed.nodes == {"r0-n3": 1, "r0-n2": 2, "r0-n0": 3, "r0-n1": 1}


@pytest.mark.parametrize(
    ("mode", "pods", "expected"),
    [
        ("required", 12, {"r0-n0": 6, "r0-n2": 4, "r0-n4": 2}),  # BestFit: 6 . 4 . 2
        ("unconstrained", 10, {"r0-n4": 2, "r0-n3": 2, "r0-n2": 4, "r0-n1": 2}),  # LeastFree: . 2 4 2 2
    ],
)
def test_slices_of_two_pods_per_node(mode: str, pods: int, expected: dict[str, int]) -> None:
    """Kueue's KEP: nodes holding 6, 5, 4, 3 and 2 pods, slices of 2 pods within one node."""
    nodes, free = _nodes({"r0": [6, 5, 4, 3, 2]})
    request = Request(mode, RACK if mode == "required" else None, HOST, 2)
    assert topology.place(request, LEVELS, ONE, pods, nodes, free).nodes == expected


def test_required_says_how_much_the_freest_domain_holds() -> None:
    nodes, free = _nodes({"r0": [8, 4], "r1": [8, 8]})
    placed = topology.place(Request("required", RACK), LEVELS, PodNeeds({GPU: 8000}), 3, nodes, free)
    assert not placed.ok
    assert placed.message == "needs 3 pods (24 nvidia.com/gpu) in one rack; the freest rack has room for 2"


def test_preferred_climbs_to_the_smallest_domain_that_holds_it_then_spreads() -> None:
    nodes, free = _nodes({"r0": [8, 8, 2], "r1": [8, 8, 8]})
    # 16 GPUs: no node has them; rack r0 has room (the tighter one) -> its two free nodes
    assert topology.place(Request("preferred", HOST), LEVELS, ONE, 16, nodes, free).nodes == {"r0-n0": 8, "r0-n1": 8}
    # 40 GPUs: no rack has them -> the freest rack whole, the rest from the other
    placed = topology.place(Request("preferred", HOST), LEVELS, ONE, 40, nodes, free)
    assert sum(placed.nodes.values()) == 40 and all(placed.nodes.get(f"r1-n{i}") == 8 for i in range(3))


def test_compact_default_gives_a_small_job_the_fullest_node_that_fits() -> None:
    nodes, free = _nodes({"r0": [8, 3, 1], "r1": [8, 8, 8]})
    assert topology.place(None, LEVELS, PodNeeds({GPU: 2000}), 1, nodes, free).nodes == {"r0-n1": 1}
    assert topology.place(None, LEVELS, PodNeeds({GPU: 8000}), 1, nodes, free).nodes == {"r0-n0": 1}


def test_cordoned_and_tainted_nodes_are_left_out() -> None:
    cordoned = NodeInfo.of(node_object("c", {"labels": {RACK: "r0"}, "capacity": {GPU: "8"}, "unschedulable": True}))
    placed = topology.place(None, LEVELS, ONE, 1, [cordoned], {"c": {GPU: 8000}})
    assert not placed.ok


def test_a_level_the_topology_does_not_have_is_named() -> None:
    nodes, free = _nodes({"r0": [8]})
    placed = topology.place(Request("required", "zone"), LEVELS, ONE, 1, nodes, free)
    assert placed.message.startswith("level zone is not one of the topology's levels")


@pytest.mark.parametrize(
    ("annotations", "count", "problem"),
    [
        ({REQUIRED: RACK, PREFERRED: HOST}, 2, "exclude each other"),
        ({SLICE_SIZE: "2"}, 4, f"needs {SLICE_REQUIRED}"),
        ({SLICE_REQUIRED: HOST}, 4, f"needs {SLICE_SIZE}"),
        ({SLICE_REQUIRED: HOST, SLICE_SIZE: "3"}, 4, "3 does not divide the pod set's 4 pods"),
        ({SLICE_REQUIRED: HOST, SLICE_SIZE: "two"}, 4, "must be a whole number"),
    ],
)
def test_bad_annotations_are_refused_with_their_path(annotations: dict[str, str], count: int, problem: str) -> None:
    request, found = request_of(annotations, count, "spec.template")
    problems = [str(p) for p in found]
    assert request is None and any(problem in p for p in problems), problems
    assert all(p.startswith("spec.template.metadata.annotations") for p in problems)


# ----- admission by topology in engine core -------------------------------------------------


def _doc(jobs: list[dict[str, Any]], *, racks: int = 2, per_rack: int = 2, extra: list[dict[str, Any]] | None = None,
         topology_name: str = "racks", priority: bool = False) -> dict[str, Any]:  # fmt: skip
    manifests: list[dict[str, Any]] = [
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Topology", "metadata": {"name": "racks"},
         "spec": {"levels": [{"nodeLabel": RACK}, {"nodeLabel": HOST}]}},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": "gpu"},
         "spec": {"topologyName": topology_name}},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": "cq"},
         "spec": {"namespaceSelector": {},
                  "preemption": {"withinClusterQueue": "LowerPriority" if priority else "Never"},
                  "resourceGroups": [{"coveredResources": [GPU],
                                      "flavors": [{"name": "gpu", "resources": [{"name": GPU, "nominalQuota": 1000}]}]}]}},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue", "metadata": {"name": "q", "namespace": "ml"},
         "spec": {"clusterQueue": "cq"}},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "WorkloadPriorityClass", "metadata": {"name": "high"}, "value": 10},
        *(extra or []),
    ]  # fmt: skip
    nodes = [{"generate": {"racks": racks, "nodesPerRack": per_rack, "gpusPerNode": 8}}]
    return {"name": "tas", "manifests": manifests, "nodes": nodes, "jobs": jobs}


def _job(name: str, at: int, pods: int, gpus: int, runtime: int = 100, annotations: dict[str, str] | None = None,
         priority: str | None = None) -> dict[str, Any]:  # fmt: skip
    labels = {"kueue.x-k8s.io/queue-name": "q"} | ({"kueue.x-k8s.io/priority-class": priority} if priority else {})
    template: dict[str, Any] = {"spec": {"containers": [{"name": "c", "resources": {"limits": {GPU: str(gpus)}}}]}}
    if annotations:
        template["metadata"] = {"annotations": annotations}
    return {"at": at, "runtime": runtime, "object": {
        "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "namespace": "ml", "labels": labels},
        "spec": {"parallelism": pods, "completions": pods, "template": template}}}  # fmt: skip


def _run(doc: dict[str, Any]) -> dict[str, Any]:
    return simulator.Simulation(scenario.parse(doc)).run().to_json()


def _placements(result: dict[str, Any]) -> list[tuple[int, str, dict[str, int]]]:
    return [(e["t"], e["workload"], e["placement"]["main"]) for e in result["events"] if e["type"] == "Admitted"]


def test_a_gang_waits_for_a_domain_though_its_quota_fits_and_starts_when_one_frees() -> None:
    doc = _doc([
        _job("small-a", 0, 1, 2, runtime=50),
        _job("small-b", 0, 1, 2, runtime=500),
        _job("small-c", 0, 1, 2, runtime=500),
        _job("small-d", 0, 1, 2, runtime=500),
        _job("rack", 10, 2, 8, annotations={REQUIRED: RACK}),
    ], racks=2, per_rack=2)  # fmt: skip
    # compact: the four small jobs share one node; both racks keep a free node... so the rack job,
    # needing two whole nodes in one rack, is placed at once in the untouched rack
    result = _run(doc)
    placed = _placements(result)
    assert [p[2] for p in placed[:4]] == [{"r0-n0": 1}] * 4
    assert placed[4] == (10, "ml/rack", {"r1-n0": 1, "r1-n1": 1})

    unconstrained = _doc(doc["jobs"], racks=2, per_rack=2)
    unconstrained["topologyPacking"] = "Kueue"
    result = _run(unconstrained)
    placed = _placements(result)
    assert placed[4][1] == "ml/rack" and placed[4][2] in ({"r1-n0": 1, "r1-n1": 1}, {"r0-n0": 1, "r0-n1": 1})


def test_a_fragmented_cluster_makes_a_gang_wait_with_the_reason() -> None:
    jobs = [_job(f"s{i}", 0, 1, 7, runtime=100 + 10 * i, annotations={REQUIRED: HOST}) for i in range(4)]
    jobs.append(_job("pair", 5, 2, 8, annotations={REQUIRED: RACK}))
    result = _run(_doc(jobs))
    pair = [e for e in result["events"] if e["workload"] == "ml/pair" and e["type"] == "Admitted"]
    # every node has 1 GPU free (quota has 996): the pair waits until both nodes of a rack are free
    assert pair[0]["t"] == 110 and pair[0]["placement"]["main"] == {"r0-n0": 1, "r0-n1": 1}


def test_preemption_frees_the_nodes_the_preemptor_is_placed_on() -> None:
    low = [_job(f"low{i}", 0, 1, 8, runtime=1000) for i in range(4)]
    high = _job("high", 10, 2, 8, annotations={REQUIRED: RACK}, priority="high")
    result = _run(_doc([*low, high], priority=True))
    evicted = sorted(e["workload"] for e in result["events"] if e["type"] == "Evicted")
    admitted = next(e for e in result["events"] if e["workload"] == "ml/high" and e["type"] == "Admitted")
    assert admitted["t"] == 10 and len(evicted) == 2
    victims_nodes = {n for e in result["events"] if e["type"] == "Admitted" and e["workload"] in evicted
                     for n in e["placement"]["main"]}  # fmt: skip
    assert set(admitted["placement"]["main"]) == victims_nodes  # the two nodes of one rack it freed


def test_capacity_freed_in_one_quota_tree_wakes_topology_queues_of_another() -> None:
    other = [
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": "other"},
         "spec": {"namespaceSelector": {}, "resourceGroups": [{"coveredResources": [GPU], "flavors": [
             {"name": "gpu", "resources": [{"name": GPU, "nominalQuota": 1000}]}]}]}},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue", "metadata": {"name": "o", "namespace": "ml"},
         "spec": {"clusterQueue": "other"}},
    ]  # fmt: skip
    first = _job("first", 0, 4, 8, runtime=50)
    first["object"]["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] = "o"
    result = _run(_doc([first, _job("second", 10, 4, 8)], extra=other))
    second = [e for e in result["events"] if e["workload"] == "ml/second" and e["type"] == "Admitted"]
    assert second and second[0]["t"] == 50


def test_a_flavor_naming_a_missing_topology_makes_the_queue_inactive() -> None:
    result = _run(_doc([_job("j", 0, 1, 1)], topology_name="nope"))
    wl = result["workloads"]["ml/j"]
    assert wl["reason"] == "Inactive" and "Topology nope" in wl["message"], wl


def _two_flavors(
    first: dict[str, Any], jobs: list[dict[str, Any]], nodes: int = 2, quota: int = 1000
) -> dict[str, Any]:
    """A ClusterQueue with flavor ``first`` (its spec) before ``gpu``, a TAS flavor on Topology racks."""
    doc = _doc(jobs, per_rack=nodes)
    doc["manifests"].insert(1, {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
                                "metadata": {"name": "first"}, "spec": first})  # fmt: skip
    doc["manifests"].insert(0, {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Topology",
                                "metadata": {"name": "hosts"}, "spec": {"levels": [{"nodeLabel": HOST}]}})  # fmt: skip
    cq = next(m for m in doc["manifests"] if m["kind"] == "ClusterQueue")
    cq["spec"]["resourceGroups"][0]["flavors"].insert(
        0, {"name": "first", "resources": [{"name": GPU, "nominalQuota": quota}]}
    )
    return doc


@pytest.mark.parametrize(
    ("first", "annotations", "flavor"),
    [
        # Kueue's checkPodSetAndFlavorMatchForTAS: a flavor whose Topology lacks the level is skipped
        ({"topologyName": "hosts"}, {REQUIRED: RACK}, "gpu"),
        ({"topologyName": "hosts"}, {REQUIRED: HOST}, "first"),
        # a pod set asking for a topology skips a flavor with none
        ({}, {REQUIRED: RACK}, "gpu"),
        # a pod set asking for none is kept off TAS flavors where the queue has a plain one
        ({}, None, "first"),
    ],
)
def test_a_pod_set_gets_the_first_flavor_that_serves_its_topology(
    first: dict[str, Any], annotations: dict[str, str] | None, flavor: str
) -> None:
    result = _run(_two_flavors(first, [_job("j", 0, 1, 1, annotations=annotations)]))
    admitted = [e for e in result["events"] if e["type"] == "Admitted"]
    assert [e["flavors"]["main"][GPU] for e in admitted] == [flavor], result["workloads"]["ml/j"]


def test_a_plain_pod_set_is_not_given_a_topology_flavor_in_a_mixed_queue() -> None:
    """Kueue keeps TAS flavors for pod sets that ask for a topology: with the plain flavor full, a
    pod set asking for none waits rather than taking the free TAS flavor."""
    doc = _two_flavors({}, [_job("fill", 0, 1, 8, runtime=1000), _job("plain", 5, 1, 1)], quota=8)
    result = _run(doc)
    admitted = [(e["t"], e["flavors"]["main"][GPU]) for e in result["events"] if e["workload"] == "ml/plain"
                and e["type"] == "Admitted"]  # fmt: skip
    fill_done = next(e["t"] for e in result["events"] if e["workload"] == "ml/fill" and e["type"] == "Finished")
    assert admitted == [(fill_done, "first")], result["events"]


def test_a_level_no_flavor_has_is_no_matching_flavor_not_quota() -> None:
    result = _run(_doc([_job("j", 0, 1, 1, annotations={REQUIRED: "example.com/zone"})]))
    wl = result["workloads"]["ml/j"]
    assert wl["reason"] == "NoMatchingFlavor", wl
    assert "does not contain the requested level example.com/zone" in wl["message"], wl


def test_quota_that_fits_on_no_nodes_is_topology_placement_failed() -> None:
    """Kueue's TopologyPlacementFailed: the quota holds it, no rack does (2 nodes of 8 GPUs each)."""
    result = _run(_doc([_job("j", 0, 3, 8, annotations={REQUIRED: RACK})]))
    wl = result["workloads"]["ml/j"]
    assert wl["reason"] == "TopologyPlacementFailed" and "in one rack" in wl["message"], wl


def test_a_nodes_pod_slots_bound_what_it_holds_as_kueue_counts_them() -> None:
    """Kueue's TAS counts one ``pods`` a pod: nodes of 8 GPUs but 2 pod slots hold 2 tiny pods each,
    so 3 pods of 1 GPU fit no one node (by GPUs alone they would)."""
    doc = _doc([_job("tiny", 0, 3, 1, annotations={REQUIRED: HOST})])
    doc["nodes"] = [{"generate": {"racks": 1, "nodesPerRack": 2, "gpusPerNode": 8, "capacity": {"pods": "2"}}}]
    wl = _run(doc)["workloads"]["ml/tiny"]
    assert wl["reason"] == "TopologyPlacementFailed" and "the freest node has room for 2" in wl["message"], wl
    doc["jobs"] = [_job("fits", 0, 2, 1, annotations={REQUIRED: HOST})]
    assert _run(doc)["workloads"]["ml/fits"]["state"] == "Finished"


def test_topology_preemption_reclaims_borrowed_nodes_in_the_cohort() -> None:
    """Kueue's TAS preemption looks in the cohort too: b borrows and fills both nodes; a's job fits
    a's quota but no node, and nothing of a's own runs: b's borrowed work is reclaimed for it."""
    doc = _doc([], racks=1, per_rack=2)
    cqs = [m for m in doc["manifests"] if m["kind"] == "ClusterQueue"]
    cq = cqs[0]
    cq["spec"]["cohortName"] = "pool"
    cq["spec"]["preemption"] = {"reclaimWithinCohort": "Any", "withinClusterQueue": "LowerPriority"}
    cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] = 12
    other = {**cq, "metadata": {"name": "b"}, "spec": {**cq["spec"], "preemption": {}}}
    doc["manifests"].append(other)
    doc["manifests"].append({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
                             "metadata": {"name": "qb", "namespace": "ml"}, "spec": {"clusterQueue": "b"}})  # fmt: skip
    borrow = [_job(f"b{i}", 0, 1, 8, runtime=1000, annotations={REQUIRED: HOST}) for i in range(2)]
    for j in borrow:
        j["object"]["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] = "qb"
    doc["jobs"] = [*borrow, _job("a", 10, 1, 8, annotations={REQUIRED: HOST})]
    result = _run(doc)
    evicted = [(e["t"], e["workload"], e["detail"]) for e in result["events"] if e["type"] == "Evicted"]
    assert len(evicted) == 1 and evicted[0][0] == 10 and evicted[0][2] == "InCohortReclamation", evicted
    admitted = next(e for e in result["events"] if e["workload"] == "ml/a" and e["type"] == "Admitted")
    assert admitted["t"] == 10, result["events"]


def test_a_partial_job_preempts_for_its_whole_count_before_it_runs_smaller() -> None:
    """Kueue's order: the whole workload by preemption first (its nodes freed by a lower-priority
    job), a partial admission only when nobody may be preempted. 16 pods of 1 GPU, at least 8,
    one rack of two 8-GPU nodes, low holding one node: low is preempted and all 16 run."""
    low = _job("low", 0, 1, 8, runtime=1000, annotations={REQUIRED: HOST})
    high = _job("high", 10, 16, 1, annotations={REQUIRED: RACK}, priority="high")
    high["object"]["metadata"]["annotations"] = {"kueue.x-k8s.io/job-min-parallelism": "8"}
    result = _run(_doc([low, high], racks=1, per_rack=2, priority=True))
    evicted = [(e["t"], e["workload"]) for e in result["events"] if e["type"] == "Evicted"]
    admitted = next(e for e in result["events"] if e["workload"] == "ml/high" and e["type"] == "Admitted")
    assert evicted[:1] == [(10, "ml/low")], result["events"]
    assert admitted["t"] == 10 and sum(admitted["placement"]["main"].values()) == 16, admitted


def test_a_scenario_with_bad_annotations_names_the_path() -> None:
    doc = _doc([_job("j", 0, 2, 1, annotations={REQUIRED: RACK, PREFERRED: HOST})])
    with pytest.raises(errors.Invalid) as exc:
        scenario.parse(doc)
    assert any(str(e).startswith("jobs[0].object.spec.template.metadata.annotations") for e in exc.value.errors), (
        exc.value.errors
    )


def test_the_report_says_where_jobs_landed() -> None:
    result = _run(_doc([_job("eight", 0, 1, 8), _job("sixteen", 0, 2, 8, annotations={REQUIRED: RACK})]))
    by_size = result["summary"]["placement"]["bySize"]
    assert by_size["8"] == {"jobs": 1, "onOneNode": 1.0, "withinOne": {RACK: 1.0}}
    assert by_size["16"] == {"jobs": 1, "onOneNode": 0.0, "withinOne": {RACK: 1.0}}


def test_node_occupancy_over_time_for_the_plot() -> None:
    from queues.placement import locality

    doc = _doc([_job("eight", 0, 1, 8, runtime=50), _job("four", 50, 1, 4, runtime=50)], racks=1, per_rack=2)
    sim = simulator.Simulation(scenario.parse(doc))
    result = sim.run()
    names, grid = locality.occupancy(result.events, result.tracks, result.nodes, result.makespan, columns=2)
    assert names == ["r0-n0", "r0-n1"]
    # first half: the 8-GPU job fills one node; second half: the 4-GPU job half of the same node
    assert grid == [[1.0, 0.5], [0.0, 0.0]]


def test_a_deleted_node_evicts_what_was_placed_there_and_it_is_placed_again() -> None:
    doc = _doc([_job("a", 0, 1, 8, runtime=100), _job("b", 0, 1, 8, runtime=100)], racks=1, per_rack=3)
    doc["edits"] = [{"at": 20, "delete": {"kind": "Node", "name": "r0-n0"}}, {"at": 30, "cordon": "r0-n1"}]
    result = _run(doc)
    evicted = [(e["t"], e["workload"], e["reason"], e["detail"]) for e in result["events"] if e["type"] == "Evicted"]
    assert evicted == [(20, "ml/a", "NodeFailures", "NodeDeleted")]
    placed = _placements(result)
    assert placed == [(0, "ml/a", {"r0-n0": 1}), (0, "ml/b", {"r0-n1": 1}), (20, "ml/a", {"r0-n2": 1})]
    assert all(w["state"] == "Finished" for w in result["workloads"].values())  # (cordoned: b keeps running)


def test_a_cordoned_node_takes_no_new_placement_until_uncordoned() -> None:
    doc = _doc([_job("a", 10, 1, 8, runtime=100), _job("b", 10, 1, 8, runtime=100)], racks=1, per_rack=1)
    doc["nodes"] = [{"generate": {"racks": 1, "nodesPerRack": 2, "gpusPerNode": 8}}]
    doc["edits"] = [{"at": 0, "cordon": "r0-n0"}, {"at": 50, "uncordon": "r0-n0"}]
    placed = _placements(_run(doc))
    assert placed == [(10, "ml/a", {"r0-n1": 1}), (50, "ml/b", {"r0-n0": 1})]


def test_node_edits_name_nodes_that_exist() -> None:
    doc = _doc([_job("a", 0, 1, 1)])
    doc["edits"] = [{"at": 5, "cordon": "nope"}, {"at": 6, "delete": {"kind": "Node", "name": "gone"}}]
    with pytest.raises(errors.Invalid) as exc:
        scenario.parse(doc)
    assert [str(e) for e in exc.value.errors] == [
        "edits[0].cordon: no node 'nope' in nodes",
        "edits[1].delete.name: no node 'gone' in nodes",
    ]


# ----- invariants of placement on random clusters (hypothesis) ----------------------------------

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@st.composite
def _clusters(draw: Any) -> tuple[list[NodeInfo], dict[str, dict[str, int]], Request | None, int, int]:
    racks = draw(st.integers(1, 4))
    nodes, free = [], {}
    for r in range(racks):
        for n in range(draw(st.integers(1, 4))):
            name = f"r{r}-n{n}"
            cordoned = draw(st.booleans()) and draw(st.booleans())
            shape = {"labels": {RACK: f"r{r}"}, "capacity": {GPU: "8"}, "unschedulable": cordoned}
            nodes.append(NodeInfo.of(node_object(name, shape)))
            free[name] = {GPU: draw(st.integers(0, 8)) * 1000}
    per_pod = draw(st.sampled_from([1, 2, 4, 8]))
    size = draw(st.sampled_from([1, 2]))
    count = size * draw(st.integers(1, 6))
    mode = draw(st.sampled_from(["required", "preferred", "unconstrained", None]))
    level = draw(st.sampled_from([RACK, HOST]))
    sliced = size > 1 and mode is not None
    request = None if mode is None else Request(mode, None if mode == "unconstrained" else level,
                                                HOST if sliced else None, size if sliced else 1)  # fmt: skip
    return nodes, free, request, per_pod, count


@settings(max_examples=300, deadline=None, derandomize=True)
@given(_clusters(), st.sampled_from(topology.PACKINGS))
def test_a_placement_fits_the_nodes_and_keeps_what_it_asks(
    cluster: tuple[list[NodeInfo], dict[str, dict[str, int]], Request | None, int, int], packing: str
) -> None:
    nodes, free, request, per_pod, count = cluster
    pod = PodNeeds({GPU: per_pod * 1000})
    before = {n: dict(f) for n, f in free.items()}
    placed = topology.place(request, LEVELS, pod, count, nodes, free, packing)
    assert free == before  # (the caller's free capacity is not changed)
    cordoned = {n.name for n in nodes if n.taints}
    room = {n: f[GPU] // (per_pod * 1000) for n, f in free.items() if n not in cordoned}
    racks: dict[str, int] = {}
    for n, pods in room.items():
        racks[n.split("-")[0]] = racks.get(n.split("-")[0], 0) + pods
    if not placed.ok:  # it fails only when it truly cannot
        if request is not None and request.slice_size > 1:
            return
        if request is not None and request.mode == "required":
            assert max((racks if request.level == RACK else room).values(), default=0) < count
        else:
            assert sum(room.values()) < count
        return
    assert sum(placed.nodes.values()) == count
    for node, pods in placed.nodes.items():
        assert node not in cordoned and pods <= room[node], (node, pods, room)
    if request is not None and request.mode == "required":
        key = (lambda n: n.split("-")[0]) if request.level == RACK else (lambda n: n)
        assert len({key(n) for n in placed.nodes}) == 1, placed.nodes
    if request is not None and request.slice_size > 1:  # slices of pods within one node
        assert all(pods % request.slice_size == 0 for pods in placed.nodes.values()), placed.nodes
    if request is None and packing == topology.COMPACT and max(room.values(), default=0) >= count:
        assert len(placed.nodes) == 1  # (compact: on one node whenever one node holds it)


@pytest.mark.parametrize(
    ("nodes", "error"),
    [
        ([{"generate": {"racks": 2, "nodesPerRack": 0, "gpusPerNode": 8}}], "nodes[0].generate.nodesPerRack: required"),
        ([{"generate": {"racks": 3, "nodesPerRack": 1, "gpusPerNode": 8, "blocks": 2}}], "2 blocks do not divide 3"),
        ([{"generate": {"racks": 1, "nodesPerRack": 1, "gpusPerNode": 8, "zones": 2}}], "nodes[0].generate.zones"),
        ([{"name": "a", "capacity": {"nvidia.com/gpu": "eight"}}], "nodes[0].capacity.nvidia.com/gpu: 'eight'"),
        ([{"capacity": {"cpu": "4"}}], "nodes[0].name: required"),
        ([{"name": "a"}, {"name": "a"}], "node 'a' is listed twice"),
    ],
)
def test_bad_nodes_name_the_path(nodes: list[dict[str, Any]], error: str) -> None:
    doc = _doc([_job("j", 0, 1, 1)])
    doc["nodes"] = nodes
    with pytest.raises(errors.Invalid) as exc:
        scenario.parse(doc)
    assert any(error in str(e) for e in exc.value.errors), exc.value.errors


def test_generated_nodes_have_their_rack_block_and_hostname() -> None:
    doc = _doc([_job("j", 0, 1, 1)])
    doc["nodes"] = [{"generate": {"racks": 4, "nodesPerRack": 2, "gpusPerNode": 8, "blocks": 2, "namePrefix": "gpu-",
                                  "capacity": {"cpu": "96"}}}]  # fmt: skip
    nodes = scenario.parse(doc).nodes
    assert [n["name"] for n in nodes[:3]] == ["gpu-b0-r0-n0", "gpu-b0-r0-n1", "gpu-b0-r1-n0"]
    assert nodes[7]["labels"] == {
        RACK: "gpu-b1-r3",
        "cloud.provider.com/topology-block": "gpu-b1",
        HOST: "gpu-b1-r3-n1",
    }
    assert nodes[0]["capacity"] == {"cpu": "96", GPU: "8"}


def test_nothing_is_placed_until_the_nodes_are_known_then_it_is() -> None:
    """The controller's inventory is pending until its informers list: a TAS job waits and says
    so (never placed on a cluster seen by half); once known, it is placed."""
    parsed = scenario.parse(_doc([_job("gang", 0, 2, 8)]))
    inventory = Inventory(pending="the Nodes and Pods informers have not listed yet")
    for node in parsed.nodes:
        inventory.put(NodeInfo.of(node_object(str(node["name"]), node)))
    sched = Scheduler(Config.of(parsed.manifests), namespaces=parsed.namespaces, inventory=inventory)
    wl = sched.intake.workload_for(parsed.jobs[0].job, seq=0, now=0.0)
    sched.submit(wl)
    assert sched.schedule() == []
    assert sched.explain(wl)[1].endswith(
        "waiting for the node inventory: the Nodes and Pods informers have not listed yet"
    )
    inventory.known(None)
    (admit,) = sched.schedule()
    assert isinstance(admit, Admit) and sum(admit.admission.placement["main"].values()) == 2


@pytest.mark.parametrize(
    "request_",
    [Request("required", RACK), Request("preferred", HOST, RACK, 2), Request("unconstrained"),
     Request("implicit", None, RACK, 4)],
)  # fmt: skip
def test_the_store_keeps_a_pod_sets_topology_request(request_: Request) -> None:
    """A term rebuilt from PostgreSQL places a waiting pod set as its job asks, not as if it asked nothing."""
    ps = jobs.PodSet("workers", 4, {"nvidia.com/gpu": 8000}, topology=request_)
    assert pod_sets_from_json(pod_sets_json([ps])) == (ps,)
