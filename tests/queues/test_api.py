"""Kueue objects from v1beta1 and v1beta2 YAML, validated as Kueue's webhooks do."""

from typing import Any

import pytest

from queues import errors
from queues.kueue import api, codec


def cq(spec: dict[str, Any], version: str = "v1beta1", name: str = "team-a") -> dict[str, Any]:
    return {"apiVersion": f"kueue.x-k8s.io/{version}", "kind": "ClusterQueue", "metadata": {"name": name}, "spec": spec}


def group(*resources: dict[str, Any], covered: list[str] | None = None, flavor: str = "a100") -> dict[str, Any]:
    return {
        "coveredResources": covered or [r["name"] for r in resources],
        "flavors": [{"name": flavor, "resources": list(resources)}],
    }


def problems(doc: dict[str, Any]) -> list[str]:
    with pytest.raises(errors.Invalid) as info:
        codec.parse(doc)
    return [str(e) for e in info.value.errors]


def test_v1beta1_and_v1beta2_mean_the_same() -> None:
    g = group({"name": "nvidia.com/gpu", "nominalQuota": "8", "borrowingLimit": "4"})
    one = codec.parse(cq({"cohort": "training", "resourceGroups": [g]}))
    two = codec.parse(cq({"cohortName": "training", "resourceGroups": [g]}, version="v1beta2"))
    assert isinstance(one, api.ClusterQueue) and isinstance(two, api.ClusterQueue)
    assert one.spec.cohort_ref == two.spec.cohort_ref == "training"
    assert one.spec.resource_groups == two.spec.resource_groups
    assert codec.to_manifest(one, version="v1beta2")["spec"]["cohortName"] == "training"
    assert codec.to_manifest(two, version="v1beta1")["spec"]["cohort"] == "training"


def test_round_trips_through_its_manifest() -> None:
    g = group({"name": "cpu", "nominalQuota": "256"}, {"name": "memory", "nominalQuota": "2Ti"})
    obj = codec.parse(cq({"resourceGroups": [g], "namespaceSelector": {}}))
    again = codec.parse(codec.to_manifest(obj))
    assert again == obj
    assert codec.to_manifest(obj)["spec"]["resourceGroups"][0]["flavors"][0]["resources"][1]["nominalQuota"] == "2Ti"


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        (
            {"resourceGroups": [group({"name": "cpu", "nominalQuota": "-1"})]},
            "spec.resourceGroups[0].flavors[0].resources[0].nominalQuota: must be greater than or equal to 0",
        ),
        (
            {"resourceGroups": [group({"name": "cpu", "nominalQuota": "1", "borrowingLimit": "1"})]},
            "spec.resourceGroups[0].flavors[0].resources[0].borrowingLimit: must be nil when cohort is empty",
        ),
        (
            {"cohort": "c", "resourceGroups": [group({"name": "cpu", "nominalQuota": "1", "lendingLimit": "2"})]},
            "spec.resourceGroups[0].flavors[0].resources[0].lendingLimit: must be less than or equal to the nominalQuota",
        ),
        (
            {"resourceGroups": [group({"name": "cpu", "nominalQuota": "12Qi"})]},
            "spec.resourceGroups[0].flavors[0].resources[0].nominalQuota: '12Qi' is not a quantity",
        ),
        (
            {"resourceGroups": [group({"name": "cpu", "nominalQuota": "1e400"})]},
            "spec.resourceGroups[0].flavors[0].resources[0].nominalQuota: '1e400' is too large",
        ),
        (
            {
                "resourceGroups": [
                    group({"name": "cpu", "nominalQuota": "1"}),
                    group({"name": "cpu", "nominalQuota": "1"}, flavor="b"),
                ]
            },
            "spec.resourceGroups[1].coveredResources[0]: duplicate resource 'cpu'",
        ),
        (
            {
                "resourceGroups": [
                    group({"name": "cpu", "nominalQuota": "1"}),
                    group({"name": "gpu", "nominalQuota": "1"}),
                ]
            },
            "spec.resourceGroups[1].flavors[0].name: duplicate flavor 'a100'",
        ),
        (
            {"resourceGroups": [group({"name": "memory", "nominalQuota": "1"}, covered=["cpu"])]},
            "spec.resourceGroups[0].flavors[0].resources[0].name: must be 'cpu'",
        ),
        (
            {"resourceGroups": [group({"name": "cpu", "nominalQuota": "1"}, flavor="A100")]},
            "spec.resourceGroups[0].flavors[0].name: 'A100' is not a valid name",
        ),
        ({"queueingStrategy": "Random"}, "spec.queueingStrategy: must be 'StrictFIFO' or 'BestEffortFIFO'"),
        ({"cohortName": "x"}, "spec.cohortName: not in kueue.x-k8s.io/v1beta1; use spec.cohort"),
        ({"resourceGroup": []}, "spec.resourceGroup: unknown field"),
        (
            {
                "cohort": "c",
                "preemption": {"reclaimWithinCohort": "Never", "borrowWithinCohort": {"policy": "LowerPriority"}},
            },
            "spec.preemption.borrowWithinCohort.policy: must be Never while reclaimWithinCohort is Never",
        ),
        (
            {"resourceGroups": [group({"name": "cpu", "nominalQuota": "1"}, flavor=f"f{i}") for i in range(17)]},
            "spec.resourceGroups: must have at most 16 items",
        ),
    ],
    ids=[
        "negative-quota",
        "borrowing-without-cohort",
        "lending-above-nominal",
        "bad-suffix",
        "absurd",
        "resource-twice",
        "flavor-twice",
        "resource-order",
        "flavor-name",
        "strategy",
        "version-field",
        "unknown-field",
        "bwc-without-reclaim",
        "too-many-groups",
    ],
)
def test_cluster_queue_rules(spec: dict[str, Any], expected: str) -> None:
    found = problems(cq(spec))
    assert any(p.startswith(expected) for p in found), found


def test_every_error_is_reported_not_just_the_first() -> None:
    spec = {
        "resourceGroups": [
            group({"name": "cpu", "nominalQuota": "-1"}, {"name": "memory", "nominalQuota": "abc"}),
        ]
    }
    doc = cq(spec, name="Bad_Name")
    doc["spec"]["resourceGroups"][0]["flavors"][0]["resources"][1]["nominalQuota"] = "-5"
    found = problems(doc)
    assert "metadata.name: 'Bad_Name' is not a valid name" in found[0]
    assert sum("must be greater than or equal to 0" in p for p in found) == 2


@pytest.mark.parametrize(
    ("doc", "expected"),
    [
        (
            {"apiVersion": "kueue.x-k8s.io/v1alpha1", "kind": "ClusterQueue"},
            "apiVersion: 'kueue.x-k8s.io/v1alpha1' is not supported",
        ),
        ({"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "Workload"}, "kind: 'Workload' is not a Kueue kind"),
        (
            {
                "apiVersion": "kueue.x-k8s.io/v1beta1",
                "kind": "LocalQueue",
                "metadata": {"name": "q"},
                "spec": {"clusterQueue": "a"},
            },
            "metadata.namespace: a LocalQueue needs a namespace",
        ),
        (
            {
                "apiVersion": "kueue.x-k8s.io/v1beta1",
                "kind": "WorkloadPriorityClass",
                "metadata": {"name": "p"},
                "value": "high",
            },
            "value: Input should be a valid integer",
        ),
        (["not", "a", "mapping"], "must be a mapping"),
    ],
    ids=["old-version", "unknown-kind", "lq-namespace", "wpc-value", "not-mapping"],
)
def test_other_kinds_and_shapes(doc: Any, expected: str) -> None:
    found = problems(doc)
    assert any(expected in p for p in found), found


def test_all_kinds_parse() -> None:
    docs = [
        {
            "apiVersion": "kueue.x-k8s.io/v1beta1",
            "kind": "ResourceFlavor",
            "metadata": {"name": "a100"},
            "spec": {
                "nodeLabels": {"gpu": "a100"},
                "nodeTaints": [{"key": "gpu", "value": "a", "effect": "NoSchedule"}],
            },
        },
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "Cohort",
            "metadata": {"name": "org"},
            "spec": {"parentName": "root"},
        },
        {
            "apiVersion": "kueue.x-k8s.io/v1beta1",
            "kind": "WorkloadPriorityClass",
            "metadata": {"name": "p"},
            "value": 100,
        },
        {
            "apiVersion": "kueue.x-k8s.io/v1beta1",
            "kind": "AdmissionCheck",
            "metadata": {"name": "prov"},
            "spec": {
                "controllerName": "kueue.x-k8s.io/provisioning-request",
                "parameters": {"apiGroup": "kueue.x-k8s.io", "kind": "ProvisioningRequestConfig", "name": "cfg"},
            },
        },
        {
            "apiVersion": "kueue.x-k8s.io/v1beta1",
            "kind": "ProvisioningRequestConfig",
            "metadata": {"name": "cfg"},
            "spec": {
                "provisioningClassName": "check-capacity.autoscaling.x-k8s.io",
                "managedResources": ["nvidia.com/gpu"],
            },
        },
    ]
    parsed = [codec.parse(d) for d in docs]
    assert [p.kind for p in parsed] == [d["kind"] for d in docs]
    prc = parsed[-1]
    assert isinstance(prc, api.ProvisioningRequestConfig)
    assert (
        prc.spec.retry_strategy.backoff_limit_count,
        prc.spec.retry_strategy.backoff_base_seconds,
        prc.spec.retry_strategy.backoff_max_seconds,
    ) == (3, 60, 1800)
