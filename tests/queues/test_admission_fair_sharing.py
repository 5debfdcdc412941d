"""Admission fair sharing (``queues.cycle.usage_history``): Kueue's decayed LocalQueue usage, entry
penalty and order within a ClusterQueue; bad configuration named by field."""

from __future__ import annotations

import math
from typing import Any

import pytest

from queues import errors
from queues.cycle import usage_history
from queues.kueue import codec, validation
from queues.simulation import scenario, simulator

GPU = "nvidia.com/gpu"


def test_usage_decays_with_the_half_life_and_an_admission_adds_its_entry_penalty() -> None:
    config = usage_history.AdmissionFairSharing(half_life=10.0, sampling_interval=1.0)
    history = usage_history.UsageHistory(config)
    history.admit("ns/a", {("f", GPU): 4000}, now=0.0)
    penalty = 4 * (1 - 0.5**0.1)  # Kueue's CalculateEntryPenalty: requests x alpha(samplingInterval)
    assert history.consumed("ns/a", 0.0) == pytest.approx({GPU: penalty})
    # Kueue's CalculateDecayedConsumed over one half-life: halfway from what it was to what it holds
    assert history.consumed("ns/a", 10.0) == pytest.approx({GPU: penalty / 2 + 4 / 2})
    history.release("ns/a", {("f", GPU): 4000}, now=10.0)
    assert history.consumed("ns/a", 30.0) == pytest.approx({GPU: (penalty / 2 + 2) / 4})
    assert history.changed == {"ns/a"}
    assert history.weighted("ns/a", 2.0, 10.0) == pytest.approx((penalty / 2 + 2) / 2), "over the LocalQueue's weight"
    assert history.weighted("ns/a", 0.0, 10.0) == math.inf, "a zero weight sorts last"
    none = usage_history.UsageHistory(usage_history.AdmissionFairSharing(half_life=0.0))
    none.admit("ns/a", {("f", GPU): 4000}, now=0.0)
    assert none.consumed("ns/a", 100.0) == {}, "a half-life of 0 keeps no history, as in Kueue"


def _doc(*, afs: bool, weight_b: str | None = None) -> dict[str, Any]:
    """One ClusterQueue of 8 GPUs with admissionScope; LocalQueues a and b. a runs 7 GPUs for 100 s,
    b 1; at 99 a submits two 4-GPU jobs, at 100 b one."""
    lq_b: dict[str, Any] = {"clusterQueue": "cq"}
    if weight_b is not None:
        lq_b["fairSharing"] = {"weight": weight_b}
    manifests: list[dict[str, Any]] = [
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": "f"}},
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ClusterQueue",
            "metadata": {"name": "cq"},
            "spec": {
                "namespaceSelector": {},
                "admissionScope": {"admissionMode": "UsageBasedAdmissionFairSharing"},
                "resourceGroups": [
                    {
                        "coveredResources": [GPU],
                        "flavors": [{"name": "f", "resources": [{"name": GPU, "nominalQuota": "8"}]}],
                    }
                ],
            },
        },
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue", "metadata": {"name": "a", "namespace": "ns"},
         "spec": {"clusterQueue": "cq"}},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue", "metadata": {"name": "b", "namespace": "ns"},
         "spec": lq_b},
    ]  # fmt: skip

    def job(name: str, lq: str, gpus: int, at: int, runtime: int) -> dict[str, Any]:
        container = {"name": "c", "resources": {"limits": {GPU: str(gpus)}}}
        return {
            "at": at,
            "runtime": runtime,
            "object": {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "metadata": {"name": name, "namespace": "ns", "labels": {"kueue.x-k8s.io/queue-name": lq}},
                "spec": {"template": {"spec": {"containers": [container]}}},
            },
        }

    doc: dict[str, Any] = {
        "name": "afs",
        "manifests": manifests,
        "jobs": [
            job("first", "a", 7, 0, 100),
            job("small", "b", 1, 0, 100),
            job("a1", "a", 4, 99, 50),
            job("a2", "a", 4, 99, 50),
            job("b1", "b", 4, 100, 50),
        ],
    }
    if afs:
        doc["admissionFairSharing"] = {"usageHalfLifeTime": "5m", "usageSamplingInterval": "1m"}
    return doc


def _admitted_at_100(doc: dict[str, Any]) -> list[str]:
    result = simulator.Simulation(scenario.parse(doc)).run().to_json()
    return sorted(e["workload"] for e in result["events"] if e["type"] == "Admitted" and e["t"] == 100)


def test_the_least_used_local_queue_goes_first_then_priority_and_fifo() -> None:
    assert _admitted_at_100(_doc(afs=False)) == ["ns/a1", "ns/a2"], "without it: FIFO"
    assert _admitted_at_100(_doc(afs=True)) == ["ns/a1", "ns/b1"], "b has used nothing: it goes before a's second"
    # b's weight 0.1: its usage (1 GPU for 100 s) counts ten times, more than a's 7: a goes first
    assert _admitted_at_100(_doc(afs=True, weight_b="0.1")) == ["ns/a1", "ns/a2"]


def test_bad_configuration_is_refused_naming_the_field() -> None:
    with pytest.raises(errors.Invalid) as bad:
        usage_history.parse({"usageSamplingInterval": "soon", "resourceWeights": {GPU: -1}, "halfLife": "1h"})
    paths = sorted(e.path for e in bad.value.errors)
    assert paths == [
        "admissionFairSharing.halfLife",
        "admissionFairSharing.resourceWeights.nvidia.com/gpu",
        "admissionFairSharing.usageHalfLifeTime",
        "admissionFairSharing.usageSamplingInterval",
    ]
    with pytest.raises(errors.Invalid) as scope:
        codec.parse(
            {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": "cq"},
             "spec": {"admissionScope": {"admissionMode": "UsageBased"}, "resourceGroups": []}}
        )  # fmt: skip
    (problem,) = scope.value.errors
    assert problem.path == "spec.admissionScope.admissionMode" and "UsageBasedAdmissionFairSharing" in problem.message


def test_admission_scope_and_local_queue_weights_warn_when_admission_fair_sharing_is_off() -> None:
    parsed = scenario.parse(_doc(afs=False, weight_b="2"))
    off = [(o.kind, e.path) for o in parsed.manifests for e in validation.unused_fields(o)]
    assert off == [("ClusterQueue", "spec.admissionScope"), ("LocalQueue", "spec.fairSharing")]
    on = [e for o in parsed.manifests for e in validation.unused_fields(o, admission_fair_sharing=True)]
    assert on == []


def _pool(fair_sharing: dict[str, Any]) -> dict[str, Any]:
    """A cohort's own 8 GPUs shared by ClusterQueues a and b (no quota of their own). a runs 8 GPUs
    for 600 s; a's next job waits from 100, b's first from 200."""
    manifests: list[dict[str, Any]] = [
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": "f"}},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Cohort", "metadata": {"name": "pool"},
         "spec": {"resourceGroups": [{"coveredResources": [GPU],
                                      "flavors": [{"name": "f", "resources": [{"name": GPU, "nominalQuota": "8"}]}]}]}},
    ]  # fmt: skip
    for team in ("a", "b"):
        manifests.append(
            {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": team},
             "spec": {"cohortName": "pool", "namespaceSelector": {},
                      "resourceGroups": [{"coveredResources": [GPU],
                                          "flavors": [{"name": "f", "resources": [{"name": GPU, "nominalQuota": "0"}]}]}]}}
        )  # fmt: skip
        manifests.append(
            {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue", "metadata": {"name": "q", "namespace": team},
             "spec": {"clusterQueue": team}}
        )  # fmt: skip

    def job(name: str, team: str, at: int, runtime: int) -> dict[str, Any]:
        container = {"name": "c", "resources": {"limits": {GPU: "8"}}}
        return {"at": at, "runtime": runtime, "object": {
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "namespace": team, "labels": {"kueue.x-k8s.io/queue-name": "q"}},
            "spec": {"template": {"spec": {"containers": [container]}}}}}  # fmt: skip

    jobs = [job("long", "a", 0, 600), job("next", "a", 100, 100), job("first", "b", 200, 100)]
    return {"name": "pool", "manifests": manifests, "jobs": jobs, "fairSharing": fair_sharing}


def test_usage_aware_fair_sharing_orders_by_decayed_usage_kueues_by_usage_now() -> None:
    def at_600(doc: dict[str, Any]) -> list[str]:
        result = simulator.Simulation(scenario.parse(doc)).run().to_json()
        return [e["workload"] for e in result["events"] if e["type"] == "Admitted" and e["t"] == 600]

    # Kueue's DRS: at 600 neither queue borrows; with its head each would borrow all 8: a tie, FIFO
    assert at_600(_pool({})) == ["a/next"]
    # usage-aware: a has used 8 GPUs for 600 s (half of it left after a 10-minute half-life)
    assert at_600(_pool({"usageHalfLifeTime": "10m"})) == ["b/first"]
    with pytest.raises(errors.Invalid) as bad:
        scenario.parse(_pool({"usageHalfLifeTime": "a while"}))
    assert [e.path for e in bad.value.errors] == ["fairSharing.usageHalfLifeTime"]
